"""Ids in text: topics (`omt_…`), records (`rec…`, record links), items (`itm_…`). Pure.

Only ids are ever resolved; a title or a name never identifies an item.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, quote, urlsplit

THREAD = re.compile(r"\bomt_[A-Za-z0-9]{4,64}\b")
ITEM = re.compile(r"\bitm_[0-9a-f]{12}\b")
RECORD = re.compile(r"\brec[A-Za-z0-9]{8,30}\b")
URL = re.compile(r"https?://[^\s<>\"'）)】\]]+")


def thread_ids(text: str) -> list[str]:
    return _unique(THREAD.findall(text or ""))


def item_ids(text: str) -> list[str]:
    return _unique(ITEM.findall(text or ""))


def record_ids(text: str, app_token: str = "", table_id: str = "") -> list[str]:
    """Record ids named in `text`: bare `rec…` ids, and `record=` of Bitable links to this table only
    (a link to another base or table names another record, whatever its id looks like)."""
    found: list[str] = []
    for url in URL.findall(text or ""):
        rec = _record_of_link(url, app_token, table_id)
        if rec is not None:
            found.append(rec)
    stripped = URL.sub(" ", text or "")
    found.extend(r for r in RECORD.findall(stripped) if _looks_like_id(r))
    return _unique(found)


def _record_of_link(url: str, app_token: str, table_id: str) -> str | None:
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    record = (query.get("record") or [""])[0]
    if not RECORD.fullmatch(record):
        return None
    segments = [s for s in parts.path.split("/") if s]
    if app_token and app_token not in segments:
        return None
    table = (query.get("table") or [""])[0]
    if table_id and table and table != table_id:
        return None
    return record


def _looks_like_id(word: str) -> bool:
    """`recordings…` is a word; ids mix in digits or capitals (`recnE5Ahw1Kq9`)."""
    tail = word[3:]
    return any(c.isdigit() or c.isupper() for c in tail)


def record_link(origin: str, app_token: str, table_id: str, record_id: str) -> str:
    return f"{origin.rstrip('/')}/base/{app_token}?table={table_id}&record={record_id}"


APPLINK_CHAT = "https://applink.feishu.cn/client/chat/open?openChatId={chat_id}"  # Feishu's documented AppLink


def topic_link(origin: str, chat_id: str, thread_id: str, message_id: str = "") -> str:
    """A link that opens the topic's chat in Feishu (the documented AppLink `client/chat/open`), naming the topic
    (and a message) in its fragment: the client never sends a fragment anywhere, and `thread_ids` reads the id
    back. Records written before carry `<origin>/client/thread/open?...&thread_id=…`; those still read back."""
    fragment = f"thread_id={thread_id}" + (f"&message_id={message_id}" if message_id else "")
    return APPLINK_CHAT.format(chat_id=quote(chat_id, safe="")) + "#" + fragment


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))
