"""User commands in a message's own text: reset (`/reset`, `/new`, `重置`, `新话题`) and `/status`. Pure.

A command is the whole text of a text or post message once the bot's @mention is stripped: nothing else
in it, so a sentence that mentions "/reset" is a question, not a command. Quoted, forwarded and card
content never is: only the sender's own words of a `text` or `post` message are read.
"""

from __future__ import annotations

import re

RESET, STATUS = "reset", "status"
_COMMANDS = {"/reset": RESET, "/new": RESET, "重置": RESET, "新话题": RESET, "/status": STATUS}
_TRAILING = re.compile(r"[\s。.!！~～]+$")


def command_of(message_type: str, text: str) -> str | None:
    if message_type not in ("text", "post"):
        return None
    word = _TRAILING.sub("", text.strip()).lower()
    return _COMMANDS.get(word)
