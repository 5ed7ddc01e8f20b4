"""Redis connections: a text client for our state and a bytes client for RQ (RQ breaks on decoded replies)."""

from __future__ import annotations

import redis

from bot.settings import Settings
from memory.embedded import ensure_server


def resolve_url(settings: Settings) -> str:
    return settings.redis_url or ensure_server(settings.var_dir)


def state_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(
        url, decode_responses=True, socket_timeout=5, socket_connect_timeout=2, health_check_interval=30
    )


def rq_client(url: str) -> redis.Redis:
    return redis.Redis.from_url(url, socket_connect_timeout=2, health_check_interval=30)


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
