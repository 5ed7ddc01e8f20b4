"""Topic bootstrap and the chain of recall through the real stack (issue 6, acceptance 6 and 7)."""

from __future__ import annotations

import html
import json
import math
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.feishu.events import mention
from tests.harness import (
    BOT_OPEN_ID,
    deliver,
    message_id,
    model_requests_with,
    route_key,
    session_log,
    unique,
    wait_route_idle,
)
from tests.own_stack import OwnStack

AT_BOT = [mention(BOT_OPEN_ID, "助手")]


def _topic(feishu: Any, earlier: int, long_at: int | None = None) -> dict[str, str]:
    """A topic with a root and `earlier` messages by another user (message `long_at` is long)."""
    chat, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, chat, text="根消息：月度报表导出失败", thread_id=thread, sender_open_id="ou_owner")
    for i in range(1, earlier + 1):
        text = f"早先消息 {i:02d}" + ("。详细日志：" + "x" * 600 if i == long_at else "")
        feishu.add_message(unique("om_e"), chat, text=text, thread_id=thread, sender_open_id="ou_other")
    return {"chat_id": chat, "chat_type": "group", "thread_id": thread, "root_id": root, "parent_id": root}


def _ask(service: Any, feishu: Any, r: Any, keys: Any, topic: dict[str, str], text: str) -> dict[str, Any]:
    env = deliver(service, feishu, sender_open_id="ou_alice", text=f"@_user_1 {text}", mentions=AT_BOT, **topic)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    wait_route_idle(r, keys, route_key("topic", topic["chat_id"], topic["thread_id"]))
    return env


def _text(req: dict[str, Any]) -> str:
    return json.dumps(req["body"]["messages"], ensure_ascii=False)


def test_new_topic_starts_with_root_and_earlier_messages(service, feishu, claude, r, keys) -> None:
    topic = _topic(feishu, earlier=3)
    _ask(service, feishu, r, keys, topic, "报表的问题现在怎么处理？")
    first = _text(model_requests_with(claude, "报表的问题现在怎么处理")[0])
    assert "根消息：月度报表导出失败" in first
    assert all(f"早先消息 {i:02d}" in first for i in (1, 2, 3))
    assert first.count("报表的问题现在怎么处理") == 1  # the batch is not repeated as thread data
    assert "<thread_context" in first and 'sender=\\"ou_other\\"' in first
    rk = route_key("topic", topic["chat_id"], topic["thread_id"])
    assert session_log(r, keys, rk)[0]["kind"] == "bootstrap"
    # A session that follows a user reset is not bootstrapped.
    _ask(service, feishu, r, keys, topic, "/reset")
    _ask(service, feishu, r, keys, topic, "换个新问题")
    after = _text(model_requests_with(claude, "换个新问题")[0])
    assert "根消息" not in after and "早先消息" not in after


def test_model_reads_thread_pages_and_next_turn_resumes(service, feishu, claude, r, keys) -> None:
    topic = _topic(feishu, earlier=59, long_at=25)  # root + 59 = a 60-message thread
    _ask(service, feishu, r, keys, topic, "看看话题里之前的消息")
    lists = [q for q in feishu.requests if q["op"] == "list" and q["query"].get("container_id") == topic["thread_id"]]
    tool_lists = [q for q in lists if q["query"].get("page_size") == "20"]
    assert len(tool_lists) == 2 and tool_lists[1]["query"].get("page_token")  # a second page was listed
    requests = model_requests_with(claude, "看看话题里之前的消息")
    assert any("早先消息 30" in _text(q) and "tool_result" in _text(q) for q in requests)  # page 2 reached the model
    assert "早先消息 30" not in _text(requests[0])  # not from the bootstrap (it holds the newest 20)
    rk = route_key("topic", topic["chat_id"], topic["thread_id"])
    record = session_log(r, keys, rk)[-1]["recall"]
    assert len(record["fetched"]) == 40
    long_id = next(i for i in record["fetched"] if i not in record["included"])
    assert long_id in record["pending"]  # spilled: only its summary entered the request
    assert record["cursor"]["has_more"] is True and record["cursor"]["thread"]
    cursor = record["cursor"]["thread"]
    _ask(service, feishu, r, keys, topic, "继续看")
    later = [q for q in feishu.requests if q["op"] == "list" and q["query"].get("container_id") == topic["thread_id"]]
    assert later[len(lists)]["query"].get("page_token") == cursor  # the next turn resumed from the cursor


def test_bootstrap_retries_transient_errors_and_skips_permanent_ones(service, feishu, claude, r, keys) -> None:
    topic = _topic(feishu, earlier=2)
    feishu.inject("list", code=0, http_status=503)  # a gateway error: the turn is tried again
    _ask(service, feishu, r, keys, topic, "第一次：报表？")
    first = model_requests_with(claude, "第一次：报表")
    assert len(first) == 1 and "根消息：月度报表导出失败" in _text(first[0])
    other = _topic(feishu, earlier=2)
    feishu.inject("list", code=230027, http_status=400)  # refused for good: answered without bootstrap
    _ask(service, feishu, r, keys, other, "第二次：报表？")
    second = model_requests_with(claude, "第二次：报表")
    assert len(second) == 1 and "根消息" not in _text(second[0])


def test_history_before_a_reset_is_read_only_when_asked_and_marked(service, feishu, claude, r, keys) -> None:
    chat = unique("oc_p2p")
    rk = route_key("p2p", chat)

    def say(text: str) -> None:
        env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text=text)
        feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
        wait_route_idle(r, keys, rk)

    say("旧话题：ETL 任务昨晚失败")
    say("/reset")

    def responder(body: dict[str, Any]) -> Any:
        n = len(body["messages"])  # 1: the question; 3: after one tool round; 5: after two
        if n == 1 and "重置之前" in _text({"body": body}):
            return [{"type": "tool_use", "id": "toolu_h1", "name": "read_history", "input": {}}]
        if n == 3:
            return [{"type": "tool_use", "id": "toolu_h2", "name": "read_history", "input": {"cross_reset": True}}]
        return "好的。"

    claude.set_responder(responder)
    say("我明确要求：看看重置之前我们聊了什么")
    results = [b["content"] for q in claude.requests for m in q["body"]["messages"] if isinstance(m["content"], list)
               for b in m["content"] if b.get("type") == "tool_result"]
    refused, crossed = results[0], results[-1]
    assert "ETL" not in refused and "user reset" in refused
    assert "ETL 任务昨晚失败" in crossed and 'crosses_user_reset="true"' in crossed
    assert "CROSSES A USER RESET" in crossed
    assert session_log(r, keys, rk)[-1]["recall"]["crossed_reset"] is True


def test_a_tool_result_fits_its_room_and_only_sent_messages_count_as_used(env, feishu, redis_url) -> None:
    from claude.budget import Budget
    from runs.runtime import Runtime
    from tests.harness import settings_from
    from turn.recall import Reader

    topic = _topic(feishu, earlier=59)
    rt = Runtime(settings_from(env), redis_url)
    b = Budget(4000, 500)
    reader = Reader(rt, route_key("topic", topic["chat_id"], topic["thread_id"]), "s_none", b)
    use = {"type": "tool_use", "id": "toolu_1", "name": "read_thread", "input": {"page_size": 50}}
    [result] = reader.run([use], 500, context="")
    assert b.cost(result["content"]) <= 500
    assert "not_shown" in result["content"] and "早先消息 01" in result["content"]
    record = reader.record()
    assert len(record["fetched"]) == 50 and record["included"] == []  # read, not yet used
    reader.sent()
    record = reader.record()
    assert 0 < len(record["included"]) < 50
    assert set(record["pending"]) == set(record["fetched"]) - set(record["included"])
    assert record["cursor"]["has_more"] is True
    # Issue 14 A12: the cursor points at the first message the request did not carry, not past the page.
    assert record["cursor"]["thread"] == f"skip:{len(record['included'])}:"
    again = {"type": "tool_use", "id": "toolu_2", "name": "read_thread", "input": {"page_size": 50}}
    [more] = reader.run([again], 500, context="")
    first_unseen = f"早先消息 {len(record['included']):02d}"  # the root is message 0
    assert first_unseen in more["content"] and f"早先消息 {len(record['included']) - 1:02d}" not in more["content"]


def test_read_thread_after_a_reset_leaves_out_what_was_said_before_it(service, feishu, claude, r, keys) -> None:
    """Issue 14 A4: after `/reset` in a topic the tool's cursor restarts, but the messages from before the reset
    stay out of the request and of the new session (unless the user explicitly asks for them)."""
    topic = _topic(feishu, earlier=3)
    _ask(service, feishu, r, keys, topic, "报表问题先聊到这")
    _ask(service, feishu, r, keys, topic, "/reset")
    feishu.add_message(unique("om_after"), topic["chat_id"], text="重置之后的新线索 42", thread_id=topic["thread_id"],
                       sender_open_id="ou_other")
    _ask(service, feishu, r, keys, topic, "看看话题里之前的消息")
    requests = model_requests_with(claude, "看看话题里之前的消息")
    results = [_text(q) for q in requests if "tool_result" in _text(q)]
    assert results and "重置之后的新线索 42" in results[-1]  # read: the messages after the reset
    assert all("早先消息" not in x and "根消息" not in x for x in results)
    assert "before_user_reset" in results[-1]
    rk = route_key("topic", topic["chat_id"], topic["thread_id"])
    assert all("早先消息" not in json.dumps(e, ensure_ascii=False) for e in session_log(r, keys, rk))


def _reader(env: dict[str, str], redis_url: str, topic: dict[str, str], b: Any) -> Any:
    from runs.runtime import Runtime
    from tests.harness import settings_from
    from turn.recall import Reader

    return Reader(Runtime(settings_from(env), redis_url), route_key("topic", topic["chat_id"], topic["thread_id"]),
                  "s_none", b)


LONG_ROOT = "根消息：月度报表导出失败，" + "导出任务日志显示第三步超时后重试三次仍失败" * 17  # 387 chars: inline


@pytest.mark.parametrize("room", [120, 200, 260, 340, 500])
def test_a_page_in_a_tiny_room_shows_the_head_of_its_first_message_and_moves_on(env, feishu, redis_url,
                                                                               room: int) -> None:
    """Issue 23 A7: a page whose room holds no whole message still shows the head of the first unseen one, with
    the offset read_message reads on from, and its cursor moves past it. Only a room that cannot hold even that
    head is full: the cursor stays where it was and the model answers with what it has."""
    from claude.budget import Budget

    chat, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, chat, text=LONG_ROOT, thread_id=thread, sender_open_id="ou_owner")
    feishu.add_message(unique("om_e"), chat, text="早先消息 01", thread_id=thread, sender_open_id="ou_other")
    b = Budget(4000, 500)
    reader = _reader(env, redis_url, {"chat_id": chat, "thread_id": thread}, b)
    use = {"type": "tool_use", "id": "toolu_1", "name": "read_thread", "input": {"page_size": 50}}
    [result] = reader.run([use], room, context="")
    page = result["content"]
    assert b.cost(page) <= room
    if 'reason="request_full"' in page:
        # A single read gets 80% of the room (its JSON framing costs the rest); the page's frame and a 40-character
        # head take ~190 tokens of that.
        assert room * 0.8 < 200 and reader.full and reader.cursor is None  # nothing shown, nothing skipped
        assert LONG_ROOT[:10] not in page
        return
    assert not reader.full and "<message_part" in page and 'offset="0"' in page
    offset = int(re.search(r"read on with read_message offset=(\d+)", page).group(1))  # type: ignore[union-attr]
    assert 40 <= offset < len(LONG_ROOT) and LONG_ROOT[:offset] in html.unescape(page)
    assert 'next_cursor="skip:1:"' in page and reader.cursor == "skip:1:"  # past the message shown in part
    reader.sent()
    record = reader.record()
    assert root in record["pending"] and root not in record["included"]  # not read whole yet
    rest = {"type": "tool_use", "id": "toolu_2", "name": "read_message", "input": {"message_id": root,
                                                                                   "offset": offset}}
    [more] = reader.run([rest], 2000, context=page)
    assert LONG_ROOT[offset:] in html.unescape(more["content"])
    nxt = {"type": "tool_use", "id": "toolu_3", "name": "read_thread", "input": {}}
    [after] = reader.run([nxt], 2000, context=page)
    assert "早先消息 01" in after["content"] and "<message_part" not in after["content"]


def test_a_tight_request_never_gets_a_thread_page_that_shows_nothing(budgeted, feishu, claude, r) -> None:
    """Issue 23 A7, as it was seen: in a request with little room left (here a 2,600-token budget, requests of
    ~1,600 tokens), the model's second read_thread got a page with no message and the cursor it was given
    (`<not_shown count="17" reason="no room"/>`, next_cursor = cursor). Every page must show at least one message,
    or part of one, and move its cursor; a read that finds the request full ends the tool rounds. (On the tight
    deployments of the read-on test below: the tightest budget the service takes, and one a little wider.)"""
    tight, _budget = budgeted
    chat, thread, root = unique("oc_room"), unique("omt"), unique("om_root")
    feishu.add_message(root, chat, text="根消息：月度报表导出失败", thread_id=thread, sender_open_id="ou_owner")
    for i in range(1, 30):
        feishu.add_message(unique("om_e"), chat, text=f"早先消息 {i:02d}" + "。补充说明" * 20, thread_id=thread,
                           sender_open_id="ou_other")
    topic = {"chat_id": chat, "chat_type": "group", "thread_id": thread, "root_id": root, "parent_id": root}
    env = deliver(tight.web, feishu, sender_open_id="ou_alice", text="@_user_1 看看话题里之前的消息", mentions=AT_BOT,
                  **topic)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)), 60)
    wait_route_idle(r, tight.keys, f"feishu:{tight.profile}:topic:{chat}:{thread}")
    requests = model_requests_with(claude, "看看话题里之前的消息")
    reads = [(q, b["content"]) for q in requests if isinstance(q["body"]["messages"][-1]["content"], list)
             for b in q["body"]["messages"][-1]["content"] if b.get("type") == "tool_result"]
    assert reads, "the model read the thread"
    for request, page in reads:
        if 'reason="request_full"' in page:  # the request is full: the model must answer now
            assert request["body"].get("tool_choice") == {"type": "none"}
            continue
        head = re.search(r'cursor="([^"]*)" next_cursor="([^"]*)"', page)
        assert head and head.group(1) != head.group(2), page[:300]  # the cursor moved
        assert re.search(r"<(thread_message|spilled_message|message_part) ", page), page[:300]  # something shown


def test_a_read_that_finds_the_request_full_ends_the_tool_rounds(env, feishu, claude, redis_url) -> None:
    """Issue 23 A7: when not even the head of the next message fits, read_thread says the request is full (the
    cursor stays) and the next request forbids tools: the model answers instead of reading nothing again."""
    from runs.runtime import Runtime
    from tests.harness import settings_from
    from turn import recall, rotation
    from turn.registry import Context
    from turn.rotation import Request
    from turn.thread import PAGE_END, message_part, page_head

    chat, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, chat, text=LONG_ROOT, thread_id=thread, sender_open_id="ou_owner")
    rk = route_key("topic", chat, thread)
    rt = Runtime(settings_from({**env, "BOT_PROFILE": unique("full"), "CONTEXT_BUDGET_TOKENS": "7000"}), redis_url)
    b, system, tools = rotation.budget_of(rt), [{"type": "text", "text": "You answer."}], recall.tools_for(rt, rk)
    assert b.factor == 1.0  # a profile of its own: no calibration yet, so the arithmetic below is exact
    uses = [{"type": "tool_use", "id": "toolu_read", "name": "read_thread", "input": {}},
            {"type": "tool_use", "id": "toolu_hist", "name": "read_history", "input": {}}]
    smallest = b.cost(page_head(thread, "", "skip:1:", True) + PAGE_END) + b.cost(message_part(root, LONG_ROOT, 0, 40))
    # Each of the two reads gets 80% of half the room the step leaves: 20 tokens less than the smallest page.
    room = math.ceil((smallest - 20) * 2 / 0.8) + b.cost(json.dumps(uses, ensure_ascii=False))

    def ask(pad: int) -> list[dict[str, Any]]:
        return [{"role": "user", "content": "请看看之前的讨论" + "x" * pad}]

    pad = 0
    while b.input_room(b.request_cost(system, ask(pad + 3), tools)) >= room:
        pad += 3

    def responder(body: dict[str, Any]) -> Any:
        return "好的，先回答。" if (body.get("tool_choice") or {}).get("type") == "none" else uses

    claude.set_responder(responder)
    turn = Context(rt, rk, (), "b_tight", lambda: True, session_id="s_none")
    talk = recall.converse(turn, Request(system, tools), ask(pad))
    requests = [q["body"] for q in claude.requests if "请看看之前的讨论" in json.dumps(q["body"], ensure_ascii=False)]
    assert len(requests) == 2 and requests[1].get("tool_choice") == {"type": "none"}
    results = [x["content"] for x in requests[1]["messages"][-1]["content"] if x.get("type") == "tool_result"]
    assert 'reason="request_full"' in results[0] and LONG_ROOT[:10] not in results[0]
    assert talk.completion.text == "好的，先回答。" and talk.completion.recall["cursor"]["thread"] is None


def test_the_stand_in_reads_the_thread_only_when_a_person_asks() -> None:
    """The service's own note on where reading stopped ("An earlier turn read the thread partway") is no request
    to read: the stand-in answers as a model would, reading only when the user asks."""
    from sandbox.claude.recall import recall_reply

    note = ("\n<recall_state>\nAn earlier turn read the thread partway; read_thread without a cursor continues "
            "there.\n</recall_state>")
    asked = '<message sender="ou_a" message_id="om_1">\n{}\n</message>' + note
    body: dict[str, Any] = {"tools": [{"name": "read_thread"}], "messages": [
        {"role": "user", "content": asked.format("周报什么时候发？")}]}
    assert recall_reply(body) is None
    body["messages"][0]["content"] = asked.format("继续看")
    reply = recall_reply(body)
    assert isinstance(reply, list) and reply[1]["name"] == "read_thread"


READ_ON = "导出任务日志显示第三步超时后重试三次仍失败"  # 21 characters: a long message is 15 of them (~330, inline)


# CONTEXT_BUDGET_TOKENS' minimum, and a little wider: +4,000 each since issue 34 (system prompt, tools)
@pytest.fixture(scope="module", params=[6000, 8000])
def budgeted(request: pytest.FixtureRequest, env: dict[str, str], workdir: Path) -> Iterator[tuple[OwnStack, int]]:
    """A deployment whose input budget is the test's parameter (the issue saw it at 3,000)."""
    stack = OwnStack.start(env, workdir, "readon", CONTEXT_BUDGET_TOKENS=str(request.param), MAX_OUTPUT_TOKENS="256")
    yield stack, request.param
    stack.stop()


def _pages_of(requests: list[dict[str, Any]]) -> dict[str, str]:
    """Every read_thread result the model was given, by its tool_use id (a later round repeats the earlier ones)."""
    reads: dict[str, str] = {}
    for q in requests:
        for m in q["body"]["messages"]:
            for block in m["content"] if isinstance(m["content"], list) else []:
                if block.get("type") == "tool_result" and "<thread_page" in str(block.get("content")):
                    reads.setdefault(str(block["tool_use_id"]), str(block["content"]))
    return reads


def test_reading_a_long_topic_under_a_tight_budget_reads_every_message_once(budgeted, feishu, claude, r) -> None:
    """Issue 32: with a 2,000–4,000-token budget and 60 long messages, "继续读" turn after turn reads the topic to its
    end: each read shows at least one unseen message and moves the cursor, every message is shown once (whole or
    as its head), none skipped. It stalled once the session's history (and a turn's first page) filled the
    request: the next reads got `<thread_unread reason="request_full"/>` or no tool round at all."""
    stack, budget = budgeted
    chat, thread, root = unique("oc_readon"), unique("omt"), unique("om_root")
    ids = [root]
    feishu.add_message(root, chat, text="根消息 00：" + READ_ON * 15, thread_id=thread, sender_open_id="ou_owner")
    for i in range(1, 60):
        ids.append(unique("om_e"))
        feishu.add_message(ids[-1], chat, text=f"早先消息 {i:02d}：" + READ_ON * 15, thread_id=thread,
                           sender_open_id="ou_other")
    topic = {"chat_id": chat, "chat_type": "group", "thread_id": thread, "root_id": root, "parent_id": root}
    rk = f"feishu:{stack.profile}:topic:{chat}:{thread}"
    start, shown = len(claude.requests), []
    for n in range(90):  # the tightest budget shows about one message a turn
        ask = deliver(stack.web, feishu, sender_open_id="ou_alice", mentions=AT_BOT, **topic,
                      text=f"@_user_1 {'看看话题里之前的消息' if n == 0 else '继续读'}（第 {n} 次）")
        asked = message_id(ask)
        feishu.wait_for(lambda: feishu.replies_to(asked), 60)  # noqa: B023 (called before the loop moves on)
        wait_route_idle(r, stack.keys, rk)
        shown = _shown(claude.requests[start:])  # the asks and answers join the topic too: read after the 60
        if set(ids) <= set(shown):
            break
    assert set(ids) <= set(shown), f"{budget}: {len(set(ids) - set(shown))} of the 60 never shown"
    assert len(shown) == len(set(shown)), f"{budget}: shown twice: {[m for m in shown if shown.count(m) > 1]}"
    assert all('reason="request_full"' not in q for q in _results_text(claude.requests[start:]))


def _shown(requests: list[dict[str, Any]]) -> list[str]:
    """The message ids the model's read_thread pages showed (whole, spilled or as a head), once per page."""
    return [mid for page in _pages_of(requests).values()
            for mid in re.findall(r'<(?:thread_message|spilled_message|message_part) [^>]*?(?:message_id|id|'
                                  r'message_id_ref)="([^"]+)"', page)]


def _results_text(requests: list[dict[str, Any]]) -> list[str]:
    return [str(b.get("content")) for q in requests for m in q["body"]["messages"]
            if isinstance(m["content"], list) for b in m["content"] if b.get("type") == "tool_result"]


def test_a_stuck_read_makes_room_from_this_turn_s_results_then_the_oldest_whole_exchange() -> None:
    """Issue 32: what makes room for one unseen message — first this turn's earlier results (a marker stays), then
    history's oldest exchange, never a tool result without the call before it; nothing left to give: None."""
    from turn.recall import DROPPED, _room_made

    call = {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "read_thread", "input": {}}]}
    result = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "page 1"}]}
    history = [{"role": "user", "content": "q1"}, call, result, {"role": "assistant", "content": "a1"},
               {"role": "user", "content": "q2"}, {"role": "assistant", "content": "a2"}]
    batch = {"role": "user", "content": "继续读"}
    now = [*history, batch, call, result]
    dropped, start = _room_made(now, len(history))
    assert start == len(history) and dropped[-1]["content"][0]["content"] == DROPPED and dropped[:-1] == now[:-1]
    cut, start = _room_made([*history, batch], len(history))
    assert cut == [*history[4:], batch] and start == 2  # q1's exchange went whole, its tool round with it
    assert _room_made([batch], 0) is None
