"""The service clock: the wall clock, plus an offset that only sandbox mode honours.

`python -m sandbox clock +2d` (and the tests) move every process's clock at once by storing the offset in
Redis; timers, digests and triage quiet periods are read against it, so a follow-up set for Wednesday can
be watched firing on a Monday. Outside sandbox mode the offset is never read: production time is real time.
Times Feishu stamps (message create_time) stay Feishu's; compare them only with each other.
"""

from __future__ import annotations

import re
import time
from datetime import datetime, tzinfo

import redis

from core.keys import Keys

_SPAN = re.compile(r"^([+-]?)(\d+(?:\.\d+)?)([smhdw]?)$")
_UNIT = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


class Clock:
    def __init__(self, r: redis.Redis, keys: Keys, *, adjustable: bool) -> None:
        self.r, self.keys, self.adjustable = r, keys, adjustable

    def offset(self) -> float:
        if not self.adjustable:
            return 0.0
        raw = self.r.get(self.keys.clock_offset)
        return float(raw) if raw else 0.0

    def now(self) -> float:
        return time.time() + self.offset()

    def advance(self, seconds: float) -> float:
        """Move the clock forward (sandbox only); returns the new offset."""
        if not self.adjustable:
            raise RuntimeError("the clock can only be moved in sandbox mode")
        return float(self.r.incrbyfloat(self.keys.clock_offset, seconds))

    def reset(self) -> None:
        self.r.delete(self.keys.clock_offset)


def parse_span(text: str) -> float:
    """'+2d', '90m', '-1h', '30' (seconds) → seconds. Pure."""
    m = _SPAN.match(text.strip())
    if not m:
        raise ValueError(f"not a time span: {text!r} (examples: +2d, 90m, 3h, 45s)")
    sign = -1 if m.group(1) == "-" else 1
    return sign * float(m.group(2)) * _UNIT[m.group(3)]


def iso(seconds: float, tz: tzinfo) -> str:
    """The one time format of everything the model reads: ISO 8601 to the second, with the zone's offset."""
    return datetime.fromtimestamp(seconds, tz).isoformat(timespec="seconds")


def iso_ms(ms: int, tz: tzinfo) -> str:
    """`iso` of a Feishu timestamp (milliseconds since the epoch, as create_time carries it)."""
    return iso(ms / 1000, tz)
