"""read_thread's pages: a page of the topic from the cursor on, what fits the room, and where the next read starts.

A page always makes progress: when not one unseen message fits whole, it shows the head of the first (read_message
reads on from its offset) and the cursor moves past it. Only when not even that head fits is the request full: the
cursor stays, and the model answers with what it has (the next turn reads on from there).
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from typing import Any

from claude import budget as bud
from runs.runtime import Runtime
from turn.thread import (
    PAGE_END,
    RouteScope,
    in_context,
    list_page,
    message_part,
    page_head,
    part_close,
    part_open,
    render,
    text_of,
)

MIN_HEAD_CHARS = 40  # a page shows at least this much of its first unseen message, or says the request is full


def parse_cursor(cursor: str | None) -> tuple[str | None, int]:
    """(Feishu page token, items of that page already read). Ours point inside a page ("skip:N:token") when a
    page did not fit; Feishu's own tokens point at a page's start. Pure."""
    if cursor and cursor.startswith("skip:"):
        _, n, token = cursor.split(":", 2)
        return token or None, max(0, int(n)) if n.isdigit() else 0
    return cursor or None, 0


def skip_past(rest: Sequence[dict[str, Any]], items: Sequence[dict[str, Any]], shown: int) -> int:
    """How many of `rest` (this page from the cursor on) lie before `items[shown]`, the first item not shown
    (pre-reset items left out among them count as read). Pure."""
    return next(i for i, m in enumerate(rest) if m is items[shown])


def _not_shown(count: int) -> str:
    return f'<not_shown count="{count}" reason="no room"/> read_thread again (without a cursor) continues with them.'


def _reset_note(hidden: int) -> str:
    return (f'\n<before_user_reset count="{hidden}"/> {hidden} message(s) of this page were sent before the user '
            "reset the conversation (a hard boundary): left out. Read them only if the user explicitly asks for "
            "pre-reset messages (cross_reset=true).")


REQUEST_FULL = ('<thread_unread reason="request_full"/> No room left in this request for thread messages: answer '
                "now; a later read continues here.")


def _joined(parts: Sequence[str]) -> str:
    return "\n" + "\n".join(parts) if parts else ""


def add_once(ids: list[str], new: str) -> None:
    if new not in ids:
        ids.append(new)


class Pages:
    """read_thread for a Reader (turn/recall.py): the state it reads and keeps is the Reader's."""

    rt: Runtime
    b: bud.Budget
    scope: RouteScope
    cursor: str | None
    has_more: bool | None
    fetched: list[str]
    included: list[str]
    staged: dict[str, str]
    reset_ms: int | None
    crossed: bool
    full: bool

    def _thread(self, args: dict[str, Any], room: int, context: str) -> str:
        thread_id = self.scope.thread_id
        if not thread_id:
            return "This conversation is not a topic: there is no thread to read."
        start = bool(args.get("from_start"))
        cursor = str(args.get("cursor") or "") or (None if start else self.cursor)
        if cursor is None and not start and self.has_more is False:
            return "The thread was read to its end in this conversation; from_start=true reads it again."
        token, skip = parse_cursor(cursor)
        asked = args.get("page_size")
        size = asked if isinstance(asked, int) else 20
        page = list_page(self.rt.feishu, thread_id, page_token=token, page_size=size)
        rest = page.items[skip:]
        items, hidden = self._after_reset(rest, bool(args.get("cross_reset")))
        note = _reset_note(hidden) if hidden else ""
        # The page's frame is paid before any message: measured with the longest next cursor it can name.
        longest = max(page.next_token or "", f"skip:{skip + len(rest)}:{token or ''}", key=len)
        frame = self.b.cost(page_head(thread_id, cursor or "", longest, True, note) + PAGE_END)
        body, shown, stuck = self._items(items, room - frame, context)
        if stuck and not shown:  # nothing read: the next read starts where this one did
            self.cursor, self.has_more = cursor, True
        elif shown < len(items):  # the next read starts at the first message this one could not show
            self.cursor, self.has_more = f"skip:{skip + skip_past(rest, items, shown)}:{token or ''}", True
        else:
            self.cursor, self.has_more = page.next_token, page.has_more
        if stuck:  # not even the head of the next message fits: this request is full, the model answers now
            self.full = True
            return REQUEST_FULL
        return page_head(thread_id, cursor or "", self.cursor or "", bool(self.has_more), note) + body + PAGE_END

    def _after_reset(self, items: Sequence[dict[str, Any]], cross: bool) -> tuple[list[dict[str, Any]], int]:
        """(the items to show, how many were left out as sent before the user's reset)."""
        if self.reset_ms is None:
            return list(items), 0
        before = [m for m in items if int(m.get("create_time") or 0) < self.reset_ms]
        if cross:
            self.crossed = self.crossed or bool(before)
            return list(items), 0
        return [m for m in items if m not in before], len(before)

    def _items(self, items: Sequence[dict[str, Any]], room: int, context: str) -> tuple[str, int, bool]:
        """(what of `items` fits `room`, how many of them that covers from the front, whether it is stuck).

        A page always makes progress: when not one unseen message fits whole, the head of the first is shown
        (read_message reads on from its offset). Stuck: not even that head fits, so nothing new is shown."""
        parts, used, new = [], 0, 0
        reserve = self.b.cost(_not_shown(len(items)))  # the line naming what is left, when something is
        for i, item in enumerate(items):
            mid = str(item.get("message_id"))
            add_once(self.fetched, mid)
            if in_context(mid, context) or mid in self.staged or mid in self.included:
                add_once(self.included, mid)  # its whole text is in this request already: not repeated
                parts.append(ref := f'<already_in_context ref="{html.escape(mid)}"/>')
                used += self.b.cost(ref)
                continue
            xml, whole = render(item, tz=self.rt.settings.tz)
            if used + self.b.cost(xml) <= room - (reserve if i + 1 < len(items) else 0):
                parts.append(xml)
                used += self.b.cost(xml)
                new += 1
                if whole:
                    self.staged[mid] = xml
                continue
            for other in items[i:]:
                add_once(self.fetched, str(other.get("message_id")))
            if new:
                return _joined([*parts, _not_shown(len(items) - i)]), i, False
            if used + self.b.cost(xml) <= room:  # alone it fits: whole, with no line naming the rest
                self.staged.update({mid: xml} if whole else {})
                return _joined([*parts, xml]), i + 1, False
            head = self._head(item, mid, room - used)  # the page's has_more says more follows
            return (_joined(parts), i, True) if head is None else (_joined([*parts, head]), i + 1, False)
        return _joined(parts), len(items), False

    def _head(self, item: dict[str, Any], mid: str, room: int) -> str | None:
        """The beginning of a message that does not fit whole, as much of it as `room` holds; None when that
        is less than MIN_HEAD_CHARS (or the whole of a shorter message)."""
        text = text_of(item)

        def tail(cut: int) -> str:  # the part's frame, plus what escaping the head adds to it
            grown = len(html.escape(text[:cut], quote=False)) - cut
            return part_open(mid, 0) + part_close(text, 0, cut) + "x" * grown

        cut = self.b.prefix_that_fits(text, room, tail)
        if cut < min(MIN_HEAD_CHARS, len(text)):
            return None
        xml = message_part(mid, text, 0, cut)
        if cut == len(text):
            self.staged[mid] = xml  # whole after all: used once sent
        return xml
