"""Prometheus metrics: ingest outcomes and latency, plus queue state read from Redis at scrape time."""

from __future__ import annotations

import redis
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from memory.keys import Keys

REGISTRY = CollectorRegistry()
EVENTS = Counter("feishu_events_total", "Events received, by outcome and HTTP status",
                 ["outcome", "status"], registry=REGISTRY)
INGEST = Histogram("feishu_ingest_seconds", "Time to answer Feishu",
                   buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0, 3.0), registry=REGISTRY)
DIRTY = Gauge("routes_with_pending_work", "Routes in the dirty set", registry=REGISTRY)
DEAD = Gauge("dead_letters", "Batches in the dead-letter list", registry=REGISTRY)


def observe_ingest(status: int, outcome: str, seconds: float) -> None:
    EVENTS.labels(outcome, str(status)).inc()
    INGEST.observe(seconds)


def render(r: redis.Redis, keys: Keys) -> bytes:
    try:
        DIRTY.set(r.zcard(keys.dirty))
        DEAD.set(r.llen(keys.dead_letters))
    except redis.RedisError:
        pass  # metrics must render even while Redis is down
    return generate_latest(REGISTRY)
