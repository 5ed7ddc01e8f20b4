"""The inbox/lease protocol on real Redis: single owner, fencing, batching, no lost wake-up, dead letters."""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta

import pytest
import redis
from rq.queue import Queue
from rq.serializers import JSONSerializer
from rq.utils import utcformat

from core.keys import Keys
from memory.sessions import KEEP_ENDED, Sessions
from runs.inbox import STARTED_GRACE_S, Commit, Inbox, Kick, Pushed
from runs.queues import enqueue_drain, job_id, rq_queue_name
from tests.harness import unique


@pytest.fixture()
def box(redis_url: str) -> tuple[Inbox, Keys, redis.Redis]:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("proto"))
    return Inbox(r, keys, lease_ms=2000, keep=4), keys, r


def push(inbox: Inbox, rk: str, i: int) -> bool:
    return inbox.push(rk, f"event-{i}", message_id=f"om_{i}", content_key=f"c{i}", queue="q").kicked


def running(inbox: Inbox, rk: str, exec_id: str) -> str:
    """Push one event and let `exec_id` own the route as the kicked run; returns the kick token."""
    push(inbox, rk, 1)
    token = inbox.next_kicks(0.1)[0].token
    assert inbox.acquire(rk, token, exec_id)
    return token


def take(inbox: Inbox, rk: str, exec_id: str) -> list[str] | None:
    return inbox.take(rk, exec_id, budget_s=60)


def commit(inbox: Inbox, rk: str, exec_id: str, n: int, batch: str, entries=(), dead=()) -> bool:
    """True when committed (the lease was ours)."""
    return inbox.commit(rk, exec_id, Commit(n=n, batch_id=batch, entries=list(entries), dead=list(dead))) != 0


def test_first_push_kicks_once_and_queues_a_kick_record(box) -> None:
    inbox, keys, r = box
    assert push(inbox, "rk", 1) is True
    assert push(inbox, "rk", 2) is False  # a run is already pending: no second kick
    kicks = inbox.next_kicks(timeout=0.1)
    assert [(k.route_key, k.queue) for k in kicks] == [("rk", "q")]
    assert r.get(keys.lease("rk")) == f"k:{kicks[0].token}"
    assert Kick.loads(kicks[0].dumps()) == kicks[0]


def test_duplicates_by_message_id_or_content_key(box) -> None:
    inbox, keys, r = box
    assert inbox.push("rk", "a", message_id="om_1", content_key="c1", queue="q").duplicate is False
    assert inbox.push("rk", "b", message_id="om_1", content_key="c2", queue="q").duplicate is True
    assert inbox.push("rk", "c", message_id="om_2", content_key="c1", queue="q").duplicate is True
    assert r.lrange(keys.inbox("rk"), 0, -1) == ["a"]
    assert r.exists(keys.seen_message("om_2")) == 0  # a rejected duplicate leaves no marker behind
    assert 86000 < r.ttl(keys.seen_message("om_1")) <= 86400


def test_a_message_is_a_duplicate_on_any_route(box) -> None:
    """After a routing-policy change the same message maps to another route: still a redelivery."""
    inbox, keys, r = box
    assert inbox.push("rk-old", "a", message_id="om_1", content_key="c1", queue="q").duplicate is False
    assert inbox.push("rk-new", "a", message_id="om_1", content_key="c1", queue="q").duplicate is True
    assert inbox.push("rk-new", "a", message_id="om_9", content_key="c1", queue="q").duplicate is True
    assert r.llen(keys.inbox("rk-new")) == 0


def test_only_the_kicked_run_acquires_and_others_are_fenced_out(box) -> None:
    inbox, _, _ = box
    push(inbox, "rk", 1)
    token = inbox.next_kicks(0.1)[0].token
    assert inbox.acquire("rk", token, "exec-a") is True
    assert inbox.acquire("rk", token, "exec-b") is False  # a retry of the same job while the first still runs
    assert inbox.acquire("rk", "stale-token", "exec-x") is False
    assert take(inbox, "rk", "exec-b") is None
    assert take(inbox, "rk", "exec-a") == ["event-1"]
    assert commit(inbox, "rk", "exec-b", 1, "b1", ["x"]) is False
    assert inbox.holds("rk", "exec-a") and not inbox.holds("rk", "exec-b")


def test_batching_commit_and_release_without_lost_wake_up(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "exec")
    assert take(inbox, "rk", "exec") == ["event-1"]
    push(inbox, "rk", 2)  # arrive during the run
    push(inbox, "rk", 3)
    assert inbox.next_kicks(0.05) == []  # the running route is not kicked again
    assert take(inbox, "rk", "exec") == ["event-1"]  # an uncommitted batch is retried as-is
    assert commit(inbox, "rk", "exec", 1, "b1", [json.dumps({"role": "user", "text": "1"})])
    assert inbox.finish("rk", "exec") == 0  # work arrived: do not release
    assert take(inbox, "rk", "exec") == ["event-2", "event-3"]
    assert commit(inbox, "rk", "exec", 2, "b2")
    assert take(inbox, "rk", "exec") == []
    assert inbox.finish("rk", "exec") == 1
    assert r.get(keys.lease("rk")) is None and r.zscore(keys.dirty, "rk") is None
    assert push(inbox, "rk", 4) is True  # the next message kicks a fresh run


def test_expired_lease_lets_the_sweep_kick_and_fences_the_old_run(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "old")
    take(inbox, "rk", "old")
    assert inbox.kick("rk", "q") is False  # a live lease: the sweep leaves it alone
    r.pexpire(keys.lease("rk"), 1)
    time.sleep(0.05)
    assert inbox.kick("rk", "q") is True
    new_token = inbox.next_kicks(0.1)[-1].token
    assert inbox.acquire("rk", new_token, "new")
    assert take(inbox, "rk", "new") == ["event-1"]  # the crashed run's batch, intact
    assert inbox.renew("rk", "old") is False and commit(inbox, "rk", "old", 1, "b") is False


def test_backoff_handover_keeps_the_route_closed_to_others(box) -> None:
    inbox, keys, r = box
    token = running(inbox, "rk", "exec")
    assert inbox.handover("rk", "exec", "q", delay_s=5)
    assert inbox.kick("rk", "q") is False
    assert inbox.acquire("rk", token, "late") is False  # a stale job must not skip the backoff
    assert inbox.pop_due() == 0  # not due yet
    successor = Kick.loads(r.zrange(keys.delayed, 0, -1)[0])
    assert inbox.acquire("rk", successor.token, "successor") is True


def test_immediate_handover_queues_a_kick_any_job_of_the_route_may_take(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "exec")
    assert inbox.handover("rk", "exec", "q")
    kick = inbox.next_kicks(0.1)[0]
    assert r.get(keys.lease("rk")) == f"k:{kick.token}"
    assert inbox.acquire("rk", "some-older-kick", "stale-job") is True  # it runs the route now
    assert inbox.acquire("rk", kick.token, "late") is False


def test_a_job_that_outlived_its_kick_lease_still_marks_the_route_dirty(box) -> None:
    """Defect 4: a stale job that takes a free lease must put the route in `dirty`."""
    inbox, keys, r = box
    assert inbox.acquire("rk", "stale", "exec") is True
    assert r.zscore(keys.dirty, "rk") is not None
    push(inbox, "rk", 1)  # arrives during the run: no kick, the run owns the route
    r.delete(keys.lease("rk"))  # the run is killed and its lease expires
    assert inbox.kick("rk", "q") is True  # the sweep still sees the route


def test_commit_dead_letters_and_clears_the_batch_state(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "exec")
    take(inbox, "rk", "exec")
    assert [inbox.bump("rk", "b", "f") for _ in range(3)] == [1, 2, 3]
    r.set(keys.answer("rk", "b"), "{}")
    r.hset(keys.sent("rk", "b"), "u0", "om_x")
    record = json.dumps({"route_key": "rk", "events": ["event-1"]})
    assert commit(inbox, "rk", "exec", 1, "b", dead=[("dead-1", record)])
    assert r.llen(keys.proc("rk")) == 0 and not r.exists(keys.fails("rk"))
    assert not r.exists(keys.answer("rk", "b")) and not r.exists(keys.sent("rk", "b"))
    assert json.loads(r.hget(keys.dead, "dead-1"))["events"] == ["event-1"]
    assert r.zscore(keys.dead_order, "dead-1") is not None


def test_replay_is_atomic_and_happens_once(box) -> None:
    inbox, keys, r = box
    r.hset(keys.dead, "d1", "{}")
    r.zadd(keys.dead_order, {"d1": 1})
    assert inbox.replay("d1", "rk", "q", ["e1", "e2"]) is True
    assert inbox.replay("d1", "rk", "q", ["e1", "e2"]) is False
    assert r.lrange(keys.inbox("rk"), 0, -1) == ["e1", "e2"]
    assert [k.route_key for k in inbox.next_kicks(0.1)] == ["rk"]


def test_commit_writes_the_session_log_only_at_the_turns_generation(box) -> None:
    """A turn a user reset overtook consumes its batch and writes nothing into the new session."""
    inbox, keys, r = box
    sessions = Sessions(r, keys)
    for i in range(3):
        push(inbox, "rk", i)
    token = inbox.next_kicks(0.1)[0].token
    inbox.acquire("rk", token, "exec")
    take(inbox, "rk", "exec")
    sid = sessions.start("rk", ("exec", 0), expected=None)
    assert inbox.commit("rk", "exec", Commit(n=1, batch_id="b0", entries=["u0", "a0"], gen=0, tokens=(5, 2, 1))) == 1
    assert r.lrange(keys.session_log("rk", sid), 0, -1) == ["u0", "a0"]
    assert sessions.get("rk", sid).counters == {"in": 5, "out": 2, "cache_read": 1, "turns": 1}
    inbox.push("rk", "{}", message_id="om_reset", content_key="c_reset", queue="q",
               also=Pushed(reset_sid="s_new"))  # a reset
    assert inbox.commit("rk", "exec", Commit(n=1, batch_id="b1", entries=["u1", "a1"], gen=0)) == 2
    assert r.lrange(keys.session_log("rk", sid), 0, -1) == ["u0", "a0"]
    assert r.llen(keys.session_log("rk", "s_new")) == 0 and r.llen(keys.proc("rk")) == 1
    assert sessions.state("rk").generation == 1 and sessions.get("rk", sid).end_reason == "user_reset"
    assert inbox.commit("rk", "exec", Commit(n=1, batch_id="b2", entries=["u2", "a2"], gen=1)) == 1
    assert r.lrange(keys.session_log("rk", "s_new"), 0, -1) == ["u2", "a2"]


def test_a_lost_kick_is_redone_by_the_next_sweep_not_after_its_lease(box) -> None:
    """A kick lease whose record and RQ job are gone (a crash, Redis' last second) must not block its route."""
    inbox, keys, r = box
    push(inbox, "rk", 1)
    r.delete(keys.kicks)  # the record is lost; its kick lease lives on
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 1
    assert r.get(keys.lease("rk")) == f"k:{inbox.next_kicks(0.1)[0].token}"


def test_a_waiting_kick_is_renewed_not_repeated(box, redis_url) -> None:
    inbox, keys, r = box
    push(inbox, "rk", 1)
    r.pexpire(keys.lease("rk"), 5_000)
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 0  # its record waits in the list
    assert r.pttl(keys.lease("rk")) > 5_000 and r.llen(keys.kicks) == 1
    token = inbox.next_kicks(0.1)[0].token  # dispatched: now an RQ job waits
    enqueue_drain(redis.Redis.from_url(redis_url), keys.profile, "q", "rk", token)
    r.pexpire(keys.lease("rk"), 5_000)
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 0
    assert r.pttl(keys.lease("rk")) > 5_000 and r.llen(keys.kicks) == 0
    r.hset(f"rq:job:{job_id('rk', token)}", "status", "finished")  # it ran without taking the route: lost
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 1


def test_a_job_stranded_by_a_worker_that_died_after_dequeuing_it_counts_as_lost(box, redis_url) -> None:
    """RQ moves a job to an intermediate list when a worker dequeues it; a worker (or Redis) that dies
    before starting it leaves it 'queued' there until RQ's maintenance, minutes later."""
    inbox, keys, r = box
    raw = redis.Redis.from_url(redis_url)
    push(inbox, "rk", 1)
    token = inbox.next_kicks(0.1)[0].token
    enqueue_drain(raw, keys.profile, "q", "rk", token)
    queue = Queue(rq_queue_name(keys.profile, "q"), connection=raw, serializer=JSONSerializer)
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 0  # waiting in its queue
    job, _ = Queue.dequeue_any([queue], timeout=None, connection=raw, serializer=JSONSerializer)
    assert job is not None and job.get_status() == "queued"  # what a worker that died here leaves behind
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 1
    assert r.get(keys.lease("rk")) == f"k:{inbox.next_kicks(0.1)[0].token}"


def test_a_job_killed_after_it_started_and_before_it_took_the_route_is_redone_soon(box, redis_url) -> None:
    """RQ marked the job started (status, started_at in one write) and its worker or work-horse was SIGKILLed
    before the job's first step, taking the kick lease: the sweep waits while that is recent, then counts the
    job as lost instead of leaving the route to the kick lease's 45 s."""
    inbox, keys, r = box
    push(inbox, "rk", 1)
    token = inbox.next_kicks(0.1)[0].token
    enqueue_drain(redis.Redis.from_url(redis_url), keys.profile, "q", "rk", token)
    job = f"rq:job:{job_id('rk', token)}"
    r.hset(job, mapping={"status": "started", "started_at": utcformat(datetime.now(UTC) - timedelta(seconds=2))})
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 0  # taking the lease now
    assert r.get(keys.lease("rk")) == f"k:{token}"
    r.hset(job, "started_at", utcformat(datetime.now(UTC) - timedelta(seconds=STARTED_GRACE_S + 1)))
    assert inbox.kick_many([("rk", "q")], inbox.listed_kicks()) == 1
    fresh = inbox.next_kicks(0.1)[0].token
    assert fresh != token and r.get(keys.lease("rk")) == f"k:{fresh}"
    assert inbox.acquire("rk", token, "the-slow-job")  # a job that was only slow still runs the route alone
    assert not inbox.acquire("rk", fresh, "the-new-job")


def test_a_lost_retry_is_redone_by_the_sweep(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "exec")
    assert inbox.handover("rk", "exec", "q", delay_s=0.001)
    time.sleep(0.01)
    assert inbox.kick("rk", "q") is False  # waiting among the delayed retries
    assert inbox.pop_due() == 1
    assert inbox.kick("rk", "q") is False  # waiting in the kick list
    r.delete(keys.kicks)  # lost before it was dispatched
    assert inbox.kick("rk", "q") is True


def test_records_of_sessions_past_their_retention_are_pruned(box) -> None:
    """A route that rotates often keeps a bounded number of session records."""
    _inbox, keys, r = box
    sessions = Sessions(r, keys, retention_s=100)
    r.set(keys.lease("rk"), "exec")
    first = sessions.start("rk", ("exec", 0), expected=None)
    r.hincrby(keys.sessions("rk"), f"{first}#turns", 3)
    second = sessions.start("rk", ("exec", 0), expected=first, end_reason="compression")
    assert sessions.prune("rk", now=time.time() + 50) == 0  # ended 50 s ago: kept
    assert sessions.prune("rk", now=time.time() + 150) == 1  # past the retention: record and counters go
    assert set(r.hkeys(keys.sessions("rk"))) == {second}
    assert sessions.state("rk").session_id == second


def test_a_route_keeps_at_most_keep_ended_ended_sessions(box) -> None:
    _inbox, keys, r = box
    sessions = Sessions(r, keys, retention_s=0)  # no time limit: only the count bounds them
    r.set(keys.lease("rk"), "exec")
    sid = sessions.start("rk", ("exec", 0), expected=None)
    for i in range(KEEP_ENDED + 5):
        r.rpush(keys.session_log("rk", sid), f"turn {i}")
        sid = sessions.start("rk", ("exec", 0), expected=sid, end_reason="compression")
    kept = [s for s in sessions.all("rk") if s.end_reason]
    assert len(kept) == KEEP_ENDED and sessions.state("rk").session_id == sid
    logs = list(r.scan_iter(keys.session_log_prefix("rk") + "*"))
    assert len(logs) == KEEP_ENDED  # the current one is empty; the oldest ended logs are gone


def test_an_idle_route_leaves_nothing_behind_after_its_retention(redis_url: str) -> None:
    """Issue 14 A6: every commit restarts the clock of the route's state, its session records and its current
    log; a route nobody talks to any more expires whole (here a 1-second retention)."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("retain"))
    inbox, sessions = Inbox(r, keys, lease_ms=2000, keep=4, route_retention_s=1), Sessions(r, keys)
    token = running(inbox, "rk", "exec")
    assert token and take(inbox, "rk", "exec")
    sid = sessions.start("rk", ("exec", 0), expected=None)
    assert inbox.commit("rk", "exec", Commit(n=1, batch_id="b0", entries=["u0", "a0"], gen=0)) == 1
    assert inbox.finish("rk", "exec") == 1
    kept = [keys.route_state("rk"), keys.sessions("rk"), keys.session_log("rk", sid)]
    assert all(0 < r.pttl(k) <= 1000 for k in kept)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(r.exists(k) for k in kept):
        time.sleep(0.1)
    left = {k: r.ttl(k) for k in r.scan_iter(f"{keys.prefix}:*") if k != keys.metrics}  # counters: per profile
    assert not any(r.exists(k) for k in kept)
    assert all(ttl > 0 for ttl in left.values()), left  # what is left (message dedupe marks) expires too


def test_a_route_index_drops_routes_past_their_retention_when_trimmed_not_per_batch(redis_url: str) -> None:
    """Issue 32: storing an event indexes nothing; the run that takes it adds its route to the indexes (`index`), and
    routes past their retention leave an index when the sweeper (all routes) or the console (the index it reads) trims
    it, so no batch pays for an index's upkeep."""
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("trim"))
    inbox = Inbox(r, keys, lease_ms=2000, route_retention_s=100)
    inbox.push("rk_new", "{}", message_id=unique("m"), content_key=unique("c"), queue="q")
    assert not r.exists(keys.routes, keys.routes_of("oc_trim"))  # the webhook's PUSH leaves the indexes to the run
    inbox.index("rk_old", ("oc_trim", ""), now=time.time() - 101)  # its last batch was past the retention
    inbox.index("rk_new", ("oc_trim", "oc_trim"))
    assert r.zscore(keys.routes, "rk_old") is not None  # adding leaves the old entry alone
    assert 0 < r.ttl(keys.routes) <= 100 and 0 < r.ttl(keys.routes_of("oc_trim")) <= 100  # they go with their routes
    assert not r.exists(keys.routes_of(""))
    assert inbox.trim_index(keys.routes) == 1 and inbox.trim_index(keys.routes_of("oc_trim")) == 1
    assert r.zrange(keys.routes, 0, -1) == r.zrange(keys.routes_of("oc_trim"), 0, -1) == ["rk_new"]
