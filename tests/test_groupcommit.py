"""Group commit on real Redis: every concurrent caller gets its own result or error, none waits forever."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from state.groupcommit import GroupCommit
from tests.harness import unique

INCR_BY = "return redis.call('INCRBY', KEYS[1], ARGV[1])"
FAIL_ON_NEGATIVE = "if tonumber(ARGV[1]) < 0 then return redis.error_reply('negative') end return ARGV[1]"


def test_concurrent_callers_each_get_their_own_result(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    gc = GroupCommit(r, INCR_BY)
    key = unique("gc")
    barrier = threading.Barrier(16)

    def call(i: int) -> int:
        barrier.wait() if i < 16 else None
        return int(gc([key], [1]))

    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(call, range(400)))
    assert sorted(results) == list(range(1, 401))  # each call ran exactly once and saw its own reply
    assert int(r.get(key)) == 400


def test_a_failing_call_fails_alone(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    gc = GroupCommit(r, FAIL_ON_NEGATIVE)

    def call(i: int) -> object:
        try:
            return gc([], [i if i % 5 else -i - 1])
        except redis.ResponseError as exc:
            return exc

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(call, range(100)))
    for i, result in enumerate(results):
        if i % 5:
            assert result == str(i)
        else:
            assert isinstance(result, redis.ResponseError) and "negative" in str(result)


def test_scripts_are_reloaded_after_a_flush(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    gc = GroupCommit(r, INCR_BY)
    key = unique("gc")
    assert gc([key], [2]) == 2
    r.script_flush()
    assert gc([key], [3]) == 5


def test_connection_failure_reaches_every_waiter() -> None:
    r = redis.Redis.from_url("redis://127.0.0.1:1/0", socket_connect_timeout=0.5)
    gc = GroupCommit(r, INCR_BY)
    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(gc, ["k"], [1]) for _ in range(8)]
        for f in futures:
            with pytest.raises(redis.ConnectionError):
                f.result(timeout=10)
