"""What `/readyz` says and the console's overview shows: the service's status and every reason behind it.

Redis only (no Open API or model call): paused work, Redis' own checks, dead letters, the items table, the
capabilities turned off, the preflight (missing rows first; the console shows every row), Sentinel, timers.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import redis

from bitable import keys as item_keys
from core.keys import Keys
from core.settings import Settings
from feishu import capabilities
from items import item_settings
from state import ha as sentinel
from state.store import sentinel_url
from timers import keys as timer_keys
from timers import timer_settings
from triage import triage_settings

log = logging.getLogger(__name__)


class Unavailable(Exception):
    """Redis did not answer."""


def snapshot(settings: Settings, r: redis.Redis, keys: Keys) -> dict[str, Any]:
    """The /readyz body (`status` ready or degraded, and why); raises Unavailable when Redis does not answer.
    `preflight.rows` holds every row the doctor checked (verdicts and fixes); /readyz leaves them out."""
    try:
        pipe = r.pipeline(transaction=False)
        pipe.hgetall(keys.paused)
        pipe.hgetall(keys.health)
        pipe.hlen(keys.dead)
        pipe.hgetall(item_keys.bitable_status(keys))
        pipe.get(keys.preflight)
        pipe.zcard(timer_keys.timers_due(keys))
        pipe.zrange(timer_keys.timers_due(keys), 0, 0, withscores=True)
        paused, checks, dead, table, preflight, timers, first_due = pipe.execute()
        off = capabilities.off(r, keys)
    except Exception as exc:
        raise Unavailable(exc.__class__.__name__) from exc
    paused = {name: json.loads(reason) for name, reason in paused.items()}
    unsafe = {name: verdict for name, verdict in checks.items() if verdict != "ok"}
    table_bad = _table_bad(table)
    preflight = json.loads(preflight) if preflight else None
    lacking = bool(preflight and preflight.get("missing"))
    ha = _redis_ha(settings, r)
    ha_bad = bool(ha and ha.get("problems"))
    full = timers >= timer_settings(settings).followups_max_pending  # new follow-ups are refused until some fire or end
    status = "degraded" if paused or unsafe or table_bad or off or lacking or ha_bad or full else "ready"
    return dict(status=status, redis=True, paused=paused, redis_checks=checks, dead_letters=dead,
                bitable=table or None, capabilities_off=off, preflight=preflight, redis_ha=ha,
                always_on=_always_on(settings, timers, first_due))


def reasons(snap: dict[str, Any]) -> list[str]:
    """Why the status is degraded, one short line each (the console's overview). Pure."""
    out = [f"paused: {name} ({why.get('reason') or why.get('code') or ''})" for name, why in snap["paused"].items()]
    out += [f"Redis {name}: {verdict}" for name, verdict in snap["redis_checks"].items() if verdict != "ok"]
    table = snap.get("bitable") or {}
    if _table_bad(table):
        out.append(f"items table: schema {table.get('schema')}, subscription {table.get('subscription', 'ok')}")
    out += [f"capability off: {name}" for name in snap["capabilities_off"]]
    out += [f"preflight missing: {row['feature']} (needs {row['needs']})"
            for row in (snap.get("preflight") or {}).get("missing") or []]
    out += [f"Redis HA: {p}" for p in (snap.get("redis_ha") or {}).get("problems") or []]
    if snap["always_on"]["followups"]["at_bound"]:
        out.append("pending timers at FOLLOWUPS_MAX_PENDING: new follow-ups are refused")
    return out


def _table_bad(table: dict[str, str]) -> bool:
    return bool(table) and (table.get("schema") != "ok" or table.get("subscription", "ok") != "ok")


def _always_on(s: Settings, pending: int, first_due: list[tuple[str, float]]) -> dict[str, object]:
    """Digest and triage settings, and the timers waiting (README: Follow-ups, digests and quiet triage)."""
    t, tri = timer_settings(s), triage_settings(s)
    caps = t.followups
    return {
        "timezone": s.bot_timezone,
        "timers_pending": pending,
        "next_due": first_due[0][1] if first_due else None,
        "followups": {"max_pending": caps.max_pending, "at_bound": pending >= caps.max_pending,
                      "per_route": caps.per_route, "per_route_person": caps.per_route_person,
                      "per_person": caps.per_person},
        "digest": {"chats": list(t.digest_chats), "cron": t.digest_cron, "on": bool(t.digest_chats)},
        "triage": {"chats": list(tri.triage_chats), "model": tri.triage_model or s.anthropic_model,
                   "quiet_seconds": tri.triage_quiet_seconds, "post_period_seconds": tri.triage_post_period_seconds,
                   "on": bool(tri.triage_chats)},
        "item_closed_statuses": list(item_settings(s).item_closed_statuses),
    }


def _redis_ha(settings: Settings, r: redis.Redis) -> dict[str, object] | None:
    """Sentinel mode: the master now, the sentinels that answer, replicas, the failovers processes saw."""
    url = sentinel_url(settings)
    if url is None:
        return None
    try:
        return sentinel.report(url, r)
    except Exception as exc:  # Redis answered the checks above; a report that fails is a reason, not a 503
        log.warning("sentinel report failed", extra={"error": repr(exc)})
        return {"mode": "sentinel", "problems": [f"sentinel report failed ({exc.__class__.__name__})"]}
