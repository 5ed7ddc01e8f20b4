"""Group commit on real Redis: every concurrent caller gets its own result or error, none waits forever."""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import redis

from state.groupcommit import GroupCommit, pack_python
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


def _kill_clients_named(r: redis.Redis, name: str) -> int:
    return sum(int(r.client_kill_filter(_id=c["id"])) for c in r.client_list() if c.get("name") == name)


def test_a_dropped_connection_is_reopened_and_the_call_answered(redis_url: str) -> None:
    """The group's connection is held across calls: when Redis drops it (a restart, a timeout, a failover), the
    client's Retry reconnects and sends the group again instead of failing the request."""
    name = unique("gcconn")
    r = redis.Redis.from_url(redis_url, decode_responses=True, client_name=name)
    gc = GroupCommit(r, INCR_BY)
    key = unique("gc")
    assert gc([key], [1]) == 1
    admin = redis.Redis.from_url(redis_url, decode_responses=True)
    assert _kill_clients_named(admin, name) >= 1
    assert gc([key], [1]) == 2  # exactly once more: the dropped connection sent nothing
    assert int(admin.get(key)) == 2


def test_a_forked_child_talks_over_its_own_connection(redis_url: str) -> None:
    """A child writing on the socket it inherited would read its parent's replies (or the parent the child's)."""
    name = unique("gcfork")
    r = redis.Redis.from_url(redis_url, decode_responses=True, socket_timeout=5, client_name=name)
    gc = GroupCommit(r, INCR_BY)
    key = unique("gc")
    assert gc([key], [1]) == 1  # the parent's connection is open (and idle) at the fork
    pid = os.fork()
    if pid == 0:  # the child: one call, then what the server sees, then out without pytest's teardown
        code = 3
        try:
            admin = redis.Redis.from_url(redis_url, decode_responses=True)
            ours = [c for c in admin.client_list() if c.get("name") == name] if gc([key], [10]) == 11 else []
            code = 0 if len(ours) == 2 else 4  # the parent's and the child's own
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert gc([key], [100]) == 111  # and the parent's still answers the parent


def test_after_a_script_flush_each_call_runs_once(redis_url: str) -> None:
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    gc = GroupCommit(r, INCR_BY)
    keys = [unique("gc") for _ in range(16)]
    assert all(gc([k], [1]) == 1 for k in keys)
    r.script_flush()
    barrier = threading.Barrier(8)

    def call(k: str) -> int:
        barrier.wait() if keys.index(k) < 8 else None
        return int(gc([k], [1]))

    with ThreadPoolExecutor(8) as pool:
        assert list(pool.map(call, keys)) == [2] * 16  # refused (NOSCRIPT), loaded, sent again: never twice
    assert [int(r.get(k)) for k in keys] == [2] * 16


@pytest.mark.parametrize("args", [
    ("EVALSHA", "a" * 40, 2, "k:1", "k:2", '{"text":"中文 😀"}', 45000, 1733450000.123456, b"\x00raw", ""),
    ("WAIT", 1, 500),
])
def test_the_python_packer_writes_what_hiredis_writes(args: tuple[object, ...]) -> None:
    hiredis = pytest.importorskip("hiredis")
    assert pack_python(args) == hiredis.pack_command(args)
