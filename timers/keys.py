"""Timers' Redis keys: one hash per timer, the due set the scheduler reads, each route's and person's pending ones, the
follow-ups one message set."""

from __future__ import annotations

from core.keys import Keys, route_tag


def timer(k: Keys, timer_id: str) -> str:
    """HASH of one timer: kind, route, item, what, due, creator, state (timers/store.py)."""
    return f"{k.prefix}:timer:{timer_id}"


def timers_due(k: Keys) -> str:
    """ZSET pending timer id → due time: what the scheduler looks at."""
    return f"{k.prefix}:timers:due"


def route_timers(k: Keys, rk: str) -> str:
    """ZSET timer id → due time: a route's pending timers."""
    return f"{k.prefix}:timers:route:{{{route_tag(rk)}}}"


def timers_of_person(k: Keys, open_id: str) -> str:
    """ZSET follow-up id → due time: the pending follow-ups one person set, across every route (a cap)."""
    return f"{k.prefix}:timers:person:{open_id}"


def timers_by_source(k: Keys, message_id: str) -> str:
    """SET of the follow-ups one request message created (a recall cancels them); expires after they are due."""
    return f"{k.prefix}:timers:source:{message_id}"
