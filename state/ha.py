"""Redis through Sentinel: the `redis+sentinel://` URL every process passes around, clients that follow
the master across a failover, the failovers processes saw, and what /readyz shows about them.

URL form (the de-facto one; redis-py itself has no Sentinel URL):
`redis+sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/<db>]`, sentinel port 26379
when left out. The password is the data nodes' (`REDIS_PASSWORD`); sentinels without AUTH are assumed.

Clients come from `Sentinel.master_for`: every new connection asks the sentinels for the master's address
(redis-py's SentinelConnectionPool), a connection to a demoted master fails with READONLY and is dropped,
and the pools reset themselves in a forked child (pid check), so web threads, the sweeper, RQ workers and
their work-horses all follow a failover without restarting.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any, cast

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

from core.sentinel_url import (  # noqa: F401  (the URL forms live in the ground; used here and re-exported)
    DEFAULT_PORT,
    SCHEME,
    SentinelConfigError,
    Target,
    host_part,
    is_sentinel_url,
    parse_address,
    parse_url,
    target_of,
)

FAILOVERS_KEY = "fb:redis:failovers"  # hash: config epoch → the change a process saw first (deployment-wide)
FAILOVERS_KEPT = 20
SENTINEL_TIMEOUT_S = 0.5  # one sentinel's answer; a dead one must not hold a request for long


# -- clients ----------------------------------------------------------------------------------------------


class ObservedSentinel(Sentinel):
    """redis-py's Sentinel that also notices when the master it hands out changes, and records the change
    once in Redis (first observer wins, keyed by the new config epoch) for /readyz."""

    def __init__(self, target: Target) -> None:
        # Sentinel queries: short timeouts and no retries, the next sentinel is the retry.
        sentinel_kwargs = {"socket_timeout": SENTINEL_TIMEOUT_S, "socket_connect_timeout": SENTINEL_TIMEOUT_S,
                           "retry": Retry(NoBackoff(), 0)}
        super().__init__(list(target.sentinels), sentinel_kwargs=sentinel_kwargs)
        self.target = target
        self.last: tuple[str, int] | None = None
        self._epoch: dict[str, int] = {}
        self._lock = threading.Lock()

    def check_master_state(self, state: dict[str, Any], service_name: str) -> bool:
        ok = bool(super().check_master_state(state, service_name))
        if ok:
            self._epoch[service_name] = int(state.get("config-epoch", 0) or 0)
        return ok

    def discover_master(self, service_name: str) -> tuple[str, int]:
        address = super().discover_master(service_name)
        address = (str(address[0]), int(address[1]))
        with self._lock:
            previous, self.last = self.last, address
        if previous is not None and previous != address:
            self._record(previous, address, self._epoch.get(service_name, 0))
        return address

    def _record(self, old: tuple[str, int], new: tuple[str, int], epoch: int) -> None:
        """Best effort, on a connection of its own (we are inside a pool's connect)."""
        entry = {"from": f"{old[0]}:{old[1]}", "to": f"{new[0]}:{new[1]}", "epoch": epoch,
                 "seen_at": round(time.time(), 3)}
        with contextlib.suppress(redis.RedisError, OSError):
            r = redis.Redis(new[0], new[1], password=self.target.password, username=self.target.username,
                            socket_timeout=1, socket_connect_timeout=1, retry=Retry(NoBackoff(), 0))
            try:
                if r.hsetnx(FAILOVERS_KEY, str(epoch), json.dumps(entry)):
                    fields = sorted(r.hkeys(FAILOVERS_KEY), key=lambda f: int(f) if f.isdigit() else 0)
                    if len(fields) > FAILOVERS_KEPT:
                        r.hdel(FAILOVERS_KEY, *fields[:-FAILOVERS_KEPT])
            finally:
                r.close()


@dataclass
class _Managers:
    by_target: dict[Target, ObservedSentinel] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


_managers = _Managers()


def manager(target: Target) -> ObservedSentinel:
    """One Sentinel manager per target and process (a forked child inherits it; its pools reset on use)."""
    with _managers.lock:
        found = _managers.by_target.get(target)
        if found is None:
            found = _managers.by_target[target] = ObservedSentinel(target)
        return found


def failover_retry() -> Retry:
    """Commands retry across the failover window (old master refused → no master → new master) for ~2 s.

    Each attempt reconnects through the sentinels. Bounded so that a web request still answers 503 well
    inside Feishu's 3 s deadline when no master turns up."""
    return Retry(ExponentialWithJitterBackoff(base=0.05, cap=0.4), 6)


def master_client(url: str, *, decode_responses: bool, **kwargs: Any) -> redis.Redis:
    target = parse_url(url)
    return manager(target).master_for(
        target.master, password=target.password, username=target.username, db=target.db,
        decode_responses=decode_responses, retry=failover_retry(), **kwargs)


# -- /readyz ----------------------------------------------------------------------------------------------


def report(url: str, r: redis.Redis) -> dict[str, Any]:
    """The master the sentinels name now, which sentinels answer, the master's replicas, the failovers
    seen; `problems` lists what makes the deployment less safe than configured (status degraded)."""
    target = parse_url(url)
    sentinels: dict[str, str] = {}
    master: dict[str, Any] | None = None
    for host, port in target.sentinels:
        name = f"{host_part(host)}:{port}"
        s = redis.Redis(host, port, socket_timeout=SENTINEL_TIMEOUT_S, socket_connect_timeout=SENTINEL_TIMEOUT_S,
                        retry=Retry(NoBackoff(), 0), decode_responses=True)
        try:
            state = cast(dict[str, Any], s.sentinel_master(target.master))
            sentinels[name] = "ok"
            if master is None or int(state.get("config-epoch", 0)) > int(master.get("config-epoch", 0)):
                master = state
        except redis.ResponseError as exc:
            sentinels[name] = f"does not know {target.master!r}: {exc}"
        except (redis.RedisError, OSError) as exc:
            sentinels[name] = f"unreachable ({exc.__class__.__name__})"
        finally:
            s.close()
    reachable = sum(1 for v in sentinels.values() if v == "ok")
    problems = []
    if reachable * 2 <= len(target.sentinels):
        problems.append(f"only {reachable} of {len(target.sentinels)} sentinels answer: no failover is possible")
    out: dict[str, Any] = {"mode": "sentinel", "master_name": target.master, "sentinels": sentinels,
                           "sentinels_reachable": reachable}
    if master is not None:
        out["master"] = f"{master['ip']}:{master['port']}"
        out["config_epoch"] = int(master.get("config-epoch", 0))
        flags = master["flags"]
        out["master_flags"] = sorted(flags) if isinstance(flags, set) else str(flags).split(",")
    served = getattr(r.connection_pool, "master_address", None)  # the address this process talks to
    if served:
        out["connected_to"] = f"{served[0]}:{served[1]}"
    info = r.info("replication")
    replicas = int(info.get("connected_slaves", 0))
    out["replicas_connected"] = replicas
    if replicas == 0:
        problems.append("no replica connected: events are acknowledged on one node and a failover would lose "
                        "the latest writes")
    failovers = [json.loads(v) for v in r.hvals(FAILOVERS_KEY)]
    failovers.sort(key=lambda e: (e.get("epoch", 0), e.get("seen_at", 0)))
    out["failovers"] = failovers[-5:]
    out["last_failover"] = failovers[-1] if failovers else None
    out["problems"] = problems
    return out
