"""The deliveries log the console shows: each request to a webhook with its outcome and why, newest first.

Accepted deliveries are logged by the run that fans them out (with what they came to: items told, no watch, not the
head); ignored and duplicate ones by the web, refused ones (bad signature or token, malformed) by the web into a list
of their own, so forgeries cannot push real deliveries out. Both lists keep the newest KEPT entries for TTL_S; an
entry holds no body, no signature, no token: the provider, event, delivery id, repository, outcome and reason.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from codehost import keys as ck
from core.keys import Keys

KEPT, TTL_S = 500, 7 * 86400
ACCEPTED, IGNORED, DUPLICATE, REFUSED = "accepted", "ignored", "duplicate", "refused"


def note(r: redis.Redis, keys: Keys, outcome: str, reason: str, **fields: Any) -> None:
    """One entry (one round trip); never raises: the request's answer does not depend on its log."""
    entry = {"at": round(time.time(), 3), "outcome": outcome, "reason": reason[:200],
             **{k: str(v)[:200] for k, v in fields.items()}}
    key = ck.refusals(keys) if outcome == REFUSED else ck.deliveries(keys)
    pipe = r.pipeline()  # MULTI/EXEC: the list never without its expiry
    pipe.lpush(key, json.dumps(entry, ensure_ascii=False))
    pipe.ltrim(key, 0, KEPT - 1)
    pipe.expire(key, TTL_S)
    try:
        pipe.execute()
    except redis.RedisError:
        return


def recent(r: redis.Redis, keys: Keys, most: int = 200) -> list[dict[str, Any]]:
    """Both lists merged, newest first."""
    pipe = r.pipeline(transaction=False)
    pipe.lrange(ck.deliveries(keys), 0, most - 1)
    pipe.lrange(ck.refusals(keys), 0, most - 1)
    entries = []
    for raw in [x for got in pipe.execute() for x in got]:
        try:
            entries.append(json.loads(raw))
        except ValueError:
            continue
    return sorted(entries, key=lambda e: -float(e.get("at") or 0))[:most]
