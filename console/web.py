"""The console's blueprint and what every page shares: the sign-in gate, CSRF, security headers, paging, audit.

Every request but the sign-in pages and static files needs a sign-in: a page without one redirects to
`/console/login`, an action (any POST) answers 403. Every POST carries the sign-in's CSRF token in a field named
`csrf` (403 without it). Pages are rendered by Jinja with autoescape, under a Content-Security-Policy that
allows no inline script, so text from chats, records or memory is shown as text and never runs. The security
headers go on every answer under /console/, a 404 or 405 too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, current_app, g, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from console import audit
from console.signin import COOKIE, Operator, SignIns, csrf_ok
from runs.runtime import Runtime

bp = Blueprint("console", __name__, url_prefix="/console", template_folder="templates", static_folder="static",
               static_url_path="/static")
PUBLIC = {"console.login", "console.login_token", "console.login_feishu", "console.feishu_callback", "console.static"}
CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "form-action 'self'; frame-ancestors 'none'; base-uri 'none'")
PAGE_MAX = 200


def rt() -> Runtime:
    return current_app.extensions["admin_runtime"]


def signins() -> SignIns:
    found = current_app.extensions.get("console_signins")
    if found is None:
        s = rt().settings
        found = current_app.extensions["console_signins"] = SignIns(rt().state, rt().keys,
                                                                     s.console_session_hours * 3600)
    return found


def operator() -> Operator:
    return g.console_operator  # type: ignore[no-any-return]


@bp.before_request
def gate() -> Response | tuple[str, int] | None:
    if request.endpoint in PUBLIC:
        return None
    op = signins().find(request.cookies.get(COOKIE))
    if op is None:
        if request.method in ("GET", "HEAD"):
            return redirect(url_for("console.login", next=_local(request.full_path)))
        return refused("请先登录控制台（sign in first）")
    if request.method == "POST" and not csrf_ok(op.csrf, request.form.get("csrf")):
        return refused("表单已过期或缺少校验字段，请刷新页面后重试（missing or wrong CSRF token）")
    g.console_operator = op
    return None


def refused(why: str) -> tuple[str, int]:
    return render_template("console/refused.html", why=why, op=None), 403


def headers(resp: Response) -> Response:
    """On every answer under /console/, the app's own and those no view made (404, 405, rq-dashboard's): an app-level
    hook, as a blueprint's runs only for its own routes. rq-dashboard's pages bring their own policy (rqdash.py)."""
    if request.path != "/console" and not request.path.startswith("/console/"):
        return resp
    resp.headers.setdefault("Content-Security-Policy", CSP)
    resp.headers["X-Content-Type-Options"] = "nosniff"
    resp.headers["X-Frame-Options"] = "DENY"
    resp.headers["Referrer-Policy"] = "same-origin"
    if request.endpoint != "console.static":
        resp.headers["Cache-Control"] = "no-store"
    return resp


@bp.app_template_filter("console_time")
def console_time(ts: float | str | None) -> str:
    """An epoch time in BOT_TIMEZONE, as operators read it."""
    try:
        return datetime.fromtimestamp(float(ts or 0), rt().settings.tz).strftime("%Y-%m-%d %H:%M:%S")
    except (TypeError, ValueError, OverflowError, OSError):
        return str(ts)


def _local(target: str | None) -> str:
    """Only a path of this console is a place to go back to after sign-in (no open redirect)."""
    target = (target or "").rstrip("?")
    parts = urlsplit(target)
    if parts.scheme or parts.netloc or not target.startswith("/console/") or target.startswith("//"):
        return "/console/"
    return target


def local(target: str | None) -> str:
    return _local(target)


def page(template: str, **context: Any) -> str:
    said = signins().said(operator().sid)
    return render_template(f"console/{template}", op=operator(), csrf=operator().csrf, said=said,
                           feature_pages=_feature_pages(), **context)


def _feature_pages() -> list[tuple[str, str]]:
    """(path, title) of the features' own pages (`Feature.panels`), for the menu."""
    from turn.registry import app_of

    return [(f"/console/f/{name}/{p.name}", p.title) for name, p in app_of(rt()).panels(of_item=False)]


@dataclass(frozen=True)
class Window:
    """One page of a list: `offset`, `limit`, and whether more follow."""

    offset: int
    limit: int
    total: int | None = None

    @property
    def prev(self) -> int | None:
        return max(0, self.offset - self.limit) if self.offset else None

    def next(self, shown: int) -> int | None:
        if self.total is not None:
            return self.offset + self.limit if self.offset + self.limit < self.total else None
        return self.offset + self.limit if shown >= self.limit else None


def window(default: int = 50, total: int | None = None) -> Window:
    try:
        offset = max(0, int(request.args.get("offset", 0)))
        limit = min(PAGE_MAX, max(1, int(request.args.get("limit", default))))
    except ValueError:
        offset, limit = 0, default
    return Window(offset, limit, total)


def record(what: str, target: str, outcome: str) -> None:
    op = operator()
    audit.write(rt().state, rt().keys, audit.Done(op.who, op.how, what, target, outcome))


def done(where: str, message: str, ok: bool = True, **params: Any) -> Response:
    """After an action: back to its page (Post/Redirect/Get), which shows one line saying how it went. The line
    travels in the sign-in, never in the URL, so nobody can make the console say something with a link."""
    signins().say(operator().sid, message, ok)
    return redirect(url_for(where, **params))


def event_view(raw: str) -> dict[str, Any]:
    """An inbox entry as a list shows it: kind, message id, sender and the start of its text (never trusted)."""
    try:
        m = json.loads(raw)
    except ValueError:
        return {"kind": "unreadable", "text": raw[:300]}
    if not isinstance(m, dict):
        return {"kind": "unreadable", "text": str(m)[:300]}
    sender = m.get("sender_open_id") or m.get("sender_union_id") or m.get("sender_user_id") or ""
    return {"kind": m.get("kind") or m.get("message_type") or "event", "message_id": m.get("message_id", ""),
            "sender": sender, "text": str(m.get("text") or m.get("what") or "")[:500], "replay": m.get("replay")}
