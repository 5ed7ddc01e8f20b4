"""The bot's own open_id and name: fetched from `bot/v3/info` at start-up, cached in Redis, only read on requests."""

from __future__ import annotations

import logging
import time

import redis

from core.keys import Keys
from feishu.client import FeishuApi

log = logging.getLogger(__name__)
TTL_S = 7 * 86400


def cached_open_id(r: redis.Redis, keys: Keys) -> str | None:
    value = r.get(keys.bot_open_id)
    return str(value) if value else None


class CachedOpenId:
    """The request path's view of the identity: Redis, remembered in-process for a few seconds when known."""

    def __init__(self, r: redis.Redis, keys: Keys, ttl: float = 10.0) -> None:
        self.r, self.keys, self.ttl = r, keys, ttl
        self._value: str | None = None
        self._until = 0.0

    def get(self) -> str | None:
        now = time.monotonic()
        if self._value is None or now >= self._until:
            self._value = cached_open_id(self.r, self.keys)  # unknown is never remembered: fail closed
            self._until = now + self.ttl
        return self._value


def refresh(api: FeishuApi, r: redis.Redis, keys: Keys) -> str:
    info = api.bot_info()
    pipe = r.pipeline()
    pipe.set(keys.bot_open_id, info["open_id"], ex=TTL_S)
    pipe.set(keys.bot_name, info["app_name"], ex=TTL_S)
    pipe.execute()
    log.info("bot identity cached", extra={"status": "ok"})
    return info["open_id"]


def cached_name(r: redis.Redis, keys: Keys) -> str:
    """The bot's app name as its members see it ("" until the identity was fetched): the system prompt names it."""
    return str(r.get(keys.bot_name) or "")
