"""CardKit card entities (issue 16, streaming answers): our adapter (feishu/cardkit.py) through the real
lark-oapi client against the emulator's documented rules — create, send as a reply, stream text, finish;
sequences, uuids, limits, streaming closed or timed out, a missing scope turning off only streaming."""

from __future__ import annotations

import itertools
import json
import uuid
from typing import Any

import pytest
import redis

from core.errors import CapabilityOff, Permanent, Retryable
from core.keys import Keys
from feishu import capabilities
from feishu.cardkit import CardKit, stream_over, streaming_card
from feishu.client import FeishuApi
from jobs.doctor import needs
from sandbox.feishu.emulator import FeishuEmulator
from tests.harness import reply_text, service_env, settings_from


@pytest.fixture
def keys() -> Keys:
    return Keys(f"ck{uuid.uuid4().hex[:8]}")  # fresh token cache and capability state per test


@pytest.fixture
def api(feishu: FeishuEmulator, redis_url: str, r: redis.Redis, keys: Keys) -> FeishuApi:
    return FeishuApi(settings_from(service_env(redis_url, feishu.url, "http://127.0.0.1:9")), r, keys)


@pytest.fixture
def kit(api: FeishuApi) -> CardKit:
    return CardKit(api)


def ask(feishu: FeishuEmulator, text: str = "帮我总结一下") -> str:
    mid = "om_" + uuid.uuid4().hex[:12]
    feishu.add_message(mid, "oc_" + uuid.uuid4().hex[:10], text=text)
    return mid


def streamed(feishu: FeishuEmulator, api: FeishuApi, kit: CardKit, first: str = "思考中…") -> tuple[str, str, str]:
    """A streaming card sent as the reply to a new question: (question id, card_id, reply id)."""
    question = ask(feishu)
    card_id = kit.create(streaming_card(first))
    reply = api.reply_card_entity(question, card_id, uuid=uuid.uuid4().hex, in_thread=False)
    return question, card_id, reply


def fails(call: Any, *args: Any, **kw: Any) -> Permanent:
    with pytest.raises(Permanent) as caught:
        call(*args, **kw)
    return caught.value


def test_create_send_stream_three_texts_then_finish(feishu, api, kit) -> None:
    question, card_id, reply = streamed(feishu, api, kit)
    assert feishu.card_of(reply) == card_id and feishu.card_text(reply) == "思考中…"
    texts = ["第一段", "第一段，第二段", "第一段，第二段，**第三段**"]
    for n, text in enumerate(texts, start=1):
        kit.stream_text(card_id, "answer", text, sequence=n, uuid=uuid.uuid4().hex)
        assert feishu.card_text(reply) == text
        assert reply_text(feishu.replies_to(question)[0]) == text  # what "the bot said", like any reply
    kit.finish(card_id, "第一段，第二段", sequence=4, uuid=uuid.uuid4().hex)
    final = streaming_card("最终答案：第一段，第二段，第三段", streaming=False)
    kit.update(card_id, final, sequence=5, uuid=uuid.uuid4().hex)

    assert feishu.card_text(reply) == "最终答案：第一段，第二段，第三段"
    shown = json.loads(feishu.replies_to(question)[0]["body"]["content"])
    assert shown["config"]["streaming_mode"] is False and shown["config"]["summary"]["content"].startswith("最终答案")
    history = feishu.card_history(card_id)
    assert [h["op"] for h in history] == ["card_create", "send", "card_content", "card_content",
                                           "card_content", "card_settings", "card_update"]
    assert [h["sequence"] for h in history[2:]] == [1, 2, 3, 4, 5]
    assert [h["streaming"] for h in history] == [True] * 5 + [False] * 2
    assert history[4]["length"] == len(texts[-1])
    assert all(a["mono"] <= b["mono"] for a, b in itertools.pairwise(history))
    assert feishu.cards()[0]["message_id"] == reply


def test_a_full_update_may_close_streaming_without_settings(feishu, api, kit) -> None:
    _, card_id, reply = streamed(feishu, api, kit)
    kit.stream_text(card_id, "answer", "半截", sequence=1, uuid="u1")
    kit.update(card_id, streaming_card("完整答案", streaming=False), sequence=2, uuid="u2")
    assert feishu.card_text(reply) == "完整答案" and not feishu.cards()[0]["streaming"]
    closed = fails(kit.stream_text, card_id, "answer", "再来", sequence=3, uuid="u3")
    assert closed.code == "300309" and stream_over(closed)


def test_a_sequence_that_does_not_increase_is_refused(feishu, api, kit) -> None:
    _, card_id, reply = streamed(feishu, api, kit)
    kit.stream_text(card_id, "answer", "甲", sequence=5, uuid="a")
    for seq in (5, 4):
        err = fails(kit.stream_text, card_id, "answer", "乙", sequence=seq, uuid=f"b{seq}")
        assert err.code == "300317" and not isinstance(err, Retryable) and not stream_over(err)
    err = fails(kit.settings, card_id, {"config": {"streaming_mode": False}}, sequence=3, uuid="c")
    assert err.code == "300317"  # one sequence per card, across every op
    assert feishu.card_text(reply) == "甲"
    kit.stream_text(card_id, "answer", "甲乙", sequence=6, uuid="d")
    assert feishu.card_text(reply) == "甲乙"


def test_a_retried_uuid_applies_once_and_a_reused_one_conflicts(feishu, api, kit) -> None:
    _, card_id, reply = streamed(feishu, api, kit)
    for _ in range(2):  # the same request again (a lost answer retried): success, applied once
        kit.stream_text(card_id, "answer", "一次", sequence=1, uuid="same")
    assert [h["op"] for h in feishu.card_history(card_id)].count("card_content") == 1
    err = fails(kit.stream_text, card_id, "answer", "另一次", sequence=2, uuid="same")
    assert err.code == "200770" and feishu.card_text(reply) == "一次"


def test_missing_scope_turns_off_only_streaming(feishu, api, kit, r, keys) -> None:
    question = ask(feishu)
    feishu.deny_scopes({"cardkit:card:write"})
    try:
        err = fails(kit.create, streaming_card("思考中…"))
    finally:
        feishu.deny_scopes(())
    assert isinstance(err, CapabilityOff) and err.capability == "streaming" and err.code == "99991672"
    off = capabilities.off(r, keys)
    assert set(off) == {"streaming"} and off["streaming"]["scopes"] == ["cardkit:card:write"]
    assert "⚠️" in json.loads(r.lrange(keys.alerts, 0, -1)[-1])["text"]
    api.add_reaction(question, "OnIt")  # everything else still works: reactions, plain replies
    api.reply_text(question, "普通回复", uuid=uuid.uuid4().hex, in_thread=False)
    assert reply_text(feishu.replies_to(question)[0]) == "普通回复"


def test_doctor_lists_the_streaming_scope_when_streaming_is_on(redis_url, feishu) -> None:
    env = service_env(redis_url, feishu.url, "http://127.0.0.1:9")
    on = [n for n in needs(settings_from({**env, "REPLY_STREAMING": "card"})) if "cardkit:card:write" in n.names]
    assert len(on) == 1 and not on[0].required
    assert not [n for n in needs(settings_from(env)) if "cardkit:card:write" in n.names]  # REPLY_STREAMING=off


def test_the_per_card_limit_is_retryable(feishu, api, kit) -> None:
    feishu.set_cardkit_limits(per_card_qps=3)
    _, card_id, _ = streamed(feishu, api, kit)
    for n in range(1, 4):
        kit.stream_text(card_id, "answer", "字" * n, sequence=n, uuid=f"u{n}")
    with pytest.raises(Retryable) as caught:
        kit.stream_text(card_id, "answer", "字" * 4, sequence=4, uuid="u4")
    assert caught.value.code == "99991400" and caught.value.retry_after is not None
    other = kit.create(streaming_card("另一张"))  # the limit is per card
    kit.stream_text(other, "answer", "不受影响", sequence=1, uuid="x")


def test_the_app_tier_spares_cards_in_streaming_mode(feishu, api, kit) -> None:
    """Documented (the overview's streaming_mode field): in streaming mode, full updates, partial updates and text
    streaming "不会触发接口的频率限制（QPS）"; only the card's own 10 a second applies."""
    feishu.set_cardkit_limits(app_qps=2)
    feishu.set_api_qpm(3)
    card_id = kit.create(streaming_card("一"))
    kit.create(streaming_card("二", streaming=False))
    with pytest.raises(Retryable):
        kit.create(streaming_card("三"))
    for n in range(1, 5):  # 4 in a second on a streaming card: past 2/s and 3/min, within the card's 10/s
        kit.stream_text(card_id, "answer", "字" * n, sequence=n, uuid=f"t{n}")
    kit.settings(card_id, {"config": {"summary": {"content": ""}}}, sequence=5, uuid="t5")
    kit.update(card_id, streaming_card("完", streaming=False), sequence=6, uuid="t6")  # streaming until it lands
    kit.settings(card_id, {"config": {"summary": {"content": "完"}}}, sequence=7, uuid="t7")
    kit.settings(card_id, {"config": {"summary": {"content": "完。"}}}, sequence=8, uuid="t8")
    with pytest.raises(Retryable):  # streaming is off: the 50/s (here 2/s) tier counts it
        kit.settings(card_id, {"config": {"summary": {"content": "完！"}}}, sequence=9, uuid="t9")


def test_a_bare_card_id_is_refused_and_an_entity_is_sent_once(feishu, api, kit) -> None:
    question = ask(feishu)
    card_id = kit.create(streaming_card("思考中…"))
    bare = fails(api.reply, question, "interactive", {"card_id": card_id}, uuid="bare", in_thread=False)
    assert bare.code == "200621"
    first = api.reply_card_entity(question, card_id, uuid="once", in_thread=False)
    assert api.reply_card_entity(question, card_id, uuid="once", in_thread=False) == first  # uuid dedupe
    again = fails(api.reply_card_entity, question, card_id, uuid="twice", in_thread=False)
    assert again.code == "230099"
    unknown = fails(api.reply_card_entity, question, "7000000000000000001", uuid="nope", in_thread=False)
    assert unknown.code == "230099" and len(feishu.replies_to(question)) == 1


def test_streaming_times_out_and_settings_reopen_it(feishu, api, kit) -> None:
    _, card_id, reply = streamed(feishu, api, kit)
    kit.stream_text(card_id, "answer", "开头", sequence=1, uuid="a")
    feishu.age_card(card_id, 601)  # documented: streaming closes 10 minutes after it was last turned on
    err = fails(kit.stream_text, card_id, "answer", "开头继续", sequence=2, uuid="b")
    assert err.code == "200850" and stream_over(err)
    assert feishu.card_history(card_id)[-1]["op"] == "streaming_timeout"
    kit.reopen(card_id, sequence=3, uuid="c")  # 200850's documented remedy: settings, streaming_mode true
    kit.stream_text(card_id, "answer", "开头继续", sequence=4, uuid="d")
    assert feishu.card_text(reply) == "开头继续"
    feishu.set_cardkit_limits(streaming_timeout_s=0.0)  # the window as a control: no test waits 10 minutes
    assert fails(kit.stream_text, card_id, "answer", "开头继续！", sequence=5, uuid="g").code == "200850"
    assert feishu.render_defects() == []  # the summary was empty: the chat list stopped showing [生成中...]
    feishu.age_card(card_id, 14 * 86400)
    expired = fails(kit.stream_text, card_id, "answer", "太晚", sequence=6, uuid="e")
    assert expired.code == "200750" and stream_over(expired)
    assert fails(kit.stream_text, "7000000000000000002", "answer", "无", sequence=1, uuid="f").code == "200740"


def test_documented_card_and_content_limits(feishu, api, kit) -> None:
    def card_with(*elements: dict[str, Any], **config: Any) -> dict[str, Any]:
        return {"schema": "2.0", "config": {"streaming_mode": True, **config}, "body": {"elements": list(elements)}}

    md = {"tag": "markdown", "element_id": "answer", "content": "x"}
    assert fails(kit.create, card_with(md, dict(md))).code == "300301"
    assert fails(kit.create, card_with(md, update_multi=False)).code == "300302"
    assert fails(kit.create, {"config": {}, "elements": [md]}).code == "300303"
    assert fails(kit.create, card_with(*[{"tag": "markdown", "content": "."}] * 201)).code == "300305"
    assert fails(kit.create, card_with({"tag": "note", "elements": []})).code == "200220"  # 1.0-only module
    card_id = kit.create(card_with(md, {"tag": "hr", "element_id": "rule"}))
    assert fails(kit.stream_text, card_id, "rule", "x", sequence=1, uuid="a").code == "300310"
    assert fails(kit.stream_text, card_id, "missing", "x", sequence=1, uuid="b").code == "300313"
    assert fails(kit.stream_text, card_id, "answer", "字" * 100_001, sequence=1, uuid="c").code == "10002"
    assert fails(kit.stream_text, card_id, "answer", "字" * 11_000, sequence=1, uuid="d").code == "200860"  # >30 KB
    kit.stream_text(card_id, "answer", "字" * 9_000, sequence=1, uuid="e")
    with pytest.raises(ValueError):
        kit.stream_text(card_id, "answer", "x", sequence=0, uuid="f")


def test_injected_faults_map_to_our_error_types(feishu, api, kit) -> None:
    _, card_id, _ = streamed(feishu, api, kit)
    feishu.inject("card_content", code=0, http_status=502)
    with pytest.raises(Retryable):
        kit.stream_text(card_id, "answer", "一", sequence=1, uuid="a")
    feishu.inject("card_content", code=200810)  # a user's card callback is being handled
    with pytest.raises(Retryable):
        kit.stream_text(card_id, "answer", "一", sequence=1, uuid="a")
    feishu.inject("card_update", code=300317)
    err = fails(kit.update, card_id, streaming_card("二", streaming=False), sequence=2, uuid="b")
    assert err.code == "300317"
    feishu.inject_fault("card_settings", "rate_limit", reset_seconds=2)
    with pytest.raises(Retryable) as caught:
        kit.finish(card_id, "摘要", sequence=3, uuid="c")
    assert caught.value.retry_after == 2.0
    kit.stream_text(card_id, "answer", "一", sequence=4, uuid="d")


def tables(n: int, tag: str = "t") -> str:
    return "\n\n".join(f"| {tag}{i} | 值 |\n| --- | --- |\n| 甲 | 乙 |" for i in range(n))


def markdown_card(*contents: str, **config: Any) -> dict[str, Any]:
    return {"schema": "2.0", "config": {"update_multi": True, **config},
            "body": {"elements": [{"tag": "markdown", "content": c} for c in contents]}}


def test_a_card_with_more_than_five_tables_is_refused(feishu, api, kit) -> None:
    """Card JSON 2.0 table component: five a card; a Markdown table counts as one (Feishu answers 230099 with
    "ErrCode: 11310; ErrMsg: card table number over limit", as reported from production)."""
    question = ask(feishu)
    err = fails(api.reply, question, "interactive", markdown_card(tables(4), tables(2, "u")), uuid="six",
                in_thread=False)
    assert err.code == "230099" and "11310" in str(err)
    api.reply(question, "interactive", markdown_card(tables(4), tables(1, "u")), uuid="five", in_thread=False)
    assert fails(kit.create, streaming_card(tables(6), streaming=False)).code == "230099"
    card_id = kit.create(streaming_card(tables(3)))
    kit.stream_text(card_id, "answer", tables(5), sequence=1, uuid="a")
    assert fails(kit.stream_text, card_id, "answer", tables(6), sequence=2, uuid="b").code == "230099"


def test_what_feishu_accepts_but_shows_badly_is_a_render_defect(feishu, api, kit) -> None:
    question = ask(feishu)
    crowded = api.reply(question, "interactive", markdown_card(tables(5)), uuid="crowded", in_thread=False)
    fenced = api.reply(question, "interactive", markdown_card("1. 安装：\n   ```bash\n   pip install x\n   ```"),
                       uuid="fenced", in_thread=False)
    clean = api.reply(question, "interactive", markdown_card(tables(4), "1. 安装：\n```bash\npip install x\n```"),
                      uuid="clean", in_thread=False)
    card_id = kit.create(streaming_card("开头", summary="[生成中...]"))
    kit.update(card_id, streaming_card("完", streaming=False, summary="**结论**：请 <at id=ou_a></at> 查看"),
               sequence=1, uuid="u1")
    left = kit.create(streaming_card("开头", summary="[生成中...]"))
    feishu.age_card(left, 601)
    assert feishu.cards()[-1]["preview"] == "[生成中...]"  # it no longer streams; the chat list says it does
    found = {(d["where"], d["kind"]) for d in feishu.render_defects()}
    assert found == {(f"message {crowded}", "tables_per_markdown"), (f"message {fenced}", "indented_fence"),
                     (f"card {card_id}", "summary_markup"), (f"card {left}", "stale_summary")}
    assert not any(clean in w for w, _ in found)
    quiet = kit.create(streaming_card("开头"))  # empty summary: Feishu's own [生成中...] only while it streams
    assert feishu.cards()[-1]["preview"] == "[生成中...]"
    feishu.age_card(quiet, 601)
    assert feishu.cards()[-1]["preview"] == "开头" and len(feishu.render_defects()) == 4
