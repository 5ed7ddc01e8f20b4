"""A chat's daily digest: its open items read fresh from Bitable, and the one card that lists them.

Open means the record's 来源群 is the chat and its 状态 is not one of the closed statuses. Bitable filters both
server-side (one `isNot` per closed status); the same test runs again here, so a closed status the search could
not take (more than the filter's 50 conditions, or an option name the table refused) still stays out.

Everything a record says is shown as text: Feishu tags are defused and Markdown punctuation becomes the
`&#N;` references the card Markdown documents, so a title cannot mention anyone, link anywhere or restyle
the card. Only the owners' open ids become real mentions.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from datetime import date, datetime
from typing import Any
from zoneinfo import ZoneInfo

from lark_oapi.channel.card import new_card

from bitable.client import MAX_CONDITIONS, Bitable, Match, Record
from bitable.errors import BitableError
from bitable.refs import openable
from feishu.cards import OPEN_ID
from feishu.render import defuse

log = logging.getLogger(__name__)

MAX_ROWS = 30  # items listed on one card; the rest are counted
BLOCKS_BYTES = 20 * 1024  # the listed items' Markdown; Feishu refuses a card over 30 KB (render.RICH_LIMIT_BYTES)
TITLE_CHARS = 60
STATUS_CHARS = ITEM_ID_CHARS = 24
LINK_CHARS = 1000
MAX_OWNERS = 5  # mentions per item; more are counted
INVALID_FILTER = "1254018"
SAFE_LINK = re.compile(r"https://[^\s<>()\[\]\"'`\\]+")
_SPACES = re.compile(r"\s+")
_PUNCTUATION = frozenset("&<>*_~`[]()#+-!|\\:$\"'/{}")  # the card Markdown table, and & itself


@dataclass(frozen=True)
class DigestRow:
    """One open item as the card shows it."""

    record_id: str
    title: str
    owner_ids: tuple[str, ...]
    status: str
    last_activity_ms: int | None
    topic_link: str
    item_id: str


# -- reading ---------------------------------------------------------------------------------------------


def open_items(bt: Bitable, chat_id: str, closed: Collection[str]) -> list[DigestRow]:
    """The chat's open items, read now; the stalest first (no known activity last)."""
    schema = bt.schema()
    chat, status = schema.name("chat"), schema.name("status")
    closed_set = {s for s in closed if s}
    records = _search(bt, chat, chat_id, status, closed_set)
    rows = [_row(r, schema.name) for r in records
            if _in_chat(r, chat, chat_id) and r.text(status).strip() not in closed_set]
    return sorted(rows, key=lambda r: (r.last_activity_ms is None, r.last_activity_ms or 0, r.record_id))


def _search(bt: Bitable, chat: str, chat_id: str, status: str, closed: set[str]) -> list[Record]:
    also: list[Match] = [(status, "isNot", [s]) for s in sorted(closed)[:MAX_CONDITIONS - 1]]
    try:
        return bt.search(chat, chat_id, "is", also=also, automatic_fields=True)
    except BitableError as exc:
        if exc.code != INVALID_FILTER or not also:
            raise
        # Undocumented: whether Bitable accepts a select option the table lacks. Filter here instead.
        log.warning("digest: status filter refused, filtering here", extra={"reason": exc.msg})
        return bt.search(chat, chat_id, "is", automatic_fields=True)


def _in_chat(record: Record, chat: str, chat_id: str) -> bool:
    return chat_id in record.chats(chat) or record.text(chat).strip() == chat_id  # group chat or text column


def _row(record: Record, name: Callable[[str], str]) -> DigestRow:
    links = record.links(name("topic_link"))
    return DigestRow(
        record_id=record.record_id, title=record.text(name("title")).strip(),
        owner_ids=tuple(record.users(name("owner"))), status=record.text(name("status")).strip(),
        last_activity_ms=record.last_modified_time or record.created_time,
        topic_link=openable(links[0] if links else record.text(name("topic_link")).strip()),  # old forms: topic
        item_id=record.text(name("item_id")).strip(),
    )


# -- the card (pure) -------------------------------------------------------------------------------------


def digest_card(rows: Sequence[DigestRow], *, now_ms: int, tz: ZoneInfo, date_label: str) -> dict[str, Any]:
    """The digest card (JSON 2.0): a header with the count, one block per item (at most MAX_ROWS, and no more
    than BLOCKS_BYTES of them), then how many were left out."""
    card = new_card().config(update_multi=True, width_mode="fill").header(
        f"待处理事项 · {date_label}（{len(rows)} 项）"[:100], template="orange" if rows else "green")
    if not rows:
        card.markdown("暂无待处理事项。")
    listed, size = 0, 0
    for row in rows[:MAX_ROWS]:
        block = _block(listed + 1, row, now_ms, tz)
        size += len(block.encode())
        if size > BLOCKS_BYTES:
            break
        card.markdown(block)
        listed += 1
    if len(rows) > listed:
        card.raw({"tag": "markdown", "element_id": "footer", "text_size": "notation",
                  "content": f"另有 {len(rows) - listed} 项未列出"})
    return card.to_dict()


def _block(n: int, row: DigestRow, now_ms: int, tz: ZoneInfo) -> str:
    title = plain(_clip(row.title, TITLE_CHARS)) or "（无标题）"
    if len(row.topic_link) <= LINK_CHARS and SAFE_LINK.fullmatch(row.topic_link):
        title = f"[{title}]({row.topic_link})"
    if row.item_id:
        title += f" · {plain(_clip(row.item_id, ITEM_ID_CHARS))}"
    facts = [f"负责人：{_owners(row.owner_ids)}", f"状态：{plain(_clip(row.status, STATUS_CHARS)) or '—'}",
             f"最近动态：{relative_day(row.last_activity_ms, now_ms, tz)}"]
    return f"**{n}.** {title}\n" + " · ".join(facts)  # not "1. …": each block would restart a list


def _owners(owner_ids: Sequence[str]) -> str:
    ids = list(dict.fromkeys(i for i in owner_ids if OPEN_ID.fullmatch(i)))
    if not ids:
        return "未指派"
    shown = " ".join(f"<at id={i}></at>" for i in ids[:MAX_OWNERS])
    return shown + (f" 等 {len(ids)} 人" if len(ids) > MAX_OWNERS else "")


def relative_day(then_ms: int | None, now_ms: int, tz: ZoneInfo) -> str:
    """How long ago `then_ms` was, in calendar days of `tz`: "今天", "昨天" or "N 天前"; "—" when unknown."""
    if then_ms is None:
        return "—"
    days = (_day(now_ms, tz) - _day(then_ms, tz)).days
    return "今天" if days <= 0 else "昨天" if days == 1 else f"{days} 天前"


def _day(ms: int, tz: ZoneInfo) -> date:
    return datetime.fromtimestamp(ms / 1000, tz).date()


def _clip(text: str, limit: int) -> str:
    text = _SPACES.sub(" ", text).strip()
    return text if len(text) <= limit else text[:limit].rstrip() + "…"


def plain(text: str) -> str:
    """`text` shown as written in card Markdown: on one line, Feishu tags defused, and every Markdown or HTML
    punctuation mark written as `&#N;` (the escape the card Markdown documents)."""
    text = defuse(_SPACES.sub(" ", text))
    return "".join(f"&#{ord(c)};" if c in _PUNCTUATION else c for c in text)
