"""Fuzzing the real endpoint: whatever arrives, the answer is a deliberate JSON status, never a 500."""

from __future__ import annotations

import json

import pytest
import requests
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bot.crypto import sign
from sandbox.events import message_event, signed_request
from tests.harness import APP_ID, ENCRYPT_KEY, VERIFICATION_TOKEN, WebServer, settings_from

ALLOWED = {200, 400, 401, 413}
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def web(env: dict[str, str]) -> WebServer:
    server = WebServer(settings_from({**env, "BOT_PROFILE": "fuzz"}))
    yield server
    server.stop()


def check(resp: requests.Response) -> None:
    assert resp.status_code in ALLOWED, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    assert "Traceback" not in resp.text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300))
def test_random_signed_bytes(web: WebServer, body: bytes) -> None:
    check(requests.post(f"{web.url}/feishu/events", data=body, headers=sign(body, ENCRYPT_KEY), timeout=10))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(payload=json_values)
def test_random_signed_encrypted_json(web: WebServer, payload: object) -> None:
    body, headers = signed_request({"wrapped": payload} if not isinstance(payload, dict) else payload,
                                   encrypt_key=ENCRYPT_KEY)
    check(requests.post(f"{web.url}/feishu/events", data=body, headers=headers, timeout=10))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(field=st.sampled_from(["message_id", "chat_id", "chat_type", "message_type", "content", "mentions",
                              "thread_id", "create_time"]),
       value=json_values)
def test_authentic_events_with_a_mangled_field(web: WebServer, field: str, value: object) -> None:
    payload = message_event(chat_id="oc_fuzz", chat_type="group", text="x", token=VERIFICATION_TOKEN,
                            app_id=APP_ID)
    payload["event"]["message"][field] = value
    body, headers = signed_request(json.loads(json.dumps(payload)), encrypt_key=ENCRYPT_KEY)
    check(requests.post(f"{web.url}/feishu/events", data=body, headers=headers, timeout=10))
