"""The messages a batch quotes, inlined: a reply's quoted message is shown with it (escaped, marked as data, within
QUOTE_CHARS; the rest spilled behind read_message), so the model does not spend a round trip on every quote.

A quote is the parent of a message outside a topic (in a topic every message's parent is structural: the thread is
read through its bootstrap and read_thread). Only a message the route may read is inlined (its chat; in a per-person
group conversation the sender's own and the assistant's, as read_message allows); one that cannot be read (recalled,
no scope, someone else's) stays a `quotes="om_…"` attribute. A quoted message the conversation's history already
shows (an earlier batch, the assistant's own answer) is named by its head (`shown="above"`), never repeated whole.
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence, Set
from datetime import tzinfo

from core.clock import iso_ms
from core.errors import AdapterError, Paused
from core.inbound import Inbound
from feishu.identity import cached_open_id
from runs.runtime import Runtime
from turn.thread import RouteScope, get_message, sender_of, text_of

QUOTE_CHARS = 600  # of a quoted message inlined; longer ones are spilled (read_message reads on)
HEAD_CHARS = 80  # of a quoted message the history already shows: enough to tell which one
HISTORY_ENTRIES = 200  # the session log's newest entries looked at (as many as a turn's assembly reads)
MAX_QUOTES = 3  # quotes inlined per batch


def quoted(rt: Runtime, rk: str, batch: Sequence[Inbound]) -> dict[str, dict[str, str]]:
    """parent message id → {sender, text, time} of the quotes the batch makes (at most MAX_QUOTES) that the route may
    read (RouteScope: a per-person group conversation shows its sender's and the assistant's messages only)."""
    scope = RouteScope.of(rk)
    wanted = list(dict.fromkeys(m.parent_id for m in batch if m.parent_id and not m.thread_id))[:MAX_QUOTES]
    bot = cached_open_id(rt.state, rt.keys) or ""
    out: dict[str, dict[str, str]] = {}
    for mid in wanted:
        try:
            item = get_message(rt.feishu, mid)
        except Paused:
            raise
        except AdapterError:
            continue
        if not item or item.get("deleted") or not scope.allows(item):
            continue
        out[mid] = {"sender": sender_of(item), "text": text_of(item, bot), "time": str(item.get("create_time") or "")}
    return out


def in_history(rt: Runtime, rk: str, sid: str) -> set[str]:
    """The messages the session's history already shows (its batches and the assistant's replies)."""
    if not sid:
        return set()
    raw = rt.state.lrange(rt.keys.session_log(rk, sid), -HISTORY_ENTRIES, -1)
    return {i for e in raw for i in json.loads(e).get("message_ids") or []}


def quote_elements(batch: Sequence[Inbound], found: Mapping[str, Mapping[str, str]], names: Mapping[str, str],
                   tz: tzinfo, shown: Set[str] = frozenset()) -> list[str | None]:
    """Per message of the batch, the `<quoted>` element of what it quotes (None: nothing inlined); one the history
    already shows (`shown`) is referred to, not repeated. Pure."""
    return [element(m.parent_id, found[m.parent_id], names, tz, m.parent_id in shown)
            if m.parent_id and m.parent_id in found else None for m in batch]


def element(mid: str, q: Mapping[str, str], names: Mapping[str, str], tz: tzinfo, above: bool = False) -> str:
    text, sender = q["text"], q["sender"]
    if above:  # shown above in this conversation: its head names it, the history holds it whole
        head = html.escape(text[:HEAD_CHARS], quote=False) + ("…" if len(text) > HEAD_CHARS else "")
        return f'<quoted ref="{html.escape(mid)}" sender="{html.escape(sender)}" shown="above">{head}</quoted>'

    whole = len(text) <= QUOTE_CHARS  # `message_id=` only for a message shown whole (recall deduplicates on it)
    attrs = f'{"message_id" if whole else "id"}="{html.escape(mid)}" sender="{html.escape(sender)}"'
    if names.get(sender):
        attrs += f' name="{html.escape(names[sender])}"'
    if q.get("time", "").isdigit():
        attrs += f' time="{iso_ms(int(q["time"]), tz)}"'
    if whole:
        return f"<quoted {attrs}>{html.escape(text, quote=False)}</quoted>"
    head = html.escape(text[:QUOTE_CHARS], quote=False)
    return (f'<quoted {attrs} chars="{len(text)}" spilled="true">{head}…</quoted> (the rest: read_message '
            f'message_id="{html.escape(mid)}" offset={QUOTE_CHARS})')
