"""Every Redis key we write, built in one place; per-route keys carry a `{tag}` hash tag for Cluster."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import lru_cache


@lru_cache(maxsize=8192)  # several keys of one route are built per event
def route_tag(route_key: str) -> str:
    return hashlib.sha1(route_key.encode("utf-8")).hexdigest()[:16]


@dataclass(frozen=True)
class Keys:
    profile: str

    @property
    def prefix(self) -> str:
        return f"fb:{self.profile}"

    def _route(self, kind: str, route_key: str) -> str:
        return f"{self.prefix}:{kind}:{{{route_tag(route_key)}}}"

    def inbox(self, rk: str) -> str:
        return self._route("inbox", rk)

    def proc(self, rk: str) -> str:
        return self._route("proc", rk)

    def lease(self, rk: str) -> str:
        return self._route("lease", rk)

    def attempts(self, rk: str) -> str:
        return self._route("attempts", rk)

    def transcript(self, rk: str) -> str:
        return self._route("transcript", rk)

    def outbox(self, rk: str) -> str:
        return self._route("outbox", rk)

    # Dedupe markers are per profile, not per route: a redelivery must stay a duplicate after a
    # routing-policy change sends the same message to another route.
    def seen_message(self, message_id: str) -> str:
        return f"{self.prefix}:seen:m:{message_id}"

    def seen_content(self, content_key: str) -> str:
        return f"{self.prefix}:seen:c:{content_key}"

    @property
    def dirty(self) -> str:
        return f"{self.prefix}:dirty"

    @property
    def kicks(self) -> str:
        return f"{self.prefix}:kicks"

    @property
    def dead_letters(self) -> str:
        return f"{self.prefix}:deadletter"

    @property
    def rejected(self) -> str:
        return f"{self.prefix}:rejected"

    @property
    def bot_open_id(self) -> str:
        return f"{self.prefix}:bot:open_id"

    def lark_cache(self, key: str) -> str:
        return f"{self.prefix}:lark:{key}"
