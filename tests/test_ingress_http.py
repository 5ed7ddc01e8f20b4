"""The endpoint's contract: challenges, authentication, malformed input, limits, outages (acceptance 2, 9)."""

from __future__ import annotations

import json
import time

import pytest
import redis
import requests

from sandbox.events import message_event, signed_request, url_verification
from tests.harness import (
    APP_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    WebServer,
    service_env,
    settings_from,
    unique,
)


@pytest.fixture(scope="module")
def web(env: dict[str, str]) -> WebServer:
    """The web app alone: nothing here may reach a worker."""
    server = WebServer(settings_from(env))
    yield server
    server.stop()


def queued(r: redis.Redis, keys, chat: str) -> int:
    rk = f"feishu:test:p2p:{chat}"
    return r.llen(keys.inbox(rk)) + r.llen(keys.proc(rk)) + int(r.zscore(keys.dirty, rk) is not None)


def event(chat: str, **kw) -> dict:
    return message_event(chat_id=chat, chat_type="p2p", text="hi", token=VERIFICATION_TOKEN, app_id=APP_ID, **kw)


def post_raw(web: WebServer, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(f"{web.url}/feishu/events", data=body, headers=headers, timeout=10)


@pytest.mark.parametrize("encrypt", [False, True])
def test_url_verification_echoes_the_challenge(web: WebServer, encrypt: bool) -> None:
    body = url_verification("ch-123", token=VERIFICATION_TOKEN)
    raw = json.dumps(body).encode() if not encrypt else signed_request(body, encrypt_key=ENCRYPT_KEY)[0]
    resp = post_raw(web, raw, {"Content-Type": "application/json"})  # Feishu may not sign challenges
    assert resp.status_code == 200
    assert resp.json() == {"challenge": "ch-123"}


def test_url_verification_with_wrong_token_is_refused(web: WebServer) -> None:
    resp = post_raw(web, json.dumps(url_verification("c", token="nope")).encode(), {})
    assert resp.status_code == 401


@pytest.mark.parametrize("attack", ["bad_signature", "stale_timestamp", "future_timestamp", "wrong_token",
                                    "wrong_key", "unsigned_event", "unsigned_plain_event"])
def test_unauthenticated_requests_get_401_and_enqueue_nothing(web, r, keys, attack: str) -> None:
    chat = unique("oc_attack")
    payload = event(chat)
    now = None
    if attack == "wrong_token":
        payload["header"]["token"] = "forged"
    if attack == "stale_timestamp":
        now = time.time() - 301
    if attack == "future_timestamp":
        now = time.time() + 301
    key = "someone-else" if attack == "wrong_key" else ENCRYPT_KEY
    body, headers = signed_request(payload, encrypt_key=key, encrypt=attack != "unsigned_plain_event", now=now)
    if attack == "bad_signature":
        headers["X-Lark-Signature"] = "f" * 64
    if attack.startswith("unsigned"):
        headers = {"Content-Type": "application/json"}
    resp = post_raw(web, body, headers)
    assert resp.status_code == 401
    assert resp.headers["Content-Type"].startswith("application/json") and "error" in resp.json()
    assert "Traceback" not in resp.text
    time.sleep(0.2)
    assert queued(r, keys, chat) == 0


def test_garbage_json_is_400(web: WebServer) -> None:
    body = b"{not json"
    from bot.crypto import sign

    resp = post_raw(web, body, sign(body, ENCRYPT_KEY))
    assert resp.status_code == 400
    assert resp.json()["error"]


def test_signed_but_malformed_event_is_400_and_kept_without_its_token(web: WebServer, r, keys) -> None:
    payload = event(unique("oc_bad"))
    del payload["event"]["message"]["chat_id"]
    resp = web.post(payload)
    assert resp.status_code == 400
    kept = [json.loads(x) for x in r.lrange(keys.rejected, 0, 50)]
    mine = [k for k in kept if k["header"]["event_id"] == payload["header"]["event_id"]]
    assert len(mine) == 1 and "token" not in mine[0]["header"]
    assert VERIFICATION_TOKEN not in json.dumps(kept)


def test_oversized_body_is_413(web: WebServer, env: dict[str, str]) -> None:
    payload = event(unique("oc_big"))
    payload["event"]["message"]["content"] = json.dumps({"text": "x" * 400_000})
    resp = web.post(payload)
    assert resp.status_code == 413
    assert resp.json()["error"]


def test_unknown_event_type_is_200_and_ignored(web, r, keys) -> None:
    chat = unique("oc_unknown")
    payload = event(chat)
    payload["header"]["event_type"] = "im.message.reaction.created_v1"
    resp = web.post(payload)
    assert resp.status_code == 200
    assert queued(r, keys, chat) == 0


def test_redis_down_is_503_so_feishu_redelivers(feishu, claude) -> None:
    dead = service_env("redis://127.0.0.1:1/0", feishu.url, claude.url)
    web = WebServer(settings_from(dead))
    try:
        resp = web.post(event(unique("oc_down")))
        assert resp.status_code == 503
        assert "Traceback" not in resp.text and resp.json()["error"]
        assert requests.get(f"{web.url}/readyz", timeout=5).status_code == 503
        assert requests.get(f"{web.url}/healthz", timeout=5).status_code == 200
    finally:
        web.stop()


def test_group_message_before_identity_is_known_is_503(feishu, claude, redis_url) -> None:
    env = service_env(redis_url, feishu.url, claude.url, BOT_PROFILE=unique("noid"),
                      FEISHU_DOMAIN="http://127.0.0.1:1")  # identity can't be fetched
    web = WebServer(settings_from(env))
    try:
        payload = message_event(chat_id=unique("oc_g"), chat_type="group", text="@_user_1 hi",
                                token=VERIFICATION_TOKEN, app_id=APP_ID)
        assert web.post(payload).status_code == 503
    finally:
        web.stop()


def test_health_ready_and_metrics(web: WebServer) -> None:
    assert requests.get(f"{web.url}/healthz", timeout=5).json() == {"status": "ok"}
    assert requests.get(f"{web.url}/readyz", timeout=5).status_code == 200
    web.post(url_verification("c", token=VERIFICATION_TOKEN), encrypt=False)
    metrics = requests.get(f"{web.url}/metrics", timeout=5).text
    assert 'feishu_events_total{outcome="challenge",status="200"}' in metrics
    assert "routes_with_pending_work" in metrics
