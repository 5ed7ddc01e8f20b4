"""Issue 16 acceptance 3: streaming answers (REPLY_STREAMING=card) through the real service.

A CardKit card appears when the model's first text arrives, grows while it writes, and ends as the complete
rendered answer: one card per turn, across a worker killed mid-stream too. Without the scope or with CardKit
failing, the turn falls back to the rendered reply."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from feishu.render import card_markdown
from sandbox.feishu.events import mention, message_recalled_event
from tests.harness import (
    APP_ID,
    BOT_OPEN_ID,
    VERIFICATION_TOKEN,
    deliver,
    message_id,
    model_requests_with,
    reply_text,
    route_key,
    session_log,
    unique,
    wait_for,
    wait_route_idle,
)
from tests.own_stack import OwnStack
from tests.streamed import answer_with, card_messages, content_ops, entity_of, long_answer

FIRST_VISIBLE_S = 2.0  # first token → first text in the chat
UPDATE_GAP_S = 2.0  # the card shows new text at least this often while the model writes


@pytest.fixture(scope="module")
def _rig(env: dict[str, str], workdir: Path) -> Iterator[OwnStack]:
    stack = OwnStack.start(env, workdir, "stream", REPLY_STREAMING="card", WORKER_CONCURRENCY="8",
                           STREAM_UPDATE_SECONDS="1", REPLY_CHUNK_CHARS="1200")
    yield stack
    stack.stop()


@pytest.fixture()
def rig(_rig: OwnStack) -> Iterator[OwnStack]:
    yield _rig
    _rig.healthy()


def test_a_long_answer_grows_in_one_card_and_ends_as_the_complete_answer(rig: OwnStack, feishu, claude, r) -> None:
    text = long_answer("流式")
    answer_with(claude, "流式测试", text)
    claude.set_delay(0.3)
    claude.set_stream(8.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="流式测试：导出为什么失败")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    wait_route_idle(r, rig.keys, rk, timeout=60)
    cards = card_messages(feishu, message_id(msg))
    assert len(feishu.replies_to(message_id(msg))) == 1 and len(cards) == 1
    entity = entity_of(feishu, cards[0])
    assert not entity["streaming"]
    assert entity["text"] == card_markdown(text)
    (call,) = [c for c in model_requests_with(claude, "流式测试")]
    history = content_ops(feishu.card_history(entity["card_id"]))
    first_visible = history[0]["at"] - call["first_text_at"]
    assert first_visible <= FIRST_VISIBLE_S, first_visible
    writing = [h["at"] for h in history if h["at"] <= call["end"]]
    gaps = [b - a for a, b in itertools.pairwise(writing)]
    assert len(writing) >= 5 and max(gaps) <= UPDATE_GAP_S, gaps
    # ...and no more often than STREAM_UPDATE_SECONDS (1 s here): the model sent ~40 deltas in those 8 s.
    assert len(writing) <= (call["end"] - call["first_text_at"]) / 1.0 + 3, len(writing)
    grew = [h["length"] for h in history]
    assert grew == sorted(grew), "the card's text only grows while the model writes"
    assert history[-1]["op"] == "card_update" and not history[-1]["streaming"]
    answer = next(e for e in session_log(r, rig.keys, rk) if e["role"] == "assistant")
    assert answer["text"] == text and answer["message_ids"] == [cards[0]["message_id"]]


def test_a_worker_killed_mid_stream_leaves_one_card_the_rerun_finishes(rig: OwnStack, feishu, claude, r) -> None:
    text = long_answer("被杀")
    answer_with(claude, "中途被杀", text)
    claude.set_delay(0.2)
    claude.set_stream(6.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="中途被杀：请详细分析")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    shown = feishu.wait_for(lambda: card_messages(feishu, message_id(msg)), timeout=30)
    card_id = feishu.card_of(shown[0]["message_id"])
    wait_for(lambda: len(content_ops(feishu.card_history(card_id))) >= 3, timeout=20, what="the card to grow")
    rig.kill_workers()
    claude.set_stream(1.0)
    wait_for(lambda: not feishu.cards()[0]["streaming"] if feishu.cards() else False, timeout=60,
             what="the rerun to finish the card")
    wait_route_idle(r, rig.keys, rk, timeout=60)
    assert len(model_requests_with(claude, "中途被杀")) == 2  # the killed stream and the rerun's
    replies = feishu.replies_to(message_id(msg))
    assert [m["message_id"] for m in replies] == [shown[0]["message_id"]], replies  # one message: the card
    assert [c["card_id"] for c in feishu.cards()] == [card_id]  # one card entity, created once
    assert feishu.cards()[0]["text"] == card_markdown(text)
    sequences = [h["sequence"] for h in feishu.card_history(card_id) if h["op"] != "send"]
    assert sequences == sorted(set(sequences)), "sequence numbers keep increasing across the two runs"


def test_a_long_answer_ends_in_the_card_and_the_rest_follows_as_replies(rig: OwnStack, feishu, claude, r) -> None:
    text = long_answer("超长", paragraphs=60)  # ~2,800 characters; REPLY_CHUNK_CHARS=1200 in this rig
    answer_with(claude, "超长回答", text)
    claude.set_stream(2.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="超长回答：全部列出")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    wait_route_idle(r, rig.keys, rk, timeout=60)
    replies = feishu.replies_to(message_id(msg))
    assert replies[0]["msg_type"] == "interactive" and len(replies) >= 3, [m["msg_type"] for m in replies]
    (entity,) = feishu.cards()
    assert entity["message_id"] == replies[0]["message_id"] and not entity["streaming"]
    shown = entity["text"] + "".join(reply_text(m) for m in replies[1:])
    for i in range(60):
        assert shown.count(f"第 {i} 段：") == 1, i  # every paragraph once: nothing lost, nothing twice
    log = next(e for e in session_log(r, rig.keys, rk) if e["role"] == "assistant")
    assert log["message_ids"] == [m["message_id"] for m in replies]


def test_without_the_cardkit_scope_the_answer_is_a_plain_reply(rig: OwnStack, feishu, claude, r) -> None:
    feishu.deny_scopes(["cardkit:card:write"])
    claude.set_stream(1.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="没有卡片权限时")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    feishu.wait_for(lambda: feishu.replies_to(message_id(msg)), timeout=30)
    wait_route_idle(r, rig.keys, rk, timeout=30)
    (reply,) = feishu.replies_to(message_id(msg))
    assert reply["msg_type"] == "text" and "没有卡片权限时" in reply_text(reply)
    assert feishu.cards() == []
    ready = requests.get(f"{rig.web.url}/readyz", timeout=5).json()
    assert "streaming" in json.dumps(ready.get("capabilities_off") or ready, ensure_ascii=False)
    # The next turn does not try again while the capability is off (one ERROR, not one per message).
    before = len([q for q in feishu.requests if q["op"] == "card_create"])
    msg2 = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="第二条消息")
    feishu.wait_for(lambda: feishu.replies_to(message_id(msg2)), timeout=30)
    assert len([q for q in feishu.requests if q["op"] == "card_create"]) == before
    r.delete(rig.keys.capability_off("streaming"))  # the rig's next tests stream again


def test_cardkit_refusing_the_card_falls_back_to_the_rendered_reply(rig: OwnStack, feishu, claude, r) -> None:
    feishu.inject("card_create", code=200220, http_status=400, times=1)
    claude.set_stream(1.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="卡片创建失败时")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    feishu.wait_for(lambda: feishu.replies_to(message_id(msg)), timeout=30)
    wait_route_idle(r, rig.keys, rk, timeout=30)
    (reply,) = feishu.replies_to(message_id(msg))
    assert reply["msg_type"] == "text" and "卡片创建失败时" in reply_text(reply)


def test_a_card_that_cannot_be_finished_is_followed_by_the_complete_answer(rig: OwnStack, feishu, claude, r) -> None:
    """Streaming closed on Feishu's side (10 minutes, or closed): the answer is posted as a plain reply under its
    own uuid, so Feishu's uuid window cannot swallow it into the card message."""
    text = long_answer("收尾失败", paragraphs=3)
    answer_with(claude, "收尾失败", text)
    claude.set_stream(1.5)
    feishu.inject("card_update", code=200740, http_status=400, times=1)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="收尾失败：看看")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    wait_route_idle(r, rig.keys, rk, timeout=40)
    replies = feishu.replies_to(message_id(msg))
    assert next(m["msg_type"] for m in replies) == "interactive" and len(replies) == 2, replies
    assert "第 2 段" in reply_text(replies[1])


def test_streamed_text_cannot_ping_anyone(rig: OwnStack, feishu, claude, r) -> None:
    text = '注意 <at user_id="all">所有人</at> 以及 <at id=all></at>，这是模型写出的标签。' + "后续内容。" * 30
    answer_with(claude, "标签注入", text)
    claude.set_stream(2.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="标签注入测试")
    wait_route_idle(r, rig.keys, route_key("p2p", chat, profile=rig.env["BOT_PROFILE"]), timeout=40)
    (entity,) = feishu.cards()
    texts = [h.get("text", "") for h in feishu.card_history(entity["card_id"])]
    assert len(texts) >= 2 and not any("<at" in t for t in texts), texts
    assert len(feishu.replies_to(message_id(msg))) == 1


def test_one_failed_update_does_not_stop_the_card(rig: OwnStack, feishu, claude, r) -> None:
    answer_with(claude, "一次失败", long_answer("一次失败", paragraphs=8))
    claude.set_stream(6.0)
    feishu.inject("card_content", code=99991400, http_status=429, times=1,
                  headers={"x-ogw-ratelimit-reset": "1"})
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="一次失败：请说明")
    wait_route_idle(r, rig.keys, route_key("p2p", chat, profile=rig.env["BOT_PROFILE"]), timeout=40)
    (entity,) = feishu.cards()
    contents = [h for h in feishu.card_history(entity["card_id"]) if h["op"] == "card_content"]
    assert len(contents) >= 3, "updates went on after the refused one"
    assert entity["text"] == card_markdown(long_answer("一次失败", paragraphs=8))
    assert len(feishu.replies_to(message_id(msg))) == 1


def test_a_user_reset_mid_stream_closes_the_half_written_card(rig: OwnStack, feishu, claude, r) -> None:
    answer_with(claude, "重置打断", long_answer("重置", paragraphs=10))
    claude.set_stream(8.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="重置打断：慢慢说")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    shown = feishu.wait_for(lambda: card_messages(feishu, message_id(msg)), timeout=30)
    card_id = feishu.card_of(shown[0]["message_id"])
    deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="/reset")
    wait_for(lambda: not feishu.cards()[0]["streaming"], timeout=30, what="the card to be closed")
    wait_route_idle(r, rig.keys, rk, timeout=30)
    assert feishu.cards()[0]["text"] == "（这条回答没有写完。）"
    assert [c["card_id"] for c in feishu.cards()] == [card_id]
    assert not any("重置" in e["text"] for e in session_log(r, rig.keys, rk) if e["role"] == "assistant")


def test_a_streamed_batch_that_is_given_up_closes_its_card(rig: OwnStack, feishu, claude, r) -> None:
    """The answer streamed, but the card cannot be finished (CardKit keeps failing): retried, then dead-lettered;
    the card says it was not finished and the sender gets the usual notice."""
    answer_with(claude, "无法收尾", long_answer("无法收尾", paragraphs=3))
    claude.set_stream(1.0)
    feishu.inject("card_update", code=300120, http_status=400, times=3)  # DEAD_LETTER_AFTER=3 in the suite
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="无法收尾：试试")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    wait_for(lambda: len(feishu.replies_to(message_id(msg))) >= 2, timeout=60, what="the dead-letter notice")
    wait_route_idle(r, rig.keys, rk, timeout=30)
    (entity,) = feishu.cards()
    assert not entity["streaming"] and entity["text"] == "（这条回答没有写完。）"
    replies = feishu.replies_to(message_id(msg))
    assert len(replies) == 2 and "多次处理都失败" in reply_text(replies[1])
    assert len(model_requests_with(claude, "无法收尾")) == 1  # the answer was kept; only the card failed


def test_a_topic_answer_streams_inside_the_topic_and_mentions_only_the_asker(rig: OwnStack, feishu, claude, r) -> None:
    asker = unique("ou_asker")
    text = f"@{asker} 已确认：问题在导出队列。顺便 @ou_stranger 不在对话里。" + "补充说明。" * 20
    answer_with(claude, "话题流式", text)
    claude.set_stream(2.0)
    topic, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, topic, text="根消息", thread_id=thread)
    asked = deliver(rig.web, feishu, chat_id=topic, chat_type="group", thread_id=thread, root_id=root,
                    parent_id=root, sender_open_id=asker, text="@_user_1 话题流式：导出失败",
                    mentions=[mention(BOT_OPEN_ID, "助手")])
    rk = f"feishu:{rig.env['BOT_PROFILE']}:topic:{topic}:{thread}"
    wait_route_idle(r, rig.keys, rk, timeout=40)
    (reply,) = feishu.replies_to(message_id(asked))
    assert reply["msg_type"] == "interactive" and reply.get("thread_id") == thread
    (entity,) = feishu.cards()
    assert f"<at id={asker}></at>" in entity["text"] and "<at id=ou_stranger" not in entity["text"]
    assert "@ou_stranger" in entity["text"]


def test_a_card_made_but_not_posted_is_posted_when_the_answer_is_done(rig: OwnStack, feishu, claude, r) -> None:
    """The card entity exists but posting it failed (a run dying between the two writes looks the same to the
    ledger): the turn finishes that card and posts it then — one card, one message, never a second entity."""
    text = long_answer("未发出", paragraphs=4)
    answer_with(claude, "卡片未发出", text)
    claude.set_stream(3.0)
    feishu.inject("reply", code=230002, http_status=400, times=1)  # the first reply: the card's message
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="卡片未发出：请回答")
    wait_route_idle(r, rig.keys, route_key("p2p", chat, profile=rig.profile), timeout=40)
    (entity,) = feishu.cards()
    (reply,) = feishu.replies_to(message_id(msg))
    assert reply["message_id"] == entity["message_id"] and not entity["streaming"]
    assert entity["text"] == card_markdown(text)


def test_a_turn_longer_than_the_streaming_window_turns_streaming_on_again(rig: OwnStack, feishu, claude, r) -> None:
    """Issue 23 B5. Feishu closes streaming 10 minutes after it was turned on (200850 afterwards); the documented
    remedy is one settings call with streaming_mode true. The emulator's window is shortened to 2.5 s (its control,
    so no test waits 10 minutes): an 8 s answer outlives it three times and the card keeps growing."""
    feishu.set_cardkit_limits(streaming_timeout_s=2.5)
    text = long_answer("长回合", paragraphs=12)
    answer_with(claude, "超过十分钟", text)
    claude.set_stream(8.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="超过十分钟的回答")
    wait_route_idle(r, rig.keys, route_key("p2p", chat, profile=rig.profile), timeout=60)
    (entity,) = feishu.cards()
    assert not entity["streaming"] and entity["text"] == card_markdown(text)
    ops = [h["op"] for h in feishu.card_history(entity["card_id"])]
    closed = ops.index("streaming_timeout")
    after = ops[closed:]
    assert "card_settings" in after and after.count("card_content") >= 2, ops  # on again, and text went on
    assert ops.count("card_settings") == ops.count("streaming_timeout"), ops  # one settings call each time
    assert len(feishu.replies_to(message_id(msg))) == 1 and feishu.render_defects() == []


def test_the_chat_list_shows_feishus_own_placeholder_then_a_plain_summary(rig: OwnStack, feishu, claude, r) -> None:
    """Issue 23 B8. A custom "[生成中...]" outlives streaming (it closed by itself here after 2 s); the finished
    card's summary is what the chat list shows verbatim, so it is plain text: no heading marks, bold or tags."""
    feishu.set_cardkit_limits(streaming_timeout_s=2.0)
    asker = unique("ou_asker")
    text = f"## 结论\n\n**导出失败**的原因已找到，@{asker} 请看 [日志](https://x.cn/log)。\n\n" + "补充说明。" * 40
    answer_with(claude, "摘要纯文本", text)
    claude.set_stream(4.0)
    chat = unique("oc_p2p")
    deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", sender_open_id=asker, text="摘要纯文本：为什么")
    wait_route_idle(r, rig.keys, route_key("p2p", chat, profile=rig.profile), timeout=60)
    (entity,) = feishu.cards()
    summary = entity["card"]["config"]["summary"]["content"]
    # the asker is mentioned in the card; the summary cannot name them (no name known) and leaves them out
    assert summary.startswith("结论 导出失败的原因已找到， 请看 日志。") and "@" not in summary, summary
    assert entity["preview"] == summary and feishu.render_defects() == []
    created = json.loads(next(q for q in feishu.requests if q["op"] == "card_create")["json"]["data"])
    assert created["config"]["summary"] == {"content": ""}


def test_many_tables_and_an_indented_fence_stream_within_the_card_limits(rig: OwnStack, feishu, claude, r) -> None:
    """Issue 23 B12. While streaming the card shows the answer up to its fifth table (one element shows four);
    finished, it holds five in two elements and the rest follows as a reply; the fence inside a list item is
    moved to the start of its lines. Before, the seventh table got the card refused (230099, 11310)."""
    tables = "\n\n".join(f"| 表{i} | 值 |\n| --- | --- |\n| 甲{i} | 乙{i} |" for i in range(7))
    text = "1. 安装依赖：\n   ```bash\n   pip install x\n   ```\n2. 对比如下\n\n" + tables
    answer_with(claude, "七表流式", text)
    claude.set_stream(3.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="七表流式：对比一下")
    wait_route_idle(r, rig.keys, route_key("p2p", chat, profile=rig.profile), timeout=60)
    replies = feishu.replies_to(message_id(msg))
    (entity,) = feishu.cards()
    assert entity["message_id"] == replies[0]["message_id"] and not entity["streaming"] and len(replies) == 2
    elements = entity["card"]["body"]["elements"]
    assert [e["element_id"] for e in elements] == ["answer", "answer_2"]
    assert [e["content"].count("| --- |") for e in elements] == [4, 1]
    shown = entity["text"] + "\n" + reply_text(replies[1])
    assert all(shown.count(f"甲{i} ") == 1 for i in range(7)) and "\n```bash\npip install x\n```" in shown
    assert max(h["text"].count("| --- |") for h in feishu.card_history(entity["card_id"])) <= 5
    assert feishu.render_defects() == []


def test_a_group_answer_tells_the_people_in_it_and_names_them_in_the_summary(rig: OwnStack, feishu, claude,
                                                                             r) -> None:
    """Several people: the card answers the asker's message; the colleague the asker mentioned is mentioned in
    it (and named in the chat-list summary), a stranger the model names is not (issue 23 attack matrix)."""
    asker, colleague = unique("ou_asker"), unique("ou_colleague")
    text = f"结论：@{colleague} 负责导出，@ou_stranger 不在对话里。" + "补充说明。" * 20
    answer_with(claude, "群里多人", text)
    claude.set_stream(2.0)
    chat = unique("oc_group")
    asked = deliver(rig.web, feishu, chat_id=chat, chat_type="group", sender_open_id=asker,
                    text="@_user_1 @_user_2 群里多人：谁负责导出", mentions=[mention(BOT_OPEN_ID, "助手"),
                                                                     mention(colleague, "王五", key="@_user_2")])
    wait_route_idle(r, rig.keys, route_key("group", chat, asker, profile=rig.profile), timeout=40)
    (reply,) = feishu.replies_to(message_id(asked))
    (entity,) = feishu.cards()
    assert reply["message_id"] == entity["message_id"]
    assert f"<at id={colleague}></at>" in entity["text"] and "<at id=ou_stranger" not in entity["text"]
    summary = entity["card"]["config"]["summary"]["content"]
    assert summary.startswith("结论：@王五 负责导出，@ou_stranger") and "<" not in summary, summary
    assert feishu.render_defects() == []


# -- issue 32: a model error mid-stream, a recall mid-stream, a rerun after a kill ------------------------------------

def test_a_model_error_mid_stream_is_retried_and_finishes_the_same_card(rig: OwnStack, feishu, claude, r) -> None:
    """An SSE `event: error` (overloaded_error) after 8 text deltas: the SDK raises it with the stream's HTTP
    status, 200. It is retried (not dead-lettered) and the rerun finishes the same card."""
    text = long_answer("中途过载")
    answer_with(claude, "中途过载", text)
    claude.set_stream(2.0)
    claude.fail_when("中途过载", kind="midstream_overloaded", times=1, after_deltas=8)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="中途过载：请分析")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    wait_for(lambda: len(feishu.replies_to(message_id(msg))) >= 1 and not feishu.cards()[0]["streaming"],
             timeout=60, what="the card to be finished")
    wait_route_idle(r, rig.keys, rk, timeout=60)
    assert claude.stats["poison_hits"] == {"中途过载": 1}
    assert len(model_requests_with(claude, "中途过载")) == 2  # the broken stream and the retry's
    assert not [d for d in r.hvals(rig.keys.dead) if rk in str(d)]  # nothing dead-lettered
    assert not any("多次处理都失败" in reply_text(m) for m in feishu.bot_messages(chat))
    (reply,) = feishu.replies_to(message_id(msg))
    (entity,) = feishu.cards()
    assert entity["message_id"] == reply["message_id"] and entity["text"] == card_markdown(text)


def test_a_question_recalled_mid_stream_stops_its_answer(rig: OwnStack, feishu, claude, r) -> None:
    answer_with(claude, "撤回提问", long_answer("撤回", paragraphs=10))
    claude.set_stream(8.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="撤回提问：慢慢说")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    shown = feishu.wait_for(lambda: card_messages(feishu, message_id(msg)), timeout=30)
    card_id = feishu.card_of(shown[0]["message_id"])
    feishu.recall_message(message_id(msg))
    event = message_recalled_event(message_id(msg), chat, app_id=APP_ID, token=VERIFICATION_TOKEN)
    assert rig.web.post(event).status_code == 200
    wait_for(lambda: not feishu.cards()[0]["streaming"], timeout=30, what="the card to be closed")
    wait_route_idle(r, rig.keys, rk, timeout=30)
    assert [c["card_id"] for c in feishu.cards()] == [card_id]
    assert feishu.cards()[0]["text"] == "（这条回答没有写完。）"  # closed as a reset closes it
    assert [m["message_id"] for m in feishu.replies_to(message_id(msg))] == [shown[0]["message_id"]]
    assert not any("撤回" in e["text"] for e in session_log(r, rig.keys, rk) if e["role"] == "assistant")
    assert len(model_requests_with(claude, "撤回提问")) == 1
    assert not [d for d in r.hvals(rig.keys.dead) if rk in str(d)]  # nothing dead-lettered


def test_a_rerun_after_a_kill_never_shows_less_than_the_card_did(rig: OwnStack, feishu, claude, r) -> None:
    text = long_answer("不缩短")
    answer_with(claude, "不缩短", text)
    claude.set_stream(6.0)
    chat = unique("oc_p2p")
    msg = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="不缩短：请详细分析")
    rk = route_key("p2p", chat, profile=rig.env["BOT_PROFILE"])
    shown = feishu.wait_for(lambda: card_messages(feishu, message_id(msg)), timeout=30)
    card_id = feishu.card_of(shown[0]["message_id"])
    wait_for(lambda: len(content_ops(feishu.card_history(card_id))) >= 4, timeout=20, what="the card to grow")
    rig.kill_workers()
    claude.set_stream(4.0)  # the rerun streams slowly enough to push several times
    wait_for(lambda: not feishu.cards()[0]["streaming"], timeout=60, what="the rerun to finish the card")
    wait_route_idle(r, rig.keys, rk, timeout=60)
    assert len(model_requests_with(claude, "不缩短")) == 2
    lengths = [h["length"] for h in content_ops(feishu.card_history(card_id))]
    assert lengths == sorted(lengths), lengths  # the card never shrank, across the kill
    assert feishu.cards()[0]["text"] == card_markdown(text)
