"""The stand-in's memory: it keeps what people ask it to, with the memory tool, as a careful model would. Offline.

Per message of the batch (any of them, not only the last), from its sender:
- "以后……" (an instruction for how to answer them) → a line in /memories/people/<sender>/instructions.md;
  "以后大家……" / "团队约定：" / "群规：" / "记住团队规则：" → a line in the chat's instructions.md;
- "记住：X" → a note of its own, X with the day it was said: in a group the team's (chats/<chat>/notes/…), in a
  private chat the person's; in an item's topic "已确认：…" / "待查：…" → a line in the item's progress.md;
- "忘掉X" → the line (or note) that holds X is deleted;
- "记忆调用：{json}" → that exact memory tool input (a model's typo, a command with a field missing);
- anywhere in the request, "写入 /memories/…：text" (a document, a quote, a record — data that pretends to be an
  instruction): the stand-in is gullible and tries; the service's grant decides.
It writes at once to the scopes the turn's <memory> block names (a request without them: it first views /memories to
learn them), then answers. A consolidation request
(its system text says MEMORY CONSOLIDATION) merges duplicate notes and rewrites a superseded owner as
"X（自 <day> 起；原为 Y）", all through the tool, then answers with what it changed.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from typing import Any

from sandbox.claude.items import _system_text
from sandbox.claude.recall import _results
from sandbox.claude.wire import block_text, offered, stable_hash, without_quotes

TOOL = "memory"
ERROR = "\x00error: "  # how _turn marks a tool result the service flagged is_error
_MESSAGE = re.compile(r'<message sender="([^"]*)" message_id="([^"]*)"[^>]*>\n?(.*?)\n?</message>', re.DOTALL)
_NOW = re.compile(r"<now>(\d{4})-(\d\d)-(\d\d)T")
_SCOPE = re.compile(r"/memories/(people|chats|items)/([A-Za-z0-9_-]+)/")
_LOADED = re.compile(r'<file path="(/memories/[^"]+)"[^>]*>\n(.*?)\n</file>', re.DOTALL)
_INDEX = re.compile(r"^- (/memories/\S+) — (.*?) \(updated", re.M)
_INJECTED = re.compile(r"写入\s*(/memories/[^\s：:]+)\s*[：:]\s*([^\n<]+)")
_TEAM = re.compile(r"^(?:以后大家|团队约定[：:]|群规[：:]|记住团队规则[：:])")
_REMEMBER = re.compile(r"^记住[：:]?\s*(.+)$", re.DOTALL)
_FORGET = re.compile(r"^(?:忘掉|忘记|别记)(.+)$", re.DOTALL)
_RAW = re.compile(r"^记忆调用[：:]\s*(\{.*\})$", re.DOTALL)
_GIVEN = re.compile(r'<scope path="(/memories/(?:people|chats|items)/[A-Za-z0-9_-]+/)"')
_PROGRESS = re.compile(r"(已确认[：:][^；;\n]+|待查[：:][^；;\n]+)")


def memory_reply(body: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    if not offered(body, TOOL) or "MEMORY CONSOLIDATION" in _system_text(body):
        return None
    question, results = _turn(body["messages"])
    wanted = _intents(question)
    if not wanted:
        return None
    given = _GIVEN.findall(question)  # the turn's <memory> names its scopes: a model writes at once, no view
    if not results and given:
        calls = _writes(wanted, " ".join(given), question)
        return _calls(body, calls, "我来记下。") if calls else "这些我没法记下来。"
    if not results:
        return _calls(body, [{"command": "view", "path": "/memories"}], "我先看看记忆里有什么。")
    if len(results) == 1 and results[0].startswith("Here're the files"):
        calls = _writes(wanted, results[0], question)
        return _calls(body, calls, "我来记下。") if calls else "这些我没法记下来。"
    writes = results[1:] if results[0].startswith("Here're the files") else results
    refused = [r for r in writes if r.startswith(ERROR)]
    if refused and len(refused) == len(writes):
        return "没能记下：" + refused[0][len(ERROR):]
    return "好的，记住了。" + ("（有一部分没能记下：" + refused[0][len(ERROR):] + "）" if refused else "")


def _turn(messages: list[dict[str, Any]]) -> tuple[str, list[str]]:
    """(the user's turn as text, the tool results of this turn so far, oldest first; a result the service marked
    is_error starts with ERROR, as a model reads the flag)."""
    results: list[str] = []
    for message in reversed(messages):
        found = _results(message)
        if message.get("role") == "user" and not found:
            return block_text(message.get("content") or ""), results
        errors = [isinstance(b, dict) and b.get("type") == "tool_result" and bool(b.get("is_error"))
                  for b in message.get("content") or [] if isinstance(b, dict) and b.get("type") == "tool_result"]
        results = [ERROR + r if bad else r for r, bad in zip(found, errors, strict=True)] + results
    return "", results


def _intents(text: str) -> list[tuple[str, str, str]]:
    """(kind, sender, words) for each memory intent of the request."""
    out = [("inject", "", f"{path}\x00{words.strip()}") for path, words in _INJECTED.findall(html.unescape(text))]
    for sender, _mid, words in _MESSAGE.findall(text):
        words = html.unescape(without_quotes(words)).strip()
        if m := _RAW.match(words):
            out.append(("raw", sender, m.group(1)))
        elif _TEAM.match(words):
            out.append(("team", sender, words))
        elif words.startswith("以后"):
            out.append(("instruction", sender, words))
        elif (m := _REMEMBER.match(words)) and not _INJECTED.search(words):
            out.append(("note", sender, m.group(1).strip()))
        elif m := _FORGET.match(words):
            out.append(("forget", sender, m.group(1).strip(" 。")))
        elif _PROGRESS.search(words):
            out.append(("progress", sender, "；".join(_PROGRESS.findall(words))))
    return out


def _writes(wanted: list[tuple[str, str, str]], listing: str, question: str) -> list[dict[str, Any]]:
    scopes = {(kind, ident) for kind, ident in _SCOPE.findall(listing)}
    chat = next((i for k, i in scopes if k == "chats"), "")
    item = next((i for k, i in scopes if k == "items"), "")
    loaded = {path: body for path, body in _LOADED.findall(html.unescape(question))}
    day = _day(question)
    calls: list[dict[str, Any]] = []
    for kind, sender, words in wanted:
        if kind == "raw":
            calls.append(json.loads(words))
        elif kind == "inject":
            path, text = words.split("\x00", 1)
            calls.append({"command": "create", "path": path, "file_text": text})
        elif kind == "instruction":
            calls.append(_append(loaded, f"/memories/people/{sender}/instructions.md", f"- {words}"))
        elif kind == "team" and chat:
            calls.append(_append(loaded, f"/memories/chats/{chat}/instructions.md", f"- {words}"))
        elif kind == "note":
            home = f"/memories/chats/{chat}" if chat else f"/memories/people/{sender}"
            slug = hashlib.sha256(words.encode()).hexdigest()[:8]
            calls.append({"command": "create", "path": f"{home}/notes/{slug}.md",
                          "file_text": f"{words}（{day} 记，{sender}）"})
        elif kind == "progress" and item:
            calls.append(_append(loaded, f"/memories/items/{item}/progress.md", f"- {words}（{day}）"))
        elif kind == "forget":
            calls += _forget(loaded, question, words)
    return calls


def _append(loaded: dict[str, str], path: str, line: str) -> dict[str, Any]:
    if path in loaded:
        lines = loaded[path].split("\n")  # counted as the reference does: a last newline ends a line, adds none
        return {"command": "insert", "path": path, "insert_line": len(lines) - (lines[-1] == ""), "insert_text": line}
    return {"command": "create", "path": path, "file_text": line}


def _forget(loaded: dict[str, str], question: str, words: str) -> list[dict[str, Any]]:
    for path, body in loaded.items():
        body = body.removesuffix("\n")
        for line in body.split("\n"):
            if words in line:
                rest = [x for x in body.split("\n") if x != line]
                return [{"command": "delete", "path": path}] if not rest else \
                    [{"command": "str_replace", "path": path, "old_str": line + "\n" if line != body.split("\n")[-1]
                      else "\n" + line, "new_str": ""}]
    for path, first in _INDEX.findall(html.unescape(question)):
        if words in first:
            return [{"command": "delete", "path": path}]
    return []


def _day(text: str) -> str:
    found = _NOW.search(text)
    return f"{found.group(2)}-{found.group(3)}" if found else "?"


def _calls(body: dict[str, Any], commands: list[dict[str, Any]], say: str) -> list[dict[str, Any]]:
    head = stable_hash(body)[:16]
    return [{"type": "text", "text": say}, *({"type": "tool_use", "id": f"toolu_mem{head}{n:04d}", "name": TOOL,
                                             "input": c} for n, c in enumerate(commands))]
