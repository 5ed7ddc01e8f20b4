"""Scenario 10: sustained load with a slow model; the backlog drains, ingest stays fast, worker memory flat."""

from __future__ import annotations

import threading
import time

from chaos.load import p2p_targets
from chaos.report import Result
from chaos.scenarios.base import Context, scenario
from chaos.stack import Stack

P99_LIMIT_MS = 50.0


class Sampler(threading.Thread):
    """Every `every` seconds: PSS of the long-lived worker processes and of busy horses, and the backlog."""

    def __init__(self, stack: Stack, every: float) -> None:
        super().__init__(daemon=True, name="chaos-sampler")
        self.stack, self.every = stack, every
        self.stopped = threading.Event()
        self.samples: list[dict[str, float]] = []
        self.t0 = time.monotonic()

    def run(self) -> None:
        while not self.stopped.wait(self.every):
            try:
                mem = self.stack.worker_memory()
                dirty = self.stack.r.zcard(self.stack.keys.dirty)
            except Exception:  # a process exited between listing and reading
                continue
            self.samples.append({"t": round(time.monotonic() - self.t0, 1), "dirty": dirty, **mem})

    def stop(self) -> None:
        self.stopped.set()
        self.join(5)


def slope_mb_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (seconds, kB) points, in MB per minute."""
    n = len(points)
    if n < 2:
        return 0.0
    mx, my = sum(x for x, _ in points) / n, sum(y for _, y in points) / n
    var = sum((x - mx) ** 2 for x, _ in points)
    return 0.0 if var == 0 else sum((x - mx) * (y - my) for x, y in points) / var * 60 / 1024


def trend(samples: list[dict[str, float]], kind: str) -> tuple[float, float, float]:
    """(mean of the first quarter, of the last quarter, slope) of one memory kind, in MB and MB/min."""
    points = [(s["t"], s[kind]) for s in samples]
    q = max(1, len(points) // 4)
    first, last = sum(y for _, y in points[:q]) / q, sum(y for _, y in points[-q:]) / q
    return first / 1024, last / 1024, slope_mb_per_min(points)


def memory_verdict(samples: list[dict[str, float]]) -> tuple[bool, str]:
    """Flat: the resident memory (RSS) of the long-lived worker processes ends within max(8 MB, 1 %) of where it
    started. USS and PSS are reported too, not judged: copy-on-write pages the RQ workers share with the
    supervisor turn private as Python touches them (USS rises, RSS does not), and PSS moves as horses come and go."""
    samples = [s for s in samples if s["processes"] > 1]
    if len(samples) < 4:
        return False, f"only {len(samples)} memory samples"
    first, last, _ = trend(samples, "rss")
    ok = last - first <= max(8.0, 0.01 * first)
    shown = "; ".join(f"{kind.upper()} {a:.0f} → {b:.0f} MB ({m:+.1f} MB/min)"
                      for kind in ("uss", "pss", "rss") for a, b, m in [trend(samples, kind)])
    return ok, (f"supervisor + {int(samples[-1]['processes']) - 1} RQ workers over {samples[-1]['t']:.0f}s "
                f"({len(samples)} samples): {shown}")


@scenario(10, "sustained load, slow model")
def sustained(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    rate, seconds, routes = ctx.size(20, 50), ctx.size(8, 60), ctx.size(40, 100)
    result.size = f"{rate}/s x {seconds}s / {routes} routes, model 1 s, {stack.concurrency} workers"
    stack.claude.set_delay(1.0)
    run = ctx.run(result, threads=24)
    model_from = len(stack.claude.requests_since(0))
    sampler = Sampler(stack, every=ctx.size(1, 2))
    sampler.start()
    try:
        run.sender.open_loop(p2p_targets(routes, "s10"), rate=rate, count=rate * seconds)
        run.phase("sending")
        drained = run.settle(idle_timeout=ctx.size(60, 180))
        sampler.stop()
        run.finish()
        calls = len(stack.claude.requests_since(model_from))
        c = result.counts
        result.check("backlog drained", drained)
        result.check(f"p99 ingest < {P99_LIMIT_MS:g} ms", c.p99_ms is not None and c.p99_ms < P99_LIMIT_MS,
                     f"p99 {c.p99_ms} ms", timed=True)
        ok, detail = memory_verdict(sampler.samples)
        result.check("worker memory flat", ok, detail)
        peak = max((s["dirty"] for s in sampler.samples), default=0)
        result.notes.append(f"{calls} model calls for {c.sent} events ({c.sent / max(calls, 1):.1f} per batch); "
                            f"peak routes with work {peak}; {detail}")
        result.extra["memory"] = sampler.samples
    finally:
        sampler.stop()
        run.close()
