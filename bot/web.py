"""The Flask edge: request → neutral `Request` → `Ingress.handle` → JSON response. Nothing else."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import cast

from flask import Blueprint, Response, current_app, jsonify, request
from prometheus_client import CONTENT_TYPE_LATEST
from werkzeug.exceptions import HTTPException

from bot import ingress as ing
from core import metrics
from jobs import readiness
from turn.registry import Lane

bp = Blueprint("feishu", __name__)


def _ingress() -> ing.Ingress:
    return current_app.extensions["feishu_ingress"]


SUCCESS = {"msg": "success"}
SUCCESS_JSON = json.dumps(SUCCESS).encode()  # the answer to nearly every event, encoded once


def answer(ingress: ing.Ingress, headers: Mapping[str, str], body: bytes) -> tuple[int, bytes]:
    """One event, framework-neutral: what both the Flask route and its lane (bot/lanes.py) answer."""
    result = ingress.handle(ing.Request(headers=headers, body=body))
    text = SUCCESS_JSON if result.body == SUCCESS else json.dumps(result.body, ensure_ascii=False).encode()
    return result.status, text


def lane(ingress: ing.Ingress) -> Lane:
    """The events endpoint's short way: the same answer without Flask's per-request machinery (issue 32)."""
    return Lane("/feishu/events", lambda headers, body, _mimetype: answer(ingress, headers, body),
                ingress.settings.max_body_bytes)


@bp.post("/feishu/events")
def events() -> Response:
    """What the lane does not take on (a chunked body, one over MAX_CONTENT_LENGTH: 413 here)."""
    body = request.get_data(cache=False)  # raises 413 past MAX_CONTENT_LENGTH
    headers = cast(Mapping[str, str], request.headers)  # case-insensitive lookups, as HTTP requires
    status, text = answer(_ingress(), headers, body)
    return Response(text, status=status, content_type="application/json")


@bp.get("/healthz")
def healthz() -> tuple[Response, int]:
    return jsonify(status="ok"), 200


@bp.get("/readyz")
def readyz() -> tuple[Response, int]:
    """200 while Redis answers (events are stored even while work is paused), with what an admin must know."""
    i = _ingress()
    try:
        snap = readiness.snapshot(i.settings, i.state, i.keys)
    except readiness.Unavailable:
        return jsonify(status="unavailable", redis=False), 503
    if snap["preflight"]:
        snap["preflight"] = {k: v for k, v in snap["preflight"].items() if k != "rows"}
    return jsonify(**snap), 200


@bp.get("/metrics")
def prometheus() -> Response:
    i = _ingress()
    return Response(metrics.render(i.state, i.keys, i.app.gauges(i.keys)), mimetype=CONTENT_TYPE_LATEST)


@bp.app_errorhandler(HTTPException)
def http_error(exc: HTTPException) -> tuple[Response, int]:
    code = exc.code or 500
    return jsonify(error=exc.name), code


@bp.app_errorhandler(Exception)
def unexpected(exc: Exception) -> tuple[Response, int]:
    current_app.logger.exception("unhandled error")
    return jsonify(error="internal error, retry later"), 503
