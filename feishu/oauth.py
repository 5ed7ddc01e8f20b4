"""Feishu sign-in for the operator console: the documented web-app OAuth flow through lark-oapi.

1. The browser goes to the authorize page (`accounts.feishu.cn/open-apis/authen/v1/authorize`, "获取授权码") with
   `client_id`, `redirect_uri` and a single-use `state`; Feishu sends it back to `redirect_uri` with `code` (valid
   5 minutes, once) and the same `state`, or with `error=access_denied` when the person refused.
2. `POST /open-apis/authen/v2/oauth/token` (JSON: grant_type authorization_code, client_id, client_secret, code,
   and redirect_uri, required for web apps and equal to the authorize request's; "获取 user_access_token", RFC
   6749) answers `{"code": 0, "access_token", "expires_in", …}` at the top level, or a non-zero `code` (20003 code
   not found, 20004 expired, 20065 used, 20071 redirect_uri mismatch, 20002 wrong secret, …) with `error` /
   `error_description`. lark-oapi 1.7.5 has no typed call for the v2 endpoint (only the deprecated v1
   `oidc/access_token`), so it goes out as the SDK's raw request.
3. `GET /open-apis/authen/v1/user_info` with that user token (lark-oapi's typed `authen.v1.user_info.get`) names
   the person: `data.open_id`, `data.name`.

The user access token is used for that one call and dropped: the console keeps only who signed in.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import urlencode, urlsplit

import lark_oapi as lark
from lark_oapi.api.authen.v1 import GetUserInfoRequest

from core.settings import Settings

TOKEN_PATH = "/open-apis/authen/v2/oauth/token"
AUTHORIZE_PATH = "/open-apis/authen/v1/authorize"
# The Open API origin → where its authorize page lives ("获取授权码": accounts.feishu.cn; Lark: accounts.larksuite.com)
ACCOUNTS = {"open.feishu.cn": "https://accounts.feishu.cn", "open.larksuite.com": "https://accounts.larksuite.com"}


class SignInError(Exception):
    """Feishu would not say who signed in; the text is safe to show (no token, no secret)."""


@dataclass(frozen=True)
class FeishuUser:
    open_id: str
    name: str


def authorize_url(settings: Settings, redirect_uri: str, state: str) -> str:
    """Where the browser signs in. An emulator (`FEISHU_DOMAIN=http://127.0.0.1:…`) plays the page itself."""
    host = urlsplit(settings.feishu_domain).hostname or ""
    origin = ACCOUNTS.get(host, settings.feishu_domain.rstrip("/"))
    return f"{origin}{AUTHORIZE_PATH}?" + urlencode({"client_id": settings.app_id, "response_type": "code",
                                                     "redirect_uri": redirect_uri, "state": state})


def client_for(settings: Settings) -> lark.Client:
    """A lark-oapi client that may carry a user's token: `enable_set_token`, without which `user_info.get` raises
    "need enable set token" even when the option names one (lark_oapi/core/token/auth.py)."""
    return (lark.Client.builder().app_id(settings.app_id).app_secret(settings.secret("feishu_app_secret"))
            .domain(settings.feishu_domain).timeout(settings.feishu_timeout_seconds).enable_set_token(True)
            .log_level(lark.LogLevel.WARNING).build())


def signed_in_user(client: lark.Client, settings: Settings, code: str, redirect_uri: str) -> FeishuUser:
    token = _user_token(client, settings, code, redirect_uri)
    option = lark.RequestOption.builder().user_access_token(token).build()
    try:
        resp = client.authen.v1.user_info.get(GetUserInfoRequest.builder().build(), option)
    except Exception as exc:  # transport failures surface as exceptions
        raise SignInError(f"Feishu did not answer ({exc.__class__.__name__})") from None
    if not resp.success() or resp.data is None or not resp.data.open_id:
        raise SignInError(f"Feishu would not name the user (code {resp.code}: {resp.msg})")
    return FeishuUser(open_id=str(resp.data.open_id), name=str(resp.data.name or ""))


def _user_token(client: lark.Client, settings: Settings, code: str, redirect_uri: str) -> str:
    body = {"grant_type": "authorization_code", "client_id": settings.app_id,
            "client_secret": settings.secret("feishu_app_secret"), "code": code, "redirect_uri": redirect_uri}
    request = (lark.BaseRequest.builder().http_method(lark.HttpMethod.POST).uri(TOKEN_PATH)
               .token_types(set())  # no token: the client secret is in the body
               .headers({"Content-Type": "application/json; charset=utf-8"})  # client.request sets none itself
               .body(body).build())
    try:
        resp = client.request(request)
        answer = json.loads(resp.raw.content or b"{}")
    except Exception as exc:
        raise SignInError(f"Feishu did not answer the sign-in ({exc.__class__.__name__})") from None
    token = answer.get("access_token") if isinstance(answer, dict) else None
    if not isinstance(answer, dict) or answer.get("code") not in (0, None) or not token:
        why = (answer.get("error_description") or answer.get("error") or answer.get("msg") or "no token") \
            if isinstance(answer, dict) else "not JSON"
        code_no = answer.get("code") if isinstance(answer, dict) else None
        raise SignInError(f"Feishu refused the sign-in code ({code_no}: {why})")
    return str(token)
