"""Prometheus metrics. Counters live in Redis, so they are true across web, worker and sweeper processes;
gauges are read from Redis at scrape time; only the ingest latency histogram is per process.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import Any

import redis
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from core.keys import Keys

REGISTRY = CollectorRegistry()
EVENTS = Counter("feishu_events_total", "Events received by this web process, by outcome and HTTP status",
                 ["outcome", "status"], registry=REGISTRY)
INGEST = Histogram("feishu_ingest_seconds", "Time to answer Feishu (this web process)",
                   buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 3.0), registry=REGISTRY)

# Redis counter field name → (metric name, help, label names). Fields are "name" or "name|v1|v2".
COUNTERS = {
    "events_queued": ("feishu_events_queued_total", "Events stored in a route inbox", ()),
    "dedupe_hits": ("feishu_dedupe_hits_total", "Redeliveries recognised as duplicates", ()),
    "turns": ("turns_total", "Batches answered", ("route_kind",)),
    "retries": ("run_retries_total", "Batches put back for a retry after a failure", ("source", "code")),
    "errors": ("adapter_errors_total", "Model and Open API errors by code", ("source", "code")),
    "tokens": ("model_tokens_total", "Model tokens by route kind", ("route_kind", "type")),
    "dead_lettered": ("dead_lettered_total", "Events moved to the dead-letter list", ()),
    "stuck_runs": ("stuck_runs_total", "Runs the watchdog broke after they exceeded their budget", ()),
    "pauses": ("pauses_total", "Times work paused for an operator (credentials, permissions)", ("component",)),
    "replays": ("dead_letter_replays_total", "Dead letters replayed", ()),
    "rotations": ("session_rotations_total", "Sessions rotated (S1 → S2) because they no longer fit", ("reason",)),
    "timers_set": ("timers_set_total", "Timers set (follow-ups by the model; digests and triage by the service)",
                   ("kind",)),
    "timers_fired": ("timers_fired_total", "Due timers pushed into their routes' inboxes", ("kind",)),
    "timers_cancelled": ("timers_cancelled_total", "Pending timers cancelled, by how", ("by",)),
    "followups": ("followups_total", "Follow-ups that fired, by outcome (posted / skipped)", ("outcome",)),
    "digests": ("digests_total", "Digest runs, by outcome (posted / empty / skipped)", ("outcome",)),
    "triage": ("triage_decisions_total", "Quiet triage decisions by kind (quiet / note / propose / capped)",
               ("decision",)),
    "memory_writes": ("memory_writes_total", "Changes written to memory scopes, by scope kind", ("kind",)),
    "memory_consolidations": ("memory_consolidations_total", "Consolidation runs, by outcome (changed / nothing)",
                              ("outcome",)),
}
OLDEST_SAMPLE = 20


_EVENTS_BY: dict[tuple[str, int], Any] = {}  # (outcome, status) → its counter; looking labels up costs more


def observe_ingest(status: int, outcome: str, seconds: float) -> None:
    counter = _EVENTS_BY.get((outcome, status))
    if counter is None:
        counter = _EVENTS_BY[(outcome, status)] = EVENTS.labels(outcome, str(status))
    counter.inc()
    INGEST.observe(seconds)


def count(r: redis.Redis, keys: Keys, name: str, *labels: str, n: int = 1) -> None:
    """Add `n` to a shared counter; never fails the caller (metrics are not worth a lost turn)."""
    field = "|".join([name, *labels])
    with contextlib.suppress(redis.RedisError):
        r.hincrby(keys.metrics, field, n)


# model_tokens_total's `type` label → the attribute of a model call's usage (claude.client Step / Completion): the
# API's uncached input, output, and input read from and written to the prompt cache.
TOKEN_KINDS = (("input", "input_tokens"), ("output", "output_tokens"), ("cache_read", "cache_read_tokens"),
               ("cache_write", "cache_creation_tokens"))


def count_tokens(r: redis.Redis, keys: Keys, route_kind: str, usage: Any) -> None:
    """A model call's tokens, each kind it used, under its route kind (`compression`, `memory` for those calls)."""
    for kind, attr in TOKEN_KINDS:
        if n := int(getattr(usage, attr, 0) or 0):
            count(r, keys, "tokens", route_kind, kind, n=n)


Gauge = tuple[str, str, str]  # (metric name, help, the sorted set whose size it is): a feature's (turn/registry.py)


class RedisCollector:
    def __init__(self, r: redis.Redis, keys: Keys, gauges: Sequence[Gauge] = ()) -> None:
        self.r, self.keys, self.gauges = r, keys, tuple(gauges)

    def collect(self) -> Iterator[Metric]:
        k = self.keys
        pipe = self.r.pipeline(transaction=False)
        pipe.hgetall(k.metrics)
        pipe.zcard(k.dirty)
        pipe.hlen(k.dead)
        pipe.zcard(k.running)
        pipe.zcard(k.delayed)
        pipe.llen(k.kicks)
        pipe.hgetall(k.paused)
        pipe.hgetall(k.health)
        pipe.smembers("rq:queues")
        pipe.zrange(k.dirty, 0, OLDEST_SAMPLE - 1)
        for _name, _help, zset in self.gauges:
            pipe.zcard(zset)
        counters, dirty, dead, running, delayed, kicks, paused, health, queues, oldest, *sizes = pipe.execute()
        yield from _counters(counters)
        for name, help_, value in (
            ("routes_with_pending_work", "Routes with pending work or a run", dirty),
            ("dead_letters", "Dead letters waiting for an admin", dead),
            ("runs_in_flight", "Runs working on a batch now", running),
            ("delayed_retries", "Retries waiting out their backoff", delayed),
            ("kicks_waiting", "Kick records not yet turned into RQ jobs", kicks),
            *((name, help_, size) for (name, help_, _), size in zip(self.gauges, sizes, strict=True)),
        ):
            yield GaugeMetricFamily(name, help_, value=float(value))
        yield self._queue_depth(queues)
        yield GaugeMetricFamily("oldest_pending_event_age_seconds", "Age of the oldest event not yet answered",
                                value=self._oldest_age(oldest))
        pause = GaugeMetricFamily("paused", "1 while work is paused for an operator", labels=["component"])
        for component in ("model", "feishu"):
            pause.add_metric([component], 1.0 if component in paused else 0.0)
        yield pause
        checks = GaugeMetricFamily("redis_config_ok", "Start-up checks of the Redis server (1 = fine)",
                                   labels=["check"])
        for check, value in health.items():
            checks.add_metric([check], 1.0 if value == "ok" else 0.0)
        yield checks

    def _queue_depth(self, queues: set[str]) -> GaugeMetricFamily:
        depth = GaugeMetricFamily("rq_queue_depth", "Drain jobs waiting in each RQ queue", labels=["queue"])
        prefix = f"rq:queue:{self.keys.profile}-"
        mine = sorted(q for q in queues if q.startswith(prefix))
        if mine:
            pipe = self.r.pipeline(transaction=False)
            for q in mine:
                pipe.llen(q)
            for q, n in zip(mine, pipe.execute(), strict=True):
                depth.add_metric([q[len("rq:queue:"):]], float(n))
        return depth

    def _oldest_age(self, routes: list[str]) -> float:
        """Feishu create_time of the first pending event of the longest-dirty routes (a bounded sample)."""
        if not routes:
            return 0.0
        pipe = self.r.pipeline(transaction=False)
        for rk in routes:
            pipe.lindex(self.keys.proc(rk), 0)
            pipe.lindex(self.keys.inbox(rk), 0)
        times = [_created_ms(raw) for raw in pipe.execute() if raw]
        known = [t for t in times if t]
        return max(0.0, time.time() - min(known) / 1000) if known else 0.0


def _created_ms(raw: str) -> int | None:
    try:
        return int(json.loads(raw).get("create_time") or 0) or None
    except (ValueError, TypeError, AttributeError):
        return None


def _counters(fields: dict[str, str]) -> Iterator[Metric]:
    grouped: dict[str, list[tuple[list[str], float]]] = defaultdict(list)
    for field, value in fields.items():
        name, *labels = field.split("|")
        if name in COUNTERS and len(labels) == len(COUNTERS[name][2]):
            grouped[name].append((labels, float(value)))
    for name, (metric, help_, label_names) in COUNTERS.items():
        family = CounterMetricFamily(metric, help_, labels=list(label_names))
        if not label_names:
            family.add_metric([], sum(v for _, v in grouped.get(name, [])))
        for labels, amount in grouped.get(name, []) if label_names else []:
            family.add_metric(labels, amount)
        yield family


def render(r: redis.Redis, keys: Keys, gauges: Sequence[Gauge] = ()) -> bytes:
    """This process's metrics and the deployment's (counters and gauges shared in Redis, the features' gauges)."""
    local = generate_latest(REGISTRY)
    shared = CollectorRegistry()
    shared.register(RedisCollector(r, keys, gauges))  # type: ignore[arg-type]
    try:
        return local + generate_latest(shared)
    except redis.RedisError:
        return local  # metrics must render even while Redis is down
