"""The endpoint's contract: challenges, authentication, malformed input, limits, outages (acceptance 2, 9)."""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import requests

from bot.crypto import encrypt, sign
from bot.envelope import Envelope, MessageEvent, to_inbound
from core.keys import Keys
from routing.keys import route_for
from routing.policy import Policy
from sandbox.feishu.events import mention, message_event, signed_request, url_verification
from tests.harness import (
    APP_ID,
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    WebServer,
    service_env,
    settings_from,
    unique,
    wait_for,
)

# Nobody serves this profile (no worker, no sweeper): whatever a request stores stays where it was put,
# so "nothing stored" is checked directly, with no sleep.
PROFILE = unique("ingress")


@pytest.fixture(scope="module")
def keys() -> Keys:
    return Keys(PROFILE)


@pytest.fixture(scope="module")
def web(env: dict[str, str], r: redis.Redis, keys: Keys) -> Iterator[WebServer]:
    """The web app alone; its start-up fetch of the bot identity (from the emulator) lets group messages in."""
    server = WebServer(settings_from({**env, "BOT_PROFILE": PROFILE}))
    wait_for(lambda: r.get(keys.bot_open_id) == BOT_OPEN_ID, 30, what="bot identity cached at start-up")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def no_error_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """Bad input is the caller's problem: never an ERROR line or a traceback in our logs."""
    yield
    bad = [r for r in caplog.records if r.name.startswith(("bot", "app")) and (r.levelno >= logging.ERROR
                                                                                 or r.exc_info)]
    assert not bad, [r.getMessage() for r in bad]


def traces(r: redis.Redis, keys: Keys, payload: dict[str, Any]) -> list[str]:
    """Everything an accepted event leaves behind: dedupe markers, inbox entry, dirty mark, kick record."""
    envelope = Envelope.model_validate(payload)
    inbound = to_inbound(envelope, MessageEvent.model_validate(envelope.event), BOT_OPEN_ID)
    rk = route_for(inbound, Policy(), PROFILE).key
    found = [name for name, present in [
        ("seen_message", r.exists(keys.seen_message(inbound.message_id))),
        ("seen_content", r.exists(keys.seen_content(inbound.content_key()))),
        ("inbox", r.llen(keys.inbox(rk))),
        ("dirty", r.zscore(keys.dirty, rk) is not None),
    ] if present]
    return found + ["kick" for kick in r.lrange(keys.kicks, 0, -1) if rk in kick]


def event(chat: str, **kw: Any) -> dict[str, Any]:
    return message_event(chat_id=chat, chat_type=kw.pop("chat_type", "p2p"), text=kw.pop("text", "hi"),
                         token=VERIFICATION_TOKEN, app_id=APP_ID, **kw)


def post_raw(web: WebServer, body: bytes, headers: dict[str, str]) -> requests.Response:
    return requests.post(f"{web.url}/feishu/events", data=body, headers=headers, timeout=10)


def assert_json_error(resp: requests.Response, status: int) -> str:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    assert "Traceback" not in resp.text
    return str(resp.json()["error"])


def kept(r: redis.Redis, keys: Keys, event_id: str) -> list[dict[str, Any]]:
    return [k for k in (json.loads(x) for x in r.lrange(keys.rejected, 0, 200))
            if isinstance(k.get("header"), dict) and k["header"].get("event_id") == event_id]


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
                                    "wrong_key", "unsigned_event", "unsigned_plain_event", "unsigned_garbled_encrypt"])
def test_unauthenticated_requests_get_401_and_enqueue_nothing(web, r, keys, attack: str) -> None:
    payload = event(unique("oc_attack"))
    now = None
    if attack == "wrong_token":
        payload["header"]["token"] = "forged"
    if attack == "stale_timestamp":
        now = time.time() - 330  # well past the 300 s window: a slow machine must not make it a boundary case
    if attack == "future_timestamp":
        now = time.time() + 330
    key = "someone-else" if attack == "wrong_key" else ENCRYPT_KEY
    body, headers = signed_request(payload, encrypt_key=key, encrypt=attack != "unsigned_plain_event", now=now)
    if attack == "bad_signature":
        headers["X-Lark-Signature"] = "f" * 64
    if attack.startswith("unsigned"):
        headers = {"Content-Type": "application/json"}
    if attack == "unsigned_garbled_encrypt":
        body = json.dumps({"encrypt": json.loads(body)["encrypt"][:-4]}).encode()
    assert_json_error(post_raw(web, body, headers), 401)
    assert traces(r, keys, payload) == []


def test_the_trace_check_sees_an_accepted_event(web, r, keys) -> None:
    """The 401 test's negative check can fail: the same event, authentic, leaves every trace."""
    payload = event(unique("oc_ok"))
    resp = web.post(payload)
    assert resp.status_code == 200 and resp.headers["Content-Type"] == "application/json"
    assert resp.json() == {"msg": "success"}
    assert traces(r, keys, payload) == ["seen_message", "seen_content", "inbox", "dirty", "kick"]


def test_garbage_json_is_400(web: WebServer) -> None:
    body = b"{not json"
    resp = post_raw(web, body, sign(body, ENCRYPT_KEY))
    assert resp.status_code == 400
    assert resp.json()["error"]


@pytest.mark.parametrize("token_at", ["header", "top"])
def test_signed_but_malformed_event_is_400_and_kept_without_its_token(web: WebServer, r, keys, token_at) -> None:
    payload = event(unique("oc_bad"))
    del payload["event"]["message"]["chat_id"]
    if token_at == "top":  # the verification token where schema 1.0 put it (issue 14 C: kept without it too)
        payload["token"] = payload["header"].pop("token")
    resp = web.post(payload)
    assert "chat_id" in assert_json_error(resp, 400)
    mine = kept(r, keys, payload["header"]["event_id"])
    assert len(mine) == 1 and "token" not in mine[0]["header"] and "token" not in mine[0]
    assert VERIFICATION_TOKEN not in json.dumps(r.lrange(keys.rejected, 0, -1))


def test_oversized_body_is_413(web: WebServer, env: dict[str, str]) -> None:
    payload = event(unique("oc_big"))
    payload["event"]["message"]["content"] = json.dumps({"text": "x" * 400_000})
    resp = web.post(payload)
    assert resp.status_code == 413
    assert resp.json()["error"]


def test_unknown_event_type_is_200_and_ignored(web, r, keys) -> None:
    payload = event(unique("oc_unknown"))
    payload["header"]["event_type"] = "im.message.reaction.created_v1"
    resp = web.post(payload)
    assert resp.status_code == 200
    assert traces(r, keys, payload) == []


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


def _challenges_counted(web: WebServer) -> float:
    found = re.search(r'^feishu_events_total\{outcome="challenge",status="200"\} (\S+)$',
                      requests.get(f"{web.url}/metrics", timeout=5).text, re.M)
    return float(found.group(1)) if found else 0.0


def test_health_ready_and_metrics(web: WebServer) -> None:
    assert requests.get(f"{web.url}/healthz", timeout=5).json() == {"status": "ok"}
    assert requests.get(f"{web.url}/readyz", timeout=5).status_code == 200
    before = _challenges_counted(web)
    web.post(url_verification("c", token=VERIFICATION_TOKEN), encrypt=False)
    web.post(url_verification("c", token=VERIFICATION_TOKEN), encrypt=False)
    assert _challenges_counted(web) == before + 2  # each event counted under its outcome and status
    assert "routes_with_pending_work" in requests.get(f"{web.url}/metrics", timeout=5).text


# --- malformed input: 400 with a clear JSON error, never a 5xx or a traceback (defect 11) -------------

DEEP = b'{"a":' + b"[" * 50_000 + b"]" * 50_000 + b"}"  # far past any recursion limit, under the body cap


@pytest.mark.parametrize("signed", [False, True])
def test_deeply_nested_json_is_400(web: WebServer, signed: bool) -> None:
    headers = sign(DEEP, ENCRYPT_KEY) if signed else {"Content-Type": "application/json"}
    assert "nested too deeply" in assert_json_error(post_raw(web, DEEP, headers), 400)


def test_deeply_nested_encrypted_payload_is_400(web: WebServer) -> None:
    body = json.dumps({"encrypt": encrypt(DEEP.decode(), ENCRYPT_KEY)}).encode()
    assert "nested too deeply" in assert_json_error(post_raw(web, body, sign(body, ENCRYPT_KEY)), 400)


@pytest.mark.parametrize(("message_type", "content", "why"), [
    ("text", {"text": 5}, "text: Input should be a valid string"),
    ("post", {"title": "t", "content": "not a list"}, "content: Input should be a valid list"),
    ("post", {"title": "t", "content": [[{"tag": "text", "text": ["x"]}]]}, "content.0.0.text"),
    ("system", {"template": "{x}", "x": [{"name": 1}]}, "system content cannot be read"),
    ("text", "[1]", "not a JSON object"),
    ("text", '{"text": ' + "[" * 5000 + "]" * 5000 + "}", "nested too deeply"),
    ("text", '{"text": "\\ud800"}', "lone UTF-16 surrogate"),
])
def test_content_of_the_wrong_shape_is_400_and_kept(web, r, keys, message_type: str, content: Any,
                                                    why: str) -> None:
    raw = content if isinstance(content, str) else json.dumps(content)
    payload = event(unique("oc_shape"), message_type=message_type, content=raw)
    assert why in assert_json_error(web.post(payload), 400)
    assert len(kept(r, keys, payload["header"]["event_id"])) == 1
    assert not r.exists(keys.seen_message(payload["event"]["message"]["message_id"]))


def _with_lone_surrogate(payload: dict[str, Any]) -> str:
    """JSON text whose message_id holds a `\\ud800` escape (json.dumps writes lone surrogates as escapes)."""
    payload["event"]["message"]["message_id"] = "om_\ud800"
    return json.dumps(payload)


@pytest.mark.parametrize("how", ["unsigned", "signed_plain", "encrypted"])
def test_lone_surrogate_escapes_are_400(web, r, keys, how: str) -> None:
    payload = event(unique("oc_sur"))
    text = _with_lone_surrogate(payload)
    body = text.encode() if how != "encrypted" else json.dumps({"encrypt": encrypt(text, ENCRYPT_KEY)}).encode()
    headers = {"Content-Type": "application/json"} if how == "unsigned" else sign(body, ENCRYPT_KEY)
    assert "surrogate" in assert_json_error(post_raw(web, body, headers), 400)
    assert len(kept(r, keys, payload["header"]["event_id"])) == (0 if how == "unsigned" else 1)


@pytest.mark.parametrize("garble", ["truncated", "other_key", "number", "null", "empty", "list"])
def test_signed_body_that_cannot_be_decrypted_is_400_not_401(web, r, keys, garble: str) -> None:
    payload = event(unique("oc_undecryptable"))
    token = json.loads(signed_request(payload, encrypt_key=ENCRYPT_KEY)[0])["encrypt"]
    value = {"truncated": token[:-4], "other_key": encrypt("{}", "other-key", iv=bytes(16)), "number": 5,
             "null": None, "empty": "", "list": [token]}[garble]
    body = json.dumps({"encrypt": value}).encode()
    assert "cannot be decrypted" in assert_json_error(post_raw(web, body, sign(body, ENCRYPT_KEY)), 400)
    assert traces(r, keys, payload) == []


@pytest.mark.parametrize("message_type", ["text", "post", "image", "file", "audio", "media", "sticker", "folder",
                                          "interactive", "merge_forward", "share_chat", "share_user", "system",
                                          "location", "video_chat", "todo", "vote", "hongbao", "calendar",
                                          "share_calendar_event", "general_calendar", "some_new_type"])
def test_every_documented_message_type_is_accepted(web, r, keys, message_type: str) -> None:
    content = None if message_type != "some_new_type" else '{"anything": [1, 2]}'
    payload = event(unique("oc_types"), message_type=message_type, content=content)
    assert web.post(payload).status_code == 200
    assert "inbox" in traces(r, keys, payload)


# --- sender ids (defect 5) and other bots (defect 10) ------------------------------------------------------

def _sender(payload: dict[str, Any], ids: dict[str, str], sender_type: str = "user") -> dict[str, Any]:
    payload["event"]["sender"]["sender_id"] = ids
    payload["event"]["sender"]["sender_type"] = sender_type
    return payload


def test_group_senders_without_open_id_get_separate_routes(web, r, keys) -> None:
    chat = unique("oc_noopen")
    sent = [_sender(event(chat, chat_type="group", text="@_user_1 hi", mentions=[mention(BOT_OPEN_ID, "助手")]),
                    ids) for ids in ({"union_id": "on_a"}, {"union_id": "on_b"}, {"user_id": "u_c"})]
    for payload in sent:
        assert web.post(payload).status_code == 200
    routes = [f"feishu:{PROFILE}:group:{chat}:{who}" for who in ("on_a", "on_b", "u_c")]
    assert [r.llen(keys.inbox(rk)) for rk in routes] == [1, 1, 1]
    assert r.llen(keys.inbox(f"feishu:{PROFILE}:group:{chat}:")) == 0


def test_a_message_without_any_sender_id_is_refused_with_200(web, r, keys, caplog) -> None:
    payload = _sender(event(unique("oc_nosender")), {"open_id": "", "union_id": ""})
    with caplog.at_level(logging.INFO):
        assert web.post(payload).status_code == 200
    assert r.exists(keys.seen_message(payload["event"]["message"]["message_id"])) == 0
    assert any(rec.getMessage() == "message not admitted" and getattr(rec, "reason", "") == "no sender id"
               and getattr(rec, "event_id", None) == payload["header"]["event_id"] for rec in caplog.records)


@pytest.fixture(scope="module")
def bots_allowed(env: dict[str, str], r: redis.Redis) -> Iterator[tuple[WebServer, Keys]]:
    profile = unique("bots")
    server = WebServer(settings_from({**env, "BOT_PROFILE": profile, "ROUTING_BOT_MESSAGES": "allow"}))
    wait_for(lambda: r.get(Keys(profile).bot_open_id) == BOT_OPEN_ID, 30, what="bot identity cached")
    yield server, Keys(profile)
    server.stop()


@pytest.mark.parametrize(("ids", "sender_type", "stored"), [
    ({"open_id": "ou_other_bot"}, "app", True),
    ({"open_id": "ou_other_bot"}, "bot", True),
    ({"open_id": BOT_OPEN_ID}, "app", False),  # our own message
    ({"union_id": "on_bot"}, "bot", False),  # cannot be told apart from ourselves
])
def test_bot_messages_allowed_unless_they_may_be_our_own(bots_allowed, r, ids, sender_type, stored) -> None:
    web, keys = bots_allowed
    payload = _sender(event(unique("oc_bots"), chat_type="group", text="@_user_1 hi",
                            mentions=[mention(BOT_OPEN_ID, "助手")]), ids, sender_type)
    assert web.post(payload).status_code == 200
    assert r.exists(keys.seen_message(payload["event"]["message"]["message_id"])) == int(stored)


def test_bot_message_before_identity_is_known_is_503(feishu, claude, redis_url) -> None:
    env = service_env(redis_url, feishu.url, claude.url, BOT_PROFILE=unique("noid"), ROUTING_BOT_MESSAGES="allow",
                      FEISHU_DOMAIN="http://127.0.0.1:1")  # identity can't be fetched
    web = WebServer(settings_from(env))
    try:
        payload = _sender(event(unique("oc_p"), chat_type="p2p"), {"open_id": "ou_other_bot"}, "app")
        assert web.post(payload).status_code == 503
    finally:
        web.stop()


@pytest.mark.parametrize("where", ["header.create_time", "event.message.content", "event.message.mentions",
                                   "event.sender.sender_id", "event.message.message_id", "event.extra"])
def test_values_nested_right_up_to_the_parser_limit_are_400(web: WebServer, where: str) -> None:
    """Depths the JSON decoder still accepts must not overflow the stack further down (validation, keeping)."""
    statuses = []
    for depth in range(940, 1001, 3):  # the decoder gives up near 970 here; both sides of it
        payload = event(unique("oc_deep"))
        *path, last = where.split(".")
        target = payload
        for step in path:
            target = target[step]
        target[last] = "NESTED"
        body = json.dumps(payload).replace('"NESTED"', "[" * depth + '"\\ud83d\\ude00"' + "]" * depth).encode()
        resp = post_raw(web, body, sign(body, ENCRYPT_KEY))
        assert resp.status_code < 500, (depth, resp.text)
        statuses.append(resp.status_code)
    assert set(statuses) == {400} if where != "event.extra" else set(statuses) <= {200, 400}


def _commands_during(r: redis.Redis, act: Any, profile: str) -> list[str]:
    """Every command Redis executed for `profile` while `act` ran, as MONITOR shows it: those naming the profile's
    keys, and the commands of a script such a call ran (`lua:`; a script runs whole, so its commands follow its
    EVALSHA). Other processes on the same server (another module's stack) are left out; commands naming no key at
    all are kept, whoever sent them."""
    marker = unique("monitor-end")
    seen: list[str] = []
    ours = False
    with r.monitor() as m:
        act()
        r.echo(marker)
        while True:
            cmd = m.next_command()
            text, lua = cmd["command"], cmd["client_type"] == "lua"
            if marker in text:
                return seen
            if not lua:
                ours = f"fb:{profile}:" in text or len(text.split()) == 1
            if ours:
                seen.append(f"{'lua:' if lua else ''}{text.split()[0].upper()}")


def test_an_accepted_event_is_one_script_call_that_leaves_the_route_indexes_to_its_run(web: WebServer,
                                                                                         r: redis.Redis,
                                                                                         keys: Keys) -> None:
    """Issue 32: the request path stays thin. It makes one script call (PUSH); whatever the console learns from an
    event (the route indexes of all routes, the chat, the person, the topic) is written by the run that takes it
    (tests/test_pipeline.py), never by the webhook, in Python or in the script."""
    chat, thread, sender = unique("oc_thin"), unique("omt_thin"), unique("ou_thin")
    payload = event(chat, chat_type="group", text="@_user_1 hi", sender_open_id=sender, thread_id=thread,
                    mentions=[mention(BOT_OPEN_ID, "bot")])
    web.post(event(unique("oc_warm"))).raise_for_status()  # script loaded, identity and replica count known
    r.ping()
    ran = _commands_during(r, lambda: web.post(payload).raise_for_status(), PROFILE)
    # Left out: connection handshakes, and INFO: the replica count, re-read at most once a second, not per event.
    outside = [c for c in ran if not c.startswith("lua:") and c not in ("HELLO", "CLIENT", "INFO")]
    assert outside == ["EVALSHA"], ran
    envelope = Envelope.model_validate(payload)
    rk = route_for(to_inbound(envelope, MessageEvent.model_validate(envelope.event), BOT_OPEN_ID), Policy(),
                   PROFILE).key
    assert r.llen(keys.inbox(rk)) == 1  # stored
    for index in (keys.routes, keys.routes_of(chat), keys.routes_of(sender), keys.routes_of(thread)):
        assert r.zscore(index, rk) is None, index  # nobody serves this profile: no run took it, so no index has it
