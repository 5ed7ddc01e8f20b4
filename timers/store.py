"""Timers in Redis: one hash per timer, a due-time index for the scheduler, a per-route index of pending ones.

Every state change is one script, so two schedulers, a user's /cancel and a recall can race on a timer
and exactly one wins: a timer leaves `pending` once, to `fired` or `cancelled`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import redis

from core.keys import Keys
from timers.keys import route_timers, timer, timers_by_source, timers_due, timers_of_person
from timers.model import ENDED_TTL_S, FOLLOWUP, Timer

if TYPE_CHECKING:
    from runs.runtime import Runtime

# KEYS: timer, due zset, route zset, source set, person zset ('' = none), route state ('' = no fence)
# ARGV: id, due, route cap, source ttl (s), person cap, route-person cap, total cap, expected gen, created_by,
#       field/value pairs…
# 1 added, 0 exists already (a rerun of the turn that set it); refused: -1 the route holds `route cap` pending,
# -2 the person holds `person cap` across all routes, -3 the person holds `route-person cap` on this route (so
# one person cannot fill a shared topic), -4 the deployment holds `total cap`, -5 a user reset moved the route
# on since the turn began (the turn's results are dropped: its timer must not outlive it).
_ADD = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
if KEYS[6] ~= '' and (redis.call('HGET', KEYS[6], 'gen') or '0') ~= ARGV[8] then return -5 end
if tonumber(ARGV[7]) > 0 and redis.call('ZCARD', KEYS[2]) >= tonumber(ARGV[7]) then return -4 end
if tonumber(ARGV[3]) > 0 and redis.call('ZCARD', KEYS[3]) >= tonumber(ARGV[3]) then return -1 end
if KEYS[5] ~= '' and tonumber(ARGV[5]) > 0 and redis.call('ZCARD', KEYS[5]) >= tonumber(ARGV[5]) then return -2 end
if ARGV[9] ~= '' and tonumber(ARGV[6]) > 0 then
  local mine = 0
  local prefix = string.sub(KEYS[1], 1, #KEYS[1] - #ARGV[1])
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, -1)) do
    if redis.call('HGET', prefix .. id, 'created_by') == ARGV[9] then mine = mine + 1 end
  end
  if mine >= tonumber(ARGV[6]) then return -3 end
end
redis.call('HSET', KEYS[1], unpack(ARGV, 10))
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
redis.call('ZADD', KEYS[3], ARGV[2], ARGV[1])
if KEYS[5] ~= '' then redis.call('ZADD', KEYS[5], ARGV[2], ARGV[1]) end
if KEYS[4] ~= '' then
  redis.call('SADD', KEYS[4], ARGV[1])
  redis.call('EXPIRE', KEYS[4], ARGV[4])
end
return 1
"""

# KEYS: timer, due zset, route zset, person key prefix   ARGV: id, new state, reason, now, ttl, expected due ('' = any)
# 1 moved out of pending, 0 not pending (already fired or cancelled) or due changed.
_END = """
if redis.call('HGET', KEYS[1], 'state') ~= 'pending' then return 0 end
if ARGV[6] ~= '' and redis.call('HGET', KEYS[1], 'due') ~= ARGV[6] then return 0 end
redis.call('HSET', KEYS[1], 'state', ARGV[2], 'end_reason', ARGV[3], 'ended_at', ARGV[4])
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('ZREM', KEYS[3], ARGV[1])
local by = redis.call('HGET', KEYS[1], 'created_by')
if by and by ~= '' then redis.call('ZREM', KEYS[4] .. by, ARGV[1]) end
redis.call('EXPIRE', KEYS[1], ARGV[5])
return 1
"""

# KEYS: route zset, due zset, ledger hash   ARGV: ledger field, timer key prefix, reason, now, ttl, person key prefix,
#       ids…
# Cancel these of the route's timers that are still pending, once per ledger field: a rerun returns the ids the
# first run cancelled (JSON), whatever has happened since.
_CANCEL_MANY = """
local done = redis.call('HGET', KEYS[3], ARGV[1])
if done then return done end
local out = {}
for i = 7, #ARGV do
  local id = ARGV[i]
  local key = ARGV[2] .. id
  if redis.call('HGET', key, 'state') == 'pending' then
    redis.call('HSET', key, 'state', 'cancelled', 'end_reason', ARGV[3], 'ended_at', ARGV[4])
    redis.call('EXPIRE', key, ARGV[5])
    redis.call('ZREM', KEYS[1], id)
    redis.call('ZREM', KEYS[2], id)
    local by = redis.call('HGET', key, 'created_by')
    if by and by ~= '' then redis.call('ZREM', ARGV[6] .. by, id) end
    table.insert(out, id)
  end
end
local encoded = cjson.encode(out)
if #out == 0 then encoded = '[]' end
redis.call('HSET', KEYS[3], ARGV[1], encoded)
redis.call('EXPIRE', KEYS[3], 172800)
return encoded
"""


@dataclass(frozen=True)
class Caps:
    """Bounds on pending follow-ups (0 = none): per route, per person, per person on one route, in all."""

    route: int = 0
    person: int = 0
    route_person: int = 0
    total: int = 0


REFUSED = {-1: "route", -2: "person", -3: "route_person", -4: "total", -5: "reset"}


class Timers:
    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.k = r, keys
        self._add, self._end = r.register_script(_ADD), r.register_script(_END)
        self._cancel_many = r.register_script(_CANCEL_MANY)

    def add(self, t: Timer, *, caps: Caps = Caps(), now: float = 0.0, fence_gen: bool = False) -> int:
        """1 added, 0 the id exists (idempotent), < 0 refused (REFUSED names the bound). A follow-up counts
        against its creator's caps; `fence_gen`: only while its route is still at the timer's generation."""
        source = timers_by_source(self.k, t.source_message_id) if t.source_message_id else ""
        person = timers_of_person(self.k, t.created_by) if t.kind == FOLLOWUP and t.created_by else ""
        state = self.k.route_state(t.route_key) if fence_gen else ""
        ttl = max(int(t.due - now), 0) + ENDED_TTL_S
        pairs = [x for kv in t.to_hash().items() for x in kv]
        keys = [timer(self.k, t.id), timers_due(self.k), route_timers(self.k, t.route_key), source, person, state]
        return int(self._add(keys, [t.id, repr(t.due), caps.route, ttl, caps.person, caps.route_person, caps.total,
                                    t.gen, t.created_by if person else "", *pairs]))

    def get(self, timer_id: str) -> Timer | None:
        return Timer.from_hash(self.r.hgetall(timer(self.k, timer_id))) if timer_id else None

    def many(self, ids: Sequence[str]) -> list[Timer]:
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(timer(self.k, i))
        return [t for t in (Timer.from_hash(raw) for raw in pipe.execute()) if t]

    def end(self, t: Timer, state: str, reason: str, now: float, *, due: float | None = None) -> bool:
        """Move a pending timer to `fired` or `cancelled` (once: False when it had already left pending)."""
        keys = [timer(self.k, t.id), timers_due(self.k), route_timers(self.k, t.route_key),
                timers_of_person(self.k, "")]
        return bool(self._end(keys, [t.id, state, reason, now, ENDED_TTL_S, "" if due is None else repr(due)]))

    def told(self, timer_id: str, text: str) -> None:
        """What the fire run posted unasked (its route's next turn is told of it)."""
        self.r.hset(timer(self.k, timer_id), "told", text[:500])

    def note(self, timer_id: str, text: str) -> None:
        """What the fire run did with it (shown by /admin/api/timers)."""
        self.r.hset(timer(self.k, timer_id), "fired_note", text[:300])

    def pending_of(self, rk: str, kind: str | None = FOLLOWUP) -> list[Timer]:
        ids = [str(i) for i in self.r.zrange(route_timers(self.k, rk), 0, -1)]
        return [t for t in self.many(ids) if t.state == "pending" and (kind is None or t.kind == kind)]

    def cancel_many(self, rk: str, ids: Sequence[str], ledger: str, field: str, reason: str, now: float) -> list[str]:
        """Cancel those of `ids` still pending, once per (ledger, field): a rerun returns the first run's ids."""
        keys = [route_timers(self.k, rk), timers_due(self.k), ledger]
        raw = self._cancel_many(keys, [field, timer(self.k, ""), reason, now, ENDED_TTL_S, timers_of_person(self.k, ""),
                                       *ids])
        return [str(i) for i in json.loads(raw)]

    def pending_of_person(self, open_id: str) -> int:
        return int(self.r.zcard(timers_of_person(self.k, open_id))) if open_id else 0

    def of_source(self, message_id: str) -> list[Timer]:
        return self.many([str(i) for i in self.r.smembers(timers_by_source(self.k, message_id))])

    def due(self, now: float, most: int = 500) -> list[tuple[str, float]]:
        raw: list[Any] = self.r.zrangebyscore(timers_due(self.k), "-inf", now, start=0, num=most, withscores=True)
        return [(str(pair[0]), float(pair[1])) for pair in raw]

    def pending_count(self) -> int:
        return int(self.r.zcard(timers_due(self.k)))

    def page(self, start: int = 0, count: int = 100) -> list[Timer]:
        """Pending timers by due time (the admin list)."""
        return self.many([str(i) for i in self.r.zrange(timers_due(self.k), start, start + count - 1)])

    def drop_dangling(self, timer_id: str, rk: str = "") -> None:
        """An index entry whose hash is gone (never expected; cleaned so the scheduler does not spin on it)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.zrem(timers_due(self.k), timer_id)
        if rk:
            pipe.zrem(route_timers(self.k, rk), timer_id)
        pipe.execute()


def timers_of(rt: Runtime) -> Timers:
    """This process's timer store (one per runtime)."""
    return rt.own("timers", lambda r: Timers(r.state, r.keys))
