"""The event parsers on Feishu's documented payloads (feishu.md §2.2–2.3) and on content of the wrong shape (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.envelope import (
    ContentError,
    Envelope,
    Inbound,
    MessageEvent,
    content_object,
    has_lone_surrogate,
    to_inbound,
)
from sandbox.events import SAMPLE_CONTENT, mention, mention_all, message_event, sample_content
from tests.strategies import ABSENT, DOCUMENTED_TYPES, content_objects, mention_lists

BOT = "ou_bot"
EXPECTED_TEXT = {  # a readable fragment of each documented sample
    "text": "hello", "post": "加粗", "image": "img_v2_041b28e3", "file": "test.txt", "audio": "2s",
    "media": "测试.mp4", "sticker": "file_v2_4", "folder": "资料", "interactive": "interactive",
    "merge_forward": "forwarded", "share_chat": "oc_0dd2", "share_user": "ou_0dd2", "system": "Amy invited Bob, Cai",
    "location": "北京天安门", "video_chat": "周会", "todo": "修复登录", "vote": "午饭吃什么", "hongbao": "恭喜发财",
    "share_calendar_event": "评审会", "calendar": "评审会", "general_calendar": "评审会",
}


def parse(payload: dict[str, Any], bot: str | None = BOT) -> Inbound:
    envelope = Envelope.model_validate(payload)
    return to_inbound(envelope, MessageEvent.model_validate(envelope.event), bot)


def event(message_type: str = "text", content: str | None = None, **kw: Any) -> dict[str, Any]:
    return message_event(chat_id="oc_g", chat_type="group", message_type=message_type, content=content, **kw)


def test_every_documented_type_has_a_sample() -> None:
    assert set(SAMPLE_CONTENT) == set(DOCUMENTED_TYPES)


@pytest.mark.parametrize("message_type", DOCUMENTED_TYPES)
def test_documented_payloads_parse_to_text(message_type: str) -> None:
    inbound = parse(event(message_type, sample_content(message_type), mentions=[mention(BOT, "助手")]))
    assert isinstance(inbound.text, str) and inbound.text.strip()
    assert EXPECTED_TEXT[message_type] in inbound.text


@pytest.mark.parametrize("message_type", ["vote_v2", "share_docs", "x"])
def test_unknown_types_parse_to_a_placeholder(message_type: str) -> None:
    assert parse(event(message_type, json.dumps({"whatever": [1, {"a": None}]}))).text == f"[{message_type} message]"
    assert parse(event(message_type, json.dumps({"text": "可读"}))).text == "可读"


@pytest.mark.parametrize("mentions", ["absent", None, [], [mention(BOT, "助手")], [mention_all()]])
def test_mentions_present_absent_empty_or_null(mentions: Any) -> None:
    payload = event(text="@_user_1 看下")
    if mentions == "absent":
        del payload["event"]["message"]["mentions"]
    else:
        payload["event"]["message"]["mentions"] = mentions
    inbound = parse(payload)
    assert inbound.text.endswith("看下")
    assert inbound.mentioned_all == (mentions == [mention_all()])
    assert [m.key for m in inbound.mentions] == [m["key"] for m in (mentions if isinstance(mentions, list) else [])]


def test_a_mention_without_id_or_key_is_tolerated() -> None:
    payload = event(text="@_user_1 hi")
    payload["event"]["message"]["mentions"] = [{"key": None, "id": None, "name": None}, {"key": "@_user_1"}]
    assert parse(payload).text == "@_user_1 hi"


@pytest.mark.parametrize(("ids", "sender_id"), [
    ({"open_id": "ou_1", "union_id": "on_1", "user_id": "u1"}, "ou_1"),
    ({"union_id": "on_1", "user_id": "u1"}, "on_1"),
    ({"open_id": "", "union_id": "", "user_id": "u1"}, "u1"),
    ({"open_id": None, "union_id": "on_1"}, "on_1"),
    ({}, ""),
])
def test_sender_id_falls_back_from_open_id_to_union_id_to_user_id(ids: dict[str, Any], sender_id: str) -> None:
    payload = event(text="hi")
    payload["event"]["sender"]["sender_id"] = ids
    assert parse(payload).sender_id == sender_id


def test_the_content_key_of_a_sender_without_open_id_is_stable_and_personal() -> None:
    def key(union_id: str, message_id: str) -> str:
        payload = event(text="hi", message_id=message_id, create_time_ms=1_700_000_000_000)
        payload["event"]["sender"]["sender_id"] = {"union_id": union_id}
        return parse(payload).content_key()

    assert key("on_1", "om_a") == key("on_1", "om_b") != key("on_2", "om_a")


@pytest.mark.parametrize(("message_type", "content", "why"), [
    ("text", {"text": 5}, "text: Input should be a valid string"),
    ("text", {"text": ["a"]}, "text"),
    ("post", {"title": "t", "content": "not a list"}, "content: Input should be a valid list"),
    ("post", {"content": [["not an element"]]}, "content.0.0"),
    ("post", {"content": [[{"tag": "text", "style": "bold"}]]}, "content.0.0.style"),
    ("post", {"content": [[{"tag": "code_block", "language": 5}]]}, "language"),
    ("post", {"zh_cn": {"title": "t", "content": {"no": "list"}}}, "content"),
    ("file", {"file_key": "f", "file_name": {"x": 1}}, "file_name"),
    ("system", {"template": "{from_user}", "from_user": [{"name": 5}]}, "from_user"),
    ("system", {"template": "{other}", "other": [{"name": 5}]}, "cannot be read"),
    ("todo", {"summary": {"title": 5}}, "summary"),
    ("vote", {"options": "a,b"}, "options"),
    ("share_chat", {"chat_id": 1}, "chat_id"),
])
def test_content_of_the_wrong_shape_is_refused_with_the_reason(message_type: str, content: Any, why: str) -> None:
    with pytest.raises(ContentError, match=why.replace(".", r"\.")):
        parse(event(message_type, json.dumps(content)))


@pytest.mark.parametrize(("raw", "why"), [
    ("not json", "not valid JSON"),
    ("[1, 2]", "not a JSON object"),
    ('"text"', "not a JSON object"),
    ('{"text": "\\ud800"}', "lone UTF-16 surrogate"),
    ('{"text": "a", "x": ' + "[" * 100 + "]" * 100 + "}", "nested too deeply"),
    ('{"text": ' + "[" * 50_000 + "]" * 50_000 + "}", "nested too deeply"),
])
def test_content_that_is_not_a_sound_json_object_is_refused(raw: str, why: str) -> None:
    with pytest.raises(ContentError, match=why):
        parse(event("text", raw))


def test_paired_surrogate_escapes_are_fine() -> None:
    assert parse(event("text", '{"text": "\\ud83d\\ude00 ok"}')).text == "😀 ok"
    assert not has_lone_surrogate('"\\ud83d\\ude00"', "😀")


def test_empty_content_is_an_empty_object() -> None:
    assert content_object("text", "") == {}


@settings(max_examples=150, deadline=None)
@given(st.sampled_from(DOCUMENTED_TYPES).flatmap(lambda t: st.tuples(st.just(t), content_objects(t))),
       mention_lists(BOT))
def test_right_typed_content_of_every_type_always_parses(typed: tuple[str, dict[str, Any]], mentions: Any) -> None:
    message_type, content = typed
    payload = event(message_type, json.dumps(content, ensure_ascii=False))
    if mentions is ABSENT:
        del payload["event"]["message"]["mentions"]
    else:
        payload["event"]["message"]["mentions"] = mentions
    assert isinstance(parse(payload).text, str)
