"""The route inbox and its lease: a thin typed face over the Lua scripts in `runs.inbox_lua`."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import redis
from rq.job import Job
from rq.queue import Queue
from rq.utils import utcformat

from core.keys import Keys
from memory.sessions import LOG_CAP
from runs import inbox_lua as scripts
from runs.queues import rq_job_key_prefix
from state.groupcommit import GroupCommit

DEDUPE_TTL_S = 86400
STARTED_GRACE_S = 15  # an RQ job started this long ago that has not taken its route's kick lease died before
KICK_TTL_MS = 45_000  # a kick lease; the sweep renews it while its record or job waits (SWEEP_INTERVAL ≤ 20 s)
MAX_BATCH = 50  # messages per turn; the rest waits for the next turn of the same run


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


@dataclass(frozen=True)
class Commit:
    """What a finished batch leaves behind: `n` events consumed, transcript entries, dead letters."""

    n: int
    batch_id: str
    entries: Sequence[str] = ()
    dead: Sequence[tuple[str, str]] = ()  # (dead-letter id, record JSON)
    gen: int | None = None  # the generation the turn ran under; entries are written only if it still holds
    tokens: tuple[int, int, int] = (0, 0, 0)  # input, output, cache read: the session's counters


@dataclass(frozen=True)
class Pushed:
    """What else a push says of its event: a user reset's new session id (""), how long a redelivery is recognised."""

    reset_sid: str = ""
    dedupe_ttl_s: int = DEDUPE_TTL_S


class Inbox:
    def __init__(self, r: redis.Redis, keys: Keys, lease_ms: int, keep: int = 40,
                 session_retention_s: int = 30 * 86400, route_retention_s: int = 90 * 86400) -> None:
        self.r, self.k, self.lease_ms, self.keep = r, keys, lease_ms, keep  # keep: transcript entries
        self.session_retention_s = session_retention_s  # how long an ended session's log is kept
        self.route_retention_s = route_retention_s  # how long an idle route's state and current log are kept
        self._push = GroupCommit(r, scripts.PUSH)  # the webhook's hot path: concurrent pushes share a trip
        self._s = {name: r.register_script(getattr(scripts, name)) for name in (
            "ACQUIRE", "TAKE", "COMMIT", "FINISH", "RENEW", "HANDOVER", "RELEASE", "KICK", "BREAK", "POP_DUE",
            "REPLAY", "DISCARD", "FORGET_RUN")}

    # -- the webhook -----------------------------------------------------------------------------------

    def push(self, rk: str, event: str, *, message_id: str, content_key: str, queue: str,
             also: Pushed = Pushed()) -> PushResult:
        """Store one event. `also.reset_sid`: the event is a user reset; the route's new session gets this id.
        `also.dedupe_ttl_s`: how long a redelivery is recognised (a sender that redelivers later keeps it longer).
        The route indexes are not written here but by the run that takes the event (`index`)."""
        reset_sid, dedupe_ttl_s = also.reset_sid, also.dedupe_ttl_s
        token = new_token()
        k = self.k
        keys = [k.seen_message(message_id), k.seen_content(content_key), k.inbox(rk), k.lease(rk), k.dirty,
                k.kicks, k.metrics, k.route_state(rk), k.sessions(rk)]
        kick = Kick(route_key=rk, token=token, queue=queue).dumps()
        res = self._push(keys, [event, token, KICK_TTL_MS, rk, time.time(), dedupe_ttl_s, kick, reset_sid,
                                k.session_log_prefix(rk), self.session_retention_s])
        return PushResult(duplicate=res == -1, kicked=res == 1)

    # -- the route indexes: the console's lookups ---------------------------------------------------------

    def index(self, rk: str, ids: Iterable[str] = (), now: float | None = None) -> None:
        """Note a route in the index of every route and in the index of each chat, person or topic id given, scored
        by now. A run calls it when it takes a batch, so no webhook request pays for the indexes (issue 32). An
        index nobody adds to any more expires with its last route (the routes' retention after their last batch)."""
        at = time.time() if now is None else now
        pipe = self.r.pipeline()  # MULTI/EXEC: an index is never left without its expiry
        for key in (self.k.routes, *(self.k.routes_of(i) for i in dict.fromkeys(ids) if i)):
            pipe.zadd(key, {rk: at})
            if self.route_retention_s > 0:
                pipe.expire(key, self.route_retention_s)
        pipe.execute()

    def trim_index(self, index: str, now: float | None = None) -> int:
        """Drop the routes past their retention from a route index; the sweeper (all routes) and the console (the
        index it reads) call it, so no batch pays for it. Returns how many went."""
        if self.route_retention_s <= 0:
            return 0
        cut = (time.time() if now is None else now) - self.route_retention_s
        return int(self.r.zremrangebyscore(index, "-inf", cut))

    # -- a run -------------------------------------------------------------------------------------------

    def acquire(self, rk: str, kick_token: str, exec_id: str) -> bool:
        keys = [self.k.lease(rk), self.k.dirty]
        return self._s["ACQUIRE"](keys, [kick_token, exec_id, self.lease_ms, rk, time.time()]) == 1

    def take(self, rk: str, exec_id: str, *, budget_s: float, job_id: str = "") -> list[str] | None:
        """The current batch (registered with the watchdog); None when the lease is no longer ours."""
        k = self.k
        info = json.dumps({"exec_id": exec_id, "job_id": job_id, "started": round(time.time(), 3)})
        # A replica gets the batch's bounds before any reply goes out: after a failover the rerun takes
        # the same batch again, so its replies carry the same uuids and Feishu posts them once.
        res = self._push.replicas.script(self._s["TAKE"], [k.inbox(rk), k.proc(rk), k.lease(rk), k.running,
                                                           k.runinfo],
                                         [exec_id, self.lease_ms, rk, time.time() + budget_s, info, MAX_BATCH])
        return None if res == -1 else list(res)

    def commit(self, rk: str, exec_id: str, c: Commit) -> int:
        """1 committed, 2 committed but the entries dropped (a user reset overtook the turn), 0 lease lost."""
        k = self.k
        keys = [k.proc(rk), k.lease(rk), k.route_state(rk), k.fails(rk), k.answer(rk, c.batch_id),
                k.sent(rk, c.batch_id), k.dead, k.dead_order, k.metrics, k.sessions(rk)]
        dead = [part for pair in c.dead for part in pair]
        gen = "" if c.gen is None else c.gen
        head: list[str | int | float] = [exec_id, self.lease_ms, c.n, c.batch_id, time.time(), gen,
                                         k.session_log_prefix(rk), LOG_CAP, *c.tokens, self.route_retention_s]
        args = [*head, len(c.entries), *c.entries, *dead, new_token()]  # the token makes a resent COMMIT a no-op
        return int(self._s["COMMIT"](keys, args))

    def finish(self, rk: str, exec_id: str) -> int:
        """1 released, 0 more work arrived, -1 lease lost."""
        k = self.k
        keys = [k.inbox(rk), k.proc(rk), k.lease(rk), k.dirty, k.running, k.runinfo]
        return int(self._s["FINISH"](keys, [exec_id, rk]))

    def renew(self, rk: str, exec_id: str) -> bool:
        return self._s["RENEW"]([self.k.lease(rk)], [exec_id, self.lease_ms]) == 1

    def holds(self, rk: str, exec_id: str) -> bool:
        return self.r.get(self.k.lease(rk)) == exec_id

    def handover(self, rk: str, exec_id: str, queue: str, *, delay_s: float = 0.0) -> bool:
        """Pass the route to a fresh run: at once (kick record), or after `delay_s` (a backoff lease)."""
        k = self.k
        keys = [k.lease(rk), k.running, k.runinfo, k.kicks, k.delayed]
        return self._s["HANDOVER"](keys, [exec_id, *_successor(rk, queue, delay_s)]) == 1

    def release(self, rk: str, exec_id: str) -> bool:
        """Give the route up, leaving it dirty (paused work); the sweep kicks it when work resumes."""
        return self._s["RELEASE"]([self.k.lease(rk), self.k.running, self.k.runinfo], [exec_id, rk]) == 1

    def bump(self, rk: str, batch_id: str, what: str, n: int = 1) -> int:
        """Count a failure (`f`) or a start (`s`) of a batch; the counts go when the batch commits. A start
        also names the batch the run works on now (`cur`): the watchdog charges that one if the run hangs."""
        key = self.k.fails(rk)
        pipe = self.r.pipeline()
        pipe.hincrby(key, f"{what}:{batch_id}", n)
        if what == "s" and n > 0:
            pipe.hset(key, "cur", batch_id)
        pipe.expire(key, 7 * 86400)
        return int(pipe.execute()[0])

    def current_batch(self, rk: str) -> str | None:
        """The batch the route's run started last (see `bump`)."""
        found = self.r.hget(self.k.fails(rk), "cur")
        return str(found) if found else None

    def forget(self, rk: str, batch_id: str) -> None:
        """Drop a batch's counters and caches when it is split into single messages."""
        pipe = self.r.pipeline()
        pipe.hdel(self.k.fails(rk), f"f:{batch_id}", f"s:{batch_id}")
        pipe.delete(self.k.answer(rk, batch_id), self.k.sent(rk, batch_id))
        pipe.execute()

    # -- the sweeper -------------------------------------------------------------------------------------

    def next_kicks(self, timeout: float, most: int = 100) -> list[Kick]:
        """Block up to `timeout` seconds for kick records, then take up to `most` of them."""
        first = self.r.blpop([self.k.kicks], timeout=timeout)
        if not first:
            return []
        rest = self.r.lpop(self.k.kicks, most - 1) or []
        return [Kick.loads(str(raw)) for raw in [first[1], *rest]]

    def return_kicks(self, kicks: Sequence[Kick]) -> None:
        """Put kicks back at the head of the list, in their order (a queue had no room for them yet)."""
        self.r.lpush(self.k.kicks, *[k.dumps() for k in reversed(kicks)])

    def pop_kick(self) -> Kick | None:
        """One waiting kick record, without blocking (a work-horse chaining routes)."""
        raw = self.r.lpop(self.k.kicks)
        return Kick.loads(str(raw)) if raw else None

    def kick(self, rk: str, queue: str) -> bool:
        """Queue a kick record when the route has work and nothing will run it (see KICK)."""
        return self.kick_many([(rk, queue)], self.listed_kicks()) == 1

    def kick_many(self, routes: Sequence[tuple[str, str]], listed: Mapping[str, set[str]] | None = None, *,
                  front: bool = False) -> int:
        """`kick` for many (route, queue) pairs in one pipelined round trip; returns how many were kicked.

        `listed`: route → tokens of its kick records now waiting in our kick list. `front`: the records go to the
        head of the list (a route whose run died has waited longest: it does not queue behind a backlog)."""
        k, listed = self.k, listed or {}
        started_before = utcformat(datetime.now(UTC) - timedelta(seconds=STARTED_GRACE_S))
        pipe = self.r.pipeline(transaction=False)
        for rk, queue in routes:
            token = new_token()
            record = Kick(route_key=rk, token=token, queue=queue).dumps()
            tokens = "," + ",".join(sorted(listed.get(rk, ()))) + ","
            self._s["KICK"]([k.inbox(rk), k.proc(rk), k.lease(rk), k.dirty, k.kicks],
                            [token, KICK_TTL_MS, rk, record, time.time(), tokens, rq_job_key_prefix(rk),
                             Job.redis_job_namespace_prefix, Queue.redis_queue_namespace_prefix, int(front),
                             started_before],
                            client=pipe)
        return sum(1 for res in pipe.execute() if res == 1)

    def listed_kicks(self) -> dict[str, set[str]]:
        """Route → tokens of the kick records waiting in our list or among the delayed retries."""
        out: dict[str, set[str]] = {}
        for raw in [*self.r.lrange(self.k.kicks, 0, -1), *self.r.zrange(self.k.delayed, 0, -1)]:
            kick = Kick.loads(str(raw))
            out.setdefault(kick.route_key, set()).add(kick.token)
        return out

    def dirty_page(self, start: int, count: int) -> list[str]:
        """Dirty routes by rank, oldest first; the sweep pages through all of them."""
        return [str(rk) for rk in self.r.zrange(self.k.dirty, start, start + count - 1)]

    def pop_due(self, limit: int = 500) -> int:
        """Move retries whose backoff is over to the kick list."""
        return int(self._s["POP_DUE"]([self.k.delayed, self.k.kicks], [time.time(), limit]))

    def break_run(self, rk: str, exec_id: str, batch_id: str, queue: str, delay_s: float) -> int:
        """Fence out a stuck run and kick a successor; the batch's failure count, or -1 if it moved on."""
        value, ttl_ms, _, record, due = _successor(rk, queue, delay_s)
        k = self.k
        keys = [k.lease(rk), k.running, k.runinfo, k.fails(rk), k.kicks, k.delayed, k.metrics]
        return int(self._s["BREAK"](keys, [exec_id, value, ttl_ms, rk, batch_id, record, due]))

    def overdue_runs(self, now: float, most: int = 100) -> list[tuple[str, str]]:
        """(route, run info JSON) of runs past their batch deadline."""
        routes = [str(rk) for rk in self.r.zrangebyscore(self.k.running, "-inf", now, start=0, num=most)]
        if not routes:
            return []
        infos = self.r.hmget(self.k.runinfo, routes)
        return [(rk, str(info or "")) for rk, info in zip(routes, infos, strict=True)]

    def forget_run(self, rk: str, info: str) -> bool:
        return self._s["FORGET_RUN"]([self.k.running, self.k.runinfo], [rk, info]) == 1

    # -- dead letters and pacing -------------------------------------------------------------------------

    def replay(self, dead_id: str, rk: str, queue: str, events: Sequence[str]) -> bool:
        token = new_token()
        record = Kick(route_key=rk, token=token, queue=queue).dumps()
        k = self.k
        keys = [k.dead, k.dead_order, k.inbox(rk), k.lease(rk), k.dirty, k.kicks, k.dead_replayed(dead_id)]
        args: list[str | int | float] = [dead_id, token, KICK_TTL_MS, rk, time.time(), record, 7 * 86400, *events]
        return self._s["REPLAY"](keys, args) == 1

    def discard(self, dead_id: str) -> bool:
        """Drop a dead letter without replaying it (kept a week under `dead_discarded`); False when it is gone."""
        k = self.k
        keys = [k.dead, k.dead_order, k.dead_replayed(dead_id), k.dead_discarded(dead_id)]
        return self._s["DISCARD"](keys, [dead_id, time.time(), 7 * 86400]) == 1


def _successor(rk: str, queue: str, delay_s: float) -> tuple[str, int, str, str, float]:
    """(lease value, its ttl ms, route, kick record, due time or 0) for the run that takes a route over:
    a queued kick any job of the route may take, or after a backoff a lease only its own job may take."""
    token = new_token()
    record = Kick(route_key=rk, token=token, queue=queue).dumps()
    if delay_s > 0:
        return f"d:{token}", int(delay_s * 1000) + KICK_TTL_MS, rk, record, time.time() + delay_s
    return f"k:{token}", KICK_TTL_MS, rk, record, 0
