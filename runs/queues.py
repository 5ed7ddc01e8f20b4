"""Enqueueing drain runs on RQ: JSON payloads, addressed by import path, always with a Retry."""

from __future__ import annotations

import redis
from rq import Queue, Retry
from rq.job import Job
from rq.serializers import JSONSerializer

from core.keys import route_tag

DRAIN = "jobs.drain.drain"
JOB_TIMEOUT_S = 3600  # a backstop only: the watchdog breaks runs past RUN_BUDGET_SECONDS per batch


def rq_queue_name(profile: str, name: str) -> str:
    """RQ queues are per profile too: a worker holds one bot's credentials and must never run another's routes."""
    return f"{profile}-{name}"


def job_id(route_key: str, kick_token: str) -> str:
    return f"run-{route_tag(route_key)}-{kick_token[:12]}"


def rq_job_key_prefix(route_key: str) -> str:
    """The Redis key of a route's drain job, up to the kick token's first 12 characters (KICK reads its status)."""
    return f"{Job.redis_job_namespace_prefix}{job_id(route_key, '')}"


def enqueue_drain(connection: redis.Redis, profile: str, queue_name: str, route_key: str, kick_token: str) -> str:
    """One drain run for `route_key`; the kick token lets this run take the route's lease.

    Failures inside a run are retried by the run itself (a backoff lease and a delayed kick that the
    sweeper dispatches), never by RQ's scheduler, whose lock a restarted worker can take minutes to
    win back. RQ's `Retry` (immediate, no interval) only covers a work-horse that died.
    """
    q = Queue(rq_queue_name(profile, queue_name), connection=connection, serializer=JSONSerializer)
    jid = job_id(route_key, kick_token)
    q.enqueue(DRAIN, {"route_key": route_key, "kick_token": kick_token}, job_id=jid, retry=Retry(max=2),
              job_timeout=JOB_TIMEOUT_S, result_ttl=60, failure_ttl=7 * 86400, description=f"drain {route_key}")
    return jid
