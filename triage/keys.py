"""Quiet triage's Redis keys: a topic's buffered unaddressed messages and its triage state."""

from __future__ import annotations

from core.keys import Keys, route_tag


def triage_buffer(k: Keys, chat_id: str, thread_id: str) -> str:
    """ZSET of a topic's unaddressed messages waiting for quiet triage (JSON member → time)."""
    return f"{k.prefix}:triage:{chat_id}:{thread_id}"


def triage_state(k: Keys, rk: str) -> str:
    """HASH of a topic route's triage: cursor (last message time seen), last unasked post time."""
    return f"{k.prefix}:triage:state:{{{route_tag(rk)}}}"
