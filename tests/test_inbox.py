"""The inbox/lease protocol on real Redis: single owner, fencing, batching, no lost wake-up, dead letters."""

from __future__ import annotations

import json
import time

import pytest
import redis

from jobs.inbox import Inbox, Kick
from memory.keys import Keys
from tests.harness import unique


@pytest.fixture()
def box(redis_url: str) -> tuple[Inbox, Keys, redis.Redis]:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("proto"))
    return Inbox(r, keys, lease_ms=2000), keys, r


def push(inbox: Inbox, rk: str, i: int) -> bool:
    return inbox.push(rk, f"event-{i}", message_id=f"om_{i}", content_key=f"c{i}", queue="q").kicked


def running(inbox: Inbox, rk: str, exec_id: str) -> str:
    """Push one event and let `exec_id` own the route as the kicked run; returns the kick token."""
    push(inbox, rk, 1)
    token = inbox.next_kicks(0.1)[0].token
    assert inbox.acquire(rk, token, exec_id)
    return token


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
    assert inbox.acquire("rk", "stale-token", "exec-x") is False
    assert inbox.acquire("rk", token, "exec-a") is True
    assert inbox.acquire("rk", token, "exec-b") is False  # a retry of the same job while the first still runs
    assert inbox.take("rk", "exec-b") is None
    assert inbox.take("rk", "exec-a") == ["event-1"]
    assert inbox.commit("rk", "exec-b", 1, "b1", ["x"], keep=10) is False
    assert inbox.holds("rk", "exec-a") and not inbox.holds("rk", "exec-b")


def test_batching_commit_and_release_without_lost_wake_up(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "exec")
    assert inbox.take("rk", "exec") == ["event-1"]
    push(inbox, "rk", 2)  # arrive during the run
    push(inbox, "rk", 3)
    assert inbox.next_kicks(0.05) == []  # the running route is not kicked again
    assert inbox.take("rk", "exec") == ["event-1"]  # an uncommitted batch is retried as-is
    assert inbox.commit("rk", "exec", 1, "b1", [json.dumps({"role": "user", "text": "1"})], keep=10)
    assert inbox.finish("rk", "exec") == 0  # work arrived: do not release
    assert inbox.take("rk", "exec") == ["event-2", "event-3"]
    assert inbox.commit("rk", "exec", 2, "b2", [], keep=10)
    assert inbox.take("rk", "exec") == []
    assert inbox.finish("rk", "exec") == 1
    assert r.get(keys.lease("rk")) is None and r.zscore(keys.dirty, "rk") is None
    assert push(inbox, "rk", 4) is True  # the next message kicks a fresh run


def test_expired_lease_lets_the_sweep_kick_and_fences_the_old_run(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "old")
    inbox.take("rk", "old")
    assert inbox.kick("rk") is None  # a live lease: the sweep leaves it alone
    r.pexpire(keys.lease("rk"), 1)
    time.sleep(0.05)
    new_token = inbox.kick("rk")
    assert new_token and inbox.acquire("rk", new_token, "new")
    assert inbox.take("rk", "new") == ["event-1"]  # the crashed run's batch, intact
    assert inbox.renew("rk", "old") is False and inbox.commit("rk", "old", 1, "b", [], keep=10) is False


def test_handover_keeps_the_route_closed_to_others(box) -> None:
    inbox, _, _ = box
    token = running(inbox, "rk", "exec")
    assert inbox.handover("rk", "exec", "next", 5000)
    assert inbox.kick("rk") is None
    assert inbox.acquire("rk", token, "late") is False
    assert inbox.acquire("rk", "next", "successor") is True


def test_dead_letter_moves_the_batch_and_clears_attempts(box) -> None:
    inbox, keys, r = box
    running(inbox, "rk", "exec")
    inbox.take("rk", "exec")
    assert [inbox.bump_attempts("rk", "b") for _ in range(3)] == [1, 2, 3]
    assert inbox.dead_letter("rk", "exec", "b", {"route_key": "rk", "events": ["event-1"]})
    assert r.llen(keys.proc("rk")) == 0 and r.hget(keys.attempts("rk"), "b") is None
    assert json.loads(r.lindex(keys.dead_letters, -1))["events"] == ["event-1"]


def test_transcript_is_bounded_by_commit(box) -> None:
    inbox, keys, r = box
    for i in range(6):
        push(inbox, "rk", i)
    token = inbox.next_kicks(0.1)[0].token
    inbox.acquire("rk", token, "exec")
    inbox.take("rk", "exec")
    for i in range(6):
        inbox.commit("rk", "exec", 1, f"b{i}", [f"u{i}", f"a{i}"], keep=4)
    assert r.lrange(keys.transcript("rk"), 0, -1) == ["u4", "a4", "u5", "a5"]
