"""Randomized interleavings of the inbox/lease protocol against real Redis (issue defect 4).

Pushes, kicks, acquires, takes, commits, finishes, hand-overs, crashes, lease expiries and sweeps in
any order must keep the scripts' invariants after every step, and once the chaos stops, an honest
recovery (the sweeper plus well-behaved runs) must commit every pushed event exactly once.
"""

from __future__ import annotations

import itertools
import json
import os
import time

import redis
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from core.keys import Keys
from runs.inbox import Commit, Inbox, Kick
from tests.harness import unique

ROUTES = ("rk-a", "rk-b")
_ids = itertools.count()


class Protocol(RuleBasedStateMachine):
    """The model: which runs exist (each with the batch it took) and which events were committed."""

    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self.r = redis.Redis.from_url(os.environ["PROTOCOL_REDIS_URL"], decode_responses=True)
        self.k = Keys(unique("proto"))
        self.inbox = Inbox(self.r, self.k, lease_ms=60_000, keep=0)
        self.pushed: list[str] = []
        self.committed: list[str] = []
        self.jobs: list[Kick] = []
        self.batches: dict[str, list[str]] = {}  # exec id → batch it took

    # -- the outside world -----------------------------------------------------------------------------

    @rule(route=st.sampled_from(ROUTES))
    def push(self, route: str) -> None:
        event = json.dumps({"id": f"e{next(_ids)}", "route": route})
        self.inbox.push(route, event, message_id=event, content_key=event, queue="q")
        self.pushed.append(event[:-1] + ',"gen":0}')  # as stored: PUSH stamps the route's generation

    @rule()
    def dispatch(self) -> None:
        self.jobs.extend(self.inbox.next_kicks(0.001, most=100) if self.r.llen(self.k.kicks) else [])

    @rule()
    def sweep(self) -> None:
        self.inbox.pop_due()
        self.inbox.kick_many([(str(rk), "q") for rk in self.r.zrange(self.k.dirty, 0, -1)])

    @rule(route=st.sampled_from(ROUTES))
    def lease_expires(self, route: str) -> None:
        self.r.delete(self.k.lease(route))

    @rule(route=st.sampled_from(ROUTES))
    def stale_job(self, route: str) -> None:
        """A job whose kick token is long gone (an RQ retry of an old job, say)."""
        self.jobs.append(Kick(route_key=route, token="stale", queue="q"))

    # -- runs --------------------------------------------------------------------------------------------

    @precondition(lambda self: self.jobs)
    @rule(target=runs, pick=st.integers(min_value=0, max_value=50))
    def start_job(self, pick: int) -> tuple[str, str]:
        job = self.jobs.pop(pick % len(self.jobs))
        exec_id = f"x{next(_ids)}"
        before = self.r.get(self.k.lease(job.route_key))
        if self.inbox.acquire(job.route_key, job.token, exec_id):
            # One owner at a time: a run's lease is never taken over, a backoff lease only by its own job.
            assert before is None or before.startswith("k:") or before == f"d:{job.token}", (before, job)
            return (job.route_key, exec_id)
        return (job.route_key, "")  # not the owner: this job ends at once

    @rule(run=runs)
    def take(self, run: tuple[str, str]) -> None:
        route, exec_id = run
        if exec_id:
            batch = self.inbox.take(route, exec_id, budget_s=60)
            if batch is not None:
                self.batches[exec_id] = batch

    @rule(run=runs)
    def commit(self, run: tuple[str, str]) -> None:
        route, exec_id = run
        batch = self.batches.pop(exec_id, None)
        if batch and self.inbox.commit(route, exec_id, Commit(n=len(batch), batch_id=unique("b"), entries=[])):
            self.committed.extend(batch)

    @rule(run=runs)
    def finish(self, run: tuple[str, str]) -> None:
        route, exec_id = run
        if exec_id and exec_id not in self.batches:
            self.inbox.finish(route, exec_id)

    @rule(run=consumes(runs), delay=st.sampled_from([0.0, 0.001]))
    def hand_over(self, run: tuple[str, str], delay: float) -> None:
        route, exec_id = run
        if exec_id:
            self.batches.pop(exec_id, None)
            self.inbox.handover(route, exec_id, "q", delay_s=delay)

    @rule(run=consumes(runs))
    def crash(self, run: tuple[str, str]) -> None:
        self.batches.pop(run[1], None)  # the process is gone; Redis keeps whatever it had written

    # -- invariants --------------------------------------------------------------------------------------

    @invariant()
    def held_or_pending_routes_are_dirty(self) -> None:
        for route in ROUTES:
            busy = self.r.exists(self.k.lease(route)) or self.r.llen(self.k.inbox(route)) or self.r.llen(
                self.k.proc(route))
            assert not busy or self.r.zscore(self.k.dirty, route) is not None, route

    @invariant()
    def nothing_committed_twice(self) -> None:
        assert len(self.committed) == len(set(self.committed))

    @rule()
    def lose_kick_records(self) -> None:
        """A crash or Redis' last second of writes loses the waiting kick records; their leases live on."""
        self.r.delete(self.k.kicks)

    def teardown(self) -> None:
        """Stop the chaos: the leases of vanished runs expire (kick and backoff leases do not have to:
        the sweep must see through them), then sweeps and honest runs finish the work."""
        for route in ROUTES:
            lease = self.r.get(self.k.lease(route))
            if lease and lease[:2] not in ("k:", "d:"):
                self.r.delete(self.k.lease(route))
        for _ in range(20):
            time.sleep(0.002)  # due retries become due
            self.sweep()
            self.dispatch()
            while self.jobs:
                self._honest_run(self.jobs.pop(0))
            if not self.r.zcard(self.k.dirty):
                break
        assert sorted(self.committed) == sorted(self.pushed), "an event was stranded or committed twice"
        assert not self.r.zcard(self.k.dirty) and not self.r.llen(self.k.kicks)

    def _honest_run(self, job: Kick) -> None:
        exec_id = f"x{next(_ids)}"
        if not self.inbox.acquire(job.route_key, job.token, exec_id):
            return
        while True:
            batch = self.inbox.take(job.route_key, exec_id, budget_s=60)
            assert batch is not None
            if batch:
                assert self.inbox.commit(job.route_key, exec_id, Commit(n=len(batch), batch_id=unique("b")))
                self.committed.extend(batch)
            elif self.inbox.finish(job.route_key, exec_id) == 1:
                return


Protocol.TestCase.settings = settings(max_examples=150, stateful_step_count=40, deadline=None,
                                      suppress_health_check=[HealthCheck.too_slow])


def test_protocol_never_strands_an_event(redis_url: str, monkeypatch) -> None:
    monkeypatch.setenv("PROTOCOL_REDIS_URL", redis_url)
    Protocol.TestCase("runTest").runTest()


def test_a_resent_commit_consumes_its_events_once(redis_url: str) -> None:
    """redis-py resends a command whose connection dropped before the answer (Redis failover or restart): the
    second COMMIT of the same call must not trim the next segment's events."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("resend"))
    inbox = Inbox(r, keys, lease_ms=60_000, keep=0)
    rk = "feishu:x:p2p:oc_resend"
    for i in range(3):
        inbox.push(rk, json.dumps({"i": i}), message_id=f"om_{i}", content_key=f"c{i}", queue="runs")
    kick = inbox.pop_kick()
    assert kick and inbox.acquire(rk, kick.token, "exec")
    assert len(inbox.take(rk, "exec", budget_s=60) or []) == 3
    script = inbox._s["COMMIT"]
    calls: list[tuple[list[str], list[object]]] = []

    def recording(keys=None, args=None, client=None):  # what redis-py would send again after a dropped reply
        calls.append((list(keys or []), list(args or [])))
        return original(keys=keys, args=args, client=client)

    original, inbox._s["COMMIT"] = script, recording
    assert inbox.commit(rk, "exec", Commit(n=1, batch_id="b1")) == 1
    (sent_keys, sent_args), = calls
    assert original(keys=sent_keys, args=sent_args) == 1  # the resend answers as the first call did
    assert [json.loads(e)["i"] for e in r.lrange(keys.proc(rk), 0, -1)] == [1, 2]
    assert inbox.commit(rk, "exec", Commit(n=1, batch_id="b2")) == 1  # a new commit consumes the next one
    assert [json.loads(e)["i"] for e in r.lrange(keys.proc(rk), 0, -1)] == [2]


def test_a_route_whose_run_died_is_kicked_ahead_of_the_backlog(redis_url: str) -> None:
    """The recovery pass puts its kick at the head of the list: that route has waited longest (issue 16)."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("front"))
    inbox = Inbox(r, keys, lease_ms=60_000, keep=0)
    for i in range(3):
        inbox.push(f"feishu:x:p2p:oc_wait{i}", "{}", message_id=f"om_w{i}", content_key=f"w{i}", queue="runs")
    dead = "feishu:x:p2p:oc_dead"
    inbox.push(dead, "{}", message_id="om_d", content_key="d", queue="runs")
    r.lrem(keys.kicks, 0, next(k for k in r.lrange(keys.kicks, 0, -1) if dead in k))
    r.delete(keys.lease(dead))  # its run took the kick and died; the lease lapsed
    assert inbox.kick_many([(dead, "runs")], inbox.listed_kicks(), front=True) == 1
    assert next(k.route_key for k in (inbox.pop_kick() for _ in range(4)) if k) == dead
