"""A timer event in a run: which timer, still wanted, and what its kind does (follow-up, triage, digest)."""

from __future__ import annotations

import json
import logging
from dataclasses import replace

from core.inbound import Inbound
from memory.sessions import RouteState
from runs.runtime import Runtime
from timers.model import Timer
from timers.store import timers_of
from turn.registry import Context, app_of

log = logging.getLogger(__name__)


def timer_of(rt: Runtime, rk: str, event: Inbound) -> Timer | None:
    """The event's timer, if it is still this route's (an admin may have deleted it; an event never moves)."""
    try:
        timer_id = str(json.loads(event.content).get("timer_id") or "")
    except (ValueError, AttributeError):
        timer_id = ""
    t = timers_of(rt).get(timer_id)
    if t is None or t.route_key != rk:
        log.warning("timer event without its timer: nothing to do", extra={"route_key": rk,
                                                                           "message_id": event.message_id})
        return None
    return t


def fire(c: Context, state: RouteState | None) -> str:
    """The timer event `c.message` of route `c.rk`: its kind's run (`state`: the route's, None on an internal route)."""
    t = timer_of(c.rt, c.rk, c.message)
    if t is None:
        return "gone"
    if t.state == "cancelled":  # cancelled after its event was pushed (a /cancel racing the scheduler)
        log.info(f"timer {t.id} cancelled before it ran: nothing posted", extra={"route_key": c.rk})
        return "cancelled"
    handler = app_of(c.rt).timer_kinds.get(t.kind)
    if handler is not None:
        return handler.run(replace(c, state=state, timer=t))
    log.warning("timer of an unknown kind ignored", extra={"route_key": c.rk, "reason": t.kind})
    return "unknown kind"
