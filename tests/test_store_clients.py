"""The state and RQ clients (state/store.py): what a new connection costs the process that opens it."""

from __future__ import annotations

from typing import Any

import pytest
import redis.utils

from state.store import rq_client, state_client


def test_new_connections_do_not_look_up_redis_pys_version(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Left to itself, redis-py reads its own version from the installed package's metadata (~3 ms) for every
    connection a pool opens; a forked work-horse opens several per turn (~12 ms of a ~75 ms turn in
    bench.pipeline). Our clients are given it once per process, so new connections never look it up."""
    looked: list[int] = []
    real = redis.utils.get_lib_version

    def counting() -> Any:
        looked.append(1)
        return real()

    monkeypatch.setattr(redis.utils, "get_lib_version", counting)
    for client in (state_client(redis_url), rq_client(redis_url)):
        pool = client.connection_pool
        held = [pool.get_connection() for _ in range(3)]  # three at once: each one new
        for conn in held:
            conn.send_command("PING")
            assert conn.read_response() in ("PONG", b"PONG")
            pool.release(conn)
        assert client.ping()
    assert looked == []
