"""Fuzzing the real endpoint: whatever arrives, the answer is a deliberate JSON status, never a 5xx.

Authentic requests (right token, valid signature, every field right-typed however odd its value) must
reach admission; forged ones get a 401 and leave no trace. The profile is served by nobody, so what a
request stores stays put and is checked directly.
"""

from __future__ import annotations

import json
import logging
import os
from collections import Counter
from collections.abc import Iterator

import pytest
import redis
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.crypto import sign
from core.keys import Keys
from sandbox.feishu.events import message_event, signed_request
from tests.harness import (
    APP_ID,
    BOT_OPEN_ID,
    ENCRYPT_KEY,
    VERIFICATION_TOKEN,
    WebServer,
    settings_from,
    unique,
    wait_for,
)
from tests.strategies import FeishuRequest, authentic_requests, forged_requests

MAX_BODY = 262_144  # the default MAX_BODY_BYTES
PROFILE = unique("fuzz")
KEYS = Keys(PROFILE)
_HEALTH = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large,
           HealthCheck.large_base_example]


SCALE = float(os.environ.get("FUZZ_SCALE", "1"))  # e.g. FUZZ_SCALE=20 for a long local run


def fuzz(examples: int) -> settings:
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, suppress_health_check=_HEALTH)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def web(env: dict[str, str], r: redis.Redis) -> Iterator[WebServer]:
    server = WebServer(settings_from({**env, "BOT_PROFILE": PROFILE, "MAX_BODY_BYTES": str(MAX_BODY)}))
    wait_for(lambda: r.get(KEYS.bot_open_id) == BOT_OPEN_ID, 30, what="bot identity cached at start-up")
    yield server
    server.stop()


@pytest.fixture(autouse=True)
def no_error_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    yield
    bad = [r.getMessage() for r in caplog.records if r.name.startswith(("bot", "app"))
           and (r.levelno >= logging.ERROR or r.exc_info)]
    assert not bad


def post(web: WebServer, body: bytes, headers: dict[str, str]) -> requests.Response:
    resp = requests.post(f"{web.url}/feishu/events", data=body, headers=headers, timeout=10)
    # With Redis up there is no reason for a 503, and a 5xx of any other kind is a bug.
    assert resp.status_code < 500, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    assert "Traceback" not in resp.text
    assert resp.status_code == 200 or resp.json()["error"]
    return resp


def test_authentic_events_of_every_type_reach_admission(web: WebServer, r: redis.Redis) -> None:
    outcomes: Counter[str] = Counter()

    @fuzz(220)
    @given(authentic_requests(ENCRYPT_KEY, VERIFICATION_TOKEN, APP_ID, BOT_OPEN_ID, huge_bytes=MAX_BODY * 3 // 4))
    def check(req: FeishuRequest) -> None:
        resp = post(web, req.body, req.headers)
        if len(req.body) > MAX_BODY:
            assert resp.status_code == 413
            outcomes["too large"] += 1
            return
        assert resp.status_code == 200, resp.text  # right-typed and authentic: never a 400
        stored = r.exists(KEYS.seen_message(req.message_id))
        outcomes["stored" if stored else "ignored"] += 1

    check()
    # The generator must really drive the queueing path, not only the refusals.
    assert outcomes["stored"] >= 20 * SCALE and outcomes["ignored"] >= 20 * SCALE, outcomes


@fuzz(120)
@given(forged_requests(ENCRYPT_KEY, VERIFICATION_TOKEN, APP_ID))
def test_forged_requests_get_401_and_leave_no_trace(web: WebServer, r: redis.Redis,
                                                    forged: tuple[str, FeishuRequest]) -> None:
    kind, req = forged
    resp = post(web, req.body, req.headers)
    assert resp.status_code == 401, (kind, resp.text)
    assert not r.exists(KEYS.seen_message(req.message_id)), kind


@fuzz(50)
@given(body=st.binary(max_size=300))
def test_random_signed_bytes(web: WebServer, body: bytes) -> None:
    assert post(web, body, sign(body, ENCRYPT_KEY)).status_code in (200, 400, 401)


@fuzz(50)
@given(payload=json_values, encrypted=st.booleans())
def test_random_signed_json(web: WebServer, payload: object, encrypted: bool) -> None:
    body, headers = signed_request({"wrapped": payload} if not isinstance(payload, dict) else payload,
                                   encrypt_key=ENCRYPT_KEY, encrypt=encrypted)
    assert post(web, body, headers).status_code in (200, 400, 401)


@fuzz(60)
@given(where=st.sampled_from(["message", "sender", "event", "header", "envelope"]),
       field=st.sampled_from(["message_id", "chat_id", "chat_type", "message_type", "content", "mentions",
                              "thread_id", "create_time", "sender_id", "sender_type", "event_id", "event_type",
                              "schema", "header", "event", "sender", "message"]),
       value=json_values)
def test_authentic_envelopes_with_a_field_of_any_type(web: WebServer, where: str, field: str, value: object) -> None:
    payload = message_event(chat_id="oc_fuzz", chat_type="group", text="x", token=VERIFICATION_TOKEN, app_id=APP_ID)
    target = {"message": payload["event"]["message"], "sender": payload["event"]["sender"],
              "event": payload["event"], "header": payload["header"], "envelope": payload}[where]
    target[field] = value
    body, headers = signed_request(json.loads(json.dumps(payload)), encrypt_key=ENCRYPT_KEY)
    assert post(web, body, headers).status_code in (200, 400, 401)
