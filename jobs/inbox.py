"""The route inbox and its lease: a thin typed face over the Lua scripts in `jobs.scripts`."""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from typing import Any

import redis

from jobs import scripts
from memory.groupcommit import GroupCommit
from memory.keys import Keys

DEDUPE_TTL_S = 86400
KICK_TTL_MS = 120_000


def new_token() -> str:
    return os.urandom(16).hex()


@dataclass(frozen=True)
class PushResult:
    duplicate: bool
    kicked: bool  # this push took the route's kick lease and queued a kick record


@dataclass(frozen=True)
class Kick:
    """A request to start one drain run; dispatched to RQ by the sweeper."""

    route_key: str
    token: str
    queue: str

    def dumps(self) -> str:
        return json.dumps({"route_key": self.route_key, "token": self.token, "queue": self.queue})

    @classmethod
    def loads(cls, raw: str) -> Kick:
        data = json.loads(raw)
        return cls(route_key=data["route_key"], token=data["token"], queue=data["queue"])


class Inbox:
    def __init__(self, r: redis.Redis, keys: Keys, lease_ms: int) -> None:
        self.r, self.k, self.lease_ms = r, keys, lease_ms
        self._push = GroupCommit(r, scripts.PUSH)  # the webhook's hot path: concurrent pushes share a trip
        self._s = {name: r.register_script(getattr(scripts, name)) for name in (
            "ACQUIRE", "TAKE", "COMMIT", "FINISH", "RENEW", "HANDOVER", "KICK", "DEAD_LETTER")}

    def push(self, rk: str, event: str, *, message_id: str, content_key: str, queue: str) -> PushResult:
        token = new_token()
        k = self.k
        keys = [k.seen_message(message_id), k.seen_content(content_key), k.inbox(rk),
                k.lease(rk), k.dirty, k.kicks]
        kick = Kick(route_key=rk, token=token, queue=queue).dumps()
        res = self._push(keys, [event, token, KICK_TTL_MS, rk, time.time(), DEDUPE_TTL_S, kick])
        return PushResult(duplicate=res == -1, kicked=res == 1)

    def next_kicks(self, timeout: float, most: int = 100) -> list[Kick]:
        """Block up to `timeout` seconds for kick records, then take up to `most` of them."""
        first = self.r.blpop([self.k.kicks], timeout=timeout)
        if not first:
            return []
        rest = self.r.lpop(self.k.kicks, most - 1) or []
        return [Kick.loads(str(raw)) for raw in [first[1], *rest]]

    def acquire(self, rk: str, kick_token: str, exec_id: str) -> bool:
        return self._s["ACQUIRE"]([self.k.lease(rk)], [kick_token, exec_id, self.lease_ms]) == 1

    def take(self, rk: str, exec_id: str) -> list[str] | None:
        """The current batch; None when the lease is no longer ours."""
        res = self._s["TAKE"]([self.k.inbox(rk), self.k.proc(rk), self.k.lease(rk)], [exec_id, self.lease_ms])
        return None if res == -1 else list(res)

    def commit(self, rk: str, exec_id: str, n: int, batch_id: str, entries: list[str], keep: int) -> bool:
        keys = [self.k.proc(rk), self.k.lease(rk), self.k.transcript(rk), self.k.attempts(rk)]
        return self._s["COMMIT"](keys, [exec_id, self.lease_ms, n, keep, batch_id, *entries]) == 1

    def finish(self, rk: str, exec_id: str) -> int:
        """1 released, 0 more work arrived, -1 lease lost."""
        keys = [self.k.inbox(rk), self.k.proc(rk), self.k.lease(rk), self.k.dirty]
        return int(self._s["FINISH"](keys, [exec_id, rk]))

    def renew(self, rk: str, exec_id: str) -> bool:
        return self._s["RENEW"]([self.k.lease(rk)], [exec_id, self.lease_ms]) == 1

    def holds(self, rk: str, exec_id: str) -> bool:
        return self.r.get(self.k.lease(rk)) == exec_id

    def handover(self, rk: str, exec_id: str, kick_token: str, ttl_ms: int) -> bool:
        return self._s["HANDOVER"]([self.k.lease(rk)], [exec_id, kick_token, ttl_ms]) == 1

    def kick(self, rk: str) -> str | None:
        """A kick token when the route has work and no live lease (the caller enqueues a run)."""
        token = new_token()
        keys = [self.k.inbox(rk), self.k.proc(rk), self.k.lease(rk), self.k.dirty]
        return token if self._s["KICK"](keys, [token, KICK_TTL_MS, rk]) == 1 else None

    def bump_attempts(self, rk: str, batch_id: str) -> int:
        key = self.k.attempts(rk)
        pipe = self.r.pipeline()
        pipe.hincrby(key, batch_id, 1)
        pipe.expire(key, 7 * 86400)
        return int(pipe.execute()[0])

    def dead_letter(self, rk: str, exec_id: str, batch_id: str, record: dict[str, Any]) -> bool:
        keys = [self.k.proc(rk), self.k.lease(rk), self.k.dead_letters, self.k.attempts(rk)]
        return self._s["DEAD_LETTER"](keys, [exec_id, json.dumps(record, ensure_ascii=False), batch_id]) == 1

    def dirty_routes(self, limit: int = 1000) -> list[str]:
        return [str(rk) for rk in self.r.zrange(self.k.dirty, 0, limit - 1)]
