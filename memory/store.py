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
