"""The operators' audit log: who did what to which object, when, and how it ended — a capped Redis stream.

Written by the console and the admin API for every action (sign-in, replay, discard, cancel, delete, undo);
read newest first, a page at a time by stream id, never all at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import redis

from console import keys as console_keys
from core.keys import Keys

KEEP = 20_000  # entries; the stream is trimmed (approximately) as it grows


@dataclass(frozen=True)
class Entry:
    id: str
    at: float
    who: str  # an open_id, or "admin-token"
    how: str  # feishu | token | api
    what: str  # sign-in, sign-out, replay, discard, cancel, delete, undo
    target: str  # the dead letter, timer, scope or route acted on ("" for sign-ins)
    outcome: str  # ok, refused, already-replayed, not-pending, unknown, …


@dataclass(frozen=True)
class Done:
    """One operator action as the log keeps it (an Entry without its id and time)."""

    who: str
    how: str
    what: str
    target: str
    outcome: str


def write(r: redis.Redis, keys: Keys, done: Done, at: float | None = None) -> str:
    fields = {"at": f"{time.time() if at is None else at:.3f}", "who": done.who, "how": done.how, "what": done.what,
              "target": done.target, "outcome": done.outcome}
    return str(r.xadd(console_keys.audit(keys), fields, maxlen=KEEP, approximate=True))  # type: ignore[arg-type]


def page(r: redis.Redis, keys: Keys, before: str = "+", count: int = 50) -> tuple[list[Entry], str | None]:
    """Newest first from `before` (exclusive when it is an entry id); the id to read on from, or None at the end."""
    start = f"({before}" if before not in ("+", "") else "+"
    rows: list[Any] = r.xrevrange(console_keys.audit(keys), max=start, min="-", count=count + 1) or []
    entries = [_entry(str(i), {str(k): str(v) for k, v in f.items()}) for i, f in rows[:count]]
    return entries, (entries[-1].id if len(rows) > count else None)


def _entry(ident: str, f: dict[str, str]) -> Entry:
    return Entry(ident, float(f.get("at") or 0), f.get("who", ""), f.get("how", ""), f.get("what", ""),
                 f.get("target", ""), f.get("outcome", ""))
