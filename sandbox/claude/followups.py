"""The stand-in's follow-ups: it sets one when asked to remind, and decides a firing one from markers. Offline.

- Any message of the batch "<when>提醒我<what>" / "remind me <when> to <what>", with the schedule_followup tool
  offered, gets a tool call of its own, as a real model acts on every request of a batch, not only the last:
  message_id = that message, at = the time resolved against the request's `<now>` as a colleague would
  (sandbox/claude/when.py; "3点" at 09:00 is 15:00), what = the rest. The tool's results are
  then echoed in the answer.
- A FOLLOW-UP CHECK request (timers/followup.py) answers {"post": false} when the follow-up waits for a
  reply (回复 / 答复 / reply) and a message since is marked owner="true"; otherwise it posts "提醒：<what>".
"""

from __future__ import annotations

import html
import json
import re
from datetime import datetime
from typing import Any

from sandbox.claude.items import _system_text
from sandbox.claude.recall import _results
from sandbox.claude.when import WhenError, parse_when
from sandbox.claude.wire import block_text, offered, stable_hash, without_quotes

_MESSAGE = re.compile(r'<message sender="([^"]*)" message_id="([^"]*)"[^>]*>\n?(.*?)\n?</message>', re.DOTALL)
_NOW = re.compile(r"<now>(\S+) \w+</now>")
_ZH = re.compile(r"^(?P<when>.+?)(?:再)?提醒(?:我|一下|大家)?(?P<what>.+)$", re.DOTALL)
_EN = re.compile(r"remind me (?P<when>.+?) to (?P<what>.+)$", re.IGNORECASE | re.DOTALL)
_FOLLOWUP = re.compile(r"<followup [^>]*>(.*?)</followup>", re.DOTALL)
_WAITS_FOR_REPLY = re.compile(r"回复|答复|回应|reply|respond|answer", re.IGNORECASE)


def schedule_reply(body: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    messages = body["messages"]
    if not offered(body, "schedule_followup") or not messages:
        return None
    results = _results(messages[-1])
    if results:
        done = [r for r in results if r.startswith(("set:", "not set:"))]
        if not done:
            return None
        failed = [r[len("not set:"):].strip() for r in done if r.startswith("not set:")]
        if failed and len(failed) == len(done):
            return "没能设上提醒：" + "；".join(failed)
        return "好的，到时候我来跟进。" + ("（有一个没设上：" + "；".join(failed) + "）" if failed else "")
    text = block_text(messages[-1].get("content") or "")
    found = _NOW.search(text)
    if not found:
        return None
    now = datetime.fromisoformat(found.group(1))
    calls: list[dict[str, Any]] = []
    unclear: list[str] = []
    for n, (_sender, mid, words) in enumerate(_MESSAGE.findall(text)):
        call = _call(body, n, mid, html.unescape(without_quotes(words)).strip(), now)
        if isinstance(call, str):
            unclear.append(call)
        elif call is not None:
            calls.append(call)
    if not calls:
        return "没能设上提醒：" + "；".join(unclear) if unclear else None
    return [{"type": "text", "text": "我来设提醒。"}, *calls]


def _call(body: dict[str, Any], n: int, message_id: str, text: str, now: datetime) -> dict[str, Any] | str | None:
    """The tool call a model makes for one message asking to be reminded; None: it does not ask; a string: the
    time could not be resolved (a model asks back instead of guessing)."""
    match = _ZH.match(text) or _EN.search(text)
    if not match:
        return None
    said = match.group("when").strip(" ，,。")
    what = match.group("what").strip(" ，,。")
    try:
        at = parse_when(said, now).at.isoformat()
    except WhenError as exc:
        return str(exc)
    return {"type": "tool_use", "id": f"toolu_{stable_hash(body)[:18]}{n:04d}", "name": "schedule_followup",
            "input": {"message_id": html.unescape(message_id), "at": at, "what": what}}


def check_reply(body: dict[str, Any]) -> str | None:
    if "FOLLOW-UP CHECK" not in _system_text(body):
        return None
    users = [m for m in body["messages"] if m.get("role") == "user"]
    text = block_text(users[-1]["content"]) if users else ""
    found = _FOLLOWUP.search(text)
    what = html.unescape(found.group(1)) if found else ""
    owner_spoke = 'owner="true"' in text
    if owner_spoke and _WAITS_FOR_REPLY.search(what):
        return json.dumps({"post": False, "text": "", "why": "负责人已在话题里回复"}, ensure_ascii=False)
    return json.dumps({"post": True, "text": f"提醒：{what}", "why": "还没有回复"}, ensure_ascii=False)
