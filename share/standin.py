"""The feature's offline model (`Feature.standin`, sandbox mode and tests): asked in words to deliver a result into
another chat — "把结论同步到运维群", "share this to the ops chat" — with `share_to_chat` offered, it calls the tool as a
model would: for each batch message asking (several people may speak in one batch), naming that message, the chat as
the person named it, and the conclusion so far as text (the conversation's last answer); given the tool's results,
it says what became of them. Deterministic, stdlib only."""

from __future__ import annotations

import hashlib
import html
import json
import re
from typing import Any

TOOL_NAME = "share_to_chat"
_MESSAGE = re.compile(r'<message sender="[^"]*" message_id="([^"]*)"[^>]*>\n?(.*?)\n?</message>', re.DOTALL)
_ZH = re.compile(r"(?:(?:同步|转发|分享|发|贴)(?:到|至)|(?:同步|转发|分享)给)\s*(?P<chat>[^\s，。,!！?？；;]{1,40})")
_NOBODY = {"我", "你", "这里", "这儿", "此处", "me", "you", "here"}
_EN = re.compile(r"\b(?:share|post|send|forward)\b.{0,40}?\b(?:to|in|into)\s+(?:the\s+)?(?P<chat>\S.{0,40}?)"
                 r"(?:\s+(?:chat|group))?\s*[.!?]*$", re.IGNORECASE)
_TAIL = re.compile(r"(?:里|中|去|吧|一下|哈|呀|啊)+$")


def reply(body: dict[str, Any]) -> Any:
    names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    messages = body.get("messages") or []
    if TOOL_NAME not in names or not messages:
        return None
    if _called(messages[-2]) if len(messages) > 1 else False:
        return _said(_results(messages[-1]))
    last = messages[-1]
    if last.get("role") != "user" or _results(last):
        return None
    conclusion = _last_answer(messages[:-1])
    calls = [_call(body, n, html.unescape(mid), html.unescape(words).strip(), conclusion)
             for n, (mid, words) in enumerate(_MESSAGE.findall(_text(last.get("content"))))]
    asked = [c for c in calls if c is not None]
    if not asked:
        return None
    if not conclusion:
        return "这里还没有可以同步的结论：先问我一个问题，再让我同步。"
    return [{"type": "text", "text": "我来同步。"}, *asked]


def _call(body: dict[str, Any], n: int, message_id: str, words: str, conclusion: str) -> dict[str, Any] | None:
    """The tool call a model makes for one message asking for a delivery; None when it does not ask for one."""
    found = _ZH.search(words) or _EN.search(words)
    if not found:
        return None
    chat = _TAIL.sub("", found.group("chat").strip(" 「」“”\"'。.!！"))
    if not chat or chat.lower() in _NOBODY:
        return None
    digest = hashlib.sha256(json.dumps(body, sort_keys=True, ensure_ascii=False).encode()).hexdigest()
    return {"type": "tool_use", "id": f"toolu_share{digest[:14]}{n:04d}", "name": TOOL_NAME,
            "input": {"message_id": message_id, "chat": chat, "text": conclusion}}


def _said(results: list[str]) -> str | None:
    ours = [r for r in results if r.startswith(("granted", "not shared:"))]
    if not ours:
        return None
    lines = []
    for r in ours:
        chat = re.search(r"「([^」]*)」", r)
        if r.startswith("granted"):
            lines.append(f"好的，这就同步到「{chat.group(1)}」。" if chat else "好的，这就同步。")
        else:
            lines.append("没能同步：" + r[len("not shared:"):].strip())
    return "\n".join(lines)


def _called(message: dict[str, Any]) -> bool:
    content = message.get("content")
    return message.get("role") == "assistant" and isinstance(content, list) and any(
        isinstance(b, dict) and b.get("type") == "tool_use" and b.get("name") == TOOL_NAME for b in content)


def _last_answer(history: list[dict[str, Any]]) -> str:
    """The conversation's last answer: what a model would pass on as "the conclusion"."""
    for m in reversed(history):
        if m.get("role") == "assistant" and (text := _text(m.get("content")).strip()):
            return text
    return ""


def _results(message: dict[str, Any]) -> list[str]:
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    out = []
    for b in content:
        if isinstance(b, dict) and b.get("type") == "tool_result":
            inner = b.get("content")
            out.append(inner if isinstance(inner, str) else _text(inner))
    return out


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content or [] if isinstance(b, dict) and b.get("type") == "text")
