"""Admin alerts: queued in Redis by any process, posted to ADMIN_CHAT_ID by the sweeper (best effort)."""

from __future__ import annotations

import hashlib
import json
import logging
import time

import redis

from runs.runtime import Runtime

log = logging.getLogger(__name__)
KEPT = 200  # alerts waiting to be posted; older ones are dropped (they are in the logs too)
TRIES = 3


def alert(rt: Runtime, text: str) -> None:
    """Queue an alert for the admin chat; a no-op without ADMIN_CHAT_ID. Never fails the caller."""
    if not rt.settings.admin_chat_id:
        return
    record = json.dumps({"text": text, "at": time.time(), "tries": 0}, ensure_ascii=False)
    try:
        pipe = rt.state.pipeline()
        pipe.rpush(rt.keys.alerts, record)
        pipe.ltrim(rt.keys.alerts, -KEPT, -1)
        pipe.execute()
    except redis.RedisError:
        log.warning("alert not queued", extra={"reason": text[:200]})


def post_pending(rt: Runtime, most: int = 20) -> int:
    """Post queued alerts to the admin chat; one that fails is retried a few times, then dropped."""
    chat = rt.settings.admin_chat_id
    if not chat:
        return 0
    posted = 0
    for _ in range(most):
        raw = rt.state.lpop(rt.keys.alerts)
        if not isinstance(raw, str):
            break
        record = json.loads(raw)
        uid = hashlib.sha256(f"alert|{record['text']}|{record['at']}".encode()).hexdigest()[:40]
        try:
            rt.feishu.send_text(chat, record["text"], uuid=uid)
            posted += 1
        except Exception as exc:
            record["tries"] += 1
            if record["tries"] < TRIES:
                rt.state.rpush(rt.keys.alerts, json.dumps(record, ensure_ascii=False))
            log.warning("admin alert not posted", extra={"error": f"{exc.__class__.__name__}: {exc}"})
            break
    return posted
