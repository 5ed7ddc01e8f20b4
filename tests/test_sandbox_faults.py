"""Fault profiles, poison markers and inspection of the stand-ins, through the real lark-oapi and anthropic SDKs."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import anthropic
import lark_oapi as lark
import pytest
import requests
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.cache import LocalCache
from lark_oapi.core.token.manager import TokenManager

from sandbox.claude.standin import ClaudeStandin
from sandbox.feishu.emulator import FeishuEmulator

SECRET = "fault-test-secret"
MODEL = "claude-sonnet-5-5"
HI: list[Any] = [{"role": "user", "content": "hi"}]


# One emulator and one stand-in for the module (starting servers per test costs more than the tests);
# each test starts from reset() and a fresh SDK token cache.
@pytest.fixture(scope="module")
def feishu_server() -> Iterator[FeishuEmulator]:
    emu = FeishuEmulator(app_id=f"cli_{uuid.uuid4().hex[:12]}", app_secret=SECRET).start()
    yield emu
    emu.stop()


@pytest.fixture(scope="module")
def claude_server() -> Iterator[ClaudeStandin]:
    server = ClaudeStandin().start()
    yield server
    server.stop()


@pytest.fixture
def emulator(feishu_server: FeishuEmulator, monkeypatch: pytest.MonkeyPatch) -> FeishuEmulator:
    feishu_server.reset()
    monkeypatch.setattr(TokenManager, "cache", LocalCache())  # lark-oapi caches tokens process-wide
    return feishu_server


@pytest.fixture
def standin(claude_server: ClaudeStandin) -> ClaudeStandin:
    claude_server.reset()
    return claude_server


def lark_client(emulator: FeishuEmulator, timeout: float = 5.0) -> lark.Client:
    builder = lark.Client.builder().app_id(emulator.app_id).app_secret(SECRET).domain(emulator.url)
    return builder.timeout(timeout).log_level(lark.LogLevel.CRITICAL).build()


def reply(client: lark.Client, target: str, text: str = "好的", msg_uuid: str | None = None) -> Any:
    body = ReplyMessageRequestBody.builder().content(json.dumps({"text": text})).msg_type("text")
    if msg_uuid:
        body = body.uuid(msg_uuid)
    req = ReplyMessageRequest.builder().message_id(target).request_body(body.build()).build()
    return client.im.v1.message.reply(req)


def create(client: lark.Client, chat_id: str, text: str = "hi") -> Any:
    body = CreateMessageRequestBody.builder().receive_id(chat_id).msg_type("text")
    body = body.content(json.dumps({"text": text}))
    req = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body.build()).build()
    return client.im.v1.message.create(req)


def model(standin: ClaudeStandin, timeout: float = 5.0) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-test", base_url=standin.url, max_retries=0, timeout=timeout)


def ask(client: anthropic.Anthropic, text: str = "hi", messages: list[Any] | None = None) -> str:
    msg = client.messages.create(model=MODEL, max_tokens=32, messages=messages or [{"role": "user", "content": text}])
    return "".join(b.text for b in msg.content if isinstance(b, anthropic.types.TextBlock))


def control(server: FeishuEmulator | ClaudeStandin, method: str, path: str, **kwargs: Any) -> Any:
    resp = requests.request(method, f"{server.url}/_sandbox/{path}", timeout=5, **kwargs)
    assert resp.status_code == 200, resp.text
    return resp.json()


# -- Feishu emulator -----------------------------------------------------------------------------------

# kind → (HTTP status, body code, bot messages stored); None = the SDK raises a transport error.
FEISHU_KINDS = {
    "rate_limit": ((429, 99991400), 0),
    "chat_limit": ((400, 230020), 0),
    "gateway": ((503, -1), 0),
    "gateway_after": ((503, -1), 1),
    "reset": (None, 0),
    "reset_after": (None, 1),
}


@pytest.mark.parametrize("kind", FEISHU_KINDS)
def test_feishu_fault_kinds_reach_lark(emulator: FeishuEmulator, kind: str) -> None:
    client = lark_client(emulator)
    emulator.add_message("om_user", "oc_team")
    control(emulator, "POST", "profile", json={"ops": ["reply"], "rate": 1.0, "mix": {kind: 1},
                                               "reset_seconds": 0, "gateway_status": 503})
    expected, stored = FEISHU_KINDS[kind]
    if expected is None:
        with pytest.raises(requests.ConnectionError, match="reset by peer"):
            reply(client, "om_user")
    else:
        resp = reply(client, "om_user")
        assert (resp.raw.status_code, resp.code) == expected
        if kind == "rate_limit":
            assert resp.raw.headers["x-ogw-ratelimit-reset"] == "0"
    assert len(emulator.replies_to("om_user")) == stored  # the response has been handled: no race
    assert control(emulator, "GET", "stats")["faults"] == {"reply": {kind: 1}}
    control(emulator, "DELETE", "profile", params={"op": "reply"})
    assert reply(client, "om_user").code == 0


def test_feishu_token_invalid_revokes_the_token(emulator: FeishuEmulator) -> None:
    client = lark_client(emulator)
    emulator.add_message("om_user", "oc_team")
    control(emulator, "POST", "faults", json={"op": "reply", "kind": "token_invalid"})
    assert reply(client, "om_user").code == 99991663
    assert reply(client, "om_user").code == 99991663  # the SDK keeps its cached token, which is now dead
    TokenManager.cache = LocalCache()  # what the service does on 99991663: drop the token, fetch anew
    assert reply(client, "om_user").code == 0
    stats = emulator.stats
    assert (stats["tokens_revoked"], stats["token_requests"], stats["bot_messages"]) == (1, 2, 1)


def test_feishu_timeout_applies_then_the_same_uuid_returns_the_original(emulator: FeishuEmulator) -> None:
    impatient = lark_client(emulator, timeout=0.5)
    emulator.add_message("om_user", "oc_team")
    emulator.inject_fault("reply", "timeout", timeout_seconds=30)  # stop() cuts the wait short
    with pytest.raises(requests.Timeout):
        reply(impatient, "om_user", msg_uuid="turn-1-chunk-0")
    stored = emulator.wait_for(lambda: emulator.replies_to("om_user"))
    retry = reply(impatient, "om_user", msg_uuid="turn-1-chunk-0")
    assert retry.code == 0 and retry.data.message_id == stored[0]["message_id"]
    assert len(emulator.replies_to("om_user")) == 1 and emulator.dedupe_hits == 1


def test_feishu_timeout_before_applying_stores_nothing(emulator: FeishuEmulator) -> None:
    impatient = lark_client(emulator, timeout=0.5)
    emulator.add_message("om_user", "oc_team")
    answered = threading.Event()
    emulator.on("reply", lambda record: answered.set())  # after-hooks run once the outcome is decided
    emulator.inject_fault("reply", "timeout_before", timeout_seconds=30)
    with pytest.raises(requests.Timeout):
        reply(impatient, "om_user", msg_uuid="turn-2-chunk-0")
    assert answered.wait(5)
    assert emulator.replies_to("om_user") == [] and emulator.stats["faults"] == {"reply": {"timeout_before": 1}}


def test_feishu_seeded_profile_fails_its_share_and_replays(emulator: FeishuEmulator) -> None:
    client = lark_client(emulator)
    emulator.add_chat("oc_load")

    def run(calls: int) -> list[int]:
        emulator.set_profile(["create"], 0.3, {"rate_limit": 2, "chat_limit": 1, "gateway": 1}, seed=42,
                             reset_seconds=0)
        return [create(client, "oc_load").code for _ in range(calls)]

    codes = run(200)
    failures = [c for c in codes if c != 0]
    assert 40 <= len(failures) <= 80 and set(failures) == {99991400, 230020, -1}
    stats = emulator.stats
    assert sum(stats["faults"]["create"].values()) == len(failures)
    assert stats["calls"]["create"] == 200 and stats["bot_messages"] == 200 - len(failures)
    emulator.reset(keep_tokens=True)
    emulator.add_chat("oc_load")
    assert run(60) == codes[:60]  # the same seed replays the same faults


def test_feishu_chat_qps_over_control_counts_rejections(emulator: FeishuEmulator) -> None:
    client = lark_client(emulator)
    emulator.add_chat("oc_busy")
    assert control(emulator, "POST", "chat_qps", json={"qps": 1}) == {"qps": 1}
    assert create(client, "oc_busy").code == 0
    assert create(client, "oc_busy").code == 230020
    assert control(emulator, "GET", "stats")["chat_limit_rejections"] == {"oc_busy": 1}
    control(emulator, "POST", "chat_qps", json={"qps": None})
    assert create(client, "oc_busy").code == 0
    sends = control(emulator, "GET", "sends", params={"chat_id": "oc_busy"})
    assert len(sends["sends"]["oc_busy"]) == 2 and sends["peak"]["oc_busy"] in (1, 2)


def test_feishu_feed_stats_and_indexed_lookups(emulator: FeishuEmulator) -> None:
    client = lark_client(emulator)
    emulator.add_message("om_a", "oc_one")
    emulator.add_message("om_b", "oc_two")
    first = [reply(client, "om_a", "a1").data.message_id, reply(client, "om_b", "b1").data.message_id]
    page = control(emulator, "GET", "feed")
    assert [m["message_id"] for m in page["items"]] == first and page["cursor"] == 4
    later = reply(client, "om_a", "a2", msg_uuid="u-a2").data.message_id
    assert reply(client, "om_a", "a2", msg_uuid="u-a2").data.message_id == later
    page = control(emulator, "GET", "feed", params={"cursor": page["cursor"]})
    assert [m["message_id"] for m in page["items"]] == [later] and page["cursor"] == 5
    everything = control(emulator, "GET", "feed", params={"cursor": 0, "bot_only": 0})["items"]
    assert [m["message_id"] for m in everything][:2] == ["om_a", "om_b"]
    assert [m["message_id"] for m in emulator.replies_to("om_a")] == [first[0], later]
    assert [m["message_id"] for m in emulator.bot_messages(chat_id="oc_two")] == [first[1]]
    stats = control(emulator, "GET", "stats")
    assert stats["calls"] == {"token": 1, "reply": 4} and stats["dedupe_hits"] == 1
    assert {chat: len(times) for chat, times in emulator.sends().items()} == {"oc_one": 2, "oc_two": 1}
    assert [r["op"] for r in control(emulator, "GET", "requests", params={"since": 3})] == ["reply", "reply"]


def test_feishu_reset_keeps_tokens_and_clears_fault_state(emulator: FeishuEmulator) -> None:
    client = lark_client(emulator)
    emulator.add_message("om_user", "oc_team")
    assert reply(client, "om_user").code == 0
    emulator.set_profile("reply", 1.0, {"gateway": 1})
    emulator.inject("reply", code=230020)
    emulator.set_chat_qps(1)
    control(emulator, "POST", "reset", json={"keep_tokens": True})
    assert control(emulator, "GET", "profile") == {} and emulator.chat_qps is None
    emulator.add_message("om_user", "oc_team")
    assert reply(client, "om_user").code == 0 and reply(client, "om_user").code == 0  # cached token still good
    stats = emulator.stats
    assert stats["calls"] == {"reply": 2} and stats["faults"] == {} and stats["token_requests"] == 0


# -- Claude stand-in -----------------------------------------------------------------------------------

CLAUDE_KINDS: dict[str, type[Exception]] = {
    "overloaded": anthropic.OverloadedError,
    "rate_limit": anthropic.RateLimitError,
    "api_error": anthropic.InternalServerError,
    "reset": anthropic.APIConnectionError,
    "timeout": anthropic.APITimeoutError,
}


@pytest.mark.parametrize("kind", CLAUDE_KINDS)
def test_claude_fault_kinds_reach_the_sdk(standin: ClaudeStandin, kind: str) -> None:
    client = model(standin, timeout=0.5)
    control(standin, "POST", "profile", json={"rate": 1.0, "mix": {kind: 1}, "retry_after": 0.1,
                                              "timeout_seconds": 30})
    with pytest.raises(CLAUDE_KINDS[kind]) as caught:
        ask(client)
    assert type(caught.value) is CLAUDE_KINDS[kind]  # e.g. a reset is not reported as a timeout
    if kind == "rate_limit":
        assert caught.value.response.headers["retry-after"] == "0.1"  # type: ignore[attr-defined]
    assert control(standin, "GET", "stats")["faults"] == {"messages": {kind: 1}}
    standin.clear_profile()
    assert ask(client) == "收到。你说的是：hi"


def test_claude_queued_kinds_keep_the_old_fail_api(standin: ClaudeStandin) -> None:
    client = model(standin)
    control(standin, "POST", "fail", json={"kind": "reset"})
    standin.fail(529, "overloaded_error")
    with pytest.raises(anthropic.APIConnectionError):
        ask(client)
    with pytest.raises(anthropic.OverloadedError):
        ask(client)
    assert ask(client).endswith("hi")
    assert [e["status"] for e in standin.timeline] == [0, 529, 200]


def test_claude_seeded_profile_fails_its_share_and_replays(standin: ClaudeStandin) -> None:
    client = model(standin)

    def run(calls: int) -> list[str]:
        standin.set_profile(0.3, {"overloaded": 1, "rate_limit": 1, "api_error": 1, "reset": 1}, seed=7)
        outcomes = []
        for _ in range(calls):
            try:
                ask(client)
                outcomes.append("ok")
            except anthropic.APIError as exc:
                outcomes.append(type(exc).__name__)
        return outcomes

    outcomes = run(200)
    failed = [o for o in outcomes if o != "ok"]
    assert 40 <= len(failed) <= 80
    assert set(failed) == {"OverloadedError", "RateLimitError", "InternalServerError", "APIConnectionError"}
    assert sum(standin.stats["faults"]["messages"].values()) == len(failed)
    standin.reset()
    assert run(60) == outcomes[:60]  # the same seed replays the same faults


def test_claude_poison_marker_fails_only_its_requests(standin: ClaudeStandin) -> None:
    client = model(standin)
    control(standin, "POST", "fail_when", json={"marker": "POISON-7", "status": 529, "error_type": "overloaded_error"})
    with pytest.raises(anthropic.OverloadedError):
        ask(client, '<message sender="ou_a">普通</message>\n<message sender="ou_b">POISON-7 坏消息</message>')
    earlier: list[Any] = [{"role": "user", "content": "POISON-7"}, {"role": "assistant", "content": "好"},
                          {"role": "user", "content": "下一个问题"}]
    assert ask(client, messages=earlier) == "收到。你说的是：下一个问题"  # only the last user turn counts
    with pytest.raises(anthropic.OverloadedError):
        ask(client, "again POISON-7")  # persistent until cleared
    assert control(standin, "GET", "fail_when")[0]["marker"] == "POISON-7"
    control(standin, "DELETE", "fail_when", params={"marker": "POISON-7"})
    assert ask(client, "POISON-7").endswith("POISON-7")
    standin.fail_when("CUT-9", kind="reset")  # a poison can also be any fault kind
    with pytest.raises(anthropic.APIConnectionError):
        ask(client, "CUT-9")
    stats = standin.stats
    assert stats["poison_hits"] == {"POISON-7": 2, "CUT-9": 1} and stats["faults"] == {"messages": {"poison": 3}}
    assert [e["fault"] for e in standin.timeline] == ["poison", None, "poison", None, "poison"]


def test_claude_timeline_shows_overlapping_calls_of_one_conversation(standin: ClaudeStandin) -> None:
    client = model(standin)
    both_arrived = threading.Barrier(2, timeout=5)

    def hold(body: dict[str, Any]) -> None:  # R1's two calls wait for each other: surely concurrent
        if body["messages"][-1]["content"].startswith("route R1"):
            both_arrived.wait()

    standin.on_request(hold)
    first = threading.Thread(target=ask, args=(client, "route R1 first"))
    first.start()
    ask(client, "route R1 second")
    first.join(5)
    ask(client, "route R2 alone")
    ask(client, "route R2 after")
    timeline = control(standin, "GET", "timeline")
    assert [e["status"] for e in timeline] == [200] * 4
    assert all(e["start"] <= e["end"] for e in timeline)
    assert [e["seq"] for e in control(standin, "GET", "timeline", params={"since": 2})] == [2, 3]
    assert control(standin, "GET", "overlaps", params={"pattern": r"route (R\d)"}) == [[0, 1]]
    assert standin.overlaps(lambda e: "R2" if "R2" in e["last_user"] else None) == []
    standin.inject_fault("timeout", timeout_seconds=30)
    with pytest.raises(anthropic.APITimeoutError):
        ask(model(standin, timeout=0.3), "route R3 abandoned")
    ask(client, "route R3 retried")  # the abandoned call is still "running" on the stand-in
    assert standin.overlaps(r"route (R\d)") == [(0, 1)]
    assert standin.overlaps(r"route (R\d)", include_timeouts=True) == [(0, 1), (4, 5)]
    assert standin.stats["calls"] == {"messages": 6} and standin.stats["in_flight"] == 1


def test_claude_midstream_overloaded_breaks_a_stream_after_its_deltas(standin: ClaudeStandin) -> None:
    """The API's mid-stream error: text deltas, then `event: error` (overloaded_error) on an HTTP 200 stream.
    The SDK raises APIStatusError with status 200; our mapping decides by its type: retried."""
    from claude.client import _mapped
    from core.errors import Retryable

    standin.inject_fault("midstream_overloaded", after_deltas=3)
    client = anthropic.Anthropic(api_key="sk-test", base_url=standin.url, max_retries=0)
    texts: list[str] = []
    question = [{"role": "user", "content": "长" * 200}]
    with pytest.raises(anthropic.APIStatusError) as caught, \
            client.messages.stream(model="m", max_tokens=100, messages=question) as s:  # type: ignore[arg-type]
        for event in s:
            if event.type == "text":
                texts.append(event.text)
    exc = caught.value
    assert (exc.status_code, exc.type) == (200, "overloaded_error") and len(texts) == 3, (exc, texts)
    mapped = _mapped(exc)
    assert isinstance(mapped, Retryable) and mapped.code == "overloaded_error"
