"""The Flask edge: request → neutral `Request` → `Ingress.handle` → JSON response. Nothing else."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST
from werkzeug.exceptions import HTTPException

from core import metrics
from core.settings import Settings
from edge import ingress as ing
from feishu import capabilities
from memory import ha as sentinel
from memory.store import sentinel_url

bp = Blueprint("feishu", __name__)


def _ingress() -> ing.Ingress:
    return current_app.extensions["feishu_ingress"]


@bp.post("/feishu/events")
def events() -> tuple[Response, int]:
    body = request.get_data(cache=False)  # raises 413 past MAX_CONTENT_LENGTH
    headers = cast(Mapping[str, str], request.headers)  # case-insensitive lookups, as HTTP requires
    result = _ingress().handle(ing.Request(headers=headers, body=body))
    # A plain Response: jsonify's provider machinery was a measurable share of the per-event cost.
    return Response(json.dumps(result.body, ensure_ascii=False), mimetype="application/json"), result.status


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    return jsonify(status="ok"), 200


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    """200 while Redis answers (events are stored even while work is paused), with what an admin must know."""
    i = _ingress()
    try:
        pipe = i.state.pipeline(transaction=False)
        pipe.hgetall(i.keys.paused)
        pipe.hgetall(i.keys.health)
        pipe.hlen(i.keys.dead)
        pipe.hgetall(i.keys.bitable_status)
        pipe.get(i.keys.preflight)
        pipe.zcard(i.keys.timers_due)
        pipe.zrange(i.keys.timers_due, 0, 0, withscores=True)
        paused, checks, dead, table, preflight, timers, first_due = pipe.execute()
        off = capabilities.off(i.state, i.keys)
    except Exception:
        return jsonify(status="unavailable", redis=False), 503
    paused = {name: json.loads(reason) for name, reason in paused.items()}
    unsafe = {name: verdict for name, verdict in checks.items() if verdict != "ok"}
    table_bad = bool(table) and (table.get("schema") != "ok" or table.get("subscription", "ok") != "ok")
    preflight = json.loads(preflight) if preflight else None
    lacking = bool(preflight and preflight.get("missing"))
    ha = _redis_ha(i)
    ha_bad = bool(ha and ha.get("problems"))
    full = timers >= i.settings.timers.followups.max_pending  # new follow-ups are refused until some fire or end
    status = "degraded" if paused or unsafe or table_bad or off or lacking or ha_bad or full else "ready"
    return jsonify(status=status, redis=True, paused=paused, redis_checks=checks, dead_letters=dead,
                   bitable=table or None, capabilities_off=off, preflight=preflight, redis_ha=ha,
                   always_on=_always_on(i.settings, timers, first_due)), 200


def _always_on(s: Settings, pending: int, first_due: list[tuple[str, float]]) -> dict[str, object]:
    """Digest and triage settings, and the timers waiting (README: Follow-ups, digests and quiet triage)."""
    t, caps = s.timers, s.timers.followups
    return {
        "timezone": t.timezone,
        "timers_pending": pending,
        "next_due": first_due[0][1] if first_due else None,
        "followups": {"max_pending": caps.max_pending, "at_bound": pending >= caps.max_pending,
                      "per_route": caps.per_route, "per_route_person": caps.per_route_person,
                      "per_person": caps.per_person},
        "digest": {"chats": list(t.digest_chats), "cron": t.digest_cron, "on": bool(t.digest_chats)},
        "triage": {"chats": list(t.triage_chats), "model": t.triage_model or s.anthropic_model,
                   "quiet_seconds": t.triage_quiet_seconds, "post_period_seconds": t.triage_post_period_seconds,
                   "on": bool(t.triage_chats)},
        "item_closed_statuses": list(t.closed_statuses),
    }


def _redis_ha(i: ing.Ingress) -> dict[str, object] | None:
    """Sentinel mode: the master now, the sentinels that answer, replicas, the failovers processes saw."""
    url = sentinel_url(i.settings)
    if url is None:
        return None
    try:
        return sentinel.report(url, i.state)
    except Exception as exc:  # Redis answered the checks above; a report that fails is a reason, not a 503
        current_app.logger.warning("sentinel report failed: %r", exc)
        return {"mode": "sentinel", "problems": [f"sentinel report failed ({exc.__class__.__name__})"]}


@bp.get("/metrics")
def prometheus() -> Response:
    i = _ingress()
    return Response(metrics.render(i.state, i.keys), mimetype=CONTENT_TYPE_LATEST)


@bp.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> tuple[Response, int]:
    code = exc.code or 500
    return jsonify(error=exc.name), code


@bp.app_errorhandler(Exception)
def unexpected(exc: Exception) -> tuple[Response, int]:
    current_app.logger.exception("unhandled error")
    return jsonify(error="internal error, retry later"), 503
