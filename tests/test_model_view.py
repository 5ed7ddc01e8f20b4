"""Issue 34: the requests the product really sends (web → Redis → worker → the stand-in recording them), read as a
model reads them: laid out for the prompt cache, people by name, tools described, the context a model needs."""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

from claude.guide import RULES
from evals import structure
from sandbox.claude.wire import block_text
from tests.harness import (
    BOT_OPEN_ID,
    deliver,
    message_id,
    model_requests_with,
    route_key,
    unique,
    wait_route_idle,
)

AT_BOT = [{"key": "@_user_1", "id": {"open_id": BOT_OPEN_ID}, "name": "助手"}]


def turn_request(claude: Any, needle: str) -> dict[str, Any]:
    """The first request whose turn carries `needle` (its batch block)."""
    for call in claude.requests:
        messages = call["body"]["messages"]
        at = structure.turn_index(call["body"])
        if at is not None and needle in block_text(messages[at]["content"][:1]):
            return dict(call["body"])
    raise AssertionError(f"no turn request carried {needle!r}")


def usage_of(claude: Any, needle: str) -> dict[str, int]:
    for call in claude.requests:
        at = structure.turn_index(call["body"])
        if at is not None and needle in block_text(call["body"]["messages"][at]["content"][:1]):
            return dict(call["usage"])
    raise AssertionError(needle)


def ask(service: Any, feishu: Any, r: Any, keys: Any, chat: str, text: str, **kw: Any) -> str:
    env = deliver(service, feishu, chat_id=chat, chat_type=kw.pop("chat_type", "p2p"), text=text, **kw)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=40)
    return message_id(env)


def test_a_conversation_is_one_cacheable_prefix_read_from_the_cache_from_its_third_turn(service, feishu, claude, r,
                                                                                        keys) -> None:
    """Breakpoints after the system, at the end of history and on the batch block; the next turn's request starts
    with this one's history and batch byte for byte; one tool list for every route kind; ≥ 70 % read from the cache
    (the stand-in bills as the API does) from the third turn on."""
    chat = unique("oc_cache")
    rk = route_key("p2p", chat)
    for n, text in enumerate(("报表服务昨天的数据对不上", "可能是上游接口改了字段", "那先核对字段映射吧",
                              "核对完了，映射没问题")):
        ask(service, feishu, r, keys, chat, f"第{n + 1}轮 {text}", sender_open_id="ou_cache")
        wait_route_idle(r, keys, rk)
    bodies = [turn_request(claude, f"第{n}轮") for n in range(1, 5)]
    for body in bodies:
        assert structure.breakpoints(body) == [], body
    for earlier, later in itertools.pairwise(bodies):
        assert structure.prefix_kept(earlier, later) == []
    for n in (3, 4):
        used = usage_of(claude, f"第{n}轮")
        total = used["input_tokens"] + used["cache_read_input_tokens"] + used["cache_creation_input_tokens"]
        assert used["cache_read_input_tokens"] >= 0.7 * total, used
    group = unique("oc_cache_g")
    ask(service, feishu, r, keys, group, "@_user_1 群里的问题", chat_type="group", mentions=AT_BOT,
        sender_open_id="ou_cache")
    topic = unique("omt_cache")
    ask(service, feishu, r, keys, group, "@_user_1 话题里的问题", chat_type="group", mentions=AT_BOT, thread_id=topic,
        sender_open_id="ou_cache")
    kinds = [bodies[0], turn_request(claude, "群里的问题"), turn_request(claude, "话题里的问题")]
    assert structure.one_tool_list(kinds) == []  # p2p, group and topic offer the same tools
    p2p_context = block_text(bodies[0]["messages"][-1]["content"][1:])
    assert "<tools_unavailable>" in p2p_context and "read_thread: this conversation is not a topic" in p2p_context


def test_the_system_prompt_names_the_bot_and_says_how_people_memory_and_trust_work(service, feishu, claude, r,
                                                                                   keys) -> None:
    chat = unique("oc_guide")
    ask(service, feishu, r, keys, chat, "介绍一下你自己", sender_open_id="ou_guide")
    body = turn_request(claude, "介绍一下你自己")
    system = body["system"][0]["text"]
    assert system.startswith("You are 助手,")  # the bot's app name (bot/v3/info), as its members see it
    assert RULES in system
    for rule in ("@all / @所有人 never notifies anyone", "To mention someone write @ and their open_id",
                 "is shown whole in <memory>", "insert a line (or str_replace one)",
                 "the operator's rules (this prompt, persona, standing team notes) come first"):
        assert rule in system, rule
    context = block_text(body["messages"][-1]["content"][1:])
    assert '<scope path="/memories/people/ou_guide/" may="read and write"/>' in context  # this turn's rights
    assert re.search(r"<now>\d{4}-\d\d-\d\dT\d\d:\d\d\+08:00 \w+</now>", context)


def test_people_are_shown_by_name_and_quoted_messages_are_inlined(service, feishu, claude, r, keys) -> None:
    feishu.add_user("ou_named", "王芳")
    chat = unique("oc_names")
    first = ask(service, feishu, r, keys, chat, "发布前要检查哪三件事？", sender_open_id="ou_named")
    answer = feishu.replies_to(first)[0]["message_id"]
    wait_route_idle(r, keys, route_key("p2p", chat))
    ask(service, feishu, r, keys, chat, "你上面说的第二点是什么意思？", sender_open_id="ou_named", parent_id=answer,
        root_id=answer)
    body = turn_request(claude, "你上面说的第二点")
    batch = body["messages"][-1]["content"][0]["text"]
    assert 'sender="ou_named"' in batch and 'name="王芳"' in batch  # the open_id stays the key
    assert re.search(r'time="\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\+08:00"', batch)
    # The bot's answer is in the history already: the quote names it by its head, never repeats it whole.
    quoted = re.search(rf'<quoted ref="{answer}" sender="assistant" shown="above">(.*?)</quoted>', batch, re.DOTALL)
    assert quoted and "发布前要检查哪三件事" in quoted.group(1)
    assert structure.duplicates(body) == [] and structure.placeholders(body) == []
    # A message the conversation never showed (the person's own, not sent to the bot) is inlined whole, as data.
    aside = unique("om_aside")
    feishu.add_message(aside, chat, text="备忘：发布窗口是周四 20:00", sender_open_id="ou_named", chat_mode="p2p")
    ask(service, feishu, r, keys, chat, "这条备忘对吗？", sender_open_id="ou_named", parent_id=aside, root_id=aside)
    batch = turn_request(claude, "这条备忘对吗")["messages"][-1]["content"][0]["text"]
    assert re.search(rf'<quoted message_id="{aside}" sender="ou_named" name="王芳" time="[^"]+\+08:00">'
                     r"备忘：发布窗口是周四 20:00</quoted>", batch)


def test_the_bots_card_reads_as_text_and_tool_rounds_stay_in_history(service, feishu, claude, r, keys) -> None:
    """A topic: the bot answers with a card; a read of the thread shows the card's text (never `[interactive]`); the
    next turn's history carries that read (the call and its result) exactly as the request did."""
    chat, thread, root = unique("oc_card"), unique("omt_card"), unique("om_root")
    feishu.add_message(root, chat, text="话题：登录页偶发 502", thread_id=thread, sender_open_id="ou_card")
    table = "| 项 | 结论 |\n|---|---|\n| 根因 | 慢查询（缺索引） |\n| 处理 | 加索引后 P99 3 秒 |"
    claude.set_responder(lambda body: table if "先给个结论表" in json.dumps(body, ensure_ascii=False) else None
                         or _builtin(body))
    try:
        ask(service, feishu, r, keys, chat, "@_user_1 先给个结论表", chat_type="group", mentions=AT_BOT,
            thread_id=thread, root_id=root, parent_id=root, sender_open_id="ou_card")
    finally:
        claude.set_responder(None)
    rk = route_key("topic", chat, thread)
    wait_route_idle(r, keys, rk)
    assert [m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"]
    ask(service, feishu, r, keys, chat, "@_user_1 看看话题里之前的消息", chat_type="group", mentions=AT_BOT,
        thread_id=thread, root_id=root, parent_id=root, sender_open_id="ou_card")
    wait_route_idle(r, keys, rk)
    results = [b["content"] for c in model_requests_with(claude, "看看话题里之前的消息")
               for m in c["body"]["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    assert results and "慢查询（缺索引）" in results[-1] and "[interactive]" not in json.dumps(results)
    ask(service, feishu, r, keys, chat, "@_user_1 好的谢谢", chat_type="group", mentions=AT_BOT, thread_id=thread,
        root_id=root, parent_id=root, sender_open_id="ou_card")
    later = turn_request(claude, "好的谢谢")
    kept = [b for m in later["messages"][:structure.turn_index(later)] if isinstance(m["content"], list)
            for b in m["content"]]
    assert any(b.get("type") == "tool_use" and b.get("name") == "read_thread" for b in kept)
    assert any(b.get("type") == "tool_result" and "慢查询（缺索引）" in str(b.get("content")) for b in kept)
    assert structure.prefix_kept(turn_request(claude, "看看话题里之前的消息"), later) == []


def _builtin(body: dict[str, Any]) -> Any:
    from sandbox.claude.standin import builtin_reply

    return builtin_reply(body)


def test_a_topic_opened_with_the_bot_shows_its_root_once(service, feishu, claude, r, keys) -> None:
    chat, thread = unique("oc_root"), unique("omt_root")
    ask(service, feishu, r, keys, chat, "@_user_1 新话题：导出任务失败（标记 ROOT-ONCE）", chat_type="group",
        mentions=AT_BOT, thread_id=thread, sender_open_id="ou_root")
    body = turn_request(claude, "标记 ROOT-ONCE")
    assert json.dumps(body["messages"], ensure_ascii=False).count("标记 ROOT-ONCE") == 1
    assert structure.duplicates(body) == []


def test_a_reset_is_marked_in_the_next_request(service, feishu, claude, r, keys) -> None:
    chat = unique("oc_reset_mark")
    ask(service, feishu, r, keys, chat, "重置前说的话 A7731", sender_open_id="ou_reset")
    ask(service, feishu, r, keys, chat, "/reset", sender_open_id="ou_reset")
    ask(service, feishu, r, keys, chat, "重置后的第一句", sender_open_id="ou_reset")
    ask(service, feishu, r, keys, chat, "重置后的第二句", sender_open_id="ou_reset")
    first = json.dumps(turn_request(claude, "重置后的第一句")["messages"], ensure_ascii=False)
    assert '<state kind=\\"reset\\"' in first and "A7731" not in first
    assert "<state kind" not in json.dumps(turn_request(claude, "重置后的第二句")["messages"], ensure_ascii=False)


def test_tools_are_described_and_a_follow_up_that_cannot_be_set_is_a_tool_error(service, feishu, claude, r,
                                                                                keys) -> None:
    chat = unique("oc_tools")
    ask(service, feishu, r, keys, chat, "记忆调用：x", sender_open_id="ou_tools")  # any turn: the tools it offers
    body = turn_request(claude, "记忆调用：x")
    assert structure.described(body) == []
    follow = next(t for t in body["tools"] if t["name"] == "schedule_followup")
    assert "10:00" in follow["input_schema"]["properties"]["at"]["description"]  # a day without a time
    assert "ask back" in follow["description"]  # ambiguous or past times
    mid = unique("om_past")

    def past(request: dict[str, Any]) -> Any:
        if "提醒我昨天" not in json.dumps(request["messages"], ensure_ascii=False):
            return None
        if any(m["role"] == "user" and isinstance(m["content"], list) and
               any(b.get("type") == "tool_result" for b in m["content"]) for m in request["messages"][-1:]):
            return "没设上。"
        return [{"type": "tool_use", "id": "toolu_past", "name": "schedule_followup",
                 "input": {"message_id": mid, "at": "2020-01-01T10:00:00+08:00", "what": "过去"}}]

    claude.set_responder(past)
    try:
        env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="提醒我昨天的事", message_id=mid,
                      sender_open_id="ou_tools")
        feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=40)
    finally:
        claude.set_responder(None)
    result = next(b for c in model_requests_with(claude, "提醒我昨天") for m in c["body"]["messages"]
                  if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result")
    assert result.get("is_error") is True and str(result["content"]).startswith("not set:")
