"""Timers in Redis: one hash per timer, a due-time index for the scheduler, a per-route index of pending ones.

Every state change is one script, so two schedulers, a user's /cancel and a recall can race on a timer
and exactly one wins: a timer leaves `pending` once, to `fired` or `cancelled`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

from jobs.timers.model import ENDED_TTL_S, FOLLOWUP, Timer
from memory.keys import Keys

# KEYS: timer, due zset, route zset, source set   ARGV: id, due, cap, source ttl (s), field/value pairs…
# 1 added, 0 exists already (a rerun of the turn that set it), -1 the route holds `cap` pending timers.
_ADD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if tonumber(ARGV[3]) > 0 and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[3]) then return -1 end
redis.call('HSET', KEYS[1], unpack(ARGV, 5))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
if KEYS[4] ~= '' then
  redis.call('SADD', KEYS[4], ARGV[1])
  redis.call('EXPIRE', KEYS[4], ARGV[4])
end
return 1
"""

# KEYS: timer, due zset, route zset   ARGV: id, new state, reason, now, ttl, expected due ('' = any)
# 1 moved out of pending, 0 not pending (already fired or cancelled) or due changed.
_END = """
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return 0 end
if ARGV[6] ~= '' and redis.call('HGET', KEYS[1], 'due') ~= ARGV[6] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'end_reason', ARGV[3], 'ended_at', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

# KEYS: route zset, due zset, ledger hash   ARGV: ledger field, timer key prefix, reason, now, ttl, kind
# Cancel the route's pending timers of one kind once per ledger field; a rerun returns the first count.
_CANCEL_ROUTE = """
local done = redis.call('HGET', KEYS[3], ARGV[1])
if done then return tonumber(done) end
local n = 0
for _, id in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
  local key = ARGV[2] .. id
  if redis.call('HGET', key, 'kind') == ARGV[6] and redis.call('HGET', key, 'state') == 'pending' then
    redis.call('HSET', key, 'state', 'cancelled', 'end_reason', ARGV[3], 'ended_at', ARGV[4])
    redis.call('EXPIRE', key, ARGV[5])
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    n = n + 1
  end
end
redis.call('HSET', KEYS[3], ARGV[1], n)
redis.call('EXPIRE', KEYS[3], 172800)
return n
"""


class Timers:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.k = r, keys
        self._add, self._end = r.register_script(_ADD), r.register_script(_END)
        self._cancel_route = r.register_script(_CANCEL_ROUTE)

    def add(self, t: Timer, *, cap: int = 0, now: float = 0.0) -> int:
        """1 added, 0 the id exists (idempotent), -1 the route is full (`cap` pending)."""
        source = self.k.timers_by_source(t.source_message_id) if t.source_message_id else ""
        ttl = max(int(t.due - now), 0) + ENDED_TTL_S
        pairs = [x for kv in t.to_hash().items() for x in kv]
        return int(self._add([self.k.timer(t.id), self.k.timers_due, self.k.timers_of(t.route_key), source],
                             [t.id, repr(t.due), cap, ttl, *pairs]))

    def get(self, timer_id: str) -> Timer | None:
        return Timer.from_hash(self.r.hgetall(self.k.timer(timer_id))) if timer_id else None

    def many(self, ids: Sequence[str]) -> list[Timer]:
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(self.k.timer(i))
        return [t for t in (Timer.from_hash(raw) for raw in pipe.execute()) if t]

    def end(self, t: Timer, state: str, reason: str, now: float, *, due: float | None = None) -> bool:
        """Move a pending timer to `fired` or `cancelled` (once: False when it had already left pending)."""
        keys = [self.k.timer(t.id), self.k.timers_due, self.k.timers_of(t.route_key)]
        return bool(self._end(keys, [t.id, state, reason, now, ENDED_TTL_S, "" if due is None else repr(due)]))

    def note(self, timer_id: str, text: str) -> None:
        """What the fire run did with it (shown by /admin/api/timers)."""
        self.r.hset(self.k.timer(timer_id), "fired_note", text[:300])

    def pending_of(self, rk: str, kind: str | None = FOLLOWUP) -> list[Timer]:
        ids = [str(i) for i in self.r.zrange(self.k.timers_of(rk), 0, -1)]
        return [t for t in self.many(ids) if t.state == "pending" and (kind is None or t.kind == kind)]

    def cancel_route(self, rk: str, ledger: str, field: str, reason: str, now: float, kind: str = FOLLOWUP) -> int:
        """Cancel the route's pending timers of `kind`, once per (ledger, field): a rerun reports the same count."""
        keys = [self.k.timers_of(rk), self.k.timers_due, ledger]
        return int(self._cancel_route(keys, [field, self.k.timer(""), reason, now, ENDED_TTL_S, kind]))

    def of_source(self, message_id: str) -> list[Timer]:
        return self.many([str(i) for i in self.r.smembers(self.k.timers_by_source(message_id))])

    def due(self, now: float, most: int = 500) -> list[tuple[str, float]]:
        raw: list[Any] = self.r.zrangebyscore(self.k.timers_due, "-inf", now, start=0, num=most, withscores=True)
        return [(str(pair[0]), float(pair[1])) for pair in raw]

    def pending_count(self) -> int:
        return int(self.r.zcard(self.k.timers_due))

    def page(self, start: int = 0, count: int = 100) -> list[Timer]:
        """Pending timers by due time (the admin list)."""
        return self.many([str(i) for i in self.r.zrange(self.k.timers_due, start, start + count - 1)])

    def drop_dangling(self, timer_id: str, rk: str = "") -> None:
        """An index entry whose hash is gone (never expected; cleaned so the scheduler does not spin on it)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.zrem(self.k.timers_due, timer_id)
        if rk:
            pipe.zrem(self.k.timers_of(rk), timer_id)
        pipe.execute()
