"""Issue 23 A1-A4 through the real stack: follow-ups where several people share a conversation, over a year's
horizon, and under caps.

- A1: Alice asks for a reminder and Bob's message lands in the same batch: the follow-up is Alice's (mentioned when
  it fires, hers to cancel), Bob's recall of his own message leaves it alone.
- A2: `/reset` in a shared topic cancels only what the resetter may cancel; the rest is kept, and a creator whose
  follow-up someone else's reset cancelled is told.
- A3: a follow-up due after its route's retention fires, even though the route was reset once and its state expired.
- A4: caps per person on a route and per person overall; the global bound shows in /readyz.

A deployment of its own (web, worker supervisor, sweeper) with Bitable items on; the service clock is pinned through
Redis before anything is said, so no step depends on the real hour or date.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis
import requests

from sandbox.feishu.events import mention, message_recalled_event
from tests.harness import (
    APP_ID,
    BOT_OPEN_ID,
    VERIFICATION_TOKEN,
    deliver,
    message_id,
    model_requests_with,
    reply_text,
    unique,
    wait_for,
)
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack
from tests.test_items import APP, TABLE, open_topic, topic_rk
from timers import keys as timer_keys
from timers.model import Timer
from timers.store import Timers

TZ = ZoneInfo("Asia/Shanghai")
MONDAY_9 = datetime(2026, 11, 30, 9, 0, tzinfo=TZ)
AT_BOT = [mention(BOT_OPEN_ID, "助手")]


@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Path, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.with_items(env, workdir, feishu, "seam", clock=MONDAY_9, WORKER_CONCURRENCY="3",
                            ADMIN_TOKEN="seams-admin", ITEM_ADMINS="ou_admin", TIMER_CHECK_SECONDS="0.2",
                            FOLLOWUPS_PER_ROUTE_PERSON="2", FOLLOWUPS_PER_PERSON="3", FOLLOWUPS_MAX_PENDING="1000")
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _ready(feishu: Any, claude: Any, stack: OwnStack, r: redis.Redis) -> Iterator[None]:
    stack.ready_for_test(feishu)
    stack.set_clock(r, MONDAY_9)  # pinned before anything is said
    yield
    claude.set_delay(0)


def pending(r: redis.Redis, stack: OwnStack, rk: str) -> list[Timer]:
    return sorted(Timers(r, stack.keys).pending_of(rk), key=lambda t: t.due)


def say(stack: OwnStack, feishu: Any, sender: str, text: str, **where: Any) -> str:
    return message_id(deliver(stack.web, feishu, text=f"@_user_1 {text}", mentions=AT_BOT, sender_open_id=sender,
                              **where))


def answer(feishu: Any, mid: str) -> str:
    return reply_text(wait_for(lambda: feishu.replies_to(mid), 60, what="the bot's reply")[0])


def reminders(feishu: Any, source: str) -> list[dict[str, Any]]:
    return [m for m in feishu.replies_to(source) if "提醒：" in reply_text(m) and "设提醒" not in reply_text(m)]


def in_topic(chat: str, thread: str, root: str) -> dict[str, Any]:
    return {"chat_id": chat, "chat_type": "group", "thread_id": thread, "root_id": root}


# -- A1: the follow-up is the asker's, not the batch's last sender's ----------------------------------------------

def test_a_reminder_asked_in_a_shared_batch_is_the_askers(stack, feishu, claude, r) -> None:
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    where = in_topic(chat, thread, root)
    rk = topic_rk(stack.keys, chat, thread)
    claude.set_delay(1.5)  # Carol's turn holds the route while Alice and Bob write: they form one batch
    carol = say(stack, feishu, "ou_carol", "卡罗尔先问一个问题", **where)
    wait_for(lambda: model_requests_with(claude, "卡罗尔先问一个问题"), 20, what="Carol's turn started")
    alice = say(stack, feishu, "ou_alice", "明天上午提醒我核对账单", **where)
    bob = say(stack, feishu, "ou_bob", "我先看看日志", **where)
    idle(r, stack.keys, rk, timeout=60)
    claude.set_delay(0)
    batched = [q for q in claude.requests if "核对账单" in json.dumps(q["body"]["messages"][-1], ensure_ascii=False)
               and "我先看看日志" in json.dumps(q["body"]["messages"][-1], ensure_ascii=False)]
    assert batched, "Alice's and Bob's messages should have reached the model as one batch"
    assert feishu.replies_to(carol)
    [timer] = pending(r, stack, rk)
    assert (timer.created_by, timer.source_message_id) == ("ou_alice", alice)  # not Bob, the batch's last sender
    footer = json.dumps([m["body"]["content"] for m in feishu.replies_to(bob) + feishu.replies_to(alice)])
    assert "ou_alice" in footer  # the reply says whose reminder it is
    # Bob recalls his own message: Alice's reminder stands
    feishu.recall_message(bob)
    assert stack.web.post(message_recalled_event(bob, chat, app_id=APP_ID, token=VERIFICATION_TOKEN)).status_code == 200
    time.sleep(0.5)
    assert [t.id for t in pending(r, stack, rk)] == [timer.id]
    # it fires under Alice's message, mentioning Alice only
    stack.set_clock(r, datetime(2026, 12, 1, 10, 0, 2, tzinfo=TZ))
    [posted] = wait_for(lambda: reminders(feishu, alice), 30, what="Alice's reminder")
    content = json.loads(posted["body"]["content"])["text"]
    assert content.startswith('<at user_id="ou_alice">') and "ou_bob" not in content
    assert not reminders(feishu, bob)


def test_the_askers_cancel_works_and_the_other_senders_is_refused(stack, feishu, claude, r) -> None:
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    where = in_topic(chat, thread, root)
    rk = topic_rk(stack.keys, chat, thread)
    claude.set_delay(1.5)
    say(stack, feishu, "ou_carol", "卡罗尔的问题", **where)
    wait_for(lambda: model_requests_with(claude, "卡罗尔的问题"), 20, what="Carol's turn started")
    say(stack, feishu, "ou_alice", "后天上午提醒我发版", **where)
    say(stack, feishu, "ou_bob", "收到", **where)
    idle(r, stack.keys, rk, timeout=60)
    claude.set_delay(0)
    [timer] = pending(r, stack, rk)
    assert timer.created_by == "ou_alice"
    refused = answer(feishu, say(stack, feishu, "ou_bob", f"/cancel {timer.id}", **where))
    assert "只有设提醒的人" in refused and pending(r, stack, rk)
    done = answer(feishu, say(stack, feishu, "ou_alice", f"/cancel {timer.id}", **where))
    assert "已取消提醒" in done and not pending(r, stack, rk)


# -- A2: /reset in a shared topic is no back door ------------------------------------------------------------------

def test_reset_in_a_shared_topic_cancels_only_what_the_resetter_may_and_tells_the_creators(stack, feishu, r) -> None:
    chat, thread, root, item = open_topic(stack.web, feishu, r, stack.keys, reporter="ou_reporter")
    feishu.edit_record(APP, TABLE, item.record_id, {"负责人": [{"id": "ou_owner"}]})
    where = in_topic(chat, thread, root)
    rk = topic_rk(stack.keys, chat, thread)
    for who, text in (("ou_alice", "明天上午提醒我看监控"), ("ou_bob", "后天上午提醒我写复盘")):
        answer(feishu, say(stack, feishu, who, text, **where))
    idle(r, stack.keys, rk)
    alices, bobs = pending(r, stack, rk)
    # a stranger's reset: the session starts over, every follow-up is kept and the reply says so
    reset = say(stack, feishu, "ou_stranger", "/reset", **where)
    text = answer(feishu, reset)
    assert "新会话" in text and "2 个跟进提醒仍保留" in text, text
    idle(r, stack.keys, rk)
    assert [t.id for t in pending(r, stack, rk)] == [alices.id, bobs.id]
    # Alice resets: her own is cancelled, Bob's stays
    text = answer(feishu, say(stack, feishu, "ou_alice", "/reset", **where))
    assert "1 个跟进提醒已一并取消" in text and "1 个跟进提醒仍保留" in text, text
    idle(r, stack.keys, rk)
    assert [t.id for t in pending(r, stack, rk)] == [bobs.id]
    # the item's owner (read from the record now) resets: Bob's is cancelled, and Bob is told
    owner_reset = say(stack, feishu, "ou_owner", "/reset", **where)
    text = answer(feishu, owner_reset)
    assert "1 个跟进提醒已一并取消" in text and "写复盘" in text, text
    told = json.loads(feishu.replies_to(owner_reset)[0]["body"]["content"])
    assert "ou_bob" in json.dumps(told)  # Bob is mentioned: his reminder was cancelled by someone else
    idle(r, stack.keys, rk)
    assert not pending(r, stack, rk)
    assert Timers(r, stack.keys).get(bobs.id).end_reason == "reset:ou_owner"  # type: ignore[union-attr]
    # nothing fires later
    before = len(feishu.bot_messages(chat))
    stack.set_clock(r, datetime(2026, 12, 3, 12, 0, tzinfo=TZ))
    time.sleep(1.0)
    idle(r, stack.keys, rk)
    assert len(feishu.bot_messages(chat)) == before


# -- A3: a follow-up due after its route's retention -------------------------------------------------------------

def test_a_followup_months_ahead_fires_after_the_routes_state_expired(stack, feishu, r) -> None:
    chat = unique("oc_seam_far")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    where = {"chat_id": chat, "chat_type": "p2p"}
    answer(feishu, say(stack, feishu, "ou_far", "/reset", **where))  # the route has been reset once: generation 1
    idle(r, stack.keys, rk)
    assert r.hget(stack.keys.route_state(rk), "gen") == "1"
    asked = say(stack, feishu, "ou_far", "2027年4月1日上午提醒我续签合同", **where)
    assert "2027年4月1日" in answer(feishu, asked)
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    # ROUTE_RETENTION_DAYS (90) pass without a word: the route's state, sessions and log expire, as COMMIT set them to
    assert r.ttl(stack.keys.route_state(rk)) > 0
    for key in (stack.keys.route_state(rk), stack.keys.sessions(rk)):
        r.pexpire(key, 1)
    time.sleep(0.1)
    assert not r.exists(stack.keys.route_state(rk))
    stack.set_clock(r, datetime(2027, 4, 1, 10, 0, 2, tzinfo=TZ))
    [posted] = wait_for(lambda: reminders(feishu, asked), 30, what="the reminder four months on")
    assert "续签合同" in reply_text(posted)
    # the fire run notes what it did once its post is out: read the note when it is there
    shown = wait_for(lambda: (t := stack.admin("GET", f"timers/{timer.id}").json())["fired_note"] and t, 10,
                     what="the fire run's note")
    assert shown["state"] == "fired" and shown["fired_note"].startswith("posted")


# -- A4: caps per person ---------------------------------------------------------------------------------------------

def test_one_person_cannot_fill_a_shared_topic_or_hold_reminders_everywhere(stack, feishu, r) -> None:
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    where = in_topic(chat, thread, root)
    rk = topic_rk(stack.keys, chat, thread)
    for day in ("明天", "后天"):
        assert "已设提醒" in answer(feishu, say(stack, feishu, "ou_spam", f"{day}上午提醒我看一下", **where))
    third = answer(feishu, say(stack, feishu, "ou_spam", "周五上午提醒我看一下", **where))
    assert "没能设上提醒" in third or "已设提醒" not in third  # FOLLOWUPS_PER_ROUTE_PERSON=2
    assert "已设提醒" in answer(feishu, say(stack, feishu, "ou_dana", "周五上午提醒我跟进", **where))  # others can
    idle(r, stack.keys, rk)
    assert sorted(t.created_by for t in pending(r, stack, rk)) == ["ou_dana", "ou_spam", "ou_spam"]
    elsewhere = {"chat_id": unique("oc_seam_dm"), "chat_type": "p2p"}
    assert "已设提醒" in answer(feishu, say(stack, feishu, "ou_spam", "明天上午提醒我喝水", **elsewhere))
    fourth = answer(feishu, say(stack, feishu, "ou_spam", "后天上午提醒我喝水", **elsewhere))
    assert "已设提醒" not in fourth  # FOLLOWUPS_PER_PERSON=3, wherever they are
    assert Timers(r, stack.keys).pending_of_person("ou_spam") == 3
    ready = requests.get(f"{stack.web.url}/readyz", timeout=10).json()
    bound = ready["always_on"]["followups"]
    assert bound["max_pending"] == 1000 and bound["per_person"] == 3 and bound["at_bound"] is False
    assert ready["always_on"]["timers_pending"] >= 4


# -- the overtaken turn's follow-ups ------------------------------------------------------------------------------

def route_timers(r: redis.Redis, stack: OwnStack, rk: str) -> list[Timer]:
    """Every timer of the route, pending or ended (their hashes, not the pending index)."""
    ids = [k.rsplit(":", 1)[-1] for k in r.scan_iter(f"{timer_keys.timer(stack.keys, '')}f_*")]
    return [t for t in Timers(r, stack.keys).many(ids) if t.route_key == rk]


def test_a_reset_that_overtakes_a_turn_leaves_none_of_its_followups(stack, feishu, claude, r) -> None:
    """A turn a reset overtook never answers, so nobody was told of what it set: a reset during the model's first
    call refuses the tool's timer (the generation moved); a reset after the tool ran cancels it."""
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    where = in_topic(chat, thread, root)
    rk = topic_rk(stack.keys, chat, thread)
    claude.set_delay(2.0)
    say(stack, feishu, "ou_alice", "明天上午提醒我对一下报价", **where)
    wait_for(lambda: model_requests_with(claude, "对一下报价"), 20, what="Alice's turn started")
    say(stack, feishu, "ou_stranger", "/reset", **where)  # lands while the model thinks, before the tool runs
    idle(r, stack.keys, rk, timeout=60)
    assert route_timers(r, stack, rk) == []  # never set: the tool saw the generation had moved
    say(stack, feishu, "ou_alice", "后天上午提醒我对一下合同", **where)
    wait_for(lambda: pending(r, stack, rk), 30, what="the tool's timer")  # the tool ran; the model thinks again
    say(stack, feishu, "ou_stranger", "/reset", **where)
    idle(r, stack.keys, rk, timeout=60)
    claude.set_delay(0)
    [voided] = route_timers(r, stack, rk)
    assert (voided.state, voided.end_reason) == ("cancelled", "superseded")


# -- A5: the worker supervisor's workers die with it ----------------------------------------------------------------

def _live(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")  # a zombie nobody reaps is gone as far as work goes


def test_killing_the_worker_supervisor_takes_its_workers_with_it(stack, feishu, r) -> None:
    supervisor = stack.supervisor
    workers = wait_for(lambda: supervisor.children(), 30, what="the pool's workers")
    os.kill(supervisor.p.pid, signal.SIGKILL)
    supervisor.p.wait(timeout=10)
    wait_for(lambda: not any(_live(pid) for pid in workers), 30, what="the orphaned workers to end")
    stack.crash_restart()  # a process manager starts the supervisor again: one pool, not two
    fresh = wait_for(lambda: stack.supervisor.children(), 30, what="the new pool")
    assert not set(fresh) & set(workers)
    chat = unique("oc_seam_after")
    assert answer(feishu, say(stack, feishu, "ou_p", "还在吗", chat_id=chat, chat_type="p2p"))


# -- B11: a reminder whose place is gone falls back, never dead-letters ----------------------------------------------

def _fire(stack: OwnStack, r: redis.Redis, rk: str, timer: Timer) -> dict[str, Any]:
    stack.set_clock(r, datetime.fromtimestamp(timer.due + 2, TZ))
    return wait_for(lambda: (shown := stack.admin("GET", f"timers/{timer.id}").json()).get("fired_note") and shown,
                    30, what="the follow-up's run")


@pytest.mark.parametrize("what", ["request recalled", "topic removed", "chat dissolved", "no thread replies"])
def test_a_followup_in_a_topic_whose_place_is_gone_posts_where_it_can_or_says_why(stack, feishu, r, what) -> None:
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    rk = topic_rk(stack.keys, chat, thread)
    asked = say(stack, feishu, "ou_asker", "明天上午提醒我看灰度结果", **in_topic(chat, thread, root))
    answer(feishu, asked)
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    assert timer.root_id == root
    if what == "request recalled":
        feishu.recall_message(asked)  # and the recall event never reached us
    elif what == "topic removed":
        feishu.remove_topic(thread)
    elif what == "chat dissolved":
        feishu.dissolve_chat(chat)
    else:
        feishu.forbid_thread_replies(chat)
    before = {m["message_id"] for m in feishu.bot_messages(chat)}
    shown = _fire(stack, r, rk, timer)
    idle(r, stack.keys, rk)
    assert not stack.dead_letters(rk)  # never a dead letter for a place that is gone
    new = [m for m in feishu.bot_messages(chat) if m["message_id"] not in before]
    if what in ("topic removed", "chat dissolved"):
        assert shown["fired_note"] == ("nothing posted: the topic no longer exists" if what == "topic removed"
                                       else "nothing posted: the chat was dissolved") and not new
        return
    [posted] = new
    assert shown["fired_note"].startswith("posted") and "看灰度结果" in reply_text(posted)
    assert posted["thread_id"] == thread  # inside the topic, never a new topic
    assert posted["parent_id"] == (root if what == "request recalled" else asked)


def test_a_followup_in_a_private_chat_whose_request_is_gone_posts_into_the_chat(stack, feishu, r) -> None:
    chat = unique("oc_seam_gone")
    rk = f"feishu:{stack.profile}:p2p:{chat}"
    asked = say(stack, feishu, "ou_p2p", "明天上午提醒我交周报", chat_id=chat, chat_type="p2p")
    answer(feishu, asked)
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    feishu.recall_message(asked)
    shown = _fire(stack, r, rk, timer)
    idle(r, stack.keys, rk)
    assert shown["fired_note"].startswith("posted") and not stack.dead_letters(rk)
    [posted] = [m for m in feishu.bot_messages(chat) if "交周报" in reply_text(m) and "设提醒" not in reply_text(m)]
    assert not posted.get("parent_id")  # a new message in the chat: there is nothing left to reply to


# -- partial grants: a follow-up in a topic the app may not read ------------------------------------------------------

def test_a_followup_in_a_topic_the_app_may_not_read_still_reminds(stack, feishu, r) -> None:
    """With `im:message.group_msg` missing (thread history off), the firing cannot read what the topic said since:
    it reminds anyway instead of failing for good."""
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys)
    rk = topic_rk(stack.keys, chat, thread)
    asked = say(stack, feishu, "ou_asker", "明天上午提醒我看压测报告", **in_topic(chat, thread, root))
    answer(feishu, asked)
    idle(r, stack.keys, rk)
    [timer] = pending(r, stack, rk)
    feishu.deny_scopes(["im:message.group_msg", "im:message.group_msg:readonly"])
    try:
        shown = _fire(stack, r, rk, timer)
        idle(r, stack.keys, rk)
    finally:
        feishu.deny_scopes([])
    assert shown["fired_note"].startswith("posted") and not stack.dead_letters(rk)
    assert [m for m in reminders(feishu, asked) if "看压测报告" in reply_text(m)]
