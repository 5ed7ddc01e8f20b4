"""Scenario 16: Sentinel failover mid-load. A stack of its own on a primary, a replica and three sentinels
(sandbox/redis_ha.py); the primary is SIGKILLed while events stream in, then the new one while the
replication stream is stalled (only acknowledgements that waited for a replica survive that)."""

from __future__ import annotations

import time
from typing import Any

import redis

from chaos.load import p2p_targets
from chaos.measure import Leaks
from chaos.report import Result
from chaos.scenarios.base import Context, scenario
from chaos.scenarios.outages import sending, wait_accepted
from chaos.stack import Host, Stack
from sandbox.redis_ha import SentinelRig
from state.store import rq_client, state_client


class SentinelHost(Host):
    def registered_workers(self) -> list[int]:
        from rq import Worker

        live = set(self.rq_workers())
        conn = rq_client(self.stack.redis_url)  # a sentinel URL: redis.Redis.from_url cannot read it
        try:
            return [w.pid for w in Worker.all(connection=conn) if w.pid in live]
        finally:
            conn.close()


class SentinelStack(Stack):
    """The chaos stack with REDIS_URL=redis+sentinel://… (the service accepts that form) on the rig."""

    def __init__(self, rig: SentinelRig, **kw: Any) -> None:
        super().__init__(**kw)
        self.rig = rig
        self.hosts = [SentinelHost(self, 1, self.services, self.port)]

    def start_redis(self) -> None:
        self.redis_url = self.rig.url()

    def redis_pid(self) -> int | None:
        return None

    def stop_redis(self, kill: bool = False, timeout: float = 15.0) -> None:
        if self._r is not None:
            self._r.close()

    @property
    def r(self) -> redis.Redis:
        if self._r is None:
            self._r = state_client(self.redis_url)
        return self._r


@scenario(16, "Sentinel failover mid-load (primary SIGKILLed, then again with replication stalled)")
def sentinel_failover(ctx: Context, result: Result) -> None:
    count, rate, routes = ctx.size(120, 400), ctx.size(15, 25), ctx.size(8, 20)
    result.size = f"{count} msgs / {routes} routes, 2 failovers"
    with SentinelRig() as rig, SentinelStack(rig, workers=ctx.stack.concurrency) as stack:
        stack.claude.set_delay(0.2)
        run_ctx = Context(stack, ctx.quick, ctx.seed, Leaks(stack), ctx.rng)
        run = run_ctx.run(result, dup_rate=0.05)
        try:
            thread = sending(run.sender, p2p_targets(routes, "s16"), rate, count)
            wait_accepted(run.sender, count // 4)
            first = rig.kill_master()
            second = rig.wait_failover(first)
            rig.restart(first)
            run.phase(f"failover 1 in {rig.failovers[-1][2]:.1f}s, old primary back as replica")
            wait_accepted(run.sender, count * 2 // 3)
            rig.stall_replication()
            time.sleep(1.5)
            rig.kill_master()
            third = rig.wait_failover(second)
            run.phase(f"failover 2 (replication stalled) in {rig.failovers[-1][2]:.1f}s")
            thread.join()
            run.settle(idle_timeout=ctx.size(30, 60))
            refused = sum(1 for e in run.sender.events for p in e.posts if p.status != 200)
            result.check("the web refused events it could not store durably", refused >= 1,
                         f"{refused} deliveries answered non-2xx")
            info = _readyz(stack)
            want = f"{third[0]}:{third[1]}"
            result.check("/readyz names the new master and the failover",
                         info.get("master") == want and (info.get("last_failover") or {}).get("to") == want,
                         str({k: info.get(k) for k in ("master", "last_failover", "sentinels_reachable")}))
            result.notes.append(f"failovers took {', '.join(f'{s:.1f}s' for *_, s in rig.failovers)}; "
                                f"{refused} deliveries refused and redelivered")
            run.finish()
        finally:
            run.close()


def _readyz(stack: Stack) -> dict[str, Any]:
    import requests

    try:
        return dict(requests.get(f"{stack.url}/readyz", timeout=10).json().get("redis_ha") or {})
    except (requests.RequestException, ValueError):
        return {}
