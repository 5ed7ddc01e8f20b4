"""User commands in a message's own text: reset (`/reset`, `/new`, `重置`, `新话题`), `/status`, and the item
commands `/登记` (`/item new`) and `/item link <record link or id>`, and the follow-up commands `/followups`
(`/提醒`) and `/cancel <id>`. Pure.

A command is the whole text of a text or post message once the bot's @mention is stripped: nothing else
in it, so a sentence that mentions "/reset" is a question, not a command. Quoted, forwarded and card
content never is: only the sender's own words of a `text` or `post` message are read.
"""

from __future__ import annotations

import re

RESET, STATUS, ITEM_NEW, ITEM_LINK = "reset", "status", "item_new", "item_link"
FOLLOWUPS, CANCEL = "followups", "cancel"
_COMMANDS = {"/reset": RESET, "/new": RESET, "重置": RESET, "新话题": RESET, "/status": STATUS,
             "/登记": ITEM_NEW, "/item new": ITEM_NEW, "/followups": FOLLOWUPS, "/提醒": FOLLOWUPS}
_TRAILING = re.compile(r"[\s。.!！~～]+$")
_LINK = re.compile(r"^/item\s+link\s+(\S+)$", re.IGNORECASE)
_CANCEL = re.compile(r"^/cancel(?:\s+(\S+))?$", re.IGNORECASE)


def command_of(message_type: str, text: str) -> str | None:
    if message_type not in ("text", "post"):
        return None
    word = _TRAILING.sub("", text.strip())
    if _LINK.match(word):
        return ITEM_LINK
    if _CANCEL.match(word):
        return CANCEL
    return _COMMANDS.get(re.sub(r"\s+", " ", word.lower()))


def cancel_argument(text: str) -> str:
    """The timer id of `/cancel <id>` ("" when none was given)."""
    match = _CANCEL.match(_TRAILING.sub("", text.strip()))
    return (match.group(1) or "") if match else ""


def link_argument(text: str) -> str:
    """The record link or id of `/item link <…>` ("" when the text is not that command)."""
    match = _LINK.match(_TRAILING.sub("", text.strip()))
    return match.group(1) if match else ""
