"""Feishu's web-app sign-in, played by the emulator: the authorize page, the v2 token endpoint, user_info.

As documented ("获取授权码", "获取 user_access_token", "获取用户信息"): the authorize page sends the browser back
to `redirect_uri` with `code` and `state` (or `error=access_denied` when the person refuses); a code is valid
for 5 minutes and only once, and only with the `redirect_uri` it was issued for; the token endpoint answers
at the top level (`code`, `access_token`, `expires_in`, `token_type`, `scope`) or with a non-zero `code`,
`error` and `error_description`; user_info answers under `data` (`open_id`, `union_id`, `name`, …).

The page is the sandbox's: a person types the open_id to sign in as (no password), so `make run` and the
browser tests can sign in without a real tenant.
"""

from __future__ import annotations

import html
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from flask import Flask, redirect, request
from werkzeug.wrappers import Response

from sandbox.server import json_response

CODE_TTL_S = 300.0
USER_TOKEN_TTL_S = 7200
# The token endpoint's refusals ("获取 user_access_token" error table; its `error` strings are RFC 6749's).
MISSING_PARAM = (20001, "invalid_request")
BAD_SECRET = (20002, "invalid_client")
CODE_UNKNOWN = (20003, "invalid_grant")
CODE_EXPIRED = (20004, "invalid_grant")
BAD_GRANT_TYPE = (20036, "unsupported_grant_type")
CODE_USED = (20065, "invalid_grant")
REDIRECT_MISMATCH = (20071, "invalid_grant")
BAD_REDIRECT_PAGE = 20029  # the authorize page's own error: a redirect_uri not configured for the app
BAD_USER_TOKEN = 99991668  # user_info with a token that is not (or no longer) valid (generic error codes)


@dataclass
class OAuthStore:
    app_id: str
    app_secret: str
    person: Callable[[str], dict[str, str]]
    clock: Callable[[], float] = time.time
    lock: threading.Lock = field(default_factory=threading.Lock)
    codes: dict[str, dict[str, Any]] = field(default_factory=dict)
    user_tokens: dict[str, tuple[str, float]] = field(default_factory=dict)  # token → (open_id, expiry)
    sign_ins: list[dict[str, Any]] = field(default_factory=list)  # what the page was asked, for tests

    def reset(self) -> None:
        with self.lock:
            self.codes.clear()
            self.user_tokens.clear()
            self.sign_ins.clear()

    def issue_code(self, open_id: str, redirect_uri: str) -> str:
        code = secrets.token_urlsafe(16)
        with self.lock:
            self.codes[code] = {"open_id": open_id, "redirect_uri": redirect_uri, "at": self.clock(), "used": False}
        return code

    def exchange(self, body: dict[str, Any]) -> tuple[dict[str, Any], int]:
        if not all(body.get(k) for k in ("grant_type", "client_id", "client_secret", "code", "redirect_uri")):
            return _refusal(MISSING_PARAM, "grant_type, client_id, client_secret, code and redirect_uri"), 400
        if body["grant_type"] != "authorization_code":
            return _refusal(BAD_GRANT_TYPE, "grant_type not supported"), 400
        if body["client_id"] != self.app_id or body["client_secret"] != self.app_secret:
            return _refusal(BAD_SECRET, "client secret invalid"), 400
        with self.lock:
            grant = self.codes.get(str(body["code"]))
            if grant is None:
                return _refusal(CODE_UNKNOWN, "the code was not found"), 400
            if grant["used"]:
                return _refusal(CODE_USED, "the code was already used"), 400
            if self.clock() - grant["at"] > CODE_TTL_S:
                return _refusal(CODE_EXPIRED, "the code expired"), 400
            grant["used"] = True  # a code is single use, even when the redirect_uri below is wrong
            if body["redirect_uri"] != grant["redirect_uri"]:
                return _refusal(REDIRECT_MISMATCH, "redirect_uri does not match the authorize request"), 400
            token = "u-" + secrets.token_urlsafe(24)
            self.user_tokens[token] = (grant["open_id"], self.clock() + USER_TOKEN_TTL_S)
        return {"code": 0, "access_token": token, "expires_in": USER_TOKEN_TTL_S, "token_type": "Bearer",
                "scope": "auth:user.id:read"}, 200

    def user_info(self, authorization: str | None) -> tuple[dict[str, Any], int]:
        token = (authorization or "").removeprefix("Bearer ").strip()
        with self.lock:
            found = self.user_tokens.get(token)
        if found is None or found[1] < self.clock():
            return {"code": BAD_USER_TOKEN, "msg": "Invalid access token for authorization"}, 401
        open_id = found[0]
        who = self.person(open_id)
        data = {"open_id": open_id, "union_id": "on_" + open_id.removeprefix("ou_"), "name": who.get("name", ""),
                "en_name": who.get("en_name", ""), "avatar_url": who.get("avatar_url", ""),
                "tenant_key": "sandbox_tenant"}
        return {"code": 0, "msg": "success", "data": data}, 200


def _refusal(error: tuple[int, str], description: str) -> dict[str, Any]:
    return {"code": error[0], "error": error[1], "error_description": description}


def register_oauth(app: Flask, store: OAuthStore) -> None:
    def authorize() -> Response:
        args = request.values
        if (args.get("client_id") != store.app_id or args.get("response_type") != "code"
                or not _is_url(args.get("redirect_uri", ""))):
            return Response(f"<p>{BAD_REDIRECT_PAGE}: redirect_uri 请求不合法</p>", status=400, mimetype="text/html")
        if request.method == "GET":
            return Response(_page(args), mimetype="text/html")
        back, state = args["redirect_uri"], args.get("state", "")
        store.sign_ins.append({"open_id": args.get("open_id", ""), "decision": args.get("decision", "")})
        if args.get("decision") != "allow" or not args.get("open_id", "").strip():
            return redirect(_with(back, error="access_denied", state=state))
        return redirect(_with(back, code=store.issue_code(args["open_id"].strip(), back), state=state))

    def token() -> Response:
        body = request.get_json(silent=True)
        answer, status = store.exchange(body if isinstance(body, dict) else {})
        return json_response(answer, status)

    def user_info() -> Response:
        answer, status = store.user_info(request.headers.get("Authorization"))
        return json_response(answer, status)

    app.add_url_rule("/open-apis/authen/v1/authorize", endpoint="oauth_authorize", view_func=authorize,
                     methods=["GET", "POST"])
    app.add_url_rule("/open-apis/authen/v2/oauth/token", endpoint="oauth_token", view_func=token, methods=["POST"])
    app.add_url_rule("/open-apis/authen/v1/user_info", endpoint="oauth_user_info", view_func=user_info,
                     methods=["GET"])


def _is_url(value: str) -> bool:
    return urlsplit(value).scheme in ("http", "https") and bool(urlsplit(value).netloc)


def _with(url: str, **params: str) -> str:
    return url + ("&" if "?" in url else "?") + urlencode(params)


def _page(args: Any) -> str:
    hidden = "".join(f'<input type="hidden" name="{k}" value="{html.escape(args.get(k, ""))}">'
                     for k in ("client_id", "response_type", "redirect_uri", "state"))
    return f"""<!doctype html><html lang="zh"><head><meta charset="utf-8"><title>飞书授权（沙盒）</title></head>
<body><h1>授权登录（沙盒）</h1><p>应用 {html.escape(store_name(args))} 请求获取你的身份信息。</p>
<form method="post">{hidden}
<label>以此身份登录（open_id）：<input name="open_id" id="open_id" value="ou_sandbox_admin"></label>
<button type="submit" name="decision" value="allow" id="allow">授权</button>
<button type="submit" name="decision" value="deny" id="deny">拒绝</button>
</form></body></html>"""


def store_name(args: Any) -> str:
    return str(args.get("client_id", ""))
