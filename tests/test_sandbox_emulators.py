"""The sandbox stand-ins speak the real wire formats: driven here by the real lark-oapi and anthropic SDKs."""

from __future__ import annotations

import json
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
    GetChatRequest,
    GetMessageRequest,
    GetMessageResourceRequest,
    ListMessageRequest,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.cache import LocalCache
from lark_oapi.core.token.manager import TokenManager

from bot.crypto import SignatureVerifier, decrypt
from sandbox.claude.standin import ClaudeStandin
from sandbox.feishu.emulator import FeishuEmulator
from sandbox.feishu.events import (
    FORWARDED_CONTENT,
    card_content,
    image_content,
    mention,
    message_event,
    post_content,
    signed_request,
    url_verification,
)

SECRET = "emulator-test-secret"
MODEL = "claude-sonnet-5-5"


@pytest.fixture
def emulator() -> Iterator[FeishuEmulator]:
    # A fresh app_id per test: lark-oapi caches tenant tokens per app_id, process-wide.
    emu = FeishuEmulator(app_id=f"cli_{uuid.uuid4().hex[:12]}", app_secret=SECRET).start()
    yield emu
    emu.stop()


@pytest.fixture
def client(emulator: FeishuEmulator, monkeypatch: pytest.MonkeyPatch) -> lark.Client:
    monkeypatch.setattr(TokenManager, "cache", LocalCache())
    builder = lark.Client.builder().app_id(emulator.app_id).app_secret(SECRET).domain(emulator.url)
    return builder.log_level(lark.LogLevel.CRITICAL).build()


@pytest.fixture
def standin() -> Iterator[ClaudeStandin]:
    server = ClaudeStandin().start()
    yield server
    server.stop()


@pytest.fixture
def model(standin: ClaudeStandin) -> anthropic.Anthropic:
    return anthropic.Anthropic(api_key="sk-test", base_url=standin.url, max_retries=0)


def reply(client: lark.Client, target: str, text: str = "好的", **options: Any) -> Any:
    body = ReplyMessageRequestBody.builder().content(json.dumps({"text": text})).msg_type("text")
    if "uuid" in options:
        body = body.uuid(options["uuid"])
    if "reply_in_thread" in options:
        body = body.reply_in_thread(options["reply_in_thread"])
    req = ReplyMessageRequest.builder().message_id(target).request_body(body.build()).build()
    return client.im.v1.message.reply(req)


def text_of(message: anthropic.types.Message) -> str:
    return "".join(block.text for block in message.content if isinstance(block, anthropic.types.TextBlock))


def create(client: lark.Client, chat_id: str, content: str, msg_type: str = "text") -> Any:
    body = CreateMessageRequestBody.builder().receive_id(chat_id).msg_type(msg_type).content(content).build()
    req = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
    return client.im.v1.message.create(req)


# -- Feishu emulator -----------------------------------------------------------------------------------


def test_token_and_reply_roundtrip(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_message("om_user1", "oc_team", text="hi")
    resp = reply(client, "om_user1", "你好")
    assert resp.code == 0, resp.msg
    msg = resp.data
    assert msg.message_id.startswith("om_") and msg.parent_id == "om_user1" and msg.root_id == "om_user1"
    assert msg.chat_id == "oc_team" and msg.msg_type == "text" and msg.thread_id is None
    assert (msg.sender.id, msg.sender.id_type, msg.sender.sender_type) == (emulator.app_id, "app_id", "app")
    assert json.loads(msg.body.content) == {"text": "你好"}
    assert emulator.token_requests == 1
    assert [m["message_id"] for m in emulator.replies_to("om_user1")] == [msg.message_id]
    token_call, reply_call = emulator.requests
    assert token_call["op"] == "token" and "Content-Type" not in token_call["headers"]
    assert reply_call["headers"]["Authorization"].startswith("Bearer t-")


def test_uuid_makes_a_reply_idempotent(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_message("om_user1", "oc_team")
    first = reply(client, "om_user1", uuid="reply-om_user1-0")
    second = reply(client, "om_user1", uuid="reply-om_user1-0")
    assert first.code == second.code == 0
    assert second.data.message_id == first.data.message_id
    assert len(emulator.bot_messages()) == 1 and emulator.dedupe_hits == 1
    assert reply(client, "om_user1", uuid="x" * 51).code == 230001


def test_thread_ids_are_inherited_or_created(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_message("om_root", "oc_topics", text="root", thread_id="omt_1")
    inside = emulator.add_message("om_in", "oc_topics", text="inside", thread_id="omt_1")
    assert inside["root_id"] == inside["parent_id"] == "om_root"
    resp = reply(client, "om_in")
    assert (resp.data.thread_id, resp.data.root_id, resp.data.parent_id) == ("omt_1", "om_root", "om_in")

    emulator.add_message("om_plain", "oc_topics", text="plain")
    threaded = reply(client, "om_plain", reply_in_thread=True)
    assert threaded.data.thread_id.startswith("omt_") and threaded.data.thread_id != "omt_1"
    assert reply(client, "om_plain").data.thread_id == threaded.data.thread_id
    assert len(emulator.bot_messages(thread_id="omt_1")) == 1


def test_sends_and_replies_answer_with_the_messages_app_link(emulator: FeishuEmulator, client: lark.Client) -> None:
    """Issue 23 B3: the send and reply answers carry `message_app_link` (lark-oapi 1.7.5 Create/ReplyMessage-
    ResponseBody): a message in a topic opens the topic at its position (`client/thread/open`), any other message
    its chat (`client/chat/open`). A uuid-deduped retry answers with the first send's link."""
    from urllib.parse import parse_qs, urlsplit

    emulator.add_message("om_root", "oc_topics", text="root", thread_id="omt_ab12")
    emulator.add_message("om_in", "oc_topics", text="inside", thread_id="omt_ab12")
    first = reply(client, "om_in", uuid="link-0")
    link = urlsplit(first.data.message_app_link)
    assert (link.scheme, link.netloc, link.path) == ("https", "applink.feishu.cn", "/client/thread/open")
    assert parse_qs(link.query) == {"open_chat_id": ["oc_topics"], "open_thread_id": ["omt_ab12"],
                                    "openchatid": ["oc_topics"], "openthreadid": ["omt_ab12"],
                                    "thread_position": ["2"]}  # the root is 0
    again = reply(client, "om_in", uuid="link-0")
    assert again.data.message_app_link == first.data.message_app_link == emulator.app_link(first.data.message_id)

    emulator.add_chat("oc_team")
    sent = create(client, "oc_team", json.dumps({"text": "hi"})).data
    chat_link = urlsplit(sent.message_app_link)
    assert chat_link.path == "/client/chat/open" and parse_qs(chat_link.query) == {
        "openChatId": ["oc_team"], "position": ["0"]}
    got = client.im.v1.message.get(GetMessageRequest.builder().message_id(sent.message_id).build())
    assert got.data.items[0].message_app_link is None  # only the send's answer carries it here


def test_reply_to_unknown_message_is_231003(client: lark.Client) -> None:
    resp = reply(client, "om_missing")
    assert (resp.code, resp.raw.status_code) == (231003, 400)


def test_injected_faults_surface_through_the_sdk(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_message("om_user1", "oc_team")
    emulator.inject("reply", code=99991400, http_status=429, headers={"x-ogw-ratelimit-reset": "1"})
    limited = reply(client, "om_user1")
    assert (limited.code, limited.raw.status_code) == (99991400, 429)
    assert limited.raw.headers["x-ogw-ratelimit-reset"] == "1"
    emulator.inject("reply", code=0, http_status=502)
    gateway = reply(client, "om_user1")
    assert (gateway.code, gateway.raw.status_code) == (-1, 502)
    assert reply(client, "om_user1").code == 0
    assert len(emulator.bot_messages()) == 1


def test_a_fault_bound_to_a_request_fails_that_request_and_no_other(emulator: FeishuEmulator,
                                                                    client: lark.Client) -> None:
    """A "before" hook that binds its fault to the request it sees (`into=record`): a concurrent call of the same
    op can never take it, as it could take a queued one (chaos scenario 18 once saw exactly that)."""
    emulator.add_message("om_user1", "oc_team")
    emulator.add_message("om_user2", "oc_team")

    def hook(record: dict) -> None:
        if record["params"].get("message_id") == "om_user2":
            emulator.inject("reply", code=0, http_status=502, into=record)

    emulator.on("reply", hook, when="before")
    assert reply(client, "om_user1").code == 0  # no fault queued for "the next reply"
    assert (reply(client, "om_user2").raw.status_code, reply(client, "om_user1").code) == (502, 0)
    assert emulator.stats["faults"]["reply"] == {"injected": 1}  # counted like a queued one


def test_expired_token_is_99991663(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_message("om_user1", "oc_team")
    assert reply(client, "om_user1").code == 0
    emulator.expire_tokens()
    resp = reply(client, "om_user1")  # the SDK still holds the old token in its cache
    assert (resp.code, resp.raw.status_code) == (99991663, 400)


def test_create_validation_get_list_and_chat(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_chat("oc_team", name="Team")
    assert create(client, "oc_nowhere", json.dumps({"text": "x"})).code == 230002
    assert create(client, "oc_team", "not json").code == 230001
    assert create(client, "oc_team", json.dumps({"text": "长" * 60_000})).code == 230025
    assert create(client, "oc_team", json.dumps({"title": "t", "content": [[]]}), "post").code == 230001
    ids = [create(client, "oc_team", json.dumps({"text": f"m{i}"})).data.message_id for i in range(3)]

    got = client.im.v1.message.get(GetMessageRequest.builder().message_id(ids[1]).build())
    assert [m.message_id for m in got.data.items] == [ids[1]]
    page = ListMessageRequest.builder().container_id_type("chat").container_id("oc_team").page_size(2)
    first = client.im.v1.message.list(page.sort_type("ByCreateTimeDesc").build())
    assert [m.message_id for m in first.data.items] == [ids[2], ids[1]] and first.data.has_more
    rest = client.im.v1.message.list(page.page_token(first.data.page_token).build())
    assert [m.message_id for m in rest.data.items] == [ids[0]] and not rest.data.has_more

    chat = client.im.v1.chat.get(GetChatRequest.builder().chat_id("oc_team").build()).data
    assert (chat.name, chat.chat_mode, chat.group_message_type) == ("Team", "group", "chat")


def test_chat_listing_shows_topic_roots_not_replies(emulator: FeishuEmulator, client: lark.Client) -> None:
    emulator.add_message("om_a", "oc_team")
    reply(client, "om_a", reply_in_thread=True)
    emulator.add_message("om_b", "oc_team")
    req = ListMessageRequest.builder().container_id_type("chat").container_id("oc_team").build()
    assert [m.message_id for m in client.im.v1.message.list(req).data.items] == ["om_a", "om_b"]
    thread_id = emulator.bot_messages()[0]["thread_id"]
    req = ListMessageRequest.builder().container_id_type("thread").container_id(thread_id).build()
    assert len(client.im.v1.message.list(req).data.items) == 2


def test_bot_info_is_top_level_and_auth_is_required(emulator: FeishuEmulator) -> None:
    token = requests.post(
        f"{emulator.url}/open-apis/auth/v3/tenant_access_token/internal",
        data=json.dumps({"app_id": emulator.app_id, "app_secret": SECRET}), timeout=5,
    ).json()
    assert token["code"] == 0 and token["expire"] == 7200
    info = requests.get(f"{emulator.url}/open-apis/bot/v3/info", timeout=5,
                        headers={"Authorization": f"Bearer {token['tenant_access_token']}"}).json()
    assert info["bot"]["open_id"] == "ou_bot" and "data" not in info
    bad = requests.get(f"{emulator.url}/open-apis/bot/v3/info", headers={"Authorization": "Bearer t-x"},
                       timeout=5)
    assert (bad.status_code, bad.json()["code"]) == (400, 99991663)
    missing = requests.get(f"{emulator.url}/nope", timeout=5)
    assert missing.status_code == 404 and missing.headers["Content-Type"].startswith("application/json")


def test_chat_qps_hooks_and_control_api(emulator: FeishuEmulator, client: lark.Client) -> None:
    seen: list[int] = []
    emulator.on("reply", lambda rec: seen.append(len(emulator.bot_messages())))
    base = f"{emulator.url}/_sandbox"
    added = requests.post(f"{base}/messages", json={"chat_id": "oc_ctl", "text": "hi"}, timeout=5)
    mid = added.json()["message_id"]
    emulator.set_chat_qps(1)
    assert reply(client, mid).code == 0
    assert reply(client, mid).code == 230020
    assert seen == [1, 1]  # after-hooks run once the effect is applied, before the response
    listed = requests.get(f"{base}/bot_messages", params={"chat_id": "oc_ctl"}, timeout=5).json()
    assert [m["parent_id"] for m in listed] == [mid]
    requests.post(f"{base}/faults", json={"op": "create", "code": 230020}, timeout=5)
    assert create(client, "oc_ctl", json.dumps({"text": "x"})).code == 230020
    requests.post(f"{base}/reset", timeout=5)
    assert emulator.messages == [] and emulator.requests == []


# -- Claude stand-in -----------------------------------------------------------------------------------


def get_items(client: lark.Client, message_id: str) -> Any:
    return client.im.v1.message.get(GetMessageRequest.builder().message_id(message_id).build())


def get_resource(client: lark.Client, message_id: str, key: str, kind: str) -> Any:
    req = GetMessageResourceRequest.builder().message_id(message_id).file_key(key).type(kind).build()
    return client.im.v1.message_resource.get(req)


def test_get_of_a_merge_forward_lists_the_bundle_and_its_children(emulator: FeishuEmulator,
                                                                 client: lark.Client) -> None:
    made = emulator.add_forward("om_fwd", "oc_team", [
        {"text": "第一条", "sender_open_id": "ou_amy", "sender_name": "Amy", "create_time": 1700000000000},
        {"msg_type": "merge_forward", "children": [{"text": "里层", "sender_open_id": "ou_bob"}]},
    ])
    resp = get_items(client, "om_fwd")
    assert resp.code == 0, resp.msg
    bundle, first, nested, inner = resp.data.items
    assert (bundle.message_id, bundle.msg_type, bundle.upper_message_id) == ("om_fwd", "merge_forward", None)
    assert json.loads(bundle.body.content) == {"content": FORWARDED_CONTENT}
    assert (first.upper_message_id, first.msg_type, first.create_time) == ("om_fwd", "text", "1700000000000")
    assert json.loads(first.body.content) == {"text": "第一条"} and first.sender.id == "ou_amy"
    assert first.sender.sender_name is None  # only with with_sender_name=true
    assert nested.upper_message_id == "om_fwd" and inner.upper_message_id == nested.message_id
    assert [c["message_id"] for c in made["children"]] == [first.message_id, nested.message_id, inner.message_id]
    named = GetMessageRequest.builder().message_id("om_fwd").build()
    named.add_query("with_sender_name", "true")
    assert client.im.v1.message.get(named).data.items[1].sender.sender_name == "Amy"
    assert [i.message_id for i in get_items(client, nested.message_id).data.items] == [nested.message_id,
                                                                                      inner.message_id]


def test_message_resources_answer_bytes_or_the_documented_errors(emulator: FeishuEmulator,
                                                                client: lark.Client) -> None:
    emulator.add_message("om_img", "oc_team", msg_type="image", content=image_content("img_1"))
    emulator.add_resource("om_img", "img_1", b"\x89PNG-bytes", content_type="image/png")
    emulator.add_resource("om_img", "file_1", b"log", kind="file", content_type="text/plain", file_name="a.log")
    ok = get_resource(client, "om_img", "img_1", "image")
    assert (ok.code, ok.file.read(), ok.raw.headers["Content-Type"]) == (0, b"\x89PNG-bytes", "image/png")
    named = get_resource(client, "om_img", "file_1", "file")
    assert (named.file.read(), named.file_name) == (b"log", "a.log")
    assert get_resource(client, "om_img", "img_1", "file").code == 234003  # type must match the resource
    assert get_resource(client, "om_img", "img_2", "image").code == 234003  # not in this message
    assert get_resource(client, "om_img", "img_1", "video").code == 234001
    assert get_resource(client, "om_gone", "img_1", "image").code == 231003
    emulator.add_message("om_card", "oc_team", msg_type="interactive", content=card_content("t", []))
    made = emulator.add_forward("om_fwd", "oc_team", [{"msg_type": "image", "content": image_content("img_9")}])
    for message_id in ("om_card", "om_fwd", made["children"][0]["message_id"]):
        assert get_resource(client, message_id, "img_9", "image").code == 234043
    emulator.inject_fault("resource", "rate_limit")
    assert get_resource(client, "om_img", "img_1", "image").code == 99991400


def test_forwards_and_resources_can_be_seeded_over_the_control_api(emulator: FeishuEmulator,
                                                                   client: lark.Client) -> None:
    emulator.add_message("om_img", "oc_team", msg_type="image", content=image_content("img_1"))
    seeded = requests.post(f"{emulator.url}/_sandbox/resources", json={
        "message_id": "om_img", "file_key": "img_1", "data_base64": "iVBORw==", "content_type": "image/png"})
    assert seeded.json() == {"ok": True}
    assert get_resource(client, "om_img", "img_1", "image").file.read() == b"\x89PNG"
    made = requests.post(f"{emulator.url}/_sandbox/forwards", json={
        "message_id": "om_fwd", "chat_id": "oc_team", "children": [{"text": "转发的话"}]}).json()
    assert made["msg_type"] == "merge_forward" and len(made["children"]) == 1
    assert len(get_items(client, "om_fwd").data.items) == 2


def test_claude_answer_quotes_the_last_user_text(standin: ClaudeStandin, model: anthropic.Anthropic) -> None:
    messages: list[Any] = [
        {"role": "user", "content": "第一句"},
        {"role": "assistant", "content": "好"},
        {"role": "user", "content": [{"type": "text", "text": "今天"}, {"type": "text", "text": "开会吗"}]},
    ]
    # Long enough to be cached: below the model's minimum (1,024 tokens for Sonnet) the API caches nothing.
    system: list[Any] = [{"type": "text", "text": "你是助手。" + "Answer briefly. " * 300,
                          "cache_control": {"type": "ephemeral"}}]
    first = model.messages.create(model=MODEL, max_tokens=256, messages=messages, system=system)
    again = model.messages.create(model=MODEL, max_tokens=256, messages=messages, system=system)
    assert text_of(first) == "收到。你说的是：今天开会吗" and first.stop_reason == "end_turn"
    assert first.id == again.id and first.id.startswith("msg_")
    assert first.usage.cache_creation_input_tokens and again.usage.cache_read_input_tokens
    assert standin.requests[0]["headers"]["Authorization"] == "Bearer sk-test"
    assert model.messages.count_tokens(model=MODEL, messages=messages).input_tokens > 0
    with model.messages.stream(model=MODEL, max_tokens=64, messages=[{"role": "user", "content": "流"}]) as s:
        assert "".join(s.text_stream) == "收到。你说的是：流"


def test_claude_faults_and_validation(standin: ClaudeStandin, model: anthropic.Anthropic) -> None:
    hi: list[Any] = [{"role": "user", "content": "hi"}]
    standin.fail(529, "overloaded_error")
    with pytest.raises(anthropic.OverloadedError):
        model.messages.create(model=MODEL, max_tokens=16, messages=hi)
    with pytest.raises(anthropic.BadRequestError):
        model.messages.create(model=MODEL, max_tokens=16, messages=[{"role": "assistant", "content": "x"}])
    with pytest.raises(anthropic.BadRequestError):
        model.messages.create(model=MODEL, max_tokens=16, messages=hi, extra_body={"temperature": 0.5})
    standin.fail(429, "rate_limit_error", times=2, headers={"retry-after-ms": "0"})
    retrying = model.with_options(max_retries=2)
    assert text_of(retrying.messages.create(model=MODEL, max_tokens=16, messages=hi)).endswith("hi")
    standin.set_responder(lambda body: "固定回答")
    assert text_of(model.messages.create(model=MODEL, max_tokens=16, messages=hi)) == "固定回答"


def test_claude_requires_a_key(standin: ClaudeStandin) -> None:
    body: dict[str, Any] = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "hi"}]}
    resp = requests.post(f"{standin.url}/v1/messages", json=body, timeout=5)
    assert resp.status_code == 401
    assert resp.json()["error"]["type"] == "authentication_error"
    assert resp.json()["request_id"].startswith("req_")
    ok = requests.post(f"{standin.url}/v1/messages", json=body, headers={"x-api-key": "k"}, timeout=5)
    assert ok.status_code == 200


# -- event builders ------------------------------------------------------------------------------------


def test_message_event_is_signed_and_encrypted_like_feishu() -> None:
    event = message_event(
        chat_id="oc_g", text="@_user_1 hi", chat_type="group", mentions=[mention("ou_bot", "助手")],
        message_id="om_1", event_id="ev_1", create_time_ms=1_700_000_000_000, token="tok", app_id="cli_x",
    )
    msg = event["event"]["message"]
    assert event["header"]["event_type"] == "im.message.receive_v1" and event["header"]["token"] == "tok"
    assert "thread_id" not in msg and "root_id" not in msg and msg["mentions"][0]["id"]["open_id"] == "ou_bot"
    assert json.loads(msg["content"]) == {"text": "@_user_1 hi"}
    assert json.loads(post_content("t", [[{"tag": "text", "text": "x"}]]))["title"] == "t"
    body, headers = signed_request(event, encrypt_key="k", now=1_700_000_000)
    SignatureVerifier("k", clock=lambda: 1_700_000_000).verify(headers, body)
    assert json.loads(decrypt(json.loads(body)["encrypt"], "k")) == event
    plain, _ = signed_request(url_verification("c", "tok"), encrypt_key="k", encrypt=False)
    assert json.loads(plain) == {"challenge": "c", "token": "tok", "type": "url_verification"}
