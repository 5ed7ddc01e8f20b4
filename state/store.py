"""Redis connections: a text client for our state and a bytes client for RQ (RQ breaks on decoded replies).

Every process passes one URL string around: `redis://…`/`unix://…` for a single server, or
`redis+sentinel://h1:p1,h2:p2/<master>` (state/ha.py) for a Sentinel-managed primary; both
`state_client` and `rq_client` understand either.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import redis
from redis.client import Pipeline
from redis.driver_info import DriverInfo

from core.settings import Settings
from state import ha as sentinel
from state.embedded import ensure_server

log = logging.getLogger(__name__)

# What every connection tells the server about its client (CLIENT SETINFO), looked up once per process: left to
# itself, redis-py reads its own version from the installed package's metadata (importlib.metadata, ~3 ms) for each
# connection a pool opens, and a forked work-horse opens several per turn (~12 ms of a ~75 ms turn, bench.pipeline).
DRIVER = DriverInfo()

# How long an acknowledgement waits for a replica to confirm a write (WAIT 1 <ms>); see ReplicaWait.
REPLICA_WAIT_MS = 500
REPLICAS_REFRESH_S = 1.0


def resolve_url(settings: Settings) -> str:
    """REDIS_SENTINELS + REDIS_SENTINEL_MASTER (+ REDIS_PASSWORD) → a sentinel URL; else REDIS_URL (which
    may itself be a sentinel URL); else the embedded server under VAR_DIR."""
    if settings.redis_sentinels or settings.redis_sentinel_master:
        password = settings.secret("redis_password") or None
        return sentinel.target_of(settings.redis_sentinels, settings.redis_sentinel_master, password).url()
    if settings.redis_url and sentinel.is_sentinel_url(settings.redis_url):
        sentinel.parse_url(settings.redis_url)  # a bad URL stops the process at start-up, with the reason
    return settings.redis_url or ensure_server(settings.var_dir)


def sentinel_url(settings: Settings) -> str | None:
    """The sentinel URL when the settings name a Sentinel-managed primary, else None."""
    if settings.redis_sentinels or (settings.redis_url and sentinel.is_sentinel_url(settings.redis_url)):
        return resolve_url(settings)
    return None


def state_client(url: str) -> redis.Redis:
    if sentinel.is_sentinel_url(url):
        return sentinel.master_client(url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2,
                                      health_check_interval=30, driver_info=DRIVER)
    return redis.Redis.from_url(
        url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2, health_check_interval=30,
        driver_info=DRIVER,
    )


def rq_client(url: str) -> redis.Redis:
    if sentinel.is_sentinel_url(url):
        return sentinel.master_client(url, decode_responses=False, socket_connect_timeout=2,
                                      health_check_interval=30, driver_info=DRIVER)
    return redis.Redis.from_url(url, socket_connect_timeout=2, health_check_interval=30, driver_info=DRIVER)


class NotReplicated(redis.ConnectionError):
    """A replica is connected but did not confirm the write in time: not acknowledged (503, redelivered)."""


class ReplicaWait:
    """Durability across a failover: Redis replicates asynchronously, so a write the primary confirmed can
    die with it. When replicas are connected, a `WAIT 1 <ms>` sent after the writes on the same connection
    (one pipeline, so one round trip) holds the acknowledgement until one replica has them.

    With no replica connected (a single server, or the replica lost) nothing waits: the write is as safe as
    the one node that has it, and /readyz says so. The count comes from INFO replication, re-read at most
    every REPLICAS_REFRESH_S and at once after a WAIT fell short."""

    def __init__(self, r: redis.Redis, timeout_ms: int = REPLICA_WAIT_MS,
                 refresh_s: float = REPLICAS_REFRESH_S) -> None:
        self.r, self.timeout_ms, self.refresh_s = r, timeout_ms, refresh_s
        self._replicas = 0
        self._checked = float("-inf")
        self._lock = threading.Lock()

    def wanted(self) -> bool:
        now = time.monotonic()
        if now - self._checked >= self.refresh_s:
            with self._lock:
                if now - self._checked >= self.refresh_s:
                    self._replicas = self._count()
                    self._checked = time.monotonic()
        return self._replicas > 0

    def _count(self) -> int:
        try:
            info = self.r.info("replication")
        except redis.ResponseError:  # a managed Redis may refuse INFO: then we cannot know, and do not wait
            return 0
        if info.get("role") != "master":
            return 0
        return int(info.get("connected_slaves", 0))

    def add(self, pipe: Pipeline) -> bool:
        """Append the WAIT to a pipeline whose writes it should cover; False when none is wanted."""
        if not self.wanted():
            return False
        pipe.execute_command("WAIT", 1, self.timeout_ms)
        return True

    def confirmed(self, acked: Any) -> bool:
        """The WAIT's answer; a shortfall makes the next call re-read the replica count."""
        if isinstance(acked, int) and acked >= 1:
            return True
        self._checked = float("-inf")
        return False

    def script(self, script: Any, keys: list[Any], args: list[Any]) -> Any:
        """Run a registered script, then wait for a replica on the same connection. A shortfall is logged,
        not raised: used where the caller's next step is slow anyway (a run's TAKE before its model call)."""
        pipe = self.r.pipeline(transaction=False)
        script(keys, args, client=pipe)
        waited = self.add(pipe)
        results = pipe.execute()
        if waited and not self.confirmed(results[-1]):
            log.warning("no replica confirmed a write within %d ms", self.timeout_ms)
        return results[0]


def server_checks(r: redis.Redis) -> dict[str, str]:
    """What a production Redis needs for our guarantees: "ok", or what is wrong (managed Redis may hide CONFIG)."""
    checks = {}
    if r.info("persistence").get("aof_enabled"):
        checks["persistence"] = "ok"
    else:  # snapshots alone lose every event acknowledged since the last one
        checks["persistence"] = "appendonly is off: events acknowledged to Feishu can be lost in a crash"
    policy = r.info("memory").get("maxmemory_policy", "unknown")
    checks["eviction"] = "ok" if policy == "noeviction" else f"maxmemory-policy is {policy}, not noeviction"
    return checks
