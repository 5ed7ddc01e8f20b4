"""The stand-in follows what memory tells it, in the order the system prompt states (the operator's rules, then the
person's and the chat's instructions.md, then the message). Offline, deterministic, and only two rules: a sender's
stored "answer me in English" (英文 / English) makes the answer English; a team rule "一律回答X" in the chat's
instructions.md makes the answer X, whatever the message asks.
"""

from __future__ import annotations

import html
import re
from typing import Any

from sandbox.claude.wire import block_text

_FILE = re.compile(r'<file path="/memories/(people|chats)/([A-Za-z0-9_-]+)/instructions\.md"[^>]*>\n(.*?)\n</file>',
                   re.DOTALL)
_SENDER = re.compile(r'<message sender="([^"]*)"')
_ALWAYS = re.compile(r"一律回答[「“\"]?([^」”\"。\n]+)")
_ENGLISH = re.compile(r"英文|English", re.IGNORECASE)


def instructed_reply(body: dict[str, Any]) -> str | None:
    """The answer the stored instructions decide (None: they decide nothing here)."""
    users = [m for m in body.get("messages") or [] if m.get("role") == "user"]
    if not users:
        return None
    text = block_text(users[-1].get("content") or "")
    files = [(kind, ident, html.unescape(words)) for kind, ident, words in _FILE.findall(text)]
    if not files or "<message " not in text:
        return None
    team = next((m.group(1).strip() for kind, _i, words in files if kind == "chats" and (m := _ALWAYS.search(words))),
                None)
    if team:
        return team
    senders = set(_SENDER.findall(text.split("<turn_context", 1)[0]))
    english = any(kind == "people" and ident in senders and _ENGLISH.search(words) for kind, ident, words in files)
    if english:
        return "Received. I will answer in English, as your memory asks."
    return None
