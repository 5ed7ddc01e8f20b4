"""Enqueueing drain runs on RQ: JSON payloads, addressed by import path, always with a Retry."""

from __future__ import annotations

from datetime import timedelta

import redis
from rq import Queue, Retry
from rq.serializers import JSONSerializer

from memory.keys import route_tag

DRAIN = "jobs.drain.drain"
JOB_TIMEOUT_S = 900


def rq_queue_name(profile: str, name: str) -> str:
    """RQ queues are per profile too: a worker holds one bot's credentials and must never run another's routes."""
    return f"{profile}-{name}"


def enqueue_drain(connection: redis.Redis, profile: str, queue_name: str, route_key: str, kick_token: str,
                  retry_delays: list[int], delay: float = 0.0) -> str:
    """One drain run for `route_key`; the kick token lets exactly this run take the lease."""
    job_id = f"run-{route_tag(route_key)}-{kick_token[:12]}"
    options = dict(
        job_id=job_id, retry=Retry(max=len(retry_delays), interval=retry_delays),
        job_timeout=JOB_TIMEOUT_S, result_ttl=300, failure_ttl=7 * 86400, description=f"drain {route_key}",
    )
    payload = {"route_key": route_key, "kick_token": kick_token}
    q = Queue(rq_queue_name(profile, queue_name), connection=connection, serializer=JSONSerializer)
    if delay > 0:
        q.enqueue_in(timedelta(seconds=delay), DRAIN, payload, **options)
    else:
        q.enqueue(DRAIN, payload, **options)
    return job_id
