"""The scheduler: due timers become inbox events of their routes; configured digests get their next timer.

It runs inside every sweeper (`python -m jobs.sweeper`), so there may be several at once: each pushes a due
timer's event with the dedupe id (timer id, due time) — the inbox's PUSH keeps the first and drops the
rest — then moves the timer out of `pending` with a script only one of them wins. A crash between the two
writes leaves the timer pending: the next pass pushes again (a duplicate, dropped) and ends it. Nothing here
talks to Feishu or the model: the run of the route does (timers/fire.py).
"""

from __future__ import annotations

import logging
import time
from datetime import datetime

from core import metrics
from core.cron import Cron
from core.inbound import TIMER_TYPE, Inbound, dumps
from routing.keys import digest_route, kind_of
from runs.runtime import Runtime
from timers.model import DIGEST, FIRED, PENDING, Timer, dedupe_key, digest_id
from timers.settings import timer_settings
from timers.store import timers_of

log = logging.getLogger(__name__)
BATCH = 500  # timers per pass; a full pass is followed by another at once (up to PASS_SECONDS)
PASS_SECONDS = 1.0


def timer_event(t: Timer, now: float) -> Inbound:
    """The inbox entry of a due timer: a `timer` event on its route, attributed to whoever set it."""
    kind = kind_of(t.route_key)
    return Inbound(
        event_id=dedupe_key(t.id, t.due), message_id=dedupe_key(t.id, t.due), chat_id=t.chat_id,
        chat_type="p2p" if kind == "p2p" else "group", sender_open_id=t.created_by, sender_type="timer",
        message_type=TIMER_TYPE, text="", content=t.event_content(), create_time=str(int(now * 1000)),
        thread_id=t.thread_id or None, root_id=t.source_message_id or None,
    )


def fire_due(rt: Runtime, now: float | None = None) -> int:
    """Push every due timer's event; returns how many timers this pass moved to `fired`."""
    fired, deadline = 0, time.monotonic() + PASS_SECONDS
    while True:
        at = rt.clock.now() if now is None else now
        due = timers_of(rt).due(at, BATCH)
        if not due:
            return fired
        fired += _push(rt, due, at)
        if len(due) < BATCH or time.monotonic() > deadline:
            return fired


def _push(rt: Runtime, due: list[tuple[str, float]], now: float) -> int:
    loaded = {t.id: t for t in timers_of(rt).many([i for i, _ in due])}
    fired = 0
    for timer_id, _ in due:
        t = loaded.get(timer_id)
        if t is None or t.state != PENDING:
            timers_of(rt).drop_dangling(timer_id, t.route_key if t else "")
            continue
        event = timer_event(t, now)
        key = dedupe_key(t.id, t.due)
        rt.inbox.push(t.route_key, dumps(event), message_id=key, content_key=key, queue=rt.queue_of(t.route_key))
        if timers_of(rt).end(t, FIRED, "due", now, due=t.due):
            fired += 1
            metrics.count(rt.state, rt.keys, "timers_fired", t.kind)
            log.info("timer due: pushed to its route", extra={"route_key": t.route_key, "reason": t.kind,
                                                               "message_id": key, "lateness": round(now - t.due, 3)})
    return fired


_last_slot: dict[str, float] = {}  # cron → the slot this process last made sure of (one ADD per chat per slot)
# One digest per chat and cron slot ("0 9,17 * * 1-5": two a day), its id the slot's local wall time: a slot
# made sure of twice (two sweepers, a restart, a DST-repeated hour) is the same timer.


def ensure_digests(rt: Runtime, now: float | None = None) -> int:
    """Each configured chat has a pending digest timer for its next slot (idempotent); returns how many were added."""
    s, ts = rt.settings, timer_settings(rt.settings)
    if not ts.digest_chats:
        return 0
    at = rt.clock.now() if now is None else now
    slot = Cron.parse(ts.digest_cron).next_after(datetime.fromtimestamp(at, s.tz))
    if _last_slot.get(ts.digest_cron) == slot.timestamp():
        return 0
    _last_slot[ts.digest_cron] = slot.timestamp()
    added = 0
    for chat_id in ts.digest_chats:
        rk = digest_route(s.bot_profile, chat_id)
        t = Timer(id=digest_id(chat_id, slot.strftime("%Y-%m-%dT%H%M")), kind=DIGEST, route_key=rk,
                  due=slot.timestamp(),
                  chat_id=chat_id, what="digest", understood=slot.strftime("%Y-%m-%d %H:%M"), created_by="",
                  created_at=at)
        if timers_of(rt).add(t, now=at) == 1:
            added += 1
            log.info("digest scheduled", extra={"route_key": rk, "reason": t.understood})
    return added
