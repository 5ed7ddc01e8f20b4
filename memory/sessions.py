"""Hermes-style sessions: a route points to its current session; sessions resume, rotate and end at resets.

Per route (keys in core/keys.py): `route` HASH {sid, gen}, `sess` HASH of session records, one `log`
LIST per session. The generation is bumped by a user reset in the webhook's PUSH script (runs/inbox_lua.py),
atomically with storing the reset command, so the reset takes effect when it is accepted: every later
write of a run that began under an older generation is refused (START, APPEND) or fenced (Drain.fence).
Sessions are only started and ended here, under the run's lease and the route's generation.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis

from claude.prompt import estimate_tokens
from core.keys import Keys

END_COMPRESSION, END_USER_RESET, END_IDLE = "compression", "user_reset", "idle"
LOG_CAP = 5000  # a safety cap only: rotation keeps a session's log within the context budget
KEEP_ENDED = 20  # ended sessions a route keeps (records and logs) for recall and admins, within the retention

# KEYS: lease, route, sess   ARGV: exec_id, gen, expected_sid ('' = none), new_sid, route_key, now,
#       end_reason ('' = first session), log_prefix, retention_s, boundary, entries...
# Start a session under the lease and the generation: end the current one (if any) and point the route
# at the new one, seeded with `entries` (a compression summary and the newest turns, or nothing).
START = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
if (redis.call('HGET', KEYS[2], 'gen') or '0') ~= ARGV[2] then return -2 end
local cur = redis.call('HGET', KEYS[2], 'sid') or ''
if cur ~= ARGV[3] then return -3 end
local now = tonumber(ARGV[6])
if cur ~= '' then
  local raw = redis.call('HGET', KEYS[3], cur)
  if raw then
    local rec = cjson.decode(raw)
    rec.end_reason = ARGV[7]
    rec.ended_at = now
    redis.call('HSET', KEYS[3], cur, cjson.encode(rec))
  end
  if tonumber(ARGV[9]) > 0 then redis.call('EXPIRE', ARGV[8] .. cur, ARGV[9]) end
end
local rec = {id = ARGV[4], route_key = ARGV[5], parent_id = cjson.null, end_reason = cjson.null,
             generation = tonumber(ARGV[2]), started_at = now, ended_at = cjson.null, boundary = ARGV[10]}
if cur ~= '' then rec.parent_id = cur end
redis.call('HSET', KEYS[3], ARGV[4], cjson.encode(rec))
redis.call('HSET', KEYS[2], 'sid', ARGV[4])
for i = 11, #ARGV do redis.call('RPUSH', ARGV[8] .. ARGV[4], ARGV[i]) end
return 1
"""


def new_session_id() -> str:
    return f"s_{time.strftime('%Y%m%d', time.gmtime())}_{os.urandom(6).hex()}"


@dataclass(frozen=True)
class Session:
    id: str
    route_key: str
    parent_id: str | None
    end_reason: str | None
    generation: int
    started_at: float
    ended_at: float | None
    boundary: str = "start"  # how it began: start, compression, user_reset, idle
    counters: dict[str, int] = field(default_factory=dict)

    def public(self) -> dict[str, Any]:
        """The admin API's view."""
        return {"id": self.id, "parent_id": self.parent_id, "end_reason": self.end_reason,
                "generation": self.generation, "started_at": self.started_at, "ended_at": self.ended_at,
                "boundary": self.boundary, "tokens": {k: self.counters.get(k, 0) for k in ("in", "out", "cache_read")},
                "turns": self.counters.get("turns", 0)}


@dataclass(frozen=True)
class RouteState:
    session_id: str | None
    generation: int


class SessionFenced(Exception):
    """The run lost its lease, or a user reset moved the route to a newer generation."""


class Sessions:
    def __init__(self, r: redis.Redis, keys: Keys, retention_s: int = 30 * 86400) -> None:
        self.r, self.k, self.retention_s = r, keys, retention_s
        self._start = r.register_script(START)

    # -- reading -----------------------------------------------------------------------------------------

    def state(self, rk: str) -> RouteState:
        sid, gen = self.r.hmget(self.k.route_state(rk), "sid", "gen")
        return RouteState(session_id=str(sid) if sid else None, generation=int(gen or 0))

    def get(self, rk: str, sid: str) -> Session | None:
        return next(iter(self.many(rk, [sid])), None)

    def many(self, rk: str, sids: Sequence[str]) -> list[Session]:
        out = []
        for sid in sids:
            raw = self.r.hget(self.k.sessions(rk), sid)
            if raw:
                out.append(self._session(rk, json.loads(raw)))
        return out

    def all(self, rk: str) -> list[Session]:
        """Every session record of the route, oldest first."""
        records = {str(f): str(v) for f, v in self.r.hgetall(self.k.sessions(rk)).items()}
        sessions = [self._session(rk, json.loads(v), records) for f, v in records.items() if "#" not in f]
        return sorted(sessions, key=lambda s: s.started_at)

    def _session(self, rk: str, rec: dict[str, Any], fields: dict[str, str] | None = None) -> Session:
        sid = rec["id"]
        if fields is None:
            names = ["in", "out", "cache_read", "turns"]
            values = self.r.hmget(self.k.sessions(rk), [f"{sid}#{n}" for n in names])
            counters = {n: int(v) for n, v in zip(names, values, strict=True) if v}
        else:
            counters = {f.split("#", 1)[1]: int(v) for f, v in fields.items() if f.startswith(f"{sid}#")}
        return Session(id=sid, route_key=rec.get("route_key", rk), parent_id=rec.get("parent_id"),
                       end_reason=rec.get("end_reason"), generation=int(rec.get("generation") or 0),
                       started_at=float(rec.get("started_at") or 0), ended_at=rec.get("ended_at"),
                       boundary=rec.get("boundary") or "start", counters=counters)

    def log(self, rk: str, sid: str) -> list[dict[str, Any]]:
        return [json.loads(e) for e in self.r.lrange(self.k.session_log(rk, sid), 0, -1)]

    def last_activity(self, rk: str, sid: str) -> float | None:
        last = self.r.lindex(self.k.session_log(rk, sid), -1)
        return float(json.loads(last).get("at") or 0) if last else None

    # -- writing (under the run's lease and the route's generation) ------------------------------------

    def start(self, rk: str, owner: tuple[str, int], *, expected: str | None, end_reason: str = "",
              boundary: str = "start", entries: Sequence[str] = ()) -> str:
        """End `expected` (the current session, or None) and start a new one, fenced by `owner` (the run's execution
        id and the generation it runs under); returns its id."""
        exec_id, gen = owner
        sid = new_session_id()
        res = self._start([self.k.lease(rk), self.k.route_state(rk), self.k.sessions(rk)],
                          [exec_id, gen, expected or "", sid, rk, time.time(), end_reason,
                           self.k.session_log_prefix(rk), self.retention_s, boundary, *entries])
        if res != 1:
            raise SessionFenced({-1: "lease lost", -2: "generation moved", -3: "session moved"}.get(int(res), res))
        self.prune(rk)
        return sid

    def prune(self, rk: str, now: float | None = None) -> int:
        """Forget sessions that ended more than the retention ago (their logs have expired) and all but the
        newest KEEP_ENDED ended ones (records and logs), so a route's state stays bounded by configuration
        however often it rotates. Runs when a session starts (rarely)."""
        records = {str(f): str(v) for f, v in self.r.hgetall(self.k.sessions(rk)).items()}
        ended = sorted(((json.loads(v).get("ended_at"), f) for f, v in records.items() if "#" not in f
                        and json.loads(v).get("ended_at")), reverse=True)
        cutoff = (now or time.time()) - self.retention_s if self.retention_s > 0 else float("-inf")
        old = {f for i, (at, f) in enumerate(ended) if i >= KEEP_ENDED or at < cutoff}
        fields = [f for f in records if f.split("#", 1)[0] in old]
        if fields:
            pipe = self.r.pipeline(transaction=False)
            pipe.hdel(self.k.sessions(rk), *fields)
            pipe.delete(*[self.k.session_log(rk, sid) for sid in old])
            pipe.execute()
        return len(old)


def entry(role: str, text: str, *, batch_id: str, message_ids: Sequence[str] = (), senders: Sequence[str] = (),
          kind: str = "turn") -> str:
    """One session log entry (with its text's estimated tokens). `kind`: turn (a user batch or an answer), summary
    (compression), bootstrap, told (what the assistant posted unasked)."""
    return json.dumps({"role": role, "text": text, "batch_id": batch_id, "message_ids": list(message_ids),
                       "senders": list(senders), "tokens": estimate_tokens(text), "kind": kind,
                       "at": round(time.time(), 3)},
                      ensure_ascii=False)
