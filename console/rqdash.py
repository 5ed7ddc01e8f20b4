"""rq-dashboard's queues, jobs and workers inside the console, at /console/rq/, behind the console's sign-in.

rq-dashboard (0.9.0) is a Flask blueprint with no auth of its own, so an app-level gate runs before its own hooks:
no sign-in → the sign-in page (or 403 for an action); its actions (delete, requeue, empty, compact) carry no CSRF
token, so they must come from the console's own pages (Origin or Referer of this host), are never taken as a GET
(`/requeue/<queue>` accepts one), and each is written to the audit log. It reads our jobs with RQ's JSON serializer
through the service's own RQ connection (also under Sentinel). Its pages use an inline script and underscore
templates, so /console/rq/ alone gets a CSP that allows them; every other console page allows no inline script.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

import rq_dashboard
import rq_dashboard.web as rqw
from flask import Flask, current_app, redirect, request, url_for
from rq import Worker
from rq.serializers import JSONSerializer
from werkzeug.wrappers import Response

from console import audit
from console.signin import COOKIE
from console.web import local, refused, rt, signins

PREFIX = "/console/rq"
CSP = ("default-src 'self'; script-src 'self' 'unsafe-inline' 'unsafe-eval'; style-src 'self' 'unsafe-inline'; "
       "img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")


class JsonWorker(Worker):
    """rq-dashboard lists workers without a serializer; a worker busy with a JSON job would fail to load."""

    @classmethod
    def all(cls, *args: Any, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        kwargs.setdefault("serializer", JSONSerializer)
        return list(super().all(*args, **kwargs))


def _our_connection(_url: Any, **_options: Any) -> tuple[None, Any]:
    """rq-dashboard connects per request from its URL setting; ours is the service's RQ client (Sentinel too)."""
    return None, current_app.extensions["admin_runtime"].rq


def init_app(app: Flask) -> None:
    rqw.config.serializer = JSONSerializer
    rqw.Worker = JsonWorker  # type: ignore[misc]
    rqw.from_url = _our_connection  # type: ignore[assignment]
    app.config["RQ_DASHBOARD_REDIS_URL"] = "redis://service-rq-client"  # never dialled: see _our_connection
    app.config.setdefault("RQ_DASHBOARD_POLL_INTERVAL", 5000)
    app.register_blueprint(rq_dashboard.blueprint, url_prefix=PREFIX)
    with app.app_context():
        rqw.setup_rq_connection(app)
    # On rq-dashboard's own requests only (every webhook event paid for them as app-level hooks): the gate first,
    # before rq-dashboard's own hooks, as an app-level one ran.
    app.before_request_funcs.setdefault(rq_dashboard.blueprint.name, []).insert(0, _gate)
    app.after_request_funcs.setdefault(rq_dashboard.blueprint.name, []).append(_headers)


def _gate() -> Response | tuple[str, int] | None:
    if request.blueprint != "rq_dashboard":
        return None
    op = signins().find(request.cookies.get(COOKIE))
    if op is None:
        if request.method in ("GET", "HEAD"):
            return redirect(url_for("console.login", next=local(request.full_path)))
        return refused("请先登录控制台（sign in first）")
    if request.method in ("GET", "HEAD") and request.endpoint == "rq_dashboard.requeue_all":
        return refused("重新入队只接受从队列页面提交（POST）")
    if request.method not in ("GET", "HEAD"):
        if not _same_origin():
            return refused("这个操作只能从控制台页面发起（Origin / Referer）")
        audit.write(rt().state, rt().keys, audit.Done(op.who, op.how, f"rq:{request.endpoint or '?'}", request.path,
                                                      "sent"))
    return None


def _same_origin() -> bool:
    source = request.headers.get("Origin") or request.headers.get("Referer") or ""
    host = urlsplit(source).netloc
    return bool(host) and host == request.host


def _headers(resp: Response) -> Response:
    if request.blueprint == "rq_dashboard":
        resp.headers["Content-Security-Policy"] = CSP
        resp.headers["X-Frame-Options"] = "DENY"
        resp.headers["X-Content-Type-Options"] = "nosniff"
    return resp
