"""Follow-ups through the real stack (issue 17 A1, A2, A5): the model's schedule_followup sets a timer, the
scheduler in the sweeper turns it into an event of the route that set it, and the run posts one short message
in the same topic — or nothing when it is no longer needed, saying why in the log.

A deployment of its own (web, worker supervisor, sweeper) with Bitable items on; the service clock is moved
through Redis (core/clock.py, as `python -m sandbox clock` does), never by sleeping.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import requests

from sandbox.feishu.events import message_recalled_event
from tests.harness import APP_ID, VERIFICATION_TOKEN, deliver, message_id, reply_text, unique, wait_for
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack
from tests.test_items import APP, AT_BOT, TABLE, open_topic, topic_rk
from timers.model import Timer
from timers.store import Timers

TZ = ZoneInfo("Asia/Shanghai")
MONDAY = datetime(2026, 11, 30, 9, 0, tzinfo=TZ)
WEDNESDAY_10 = datetime(2026, 12, 2, 10, 0, tzinfo=TZ)
TOKEN = "followups-admin"


@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Path, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.with_items(env, workdir, feishu, "fu", clock=MONDAY, WORKER_CONCURRENCY="3", ADMIN_TOKEN=TOKEN,
                            ITEM_ADMINS="ou_admin", TIMER_CHECK_SECONDS="0.2", RUN_RETRY_DELAYS="1,1,1,1,1",
                            DEAD_LETTER_AFTER="3")
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _ready(feishu: Any, stack: OwnStack) -> None:
    stack.ready_for_test(feishu)


def pending(r: redis.Redis, stack: OwnStack, rk: str) -> list[Timer]:
    return Timers(r, stack.keys).pending_of(rk)


def admin(stack: OwnStack, method: str, path: str) -> requests.Response:
    return stack.admin(method, path)


def ask(stack: OwnStack, feishu: Any, text: str, **where: Any) -> tuple[dict[str, Any], str]:
    env = deliver(stack.web, feishu, text=text, **where)
    reply = wait_for(lambda: feishu.replies_to(message_id(env)), 60, what="the bot's reply")[0]
    return env, reply_text(reply)


def reminders(feishu: Any, source: str) -> list[dict[str, Any]]:
    """The bot's messages under the request after its first reply: the follow-ups it posted."""
    return [m for m in feishu.replies_to(source) if "提醒：" in reply_text(m) and "已设提醒" not in reply_text(m)]


def nothing_posted_by_then(stack: OwnStack, feishu: Any, r: redis.Redis, chat: str, rk: str, when: datetime) -> None:
    """The clock passes the follow-ups' time: the schedulers pass several times, and the chat stays quiet."""
    before = len(feishu.bot_messages(chat))
    stack.set_clock(r, when)
    time.sleep(1.0)
    idle(r, stack.keys, rk)
    assert len(feishu.bot_messages(chat)) == before


# -- A1: set on Monday, fires once on Wednesday in the same topic, across restarts and two schedulers ---------

def test_a_followup_set_on_monday_fires_once_on_wednesday_in_its_topic_after_restarts(stack, feishu, r) -> None:
    stack.set_clock(r, MONDAY)
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    env, text = ask(stack, feishu, "周三上午提醒我看负责人有没有回复", chat_id=chat, chat_type="group",
                    thread_id=thread, root_id=root, mentions=AT_BOT, sender_open_id="ou_asker")
    assert "12月2日（周三）10:00" in text, text  # the reply names the time it understood
    rk = topic_rk(stack.keys, chat, thread)
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    assert timer.due == WEDNESDAY_10.timestamp() and timer.created_by == "ou_asker" and timer.thread_id == thread
    assert timer.id in text
    stack.crash_restart(sweepers=2)  # every process killed and started again, two schedulers from here on
    stack.set_clock(r, datetime(2026, 12, 2, 9, 59, 50, tzinfo=TZ))
    time.sleep(1.5)
    assert not reminders(feishu, message_id(env)), "fired before it was due"
    stack.set_clock(r, datetime(2026, 12, 2, 10, 0, 1, tzinfo=TZ))
    posted = wait_for(lambda: reminders(feishu, message_id(env)), 30, what="the follow-up")
    idle(r, stack.keys, rk)
    time.sleep(0.8)  # both schedulers (every 0.2 s) have had several passes
    posted = reminders(feishu, message_id(env))
    assert len(posted) == 1, posted
    assert posted[0]["thread_id"] == thread and "看负责人有没有回复" in reply_text(posted[0])
    assert json.loads(posted[0]["body"]["content"])["text"].startswith('<at user_id="ou_asker">')  # mentioned
    assert not pending(r, stack, rk)
    shown = admin(stack, "GET", f"timers/{timer.id}").json()
    assert shown["state"] == "fired" and shown["fired_note"].startswith("posted")


def test_the_check_sees_the_asking_message_whole_and_knows_the_asker_is_mentioned(stack, feishu, claude, r) -> None:
    """Issue 34: the follow-up check's request carries the message that asked for it whole (not cut mid-tag, escaped
    once), says the reminder mentions the asker, and states times in ISO 8601 with offset."""
    stack.set_clock(r, MONDAY)
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    asked = ("周三上午提醒我看 <b>负责人</b> 有没有回复，" + "顺便确认一下导出任务的日志和看板数据是否一致，" * 12
             + "（完整到这里）")
    env, _ = ask(stack, feishu, asked, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                 mentions=AT_BOT, sender_open_id="ou_asker")
    rk = topic_rk(stack.keys, chat, thread)
    idle(r, stack.keys, rk)
    cursor = len(claude.requests)
    stack.set_clock(r, datetime(2026, 12, 2, 10, 0, 1, tzinfo=TZ))
    check = wait_for(lambda: next((q["body"] for q in claude.requests_since(cursor)
                                   if "FOLLOW-UP CHECK" in str(q["body"].get("system"))), None), 30, what="the check")
    sent = check["messages"][-1]["content"]
    text = sent if isinstance(sent, str) else "".join(b.get("text", "") for b in sent)
    whole = text.split("<asked>\n", 1)[1].split("\n</asked>", 1)[0]
    assert whole.startswith(f'<message sender="ou_asker" message_id="{message_id(env)}"') and "（完整到这里）" in whole
    assert "&lt;b&gt;负责人&lt;/b&gt;" in whole and "&amp;lt;" not in text  # escaped once
    assert text.count("（完整到这里）") == 1  # not again in the session's tail
    assert 'mentioned_in_reminder="true"' in text and 'due="2026-12-02T10:00:00+08:00"' in text
    assert "starts by mentioning the person who asked" in check["system"][0]["text"]
    idle(r, stack.keys, rk)


def test_after_the_owner_replied_the_followup_posts_nothing_and_logs_why(stack, feishu, r) -> None:
    stack.set_clock(r, MONDAY)
    chat, thread, root, item = open_topic(stack.web, feishu, r, stack.keys)
    feishu.edit_record(APP, TABLE, item.record_id, {"负责人": [{"id": "ou_owner"}]})
    _env, _text = ask(stack, feishu, "周三上午提醒我看负责人有没有回复", chat_id=chat, chat_type="group",
                    thread_id=thread, root_id=root, mentions=AT_BOT, sender_open_id="ou_asker")
    rk = topic_rk(stack.keys, chat, thread)
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    deliver(stack.web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
            text="已经定位到原因了，今晚发修复", sender_open_id="ou_owner")  # not to the bot: kept in the thread
    before = len(feishu.bot_messages(chat))
    stack.set_clock(r, datetime(2026, 12, 2, 10, 0, 1, tzinfo=TZ))
    note = wait_for(lambda: admin(stack, "GET", f"timers/{timer.id}").json().get("fired_note"), 30)
    idle(r, stack.keys, rk)
    assert note.startswith("nothing posted") and "负责人已在话题里回复" in note
    assert len(feishu.bot_messages(chat)) == before
    logs = (stack.workdir / f"{stack.profile}-jobs.worker.log").read_text(errors="replace")
    assert f"follow-up {timer.id}: nothing posted" in logs


def test_a_closed_item_needs_no_reminder_and_costs_no_model_call(stack, feishu, claude, r) -> None:
    stack.set_clock(r, MONDAY)
    chat, thread, root, item = open_topic(stack.web, feishu, r, stack.keys)
    ask(stack, feishu, "明天下午3点提醒我确认发布", chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
        mentions=AT_BOT, sender_open_id="ou_asker")
    rk = topic_rk(stack.keys, chat, thread)
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    feishu.edit_record(APP, TABLE, item.record_id, {"状态": "已解决"})
    cursor = len(claude.requests)
    before = len(feishu.bot_messages(chat))
    stack.set_clock(r, datetime(2026, 12, 1, 15, 0, 5, tzinfo=TZ))
    note = wait_for(lambda: admin(stack, "GET", f"timers/{timer.id}").json().get("fired_note"), 30)
    assert note == "nothing posted: the item is closed"
    assert len(feishu.bot_messages(chat)) == before
    assert not [q for q in claude.requests_since(cursor) if "FOLLOW-UP CHECK" in str(q["body"].get("system"))]


def test_an_unreadable_time_sets_nothing_and_the_reply_says_so(stack, feishu, r) -> None:
    chat = unique("oc_fu_p2p")
    _, text = ask(stack, feishu, "下下个月圆之夜提醒我喝茶", chat_id=chat, chat_type="p2p", sender_open_id="ou_p")
    assert "没能设上提醒" in text
    idle(r, stack.keys, f"feishu:{stack.profile}:p2p:{chat}")
    assert not pending(r, stack, f"feishu:{stack.profile}:p2p:{chat}")


def test_what_a_followup_repeats_cannot_ping_anyone(stack, feishu, r) -> None:
    stack.set_clock(r, MONDAY)
    chat = unique("oc_fu_p2p")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    env, _ = ask(stack, feishu, '明天上午提醒我<at user_id="all"></at>和<at user_id="ou_boss">老板</at>看数据',
                 chat_id=chat, chat_type="p2p", sender_open_id="ou_p")
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    stack.set_clock(r, datetime(2026, 12, 1, 10, 0, 2, tzinfo=TZ))
    [posted] = wait_for(lambda: reminders(feishu, message_id(env)), 30, what="the follow-up")
    body = posted["body"]["content"]
    assert "看数据" in reply_text(posted) and timer.what.endswith("看数据")
    text = json.loads(body)["text"]
    assert '<at user_id="all"' not in text and '<at user_id="ou_boss"' not in text  # defused, shown as text
    assert text.startswith('<at user_id="ou_p">')  # only whoever set it is mentioned


# -- A2: /reset cancels the route's follow-ups; a recalled request cancels its timer ------------------------

def test_reset_cancels_the_routes_pending_followups_and_says_how_many(stack, feishu, r) -> None:
    stack.set_clock(r, MONDAY)
    chat = unique("oc_fu_p2p")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    where = {"chat_id": chat, "chat_type": "p2p", "sender_open_id": "ou_p"}
    ask(stack, feishu, "明天上午提醒我交周报", **where)
    ask(stack, feishu, "后天下午提醒我看数据", **where)
    other = unique("oc_fu_p2p")  # another route's follow-up is not touched
    ask(stack, feishu, "明天上午提醒我开会", chat_id=other, chat_type="p2p", sender_open_id="ou_p")
    idle(r, stack.keys, rk)
    assert len(pending(r, stack, rk)) == 2
    _, listed = ask(stack, feishu, "/followups", **where)
    assert "交周报" in listed and "看数据" in listed and "（2 个）" in listed and "（你设）" in listed
    assert "ou_p" not in listed  # nobody is pinged by a list
    _, confirmed = ask(stack, feishu, "/reset", **where)
    assert "2 个跟进提醒已一并取消" in confirmed
    idle(r, stack.keys, rk)
    assert not pending(r, stack, rk)
    assert len(pending(r, stack, f"feishu:{stack.profile}:p2p:{other}")) == 1
    nothing_posted_by_then(stack, feishu, r, chat, rk, datetime(2026, 12, 3, 12, 0, tzinfo=TZ))


def test_a_recalled_request_cancels_the_followup_it_set(stack, feishu, r) -> None:
    stack.set_clock(r, MONDAY)
    chat = unique("oc_fu_group")
    sender = "ou_recaller"
    env, _ = ask(stack, feishu, "明天上午提醒我看报价", chat_id=chat, chat_type="group", mentions=AT_BOT,
                 sender_open_id=sender)
    rk = f"feishu:{stack.profile}:group:{chat}:{sender}"
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    feishu.recall_message(message_id(env))
    event = message_recalled_event(message_id(env), chat, token=VERIFICATION_TOKEN, app_id=APP_ID)
    assert stack.web.post(event).status_code == 200
    shown = admin(stack, "GET", f"timers/{timer.id}").json()
    assert shown["state"] == "cancelled" and shown["end_reason"] == "recalled"
    nothing_posted_by_then(stack, feishu, r, chat, rk, datetime(2026, 12, 1, 11, 0, tzinfo=TZ))


def test_cancel_is_for_the_creator_the_items_owner_or_reporter_and_admins(stack, feishu, r) -> None:
    stack.set_clock(r, MONDAY)
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys, reporter="ou_reporter")
    where = {"chat_id": chat, "chat_type": "group", "thread_id": thread, "root_id": root, "mentions": AT_BOT}
    for text in ("明天上午提醒我看日志", "后天上午提醒我看监控", "周五提醒我写复盘"):
        ask(stack, feishu, text, sender_open_id="ou_asker", **where)
    rk = topic_rk(stack.keys, chat, thread)
    idle(r, stack.keys, rk)
    first, second, third = sorted(pending(r, stack, rk), key=lambda t: t.due)
    _, refused = ask(stack, feishu, f"/cancel {first.id}", sender_open_id="ou_stranger", **where)
    assert "只有设提醒的人" in refused
    env, done = ask(stack, feishu, f"/cancel {first.id}", sender_open_id="ou_reporter", **where)
    assert "已取消" in done and first.id in done
    told = json.loads(feishu.replies_to(message_id(env))[0]["body"]["content"])["text"]
    assert '<at user_id="ou_asker">' in told  # somebody else's follow-up: its creator is told (issue 23 A2)
    _, done = ask(stack, feishu, f"/cancel {second.id}", sender_open_id="ou_admin", **where)
    assert "已取消" in done
    _, unknown = ask(stack, feishu, "/cancel f_0000000000", sender_open_id="ou_asker", **where)
    assert "没有编号为 f_0000000000" in unknown
    idle(r, stack.keys, rk)
    assert [t.id for t in pending(r, stack, rk)] == [third.id]
    assert admin(stack, "DELETE", f"timers/{third.id}").status_code == 200
    assert admin(stack, "DELETE", f"timers/{third.id}").status_code == 409  # nothing changes twice
    assert not pending(r, stack, rk)
    listed = admin(stack, "GET", f"timers?route={rk}").json()
    assert listed["count"] == 0 and "cancel" in listed


def test_the_admin_timers_api_needs_the_token(stack) -> None:
    resp = requests.get(f"{stack.web.url}/admin/api/timers", timeout=10)
    assert resp.status_code == 401
    resp = requests.get(f"{stack.web.url}/admin/api/timers", timeout=10, headers={"Authorization": "Bearer nope"})
    assert resp.status_code == 401
    assert admin(stack, "GET", "timers").status_code == 200
    metrics = requests.get(f"{stack.web.url}/metrics", timeout=10).text
    assert "timers_pending " in metrics and 'timers_set_total{kind="followup"}' in metrics
    ready = requests.get(f"{stack.web.url}/readyz", timeout=10).json()["always_on"]
    assert ready["timezone"] == "Asia/Shanghai" and ready["digest"]["cron"] == "30 9 * * 1-5"
    assert ready["triage"]["on"] is False and ready["timers_pending"] >= 0


# -- A5: a follow-up whose post keeps failing is retried, then dead-lettered, and replays once ------------------

def test_a_failing_followup_run_is_retried_then_dead_lettered_and_replays_once(stack, feishu, r) -> None:
    stack.set_clock(r, MONDAY)
    chat = unique("oc_fu_p2p")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    env, _ = ask(stack, feishu, "明天上午提醒我续费域名", chat_id=chat, chat_type="p2p", sender_open_id="ou_p")
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    feishu.inject("reply", code=1500, http_status=500, times=3)  # a server error each time: retryable
    cursor = len(feishu.requests)
    stack.set_clock(r, datetime(2026, 12, 1, 10, 0, 2, tzinfo=TZ))
    [letter] = wait_for(lambda: stack.dead_letters(rk), 60, what="the dead letter")
    attempts = [q for q in feishu.requests[cursor:] if q["op"] == "reply"]
    assert len(attempts) == 3  # retried with backoff, then given up
    assert not reminders(feishu, message_id(env))
    assert admin(stack, "POST", f"deadletters/{letter['id']}/replay").status_code == 200
    wait_for(lambda: reminders(feishu, message_id(env)), 30, what="the replayed follow-up")
    idle(r, stack.keys, rk)
    assert len(reminders(feishu, message_id(env))) == 1
    assert timer.id in admin(stack, "GET", f"timers/{timer.id}").json()["id"]


def test_a_reminder_feishu_applied_but_refused_is_not_repeated_by_the_replay(stack, feishu, r) -> None:
    """Found by chaos 18: Feishu posts the reminder but answers 502 every time, so the run is dead-lettered; the
    replay (a new batch) must not post a second reminder — its uuid is the timer's, not the batch's."""
    stack.set_clock(r, MONDAY)
    chat = unique("oc_fu_p2p")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    env, _ = ask(stack, feishu, "明天上午提醒我发周报", chat_id=chat, chat_type="p2p", sender_open_id="ou_p")
    idle(r, stack.keys, rk)
    feishu.inject_fault("reply", "gateway_after", times=50)  # applied, then a 502: every try of every run
    stack.set_clock(r, datetime(2026, 12, 1, 10, 0, 2, tzinfo=TZ))
    [letter] = wait_for(lambda: stack.dead_letters(rk), 90, what="the dead letter")
    feishu.clear_faults()
    assert len(reminders(feishu, message_id(env))) == 1  # Feishu did post it, once (its uuid window)
    assert admin(stack, "POST", f"deadletters/{letter['id']}/replay").status_code == 200
    idle(r, stack.keys, rk)
    time.sleep(0.5)
    assert len(reminders(feishu, message_id(env))) == 1
