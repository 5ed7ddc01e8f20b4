"""The bot's own open_id: fetched from `bot/v3/info` at start-up, cached in Redis, only read on requests."""

from __future__ import annotations

import logging

import redis

from bot.feishu import FeishuApi
from memory.keys import Keys

log = logging.getLogger(__name__)
TTL_S = 7 * 86400


def cached_open_id(r: redis.Redis, keys: Keys) -> str | None:
    value = r.get(keys.bot_open_id)
    return str(value) if value else None


def refresh(api: FeishuApi, r: redis.Redis, keys: Keys) -> str:
    open_id = api.bot_open_id()
    r.set(keys.bot_open_id, open_id, ex=TTL_S)
    log.info("bot identity cached", extra={"status": "ok"})
    return open_id
