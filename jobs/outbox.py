"""The fenced outbox: every reply carries a deterministic uuid and is recorded once delivered."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

import redis
from lark_oapi.channel.outbound.sender import chunk_text

from bot.feishu import FeishuApi
from memory.keys import Keys

DELIVERED_TTL_S = 2 * 86400


class LeaseLost(Exception):
    """The run no longer owns its route; it must not touch the outside world."""


def reply_uuid(route_key: str, batch_id: str, chunk: int) -> str:
    """Same (route, batch, chunk) → same uuid, so Feishu posts a retried reply at most once."""
    return hashlib.sha256(f"{route_key}|{batch_id}|{chunk}".encode()).hexdigest()[:40]


class Outbox:
    def __init__(self, r: redis.Redis, keys: Keys, feishu: FeishuApi, chunk_chars: int) -> None:
        self.r, self.k, self.feishu, self.chunk_chars = r, keys, feishu, chunk_chars

    def reply(self, route_key: str, batch_id: str, target: str, text: str, *, in_thread: bool,
              fence: Callable[[], bool]) -> list[str]:
        """Post `text` as replies to `target`, skipping chunks already delivered by an earlier run."""
        sent = []
        ledger = self.k.outbox(route_key)
        for i, chunk in enumerate(chunk_text(text, limit=self.chunk_chars) or [text]):
            uid = reply_uuid(route_key, batch_id, i)
            done = self.r.hget(ledger, uid)
            if done:
                sent.append(str(done))
                continue
            if not fence():
                raise LeaseLost(route_key)
            message_id = self.feishu.reply_text(target, chunk, uuid=uid, in_thread=in_thread)
            self.r.hset(ledger, uid, message_id)
            self.r.expire(ledger, DELIVERED_TTL_S)
            sent.append(message_id)
        return sent
