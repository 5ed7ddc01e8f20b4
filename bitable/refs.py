"""Ids in text: topics (`omt_…`), records (`rec…`, record links), items (`itm_…`). Pure.

Only ids are ever resolved; a title or a name never identifies an item.
"""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlencode, urlsplit

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


# AppLinks that open a topic. Sources: larksuite/cli shortcuts/im/convert_lib/app_link.go (thread_app_link: path
# /client/thread/open with open_chat_id / open_thread_id and openchatid / openthreadid, "desktop and mobile clients
# use different spellings of these keys"; applink.feishu.cn for Feishu, applink.larksuite.com for Lark), and the
# message_app_link Feishu answers a send or reply with (lark-oapi 1.7.5 Create/ReplyMessageResponseBody; links seen in
# public repositories for messages in a topic have this form plus thread_position). A chat AppLink
# (`client/chat/open?openChatId=`) opens the chat only: a client ignores the fragment, so `#thread_id=…` never led
# into the topic.
APPLINK_HOSTS = ("applink.feishu.cn", "applink.larksuite.com")
SAFE_LINK = re.compile(r"https://[^\s<>()\[\]\"'`\\]{1,1000}")


def applink_origin(origin: str) -> str:
    """Where a tenant's AppLinks live: Lark's (larksuite.com) on applink.larksuite.com, Feishu's on
    applink.feishu.cn."""
    host = urlsplit(origin).hostname or ""
    lark = host == "larksuite.com" or host.endswith(".larksuite.com")
    return f"https://{APPLINK_HOSTS[1] if lark else APPLINK_HOSTS[0]}"


def topic_link(origin: str, chat_id: str, thread_id: str) -> str:
    """The AppLink that opens the topic itself (`client/thread/open`), naming the chat and the topic in both
    spellings the clients read; `thread_ids` reads the topic back from it."""
    query = urlencode({"open_chat_id": chat_id, "open_thread_id": thread_id, "openchatid": chat_id,
                       "openthreadid": thread_id})
    return f"{applink_origin(origin)}/client/thread/open?{query}"


def answer_link(app_link: str, origin: str, chat_id: str, thread_id: str) -> str:
    """A first answer's link: the message_app_link Feishu answered its post with (it opens the topic at the
    answer), else the topic's AppLink."""
    return app_link if SAFE_LINK.fullmatch(app_link or "") else topic_link(origin, chat_id, thread_id)


def openable(url: str) -> str:
    """A link as a record holds it, in a form that opens the topic: the links this service wrote before (the
    chat AppLink naming the topic in its fragment, and `<origin>/client/thread/open?chat_id=…&thread_id=…`)
    become the topic's AppLink; any other link is kept as written. Pure."""
    parts = urlsplit(url)
    if parts.path == "/client/chat/open" and parts.hostname in APPLINK_HOSTS:
        chat, thread = parse_qs(parts.query).get("openChatId"), parse_qs(parts.fragment).get("thread_id")
    elif parts.path == "/client/thread/open" and "open_thread_id" not in parse_qs(parts.query):
        chat, thread = parse_qs(parts.query).get("chat_id"), parse_qs(parts.query).get("thread_id")
    else:
        return url
    if not (chat and thread and chat[0].startswith("oc_") and THREAD.fullmatch(thread[0])):
        return url
    return topic_link(f"https://{parts.hostname}", chat[0], thread[0])


def _unique(values: list[str]) -> list[str]:
    return list(dict.fromkeys(values))
