"""A Redis lock per Bitable table: Bitable refuses concurrent writes to one table (1254291), across all processes."""

from __future__ import annotations

import random
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from bitable.errors import SOURCE, BitableRetryable

# Compare-and-delete: a holder whose TTL ran out must not release the next holder's lock.
RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def lock_key(app_token: str, table_id: str) -> str:
    # Not under the profile's prefix on purpose: two bot profiles on one Redis writing one table must
    # still take turns, Bitable's rule is per table whoever writes.
    return f"fb:bitable:lock:{app_token}:{table_id}"


class TableLock:
    """SET NX PX with a random token; waits in short jittered sleeps up to `wait_s`, then Retryable."""

    def __init__(self, r: redis.Redis, key: str, *, ttl_s: float, wait_s: float, poll_s: float = 0.02) -> None:
        self.r, self.key = r, key
        self.ttl_ms = max(1, int(ttl_s * 1000))
        self.wait_s, self.poll_s = wait_s, poll_s
        self._release = r.register_script(RELEASE)

    @contextmanager
    def held(self) -> Iterator[None]:
        token = secrets.token_hex(16)
        deadline = time.monotonic() + self.wait_s
        while not self.r.set(self.key, token, nx=True, px=self.ttl_ms):
            if time.monotonic() >= deadline:
                raise BitableRetryable(f"bitable write lock {self.key} busy for {self.wait_s:.0f} s",
                                       source=SOURCE, code="lock_busy")
            time.sleep(self.poll_s * random.uniform(0.5, 1.5))  # jitter: waiters do not poll in step
        try:
            yield
        finally:
            self._release(keys=[self.key], args=[token])
