"""What a delivery asks for, read from a command or a tool call: which result, and which chat. Pure.

A chat is named by its id (`oc_…`), by a chat link (Feishu's AppLink `…/client/chat/open?openChatId=oc_…`, or a
topic's `…/client/thread/open?open_chat_id=oc_…`), or by its exact name. A name is resolved later (share/access.py),
against the chats Feishu's chat search shows the bot, and only when exactly one of them has that very name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from bitable.refs import APPLINK_HOSTS

ANSWER, FIRST_ANSWER = "answer", "first_answer"
COMMAND = re.compile(r"^/share(?:\s+(.*))?$", re.IGNORECASE | re.DOTALL)
# `同步到 运维群` / `同步首答到 运维群`: a command only when the rest can be nothing but a chat's name (no sentence
# after it: "同步到运维群，顺便说明原因" is for the model, which has the tool).
WORDS = re.compile(r"^同步(首答)?到[ \t]*([^\s，。？！；：,.?!;:][^\n，。？！；：,?!;:]{0,59})$")
FIRST = ("首答", "first")
CHAT_ID = re.compile(r"oc_[0-9A-Za-z_-]{1,64}")
NAME_CHARS = 60
_QUOTES = "「」『』“”\"'《》【】[]<> \t"
USAGE = ("用法：/share 群名（或群 ID oc_…、群链接）同步这里最近的回答；/share 首答 群名 同步事项的首答。"
         "也可以说「同步到 群名」。")


@dataclass(frozen=True)
class Target:
    """The chat asked for: its id (named by id or link) or its name (resolved against Feishu's chat search)."""

    chat_id: str = ""
    name: str = ""

    @property
    def shown(self) -> str:
        return self.name or self.chat_id


@dataclass(frozen=True)
class Asked:
    what: str  # ANSWER (the route's last answer) or FIRST_ANSWER (an item topic's first answer)
    target: Target


class SpecError(ValueError):
    """Not a delivery that can be made; str(err) is the short reply that says why (Chinese)."""


def read_command(text: str) -> Asked:
    """`/share [首答] <chat>` or `同步[首答]到 <chat>` (the whole message, the bot's @mention stripped)."""
    words = WORDS.match(text.strip())
    if words:
        return Asked(FIRST_ANSWER if words.group(1) else ANSWER, read_target(words.group(2)))
    command = COMMAND.match(text.strip())
    rest = ((command.group(1) if command else "") or "").strip()
    head, _, tail = rest.partition(" ")
    if head.lower() in FIRST:
        return Asked(FIRST_ANSWER, read_target(tail))
    return Asked(ANSWER, read_target(rest))


def read_target(text: str) -> Target:
    """A chat as a person or the model named it: an id, a chat link, or a name (one line, at most 60 characters)."""
    raw = (text or "").strip().strip(_QUOTES).strip()
    if not raw:
        raise SpecError(USAGE)
    if CHAT_ID.fullmatch(raw):
        return Target(chat_id=raw)
    if raw.lower().startswith(("http://", "https://")):
        chat = chat_of_link(raw)
        if not chat:
            raise SpecError("看不出这个链接是哪个群：请用群链接（…/client/chat/open?openChatId=oc_…）、群 ID 或群名。")
        return Target(chat_id=chat)
    if "\n" in raw or len(raw) > NAME_CHARS:
        raise SpecError(f"群名最多 {NAME_CHARS} 个字、只占一行。" + USAGE)
    return Target(name=" ".join(raw.split()))


def chat_of_link(url: str) -> str:
    """The chat an AppLink opens (a chat's, or a topic's chat); "" for any other link."""
    parts = urlsplit(url)
    if parts.scheme != "https" or parts.hostname not in APPLINK_HOSTS:
        return ""
    if parts.path not in ("/client/chat/open", "/client/thread/open"):
        return ""
    query = parse_qs(parts.query)
    found = (query.get("openChatId") or query.get("open_chat_id") or query.get("openchatid") or [""])[0]
    return found if CHAT_ID.fullmatch(found) else ""


def same_name(a: str, b: str) -> bool:
    """One chat name and another, spaces and letter case aside (search matches loosely; we do not)."""
    return " ".join(a.split()).casefold() == " ".join(b.split()).casefold()


def inert(name: str) -> str:
    """A name people chose (a chat's), shown in Markdown without becoming a link, a mention or emphasis."""
    table = str.maketrans({"[": "［", "]": "］", "(": "（", ")": "）", "<": "‹", ">": "›", "*": "＊",
                           "`": "'", "~": "～", "#": "＃", "|": "｜", "\\": "＼"})
    return " ".join(name.split()).translate(table)[:NAME_CHARS]
