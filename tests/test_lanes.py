"""The webhooks' lanes (bot/lanes.py) answer exactly as the Flask routes they shortcut, through the real web app on
a real socket: each request is sent once with a Content-Length (the lane takes it) and once chunked (the lane leaves
it to Flask), and both answers must match: status, JSON, content type. Flask's `request_started` signal shows which
way a request went. Bodies over the cap and bodies cut short are answered as werkzeug answers them, nothing stored."""

from __future__ import annotations

import json
import socket
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import redis
import requests
from flask import request_started

from core.keys import Keys
from sandbox.codehost import github_request, gitlab_request
from sandbox.feishu.events import message_event, signed_request, url_verification
from tests.harness import ENCRYPT_KEY, VERIFICATION_TOKEN, WebServer, settings_from, unique
from tests.test_codehost_pure import example

SECRET, TOKEN = "lanes-gh-secret", "lanes-gl-token"
MAX_BODY = 4096  # MAX_BODY_BYTES here, the setting's minimum is 1024
HOOK_MAX = 65536  # CODEHOST_MAX_BODY_BYTES


@pytest.fixture(scope="module")
def web(env: dict[str, str]) -> Iterator[WebServer]:
    with pytest.MonkeyPatch.context() as mp:  # the web reads its features' settings from the environment when built
        mp.setenv("GITHUB_WEBHOOK_SECRET", SECRET)
        mp.setenv("GITLAB_WEBHOOK_TOKEN", TOKEN)
        mp.setenv("CODEHOST_MAX_BODY_BYTES", str(HOOK_MAX))
        server = WebServer(settings_from({**env, "MAX_BODY_BYTES": str(MAX_BODY), "BOT_PROFILE": "lanes"}))
    yield server
    server.stop()


@pytest.fixture()
def flask_served(web: WebServer) -> Iterator[list[str]]:
    """The paths Flask dispatched (its `request_started` signal: a lane never fires it)."""
    seen: list[str] = []

    def note(_sender: Any, **_extra: Any) -> None:
        from flask import request

        seen.append(request.path)

    request_started.connect(note, web.app)
    yield seen
    request_started.disconnect(note, web.app)


Built = tuple[str, bytes, dict[str, str]]  # path, body, headers


def feishu_event(chat: str = "") -> Built:
    ev = message_event(chat_id=chat or unique("oc_lane"), chat_type="p2p", text="走哪条路都一样",
                       token=VERIFICATION_TOKEN)
    body, headers = signed_request(ev, encrypt_key=ENCRYPT_KEY)
    return "/feishu/events", body, headers


def feishu_challenge() -> Built:
    body, headers = signed_request(url_verification("ch-" + uuid.uuid4().hex, VERIFICATION_TOKEN),
                                   encrypt_key=ENCRYPT_KEY)
    return "/feishu/events", body, headers


def feishu_bad_signature() -> Built:
    path, body, headers = feishu_event()
    return path, body, {**headers, "X-Lark-Signature": "0" * 64}


def feishu_not_json() -> Built:
    return "/feishu/events", b"{not json", {"Content-Type": "application/json"}


def feishu_wrong_token() -> Built:
    ev = message_event(chat_id=unique("oc_lane"), chat_type="p2p", text="x", token="not-the-token")
    body, headers = signed_request(ev, encrypt_key=ENCRYPT_KEY)
    return "/feishu/events", body, headers


def github_failed_check() -> Built:
    payload = example("github", "check_run.completed.payload")
    payload["check_run"]["id"] = uuid.uuid4().int % 10**9  # a fresh body: not a redelivery of the last one
    body, headers = github_request("check_run", payload, SECRET)
    return "/hooks/github", body, headers


def github_wrong_signature() -> Built:
    body, headers = github_request("check_run", example("github", "check_run.completed.payload"), "not-the-secret")
    return "/hooks/github", body, headers


def github_ping() -> Built:
    body, headers = github_request("ping", example("github", "ping.payload"), SECRET)
    return "/hooks/github", body, headers


def github_unhandled() -> Built:
    body, headers = github_request("star", {"action": "created"}, SECRET)
    return "/hooks/github", body, headers


def gitlab_wrong_token() -> Built:
    body, headers = gitlab_request("Pipeline Hook", example("gitlab", "pipeline_hook"), "not-the-token")
    return "/hooks/gitlab", body, headers


CASES: dict[str, Callable[[], Built]] = {
    "feishu event": feishu_event, "feishu challenge": feishu_challenge, "feishu bad signature": feishu_bad_signature,
    "feishu body not JSON": feishu_not_json, "feishu wrong token": feishu_wrong_token,
    "github failed check": github_failed_check, "github wrong signature": github_wrong_signature,
    "github ping": github_ping, "github unhandled event": github_unhandled, "gitlab wrong token": gitlab_wrong_token,
}


def post(web: WebServer, built: Built, *, chunked: bool) -> requests.Response:
    path, body, headers = built
    data: Any = iter([body]) if chunked else body  # a generator body goes chunked, with no Content-Length
    return requests.post(f"{web.url}{path}", data=data, headers=headers, timeout=10)


def answer(resp: requests.Response) -> tuple[int, Any, str]:
    return resp.status_code, resp.json(), resp.headers["Content-Type"]


@pytest.mark.parametrize("case", list(CASES))
def test_a_lane_answers_as_the_flask_route_it_shortcuts(web: WebServer, flask_served: list[str], case: str) -> None:
    build = CASES[case]
    laned = post(web, build(), chunked=False)
    assert flask_served == [], "a request with a Content-Length under the cap goes by the lane"
    routed = post(web, build(), chunked=True)
    assert flask_served == [build()[0]], "a chunked body goes to Flask"
    got, want = answer(laned), answer(routed)
    if case == "feishu challenge":  # each request's own challenge comes back
        got, want = (got[0], sorted(got[1]), got[2]), (want[0], sorted(want[1]), want[2])
    assert got == want
    assert got[0] in (200, 400, 401)


@pytest.mark.parametrize("chunked", [False, True])
def test_an_event_is_stored_the_same_either_way(web: WebServer, r: redis.Redis, chunked: bool) -> None:
    chat = unique("oc_lane")
    path, body, headers = feishu_event(chat)
    assert post(web, (path, body, headers), chunked=chunked).status_code == 200
    entries = [json.loads(e) for e in r.lrange(Keys("lanes").inbox(f"feishu:lanes:p2p:{chat}"), 0, -1)]
    assert [e["text"] for e in entries] == ["走哪条路都一样"]
    assert post(web, (path, body, headers), chunked=not chunked).status_code == 200  # a redelivery, the other way
    assert r.llen(Keys("lanes").inbox(f"feishu:lanes:p2p:{chat}")) == 1


@pytest.mark.parametrize(("path", "cap"), [("/feishu/events", MAX_BODY), ("/hooks/github", HOOK_MAX)])
def test_a_body_over_the_cap_is_flask_s_413_and_nothing_is_read(web: WebServer, flask_served: list[str], path: str,
                                                                 cap: int) -> None:
    resp = requests.post(f"{web.url}{path}", data=b"{" + b" " * cap + b"}", timeout=10,
                         headers={"Content-Type": "application/json"})
    assert resp.status_code == 413 and resp.json() == {"error": "Request Entity Too Large"}
    assert flask_served == [path]


@pytest.mark.parametrize("build", [feishu_event, github_failed_check])
def test_a_body_cut_short_is_a_400_and_nothing_is_stored(web: WebServer, r: redis.Redis,
                                                         build: Callable[[], Built]) -> None:
    path, body, headers = build()
    before = set(r.scan_iter("*"))
    head = [f"POST {path} HTTP/1.1", "Host: 127.0.0.1", f"Content-Length: {len(body)}", "Connection: close",
            *(f"{k}: {v}" for k, v in headers.items())]
    with socket.create_connection(("127.0.0.1", int(web.url.rsplit(":", 1)[1])), timeout=10) as s:
        s.sendall(("\r\n".join(head) + "\r\n\r\n").encode() + body[: len(body) // 2])
        s.shutdown(socket.SHUT_WR)  # the client goes away mid-body
        reply = b""
        while chunk := s.recv(65536):
            reply += chunk
    assert reply.startswith(b"HTTP/1.1 400"), reply[:80]
    assert {k for k in r.scan_iter("*") if "inbox" in k or "seen" in k} <= before
