"""Signing in and out: ADMIN_TOKEN in a form (headless use), or Feishu's web sign-in for CONSOLE_ADMINS.

Before a sign-in exists, a random pre-sign-in cookie, signed like the sign-in cookie, carries the login form's CSRF
token (double submit) and binds a Feishu sign-in's `state` to the browser that began it: a cookie planted by a
neighbouring site is not signed, so it is never adopted. Wrong tokens share the admin API's limit per client
(console/lockout.py). Feishu's redirect URI is built from CONSOLE_URL, never from the request's Host header; outside
sandbox mode Feishu sign-in is off until CONSOLE_URL is set.
"""

from __future__ import annotations

import secrets
from urllib.parse import urlsplit

from flask import make_response, redirect, render_template, request, url_for
from werkzeug.wrappers import Response

from console import audit, lockout
from console.signin import COOKIE, PRE_COOKIE, TOKEN_OPERATOR, csrf_ok, may_sign_in, token_matches
from console.web import bp, local, operator, record, rt, signins
from feishu import oauth

NO_URL = "飞书登录未开启：请设置 CONSOLE_URL（控制台的公网地址，飞书登录回调用它）"


def _secure() -> bool:
    """Secure cookies outside sandbox mode, except over plain http on loopback (a browser would drop them)."""
    host = (urlsplit(request.host_url).hostname or "").lower()
    return not (rt().settings.sandbox or (not request.is_secure and host in ("127.0.0.1", "localhost", "::1")))


def _set(resp: Response, name: str, value: str, max_age: int) -> None:
    resp.set_cookie(name, value, max_age=max_age, path="/console/", httponly=True, samesite="Lax", secure=_secure())


def _pre() -> str:
    """This browser's pre-sign-in value: the one its signed cookie carries, else a new one."""
    return signins().unsign(request.cookies.get(PRE_COOKIE)) or secrets.token_urlsafe(24)


def _pre_given() -> str:
    return signins().unsign(request.cookies.get(PRE_COOKIE)) or ""


def _login_page(status: int = 200, why: str = "") -> Response:
    pre = _pre()
    s = rt().settings
    off = NO_URL if s.console_operators and not _redirect_uri() else ""
    html = render_template("console/login.html", op=None, csrf=pre, why=why, next=local(request.values.get("next")),
                           token_on=bool(s.secret("admin_token")), feishu_on=bool(s.console_operators) and not off,
                           feishu_off=off)
    resp = make_response(html, status)
    _set(resp, PRE_COOKIE, signins().sign(pre), 3600)
    return resp


@bp.get("/login")
def login() -> Response:
    return _login_page()


@bp.post("/login/token")
def login_token() -> Response | tuple[str, int]:
    if not csrf_ok(_pre_given(), request.form.get("csrf")):
        why = "表单已过期，请刷新登录页（missing CSRF token）"
        return render_template("console/refused.html", op=None, why=why), 403
    right = token_matches(rt().settings, request.form.get("token", ""))
    wait = lockout.refusal(rt(), right)
    if wait:
        resp = _login_page(429, f"尝试次数过多，请 {max(1, wait // 60)} 分钟后再试")
        resp.headers["Retry-After"] = str(wait)
        return resp
    if not right:
        audit.write(rt().state, rt().keys, audit.Done("unknown", "token", "sign-in", "", "refused: wrong token"))
        return _login_page(403, "令牌不对，或未设置 ADMIN_TOKEN")
    return _signed_in(TOKEN_OPERATOR, "ADMIN_TOKEN", "token", request.form.get("next"))


def _signed_in(who: str, name: str, how: str, next_url: str | None) -> Response:
    op, cookie = signins().open(who, name, how)
    audit.write(rt().state, rt().keys, audit.Done(op.who, how, "sign-in", "", "ok"))
    resp = redirect(local(next_url))
    _set(resp, COOKIE, cookie, int(rt().settings.console_session_hours * 3600))
    resp.delete_cookie(PRE_COOKIE, path="/console/")
    return resp


def _redirect_uri() -> str:
    """CONSOLE_URL's callback; the request's own host in sandbox mode only (`make run`); "" = Feishu sign-in off."""
    s = rt().settings
    base = s.console_url or (request.host_url if s.sandbox else "")
    return f"{base.rstrip('/')}{url_for('console.feishu_callback')}" if base else ""


@bp.get("/login/feishu")
def login_feishu() -> Response:
    if not _redirect_uri():
        return _login_page(503, NO_URL)
    pre = _pre()
    state = signins().begin_oauth(pre, local(request.args.get("next")))
    resp = redirect(oauth.authorize_url(rt().settings, _redirect_uri(), state))
    _set(resp, PRE_COOKIE, signins().sign(pre), 3600)
    return resp


@bp.get("/login/feishu/callback")
def feishu_callback() -> Response | tuple[str, int]:
    r, keys, s = rt().state, rt().keys, rt().settings
    next_url = signins().finish_oauth(request.args.get("state", ""), _pre_given())
    if next_url is None:
        return _login_page(403, "登录已过期，或不是在这个浏览器里发起的，请重新登录")
    if not _redirect_uri():
        return _login_page(503, NO_URL)
    if request.args.get("error") or not request.args.get("code"):
        return _login_page(403, "飞书授权未完成（已拒绝或已取消）")
    try:
        user = oauth.signed_in_user(oauth.client_for(s), s, request.args["code"], _redirect_uri())
    except oauth.SignInError as exc:
        audit.write(r, keys, audit.Done("unknown", "feishu", "sign-in", "", f"failed: {exc}"))
        return _login_page(502, f"飞书没有确认你的身份：{exc}")
    if not may_sign_in(s, user.open_id):
        audit.write(r, keys, audit.Done(user.open_id, "feishu", "sign-in", "", "refused: not in CONSOLE_ADMINS"))
        return _login_page(403, f"{user.name or user.open_id}（{user.open_id}）不是控制台管理员："
                                "请管理员把这个 open_id 加进 CONSOLE_ADMINS")
    return _signed_in(user.open_id, user.name, "feishu", next_url)


@bp.post("/logout")
def logout() -> Response:
    op = operator()
    signins().close(op.sid)
    record("sign-out", "", "ok")
    resp = redirect(url_for("console.login"))
    resp.delete_cookie(COOKIE, path="/console/")
    return resp
