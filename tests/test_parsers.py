"""The event parsers on Feishu's documented payloads (feishu.md §2.2–2.3) and on content of the wrong shape (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bot.envelope import Envelope, MessageEvent, to_inbound
from core.inbound import Inbound, Mention, dumps
from feishu.message import FORWARDED_PLACEHOLDER, ContentError, content_object, has_lone_surrogate
from routing.admission import admit
from routing.policy import Policy
from sandbox.feishu.events import (
    DOC_DIVIDER,
    SAMPLE_CONTENT,
    card_content,
    mention,
    mention_all,
    message_event,
    post_content,
    post_with_code_block,
    sample_content,
    system_content,
)
from tests.strategies import ABSENT, DOCUMENTED_TYPES, content_objects, mention_lists

BOT = "ou_bot"
EXPECTED_TEXT = {  # a readable fragment of each documented sample
    "text": "hello", "post": "第一行 :", "image": "img_v2_041b28e3", "file": "test.txt", "audio": "2s",
    "media": "测试.mp4", "sticker": "file_v2_4", "folder": "资料", "interactive": "卡片标题",
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


# --- content fidelity: what reaches the model is what the user wrote --------------------------------------

TOM = mention("ou_tom", "Tom", key="@_user_2")


def test_a_text_with_mentions_keeps_paragraphs_blank_lines_and_indentation() -> None:
    text = "@_user_1 第一段\n\n    if x:\n        return  1\n\n@_user_2  看下   这里"
    inbound = parse(event(text=text, mentions=[mention(BOT, "助手"), TOM]))
    assert inbound.text == "第一段\n\n    if x:\n        return  1\n\n@Tom  看下   这里"


@pytest.mark.parametrize(("text", "expected"), [
    ("请 @_user_1 看下", "请 看下"),
    ("看下 @_user_1", "看下"),
    ("@_user_1\n    缩进的第一行", "    缩进的第一行"),
    ("@_user_1 @_user_2 你看", "@Tom 你看"),
    ("@_user_2 @_user_1 你看", "@Tom 你看"),
    ("@_user_9 未知的人", "@_user_9 未知的人"),
    ("@_all 开会", "@all 开会"),
])
def test_only_the_bots_own_mention_and_its_spaces_are_removed(text: str, expected: str) -> None:
    assert parse(event(text=text, mentions=[mention(BOT, "助手"), TOM])).text == expected


def test_a_post_with_paragraphs_a_code_block_and_a_mention_keeps_its_layout() -> None:
    code = "def f(x):\n    if x:\n        return 1\n\n    return 0"
    content = post_with_code_block(["登录接口报错，代码如下：", "", "第二段  两个空格"], code)
    inbound = parse(event("post", content, mentions=[mention(BOT, "助手")]))
    assert inbound.text == f"登录接口报错，代码如下：\n\n第二段  两个空格\n```python\n{code}\n```"


def test_a_post_drops_the_bots_at_tag_like_a_text_does() -> None:
    content = post_content("", [[{"tag": "text", "text": "请 "}, {"tag": "at", "user_id": "@_user_1", "user_name": ""},
                                 {"tag": "text", "text": " 看下"}]])
    assert parse(event("post", content, mentions=[mention(BOT, "助手")])).text == "请 看下"


@pytest.mark.parametrize(("tag", "shown"), [
    ({"tag": "at", "user_id": "@_user_2", "user_name": ""}, "找 @Tom 看"),  # the documented received form
    ({"tag": "at", "user_id": "@_user_2", "user_name": "Tom"}, "找 @Tom 看"),
    ({"tag": "at", "user_id": "ou_tom", "user_name": "Tom"}, "找 @Tom 看"),
    ({"tag": "at", "user_id": "ou_tom"}, "找 @Tom 看"),
    ({"tag": "at", "user_id": "", "user_name": ""}, "找  看"),  # nothing to show: no stray "@"
    ({"tag": "at", "user_id": "all", "user_name": "所有人"}, "找 @all 看"),
])
def test_post_at_tags_render_one_at_sign_and_a_name(tag: dict[str, Any], shown: str) -> None:
    content = post_content("", [[{"tag": "text", "text": "找 "}, tag, {"tag": "text", "text": " 看"}]])
    assert parse(event("post", content, mentions=[TOM])).text == shown


def test_the_documented_post_sample_names_the_mentioned_user_once() -> None:
    text = parse(event("post", sample_content("post"), mentions=[mention("ou_tom", "Tom")])).text
    assert "[超链接](http://www.feishu.cn)@Tom\n" in text and "@@" not in text
    assert "```go\nfunc main() int64 {\n    return 0\n}\n```" in text


def test_a_post_whose_at_tag_holds_the_bots_open_id_is_a_mention_of_the_bot() -> None:
    content = post_content("", [[{"tag": "at", "user_id": BOT, "user_name": "助手"}, {"tag": "text", "text": " 帮忙"}]])
    inbound = parse(event("post", content, mentions=[]))
    assert inbound.text == "帮忙"
    assert admit(inbound, Policy(), BOT).reason == "mentioned"
    other = parse(event("post", content.replace(BOT, "ou_tom"), mentions=[]))
    assert admit(other, Policy(), BOT).reason == "not mentioned"


def test_a_received_card_shows_its_title_rows_and_mentions() -> None:
    text = parse(event("interactive", sample_content("interactive"), mentions=[mention("ou_tom", "Tom")])).text
    lines = text.split("\n")
    assert lines[0] == "# 卡片标题"
    assert lines[1] == "[button: 主按钮][button: 次按钮][button: 危险按钮]"
    assert lines[2].startswith("[飞书](https://www.feishu.cn)整合即时沟通") and "，@Tom更高效、更愉悦。" in lines[2]
    assert "[image] 备注信息" in lines and "[select_static: 默认提示文本 / 选项1 / 选项2 / 选项3 / 选项4]" in text
    assert "[interactive]" not in text


def test_a_card_with_neither_title_nor_text_is_named_as_a_card() -> None:
    assert parse(event("interactive", card_content("", [[{"tag": "hr_unknown"}]]))).text == "[card]"


@pytest.mark.parametrize(("content", "expected"), [
    (system_content(), "新会话"),
    (system_content(**{**DOC_DIVIDER, "divider_text": {"i18n_text": {"zh_cn": "新话题"}}}), "新话题"),
    (system_content("{from_user} 开启了 {divider_text}{nothing}", from_user=["Amy"]), "Amy 开启了"),
    (system_content("第 {n} 次", n=3), "第 3 次"),
])
def test_system_templates_are_filled_or_their_placeholders_dropped(content: str, expected: str) -> None:
    assert parse(event("system", content)).text == expected


def test_a_forwarded_bundle_is_left_for_the_worker_to_fetch() -> None:
    assert parse(event("merge_forward", sample_content("merge_forward"))).text == FORWARDED_PLACEHOLDER


@settings(deadline=None)
@given(st.text(), st.text(), st.one_of(st.none(), st.text()), st.booleans())
def test_an_inbox_entry_is_the_json_text_of_the_message_without_its_generation(
        text: str, name: str, thread: str | None, everyone: bool) -> None:
    """`dumps` takes pydantic's serializer for speed (the webhook's hot path); it must write exactly what the
    json module writes, so entries read the same whichever release stored them."""
    inbound = Inbound(event_id="ev", message_id="om", chat_id="oc", chat_type="group", sender_open_id="ou",
                      sender_type="user", message_type="text", text=text,
                      content=json.dumps({"text": text}, ensure_ascii=False), thread_id=thread,
                      mentions=[Mention(key="@_user_1", open_id=None, name=name)], mentioned_all=everyone, gen=7)
    entry = dumps(inbound)
    assert entry == json.dumps(inbound.model_dump(mode="json", exclude={"gen"}), ensure_ascii=False,
                               separators=(",", ":"))
    assert Inbound.model_validate_json(entry) == inbound.model_copy(update={"gen": None})
