"""`/poll` (issue 31's small real feature, one folder + one line in app.py): the command's reading (pure), and a
poll through the real stack — one vote per person, changeable, bounded, closed by its timer with the result."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from feishu.cards import buttons_of
from polls.spec import SpecError, read_spec
from tests.harness import deliver, message_id, reply_text, unique, wait_for
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack
from tests.test_items import _click
from tests.test_plugins import AT_BOT, MONDAY_9, stack  # noqa: F401  (the module's stack: the product's App + one)

TZ = ZoneInfo("Asia/Shanghai")
DAY = timedelta(hours=24)


@pytest.mark.parametrize("text, question, options, closes", [
    ("午饭吃什么 | 面 | 饭", "午饭吃什么", ("面", "饭"), MONDAY_9 + DAY),
    ("午饭 ｜ 面 ｜ 饭 ｜ 面 | 截止 10:00", "午饭", ("面", "饭"), MONDAY_9.replace(hour=10)),
    ("a | b | c | 截止 8:30", "a", ("b", "c"), MONDAY_9.replace(hour=8, minute=30) + timedelta(days=1)),
    ("a | b | c | 截止 明天 9点", "a", ("b", "c"), MONDAY_9 + timedelta(days=1)),
    ("a | b | c | 截止 2小时", "a", ("b", "c"), MONDAY_9 + timedelta(hours=2)),
    ("a | b | c | until 2026-12-01T18:00+08:00", "a", ("b", "c"), datetime(2026, 12, 1, 18, 0, tzinfo=TZ)),
])
def test_a_poll_command_is_read_with_its_closing_time(text: str, question: str, options: tuple[str, ...],
                                                      closes: datetime) -> None:
    spec = read_spec(text, MONDAY_9, DAY)
    assert (spec.question, spec.options, spec.closes_at) == (question, options, closes)


@pytest.mark.parametrize("text, says", [
    ("只有问题", "用法"), ("问题 | 一个选项", "用法"), ("q | a | a", "2 到 10"),
    ("q | " + " | ".join(map(str, range(11))), "2 到 10"), ("q | a | b | 截止 下辈子", "看不懂"),
    ("q | a | b | 截止 2026-11-29T10:00+08:00", "之后"), ("q | a | b | 截止 40天", "之后"),
])
def test_a_command_that_is_no_poll_says_why(text: str, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        read_spec(text, MONDAY_9, DAY)


def _poll_card(feishu: Any, chat: str) -> dict[str, Any] | None:
    cards = [m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"
             and "投票" in json.dumps(feishu.card_versions(m["message_id"])[0], ensure_ascii=False)]
    return cards[-1] if cards else None


def _shown(feishu: Any, card_id: str) -> str:
    return json.dumps(feishu.card_versions(card_id)[-1], ensure_ascii=False)


def test_a_poll_counts_one_vote_per_person_and_posts_its_result_when_it_closes(
        stack: OwnStack, feishu: Any, r: redis.Redis) -> None:  # noqa: F811
    stack.ready_for_test(feishu)
    stack.set_clock(r, MONDAY_9)
    web, chat = stack.web, unique("oc_poll")
    rk = f"feishu:{stack.profile}:group:{chat}:ou_host"
    env = deliver(web, feishu, chat_id=chat, chat_type="group", text="@_user_1 /poll 午饭吃什么 | 面 | 饭 | 截止 10:00",
                  mentions=AT_BOT, sender_open_id="ou_host")
    card = wait_for(lambda: _poll_card(feishu, chat), 30, what="the poll card")
    values = [v for _label, v in buttons_of(feishu.card_versions(card["message_id"])[-1])]
    assert [v["action"] for v in values] == ["polls:vote", "polls:vote"]
    noodles, rice = values
    _click(web, "ou_a", noodles, card["message_id"], chat)
    _click(web, "ou_b", rice, card["message_id"], chat)
    _click(web, "ou_a", rice, card["message_id"], chat)  # changes the vote
    _click(web, "ou_c", noodles, card["message_id"], chat)  # the third voter: POLL_MAX_VOTERS=2
    wait_for(lambda: "饭 — 2 票" in _shown(feishu, card["message_id"]), 40, what="the redrawn card")
    wait_for(lambda: feishu.replies_to(card["message_id"]), 40, what="the full poll's reply")
    idle(r, stack.keys, rk)
    assert "面 — 0 票" in _shown(feishu, card["message_id"])
    assert ["已满" in reply_text(m) for m in feishu.replies_to(card["message_id"])] == [True]
    votes = [k for k in r.scan_iter(f"fb:{stack.profile}:f:polls:*")]
    assert len(votes) == 2 and all(0 < r.ttl(k) <= 8 * 86400 for k in votes)

    stack.set_clock(r, MONDAY_9 + timedelta(hours=1, minutes=1))
    def results() -> list[dict[str, Any]]:
        return [m for m in feishu.replies_to(message_id(env)) if m["msg_type"] != "interactive"]

    result = wait_for(results, 40, what="the poll's result")
    assert "最多的是：饭" in reply_text(result[0]) and "共 2 人投票" in reply_text(result[0])
    wait_for(lambda: "投票结果" in _shown(feishu, card["message_id"]), 30, what="the closed card")
    assert "polls:vote" not in _shown(feishu, card["message_id"])
    _click(web, "ou_d", noodles, card["message_id"], chat)  # a click on the card left in an old client
    wait_for(lambda: len(feishu.replies_to(card["message_id"])) >= 2, 30, what="the closed poll's reply")
    assert "截止" in reply_text(feishu.replies_to(card["message_id"])[-1])
    idle(r, stack.keys, rk)
    assert len(results()) == 1  # the result once


def test_a_poll_in_a_private_chat_is_refused_politely(stack: OwnStack, feishu: Any) -> None:  # noqa: F811
    chat = unique("oc_p2p")
    env = deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", text="/poll a | b | c")
    assert "只能在群里" in reply_text(wait_for(lambda: feishu.replies_to(message_id(env)), 30)[0])
