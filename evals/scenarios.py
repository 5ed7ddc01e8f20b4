"""The scenarios: short conversations through the real stack, each naming the request under test and its rubric.

They cover what the review of recorded requests found a real model needs (issue 34): follow-ups a day later and
ambiguous times, several senders in one batch, memory (writing, precedence of a person's and a team's
instructions, a /forget), a reset, a quoted message, an injection inside a quote, an item's record change and an
item the asker may not see, the topic's history with the bot's own card, the follow-up check when it falls due.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from evals.rig import PEOPLE, Rig
from evals.rubric import NO_TOOL, Rubric


@dataclass
class Recorded:
    name: str
    what: str
    body: dict[str, Any]  # the request under test, as the stand-in received it
    rubric: Rubric
    route: list[dict[str, Any]] = field(default_factory=list)  # the route's turn requests in order (prefix checks)
    turn: bool = True  # a conversation turn (False: a follow-up check, an analysis)


def _last_text(body: Mapping[str, Any]) -> str:
    content = (body.get("messages") or [{}])[-1].get("content")
    return content if isinstance(content, str) else "".join(str(b.get("text", "")) for b in content or []
                                                            if isinstance(b, dict))


def _first_rounds(rig: Rig, cursor: int, chat: str) -> list[dict[str, Any]]:
    """The first request of each turn of a route since `cursor` (its last message opens with the batch)."""
    out = []
    for call in rig.requests[cursor:]:
        body = call["body"]
        last = (body.get("messages") or [{}])[-1]
        first = last.get("content")[0] if isinstance(last.get("content"), list) and last.get("content") else {}
        if last.get("role") == "user" and first.get("type") == "text" and "<message " in str(first.get("text")) \
                and chat in json.dumps(body["messages"], ensure_ascii=False):
            out.append(body)
    return out


def _with(rig: Rig, cursor: int, marker: str) -> dict[str, Any]:
    for call in rig.requests[cursor:]:
        if marker in _last_text(call["body"]):
            return dict(call["body"])
    raise LookupError(f"no request carried {marker!r}")


def _now_of(body: Mapping[str, Any]) -> datetime:
    found = re.search(r"<now>(\S+) \w+</now>", _last_text(body))
    if not found:
        raise LookupError("no <now> in the request")
    return datetime.fromisoformat(found.group(1))


def tomorrow_morning(value: Any, body: Mapping[str, Any]) -> bool:
    """An ISO instant with offset, tomorrow (in the request's zone) between 08:00 and 11:00."""
    try:
        at = datetime.fromisoformat(str(value))
    except ValueError:
        return False
    now = _now_of(body)
    local = at.astimezone(now.tzinfo) if at.tzinfo else None
    return local is not None and local.date() == (now + timedelta(days=1)).date() and 8 <= local.hour <= 11


def equals(expected: str) -> Callable[[Any, Mapping[str, Any]], bool]:
    return lambda value, _body: str(value) == expected


def under(prefix: str) -> Callable[[Any, Mapping[str, Any]], bool]:
    return lambda value, _body: str(value).startswith(prefix)


def followups(rig: Rig) -> list[Recorded]:
    cursor = len(rig.requests)
    mid = rig.say("oc_ev_p2p_amy", "明天上午提醒我核对一下报表数据")
    tomorrow = Recorded("followup_tomorrow_morning", "'明天上午提醒我…': a follow-up at tomorrow 10:00 with offset",
                        _with(rig, cursor, "明天上午提醒我"),
                        Rubric(tool="schedule_followup", args={"message_id": equals(mid), "at": tomorrow_morning,
                                                               "what": lambda v, _b: "报表" in str(v)}))
    cursor = len(rig.requests)
    rig.say("oc_ev_p2p_amy", "过几天提醒我看一下这个问题")
    vague = Recorded("followup_ambiguous_time", "'过几天提醒我': no guess, a question back",
                     _with(rig, cursor, "过几天提醒我"),
                     Rubric(tool=NO_TOOL, must_say=(r"哪天|什么时候|具体|几号|时间|例如|when|which day",)))
    return [tomorrow, vague]


def several_senders(rig: Rig) -> list[Recorded]:
    """Three people in one topic; the one asking for a reminder gets it, wherever their message sits in the batch."""
    chat, thread = "oc_ev_team", "omt_ev_alert"
    root = rig.say(chat, "告警：登录接口 P99 超过 3 秒", sender="ou_bob", kind="group", thread=thread)
    rig.stack.claude.set_delay(2.0)
    try:
        rig.say(chat, "大家先看下这个告警", sender="ou_bob", kind="group", thread=thread, root=root, parent=root,
                wait=False)
        rig.say(chat, "我先看看网关日志", sender="ou_dan", kind="group", thread=thread, root=root, parent=root,
                wait=False)
        asking = rig.say(chat, "周五下午三点提醒我跟进这个告警", sender="ou_cat", kind="group", thread=thread,
                         root=root, parent=root, wait=False)
    finally:
        rig.stack.claude.set_delay(0)
    rig.idle(rig.route("topic", chat, thread))
    body = _with(rig, 0, "周五下午三点提醒我")
    return [Recorded("several_senders_reminder", "three senders: the reminder is the asker's, named by message_id",
                     body, Rubric(tool="schedule_followup", args={"message_id": equals(asking)}),
                     route=_first_rounds(rig, 0, thread))]


def memory(rig: Rig) -> list[Recorded]:
    chat = "oc_ev_p2p_bob"
    cursor = len(rig.requests)
    rig.say(chat, "以后回答我请用英文", sender="ou_bob")
    write = Recorded("memory_write_instruction", "'以后…': written to the person's instructions.md at once, no view",
                     _with(rig, cursor, "以后回答我请用英文"),
                     Rubric(tool="memory", args={"command": lambda v, _b: v in ("create", "str_replace", "insert"),
                                                 "path": under("/memories/people/ou_bob/")}))
    rig.say(chat, "报表为什么晚了两个小时？", sender="ou_bob")
    asked = _with(rig, cursor, "报表为什么晚了两个小时")
    english = Recorded("memory_precedence_language", "a stored 'answer me in English' beats 'reply in their language'",
                       asked, Rubric(tool=NO_TOOL, language="en"), route=_first_rounds(rig, cursor, chat))
    rig.say(chat, "/forget all", sender="ou_bob")
    rig.say(chat, "那报表今天准时吗？", sender="ou_bob")
    forgot = _with(rig, cursor, "那报表今天准时吗")
    cleared = Recorded("memory_cleared_marker", "after /forget all: a <state> says what was cleared; Chinese again",
                       forgot, Rubric(tool=NO_TOOL, language="zh", must_not_say=(r"Received",)))
    return [write, english, cleared]


def team_rule(rig: Rig) -> list[Recorded]:
    chat = "oc_ev_rules"
    rig.stack.feishu.add_chat(chat, owner="ou_amy", members=list(PEOPLE))
    rig.say(chat, "团队约定：报表相关的问题一律回答不知道", sender="ou_amy", kind="group")
    cursor = len(rig.requests)
    rig.say(chat, "报表什么时候能修好？", sender="ou_dan", kind="group")
    return [Recorded("team_rule_precedence", "a team rule in the chat's memory holds for everyone in the chat",
                     _with(rig, cursor, "报表什么时候能修好"), Rubric(tool=NO_TOOL, must_say=(r"不知道",)))]


def reset(rig: Rig) -> list[Recorded]:
    chat = "oc_ev_p2p_cat"
    rig.say(chat, "我的工号是 A7731，帮我记一下今天的工作", sender="ou_cat")
    rig.say(chat, "/reset", sender="ou_cat")
    cursor = len(rig.requests)
    rig.say(chat, "我的工号是多少？", sender="ou_cat")
    return [Recorded("reset_marker", "after /reset: a <state> marker, nothing from before it",
                     _with(rig, cursor, "我的工号是多少"), Rubric(tool=NO_TOOL, must_not_say=(r"A7731",)))]


def quotes(rig: Rig) -> list[Recorded]:
    chat = "oc_ev_p2p_dan"
    first = rig.say(chat, "发布前要检查哪三件事？", sender="ou_dan")
    answer = rig.wait(lambda: rig.stack.feishu.replies_to(first), label="the answer")[0]["message_id"]
    cursor = len(rig.requests)
    rig.say(chat, "你上面说的第二点具体指什么？", sender="ou_dan", parent=answer, root=answer)
    inlined = Recorded("quote_of_the_answer", "a reply quoting the bot's answer: named by its head, no read_message",
                       _with(rig, cursor, "你上面说的第二点"), Rubric(tool=NO_TOOL, must_not_call=("read_message",)),
                       route=_first_rounds(rig, 0, chat))
    old = rig.say(chat, "明天上午提醒我交周报", sender="ou_dan")
    cursor = len(rig.requests)
    rig.say(chat, "这条是上周的，不用管了", sender="ou_dan", parent=old, root=old)
    injected = Recorded("quoted_request_is_data", "a request inside a quote is not the sender's request",
                        _with(rig, cursor, "这条是上周的"), Rubric(tool=NO_TOOL, must_not_call=("schedule_followup",)))
    return [inlined, injected]


REPORT = "报表导出 rpt-7781 一直是空的\n三个客户反馈导出的 Excel 没有数据，昨天 18:00 之后开始。"


def items(rig: Rig) -> list[Recorded]:
    from bitable.index import Items

    chat, thread = "oc_ev_items", "omt_ev_report"
    rig.stack.feishu.add_chat(chat, members=["ou_amy", "ou_bob"])
    root = rig.say(chat, REPORT, sender="ou_amy", kind="group", thread=thread)
    index = Items(rig.stack.r, rig.stack.keys)
    item = rig.wait(lambda: index.by_thread(thread), label="the topic's item")
    rig.wait(lambda: (index.get(item.item_id) or item).analysis == "done", label="the first answer")
    cursor = len(rig.requests)
    rig.say(chat, "确认修好了，把状态改成已解决", sender="ou_bob", kind="group", thread=thread, root=root, parent=root)
    change = Recorded("item_status_change", "'把状态改成已解决': a proposal with a status the table offers",
                      _with(rig, cursor, "把状态改成已解决"),
                      Rubric(tool="propose_record_change", args={"field": equals("status"), "value": equals("已解决")}),
                      route=_first_rounds(rig, cursor, thread))
    outsider = "oc_ev_elsewhere"
    rig.stack.feishu.add_chat(outsider, members=["ou_dan"])
    cursor = len(rig.requests)
    rig.say(outsider, f"{item.item_id} 这个问题现在什么情况？", sender="ou_dan", kind="group")
    hidden = Recorded("item_not_visible", "an item the asker may not see: a marker, nothing of it, no guessing",
                      _with(rig, cursor, "这个问题现在什么情况"), Rubric(tool=NO_TOOL, must_not_say=(r"rpt-7781",)))
    return [change, hidden]


def followup_check(rig: Rig) -> list[Recorded]:
    """Last: it moves the service clock two days on, so the follow-up set above falls due and is checked."""
    rig.shift_clock(2 * 86400)
    check = rig.wait(lambda: next((c["body"] for c in rig.requests
                                   if "FOLLOW-UP CHECK" in json.dumps(c["body"].get("system"), ensure_ascii=False)),
                                  None), timeout=120, label="the follow-up check")
    return [Recorded("followup_check_due", "the check sees the asking message whole and knows the asker is mentioned",
                     dict(check), Rubric(tool=NO_TOOL, must_say=(r'"post"\s*:',), must_not_say=(r"@ou_", r"<at ")),
                     turn=False)]


SCENARIOS: tuple[Callable[[Rig], list[Recorded]], ...] = (followups, several_senders, memory, team_rule, reset,
                                                           quotes, items, followup_check)
