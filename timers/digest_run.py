"""A digest run: the chat's open items, read fresh from Bitable, posted as one card — or nothing when none.

It is a run of the chat's digest route (`feishu:<profile>:digest:<chat_id>`): leased, retried with backoff,
dead-lettered like any other. Its timer id names the chat and the cron slot (local), the card's send is keyed by
that id (the outbox ledger, then Feishu's uuid window), so a rerun or a second scheduler posts it once.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime

from core import metrics
from items import item_settings
from memory import related
from runs.outbox import Destination
from runs.runtime import Runtime
from timers.digest import DigestRow, digest_card, open_items
from timers.model import Timer
from timers.settings import timer_settings
from timers.store import timers_of

log = logging.getLogger(__name__)
LATE_S = 12 * 3600  # a digest more than this late (the service was down) is skipped: the next one comes


def run_digest(rt: Runtime, rk: str, t: Timer, batch_id: str, fence: Callable[[], bool]) -> str:
    s = rt.settings
    now = rt.clock.now()
    skip = ("the chat is no longer in DIGEST_CHATS" if t.chat_id not in timer_settings(s).digest_chats
            else "items are off (no Bitable configured)" if rt.bitable is None
            else f"{now - t.due:.0f} s late" if now - t.due > LATE_S else "")
    if skip:
        return _done(rt, rk, t, f"nothing posted: {skip}", "skipped")
    assert rt.bitable is not None
    rows = _with_talk(rt, open_items(rt.bitable, t.chat_id, item_settings(s).item_closed_statuses))
    if not rows:
        return _done(rt, rk, t, "nothing posted: no open items", "empty")
    label = datetime.fromtimestamp(t.due, s.tz).strftime("%m月%d日 %H:%M")
    card = digest_card(rows, now_ms=int(now * 1000), tz=s.tz, date_label=label)
    message_id = rt.outbox.post_card(Destination(rk, t.chat_id, fence=fence), f"digest-{t.id}", card)
    titles = "；".join(r.title[:40] for r in rows[:10]) + ("…" if len(rows) > 10 else "")
    related.keep_own(rt.state, rt.keys, t.chat_id, message_id,
                     f"已发过待办汇总（{label}，{len(rows)} 个未结事项）：{titles}",
                     time.time())  # real time, as Feishu stamps the messages it is shown among
    return _done(rt, rk, t, f"posted {message_id} with {len(rows)} open items", "posted")


def _with_talk(rt: Runtime, rows: list[DigestRow]) -> list[DigestRow]:
    """Last activity: the record's last edit or the last turn that worked on the item, whichever is newer."""
    talk = rt.items.last_activity([r.item_id for r in rows if r.item_id])
    out = [replace(r, last_activity_ms=max(r.last_activity_ms or 0, int(talk.get(r.item_id, 0) * 1000)) or None)
           for r in rows]
    return sorted(out, key=lambda r: (r.last_activity_ms is None, r.last_activity_ms or 0, r.record_id))


def _done(rt: Runtime, rk: str, t: Timer, note: str, outcome: str) -> str:
    timers_of(rt).note(t.id, note)
    metrics.count(rt.state, rt.keys, "digests", outcome)
    log.info(f"digest {t.id}: {note}", extra={"route_key": rk, "reason": note})
    return note
