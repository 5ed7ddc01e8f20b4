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
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, cast
from urllib.parse import quote, unquote

import redis
from redis.backoff import ExponentialWithJitterBackoff, NoBackoff
from redis.retry import Retry
from redis.sentinel import Sentinel

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379
FAILOVERS_KEY = "fb:redis:failovers"  # hash: config epoch → the change a process saw first (deployment-wide)
FAILOVERS_KEPT = 20
SENTINEL_TIMEOUT_S = 0.5  # one sentinel's answer; a dead one must not hold a request for long


class SentinelConfigError(ValueError):
    """A Sentinel setting or URL that cannot work; raised at start-up."""


@dataclass(frozen=True)
class Target:
    """Where the data lives: the sentinels to ask, the master's name and the data nodes' credentials."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    password: str | None = None
    username: str | None = None
    db: int = 0

    def url(self) -> str:
        auth = ""
        if self.password is not None or self.username:
            auth = f"{quote(self.username or '', safe='')}:{quote(self.password or '', safe='')}@"
        hosts = ",".join(f"{_host_part(h)}:{p}" for h, p in self.sentinels)
        db = f"/{self.db}" if self.db else ""
        return f"{SCHEME}://{auth}{hosts}/{quote(self.master, safe='')}{db}"

    def describe(self) -> str:
        """The URL without credentials, fit for logs and /readyz."""
        return Target(self.sentinels, self.master, db=self.db).url()


def _host_part(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def parse_address(text: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`, or a bare host with the sentinel port)."""
    text = text.strip()
    if not text:
        raise SentinelConfigError("an empty sentinel address")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise SentinelConfigError(f"sentinel address {text!r} is not host:port")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise SentinelConfigError(f"sentinel address {text!r}: write an IPv6 host as [host]:port")
    else:
        host, port_text = text, ""
    if not host or any(c in host for c in "/@,? "):
        raise SentinelConfigError(f"sentinel address {text!r} is not host:port")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SentinelConfigError(f"sentinel address {text!r} has no valid port")
    return host, int(port_text)


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(SCHEME + "://")


def parse_url(url: str) -> Target:
    if not is_sentinel_url(url):
        raise SentinelConfigError(f"not a {SCHEME}:// URL")
    rest = url[len(SCHEME) + 3:]
    netloc, _, path = rest.partition("/")
    path, _, _query = path.partition("?")
    username = password = None
    if "@" in netloc:
        auth, _, netloc = netloc.rpartition("@")
        user_text, sep, pass_text = auth.partition(":")
        username = unquote(user_text) or None
        password = unquote(pass_text) if sep else None
    sentinels = tuple(parse_address(part) for part in netloc.split(",") if part.strip())
    if not sentinels:
        raise SentinelConfigError(f"{SCHEME}:// URL names no sentinel (host:port,host:port)")
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts:
        raise SentinelConfigError(f"{SCHEME}:// URL names no master: {SCHEME}://host:port,host:port/<master>")
    if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise SentinelConfigError(f"{SCHEME}:// URL path must be /<master>[/<db>]")
    return Target(sentinels, parts[0], password, username, int(parts[1]) if len(parts) == 2 else 0)


def target_of(sentinels: Sequence[str], master: str | None, password: str | None = None) -> Target:
    """From REDIS_SENTINELS / REDIS_SENTINEL_MASTER / REDIS_PASSWORD."""
    if not sentinels:
        raise SentinelConfigError("REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is empty")
    if not master or not master.strip():
        raise SentinelConfigError("REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER (the master's name) is not")
    return Target(tuple(parse_address(s) for s in sentinels), master.strip(), password or None)


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
        name = f"{_host_part(host)}:{port}"
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
