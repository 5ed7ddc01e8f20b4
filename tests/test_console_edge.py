"""The console's and the admin API's edges (issue 32): one limit for wrong ADMIN_TOKENs counted per client (behind a
trusted proxy too) that never refuses the right token, security headers on answers no view made, Feishu's
redirect URI never taken from the Host header, a pre-sign-in cookie the console did not sign never trusted.
Through the real app on a real socket, on the session's Redis, each test from clients of its own."""

from __future__ import annotations

import re
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
import requests

from console.lockout import LIMIT
from tests.harness import WebServer, settings_from, unique

TOKEN = "edge-admin-token"
ADMIN = "ou_edge_admin"


def _web(env: dict[str, str], **extra: str) -> WebServer:
    return WebServer(settings_from({**env, "BOT_PROFILE": unique("edge"), "ADMIN_TOKEN": TOKEN,
                                    "CONSOLE_ADMINS": ADMIN, "CONSOLE_TRUSTED_PROXIES": "1", **extra}))


@pytest.fixture(scope="module")
def web(env: dict[str, str]) -> Iterator[WebServer]:
    """Behind one trusted proxy (X-Forwarded-For names the client), without CONSOLE_URL, outside sandbox mode."""
    server = _web(env)
    yield server
    server.stop()


def api(web: WebServer, client: str, token: str) -> requests.Response:
    return requests.get(f"{web.url}/admin/api/timers", timeout=10,
                        headers={"Authorization": f"Bearer {token}", "X-Forwarded-For": client})


def form(web: WebServer, client: str, token: str) -> requests.Response:
    """One token sign-in as a browser sends it: the login page (its CSRF cookie), then the form."""
    s = requests.Session()
    s.headers["X-Forwarded-For"] = client
    page = s.get(f"{web.url}/console/login", timeout=10)
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf, page.text[:300]
    return s.post(f"{web.url}/console/login/token", data={"csrf": csrf.group(1), "token": token},
                  allow_redirects=False, timeout=10)


def client() -> str:
    return unique("client")


def test_the_admin_apis_11th_wrong_token_from_a_client_is_refused(web: WebServer) -> None:
    who = client()
    assert [api(web, who, "wrong").status_code for _ in range(LIMIT)] == [401] * LIMIT
    refused = api(web, who, "wrong")
    assert refused.status_code == 429 and refused.json()["error"]
    assert 0 < int(refused.headers["Retry-After"]) <= 600


def test_the_console_form_and_the_admin_api_share_one_limit(web: WebServer) -> None:
    who = client()
    for _ in range(LIMIT):
        assert api(web, who, "wrong").status_code == 401
    assert form(web, who, "wrong").status_code == 429
    other = client()
    for _ in range(LIMIT):
        assert form(web, other, "wrong").status_code == 403
    assert api(web, other, "wrong").status_code == 429


def test_a_lockout_never_refuses_the_right_token(web: WebServer) -> None:
    who = client()
    for _ in range(LIMIT + 2):
        form(web, who, "wrong")
    assert form(web, who, "wrong").status_code == 429
    signed_in = form(web, who, TOKEN)
    assert signed_in.status_code == 302 and urlsplit(signed_in.headers["Location"]).path == "/console/"
    assert api(web, who, TOKEN).status_code == 200
    assert api(web, who, "wrong").status_code == 429  # still locked for wrong ones


def test_behind_a_trusted_proxy_each_client_is_counted_apart(web: WebServer) -> None:
    stranger, operator = client(), client()
    for _ in range(LIMIT + 1):
        form(web, stranger, "wrong")
    assert form(web, stranger, "wrong").status_code == 429
    assert form(web, operator, "wrong").status_code == 403  # not the stranger's lock
    # The proxy appends the address it saw; what the sender wrote before it is the sender's own claim.
    assert form(web, f"{operator}, {stranger}", "wrong").status_code == 429


@pytest.mark.parametrize(("method", "path"), [("GET", "/console/nonexistent"), ("GET", "/console/rq/nonexistent/x"),
                                              ("POST", "/console/login"), ("DELETE", "/console/")])
def test_an_answer_no_view_made_under_console_carries_the_security_headers(web: WebServer, method: str,
                                                                          path: str) -> None:
    resp = requests.request(method, web.url + path, allow_redirects=False, timeout=10)
    assert resp.status_code in (404, 405), resp.status_code
    assert "script-src 'self';" in resp.headers.get("Content-Security-Policy", ""), dict(resp.headers)
    assert resp.headers.get("X-Frame-Options") == "DENY" and resp.headers.get("X-Content-Type-Options") == "nosniff"


def test_a_foreign_host_never_becomes_the_redirect_uri(web: WebServer, env: dict[str, str]) -> None:
    evil = {"Host": "evil.example"}
    resp = requests.get(f"{web.url}/console/login/feishu", headers=evil, allow_redirects=False, timeout=10)
    assert resp.status_code == 503 and "evil.example" not in resp.headers.get("Location", "")
    assert "CONSOLE_URL" in resp.text
    page = requests.get(f"{web.url}/console/login", timeout=10)
    assert 'data-testid="feishu-off"' in page.text and 'data-action="feishu-sign-in"' not in page.text
    pinned = _web(env, CONSOLE_URL="https://console.example.com")
    try:
        resp = requests.get(f"{pinned.url}/console/login/feishu", headers=evil, allow_redirects=False, timeout=10)
    finally:
        pinned.stop()
    assert resp.status_code == 302
    [uri] = parse_qs(urlsplit(resp.headers["Location"]).query)["redirect_uri"]
    assert uri == "https://console.example.com/console/login/feishu/callback"


def test_a_pre_sign_in_cookie_the_console_did_not_sign_is_never_trusted(web: WebServer) -> None:
    planted = {"fb_console_pre": "planted-by-a-neighbour"}
    headers = {"X-Forwarded-For": client()}
    resp = requests.post(f"{web.url}/console/login/token", cookies=planted, headers=headers, allow_redirects=False,
                         data={"csrf": planted["fb_console_pre"], "token": TOKEN}, timeout=10)
    assert resp.status_code == 403 and "fb_console" not in resp.cookies
    page = requests.get(f"{web.url}/console/login", cookies=planted, timeout=10)
    assert 'value="planted-by-a-neighbour"' not in page.text
    fresh = page.cookies.get("fb_console_pre") or ""
    assert fresh and "planted" not in fresh  # a new value, signed: the planted one is not adopted


def test_in_sandbox_mode_feishu_sign_in_still_follows_the_requests_host(env: dict[str, str]) -> None:
    """`make run`'s walkthrough: no CONSOLE_URL, the emulator's authorize page, back to the host the browser used."""
    sandbox = {k: v for k, v in env.items() if not k.startswith(("FEISHU_", "ANTHROPIC_"))}
    web = WebServer(settings_from({**sandbox, "BOT_PROFILE": unique("edge")}))
    try:
        assert web.app.extensions["admin_runtime"].settings.sandbox
        resp = requests.get(f"{web.url}/console/login/feishu", allow_redirects=False, timeout=10)
    finally:
        web.stop()
    assert resp.status_code == 302
    [uri] = parse_qs(urlsplit(resp.headers["Location"]).query)["redirect_uri"]
    assert uri == f"{web.url}/console/login/feishu/callback"
