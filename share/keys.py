"""The share feature's Redis keys, under `fb:<profile>:f:share:…` (core's `Keys.feature`)."""

from __future__ import annotations

import hashlib

from core.keys import Keys

NAME = "share"


def slots(k: Keys, person: str) -> str:
    """ZSET delivery id → when it was asked: one person's deliveries of the last hour (the rate limit); it expires
    an hour after the newest, and holds SHARE_PER_PERSON_HOUR ids at most."""
    safe = person if person.replace("_", "").replace("-", "").isalnum() else hashlib.sha1(person.encode()).hexdigest()
    return k.feature(NAME, "slots", safe)
