"""Digests and quiet triage through the real stack (issue 17 A3, A4).

Digest: at each DIGEST_CRON slot (here weekdays 09:30 and 17:30, BOT_TIMEZONE) each chat of DIGEST_CHATS gets one
card listing its open items read from Bitable (来源群 = the chat, 状态 not closed); nothing when none are open; once
per slot, also across a restart of every process; an empty slot does not use up the day (issue 23 A6). A slot the
service slept through by more than 12 h is skipped. The service clock is pinned before the stack starts.

Triage: the labelled set (tests/data/triage_set.jsonl, 200 messages over 12 topics, 9 linked to items) is
posted into a TRIAGE_CHATS chat without addressing the bot, 9 messages per topic per round, the service clock
moved past the quiet period after each round. Unasked posts caused by chatter stay under 2 % of the chatter,
new evidence in an item's topic leads to a note or a proposal in ≥ 90 % of cases, no topic ever gets two
unasked posts within TRIAGE_POST_PERIOD_SECONDS, p2p and chats that did not opt in never get one.
"""

from __future__ import annotations

import json
import time
from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from bitable.index import Items
from core.clock import Clock
from tests.harness import deliver, reply_text, unique, wait_for
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack
from tests.test_items import APP, TABLE, open_topic, topic_rk
from timers import keys as timer_keys
from timers.store import Timers

TZ = ZoneInfo("Asia/Shanghai")
DATA = Path(__file__).parent / "data"
DIGEST_CHAT, EMPTY_CHAT, OTHER_CHAT = unique("oc_dg"), unique("oc_dg_empty"), unique("oc_dg_other")
SLOT_CHAT = unique("oc_dg_slots")
MONDAY_8 = datetime(2026, 11, 30, 8, 0, tzinfo=TZ)
TRIAGE_CHAT, QUIET_CHAT = unique("oc_tri"), unique("oc_tri_not_opted")
QUIET, POST_PERIOD = 300, 600
PER_ROUND = 9  # messages per topic per quiet period: the set's 16–17 per topic in two rounds


@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Path, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.with_items(env, workdir, feishu, "ao", WORKER_CONCURRENCY="4", ADMIN_TOKEN="ao-admin",
                            TIMER_CHECK_SECONDS="0.2", DIGEST_CHATS=f"{DIGEST_CHAT},{EMPTY_CHAT},{SLOT_CHAT}",
                            DIGEST_CRON="30 9,17 * * 1-5", clock=MONDAY_8,
                            TRIAGE_CHATS=TRIAGE_CHAT, TRIAGE_MODEL="claude-haiku-5",
                            TRIAGE_QUIET_SECONDS=str(QUIET), TRIAGE_POST_PERIOD_SECONDS=str(POST_PERIOD))
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _ready(feishu: Any, stack: OwnStack) -> None:
    stack.ready_for_test(feishu)


def later(r: redis.Redis, stack: OwnStack, seconds: float) -> None:
    Clock(r, stack.keys, adjustable=True).advance(seconds)


def cards(feishu: Any, chat: str) -> list[dict[str, Any]]:
    return [m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"]


def record(feishu: Any, title: str, chat: str, status: str, owner: str = "ou_owner") -> None:
    feishu.add_record(APP, TABLE, {"标题": title, "来源群": [{"id": chat}], "状态": status,
                                   "负责人": [{"id": owner}],
                                   "话题链接": {"text": "话题", "link": f"https://example.feishu.cn/t/{unique('t')}"}})


def _digest_timers(r: redis.Redis, stack: OwnStack, chat: str) -> list[Any]:
    ids = [k.rsplit(":", 1)[-1] for k in r.scan_iter(f"{timer_keys.timer(stack.keys, '')}dg_{chat}_*")]
    return sorted(Timers(r, stack.keys).many(ids), key=lambda t: t.due)


# -- A3: the digest -------------------------------------------------------------------------------------------

def test_the_digest_lists_exactly_the_chats_open_items_once_per_day_across_restarts(stack, feishu, r) -> None:
    for chat in (DIGEST_CHAT, EMPTY_CHAT, OTHER_CHAT):
        feishu.add_chat(chat)  # the bot is in these groups
    record(feishu, "导出 Excel 失败", DIGEST_CHAT, "待处理")
    record(feishu, "登录偶发超时", DIGEST_CHAT, "处理中", owner="ou_liu")
    record(feishu, "旧的支付问题", DIGEST_CHAT, "已解决")
    record(feishu, "别的群的问题", OTHER_CHAT, "待处理")
    record(feishu, "空群里关掉的问题", EMPTY_CHAT, "已关闭")
    [first] = wait_for(lambda: _digest_timers(r, stack, DIGEST_CHAT), 60, what="the sweeper's first digest timer")
    stack.add_sweeper()  # two schedulers from here on
    stack.set_clock(r, datetime(2026, 12, 7, 9, 29, 50, tzinfo=TZ))  # a Monday, just before 09:30
    wait_for(lambda: [t for t in _digest_timers(r, stack, DIGEST_CHAT) if t.id.endswith("2026-12-07T0930")], 30,
             what="Monday's digest timer")
    posted = wait_for(lambda: cards(feishu, DIGEST_CHAT), 30, what="the digest card")
    text = reply_text(posted[0])
    assert "导出 Excel 失败" in text and "登录偶发超时" in text and text.count("**") == 4  # two items
    assert "（2 项）" in json.loads(posted[0]["body"]["content"])["header"]["title"]["content"]
    assert "旧的支付问题" not in text and "别的群的问题" not in text
    content = posted[0]["body"]["content"]
    assert "ou_owner" in content and "ou_liu" in content  # owners are mentioned
    today = wait_for(lambda: [t for t in _digest_timers(r, stack, DIGEST_CHAT)  # the run notes it after the card
                              if t.id.endswith("2026-12-07T0930") and t.fired_note], 30, what="the digest run's note")
    assert today[0].state == "fired" and today[0].fired_note.startswith("posted")
    if first.id < f"dg_{DIGEST_CHAT}_2026-12-06":  # the slot set at real time, slept through by days: skipped
        stale = wait_for(lambda: [t for t in _digest_timers(r, stack, DIGEST_CHAT)
                                  if t.id == first.id and t.fired_note], 30, what="the stale slot's run")
        assert stale[0].fired_note.startswith("nothing posted") and "late" in stale[0].fired_note
    empty = wait_for(lambda: [t for t in _digest_timers(r, stack, EMPTY_CHAT)
                              if t.id.endswith("2026-12-07T0930") and t.fired_note], 30)
    assert empty[0].fired_note == "nothing posted: no open items" and not feishu.bot_messages(EMPTY_CHAT)
    assert not feishu.bot_messages(OTHER_CHAT)  # a chat that did not opt in
    time.sleep(1.0)  # both schedulers (every 0.2 s) have passed the slot several times
    assert len(cards(feishu, DIGEST_CHAT)) == 1
    stack.crash_restart()  # every process killed and started again: the day's digest is not posted again
    later(r, stack, 3600)
    time.sleep(1.5)
    assert len(cards(feishu, DIGEST_CHAT)) == 1
    # the next weekday morning: the next digest (Monday's 17:30 slot, slept through by 16 h, is skipped)
    stack.set_clock(r, datetime(2026, 12, 8, 9, 29, 50, tzinfo=TZ))  # the schedulers (every 1 s) see it before
    wait_for(lambda: len(cards(feishu, DIGEST_CHAT)) == 2, 30, what="Tuesday's digest")
    time.sleep(1.0)
    assert len(cards(feishu, DIGEST_CHAT)) == 2


def test_each_cron_slot_of_a_day_gets_its_digest_even_after_an_empty_one(stack, feishu, r) -> None:
    """Issue 23 A6: `30 9,17 * * 1-5` is two digests a day; a 09:30 slot with nothing open does not use up the day."""
    feishu.add_chat(SLOT_CHAT)
    stack.set_clock(r, datetime(2026, 12, 9, 9, 29, 50, tzinfo=TZ))  # a Wednesday, nothing open in the chat yet
    morning = wait_for(lambda: [t for t in _digest_timers(r, stack, SLOT_CHAT)
                                if t.id.endswith("2026-12-09T0930") and t.fired_note], 30, what="the 09:30 run")
    assert morning[0].fired_note == "nothing posted: no open items" and not cards(feishu, SLOT_CHAT)
    record(feishu, "下午才报上来的问题", SLOT_CHAT, "待处理")
    stack.set_clock(r, datetime(2026, 12, 9, 17, 29, 55, tzinfo=TZ))
    [posted] = wait_for(lambda: cards(feishu, SLOT_CHAT), 30, what="the 17:30 digest")
    assert "下午才报上来的问题" in reply_text(posted) and "17:30" in posted["body"]["content"]
    time.sleep(1.0)  # the schedulers pass the slot several times
    assert len(cards(feishu, SLOT_CHAT)) == 1
    slots = [t.id.rsplit("_", 1)[-1] for t in _digest_timers(r, stack, SLOT_CHAT) if t.state == "fired"]
    assert {"2026-12-09T0930", "2026-12-09T1730"} <= set(slots)


# -- A4: quiet triage on the labelled set -----------------------------------------------------------------------

class _Pending:
    analysis = ""


def _labelled() -> tuple[list[dict[str, Any]], dict[str, Any]]:
    rows = [json.loads(line) for line in (DATA / "triage_set.jsonl").read_text().splitlines() if line.strip()]
    topics = json.loads((DATA / "triage_topics.json").read_text())
    return rows, topics


def _pending_triage(r: redis.Redis, stack: OwnStack) -> int:
    return sum(1 for t in Timers(r, stack.keys).page(0, 500) if t.kind == "triage")


def test_triage_on_the_labelled_set_stays_quiet_on_chatter_and_speaks_on_evidence(stack, feishu, claude,
                                                                                   r) -> None:
    rows, topics = _labelled()
    stack.set_clock(r, datetime(2026, 12, 9, 14, 0, tzinfo=TZ))
    threads: dict[str, tuple[str, str]] = {}  # topic → (thread, root message)
    for name, facts in sorted(topics.items()):
        if facts is None:
            thread = unique("omt")
            env = deliver(stack.web, feishu, chat_id=TRIAGE_CHAT, chat_type="group", thread_id=thread,
                          text=f"讨论：{name}", sender_open_id="ou_starter")
            threads[name] = (thread, env["event"]["message"]["message_id"])
            continue
        report = f"@_user_1 {facts['title']}\n{facts['description']}"
        _chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys, text=report,
                                                reporter="ou_reporter", chat=TRIAGE_CHAT, wait_done=False)
        threads[name] = (thread, root)
    items = Items(r, stack.keys)
    for name, (thread, _root) in threads.items():  # the first answers ran side by side; all done before counting
        if topics[name] is not None:
            wait_for(lambda t=thread: (items.by_thread(t) or _Pending).analysis == "done", 60, what="first answers")
            idle(r, stack.keys, topic_rk(stack.keys, TRIAGE_CHAT, thread))
    by_topic: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        by_topic[row["topic"]].append(row)
    target_of: dict[str, dict[str, Any]] = {}  # our message id → its labelled row
    cursor = len(claude.requests)
    before = {name: len(feishu.bot_messages(TRIAGE_CHAT, thread_id=t)) for name, (t, _) in threads.items()}
    rounds = -(-max(len(v) for v in by_topic.values()) // PER_ROUND)
    posts_per_round: list[dict[str, int]] = []
    for n in range(rounds):
        for name, batch in sorted(by_topic.items()):
            thread, root = threads[name]
            for row in batch[n * PER_ROUND:(n + 1) * PER_ROUND]:
                env = deliver(stack.web, feishu, chat_id=TRIAGE_CHAT, chat_type="group", thread_id=thread,
                              root_id=root, text=row["text"], sender_open_id=row["sender"])
                target_of[env["event"]["message"]["message_id"]] = row
        seen = {name: len(feishu.bot_messages(TRIAGE_CHAT, thread_id=t)) for name, (t, _) in threads.items()}
        later(r, stack, POST_PERIOD + 100)  # past the quiet period and the post period
        wait_for(lambda: _pending_triage(r, stack) == 0, 60, what="the triage timers to fire")
        for thread, _root in threads.values():
            idle(r, stack.keys, topic_rk(stack.keys, TRIAGE_CHAT, thread), timeout=60)
        posts_per_round.append({name: len(feishu.bot_messages(TRIAGE_CHAT, thread_id=t)) - seen[name]
                                for name, (t, _) in threads.items()})
    assert all(n <= 1 for round_ in posts_per_round for n in round_.values()), posts_per_round
    unasked = [m for name, (t, _) in threads.items()
               for m in feishu.bot_messages(TRIAGE_CHAT, thread_id=t)[before[name]:]]
    answered = [target_of.get(str(m.get("parent_id") or "")) for m in unasked]
    assert all(answered), "every unasked post answers one of the set's messages"
    chatter = [row for row in rows if row["label"] != "evidence"]
    by_chatter = [row for row in answered if row and row["label"] != "evidence"]
    share = len(by_chatter) / len([row for row in rows if row["label"] == "chatter"])
    evidence = [row for row in rows if row["label"] == "evidence" and topics[row["topic"]] is not None]
    posting = {(name, n) for n, round_ in enumerate(posts_per_round) for name, k in round_.items() if k}
    covered = [row for row in evidence
               if (row["topic"], by_topic[row["topic"]].index(row) // PER_ROUND) in posting]
    proposals = [m for m in unasked if m["msg_type"] == "interactive"]  # the approval card
    notes = [m for m in unasked if m["msg_type"] != "interactive"]
    assert proposals and notes and all(reply_text(m).startswith("新证据") for m in notes)
    print(f"\ntriage: {len(unasked)} unasked posts ({len(proposals)} proposals); answering non-evidence "
          f"{len(by_chatter)} of {len(chatter)} ({share:.1%} of the chatter); evidence covered "
          f"{len(covered)}/{len(evidence)}")
    assert share < 0.02
    assert len(covered) / len(evidence) >= 0.9
    calls = [q for q in claude.requests_since(cursor) if "QUIET TRIAGE" in json.dumps(q["body"].get("system"))]
    assert all(q["body"]["model"] == "claude-haiku-5" for q in calls)
    item_topics = sum(1 for f in topics.values() if f is not None)
    assert 0 < len(calls) <= rounds * item_topics  # one call per topic per quiet period at most
    for name, facts in topics.items():  # topics without an item: never a call, never a post
        if facts is None:
            thread, _ = threads[name]
            assert len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread)) == 0


def test_a_topic_gets_at_most_one_unasked_post_per_period_and_only_where_opted_in(stack, feishu, claude,
                                                                               r) -> None:
    stack.set_clock(r, datetime(2026, 12, 10, 14, 0, tzinfo=TZ))
    _c, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys, chat=TRIAGE_CHAT)
    _c2, other_thread, other_root, _i2 = open_topic(stack.web, feishu, r, stack.keys, chat=QUIET_CHAT)
    rk = topic_rk(stack.keys, TRIAGE_CHAT, thread)
    first = len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread))
    for text in ("测试环境也能复现，日志里有 NullPointerException", "用户那边截图也是同样的报错"):
        deliver(stack.web, feishu, chat_id=TRIAGE_CHAT, chat_type="group", thread_id=thread, root_id=root,
                text=text, sender_open_id="ou_tester")
        deliver(stack.web, feishu, chat_id=QUIET_CHAT, chat_type="group", thread_id=other_thread,
                root_id=other_root, text=text, sender_open_id="ou_tester")
    deliver(stack.web, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="测试环境也能复现，日志里有报错",
            sender_open_id="ou_tester")
    _c3, chatty, chatty_root, _i3 = open_topic(stack.web, feishu, r, stack.keys, chat=TRIAGE_CHAT)
    for text in ("收到👍", "好的", "[赞]", "哈哈哈"):  # the fast path: nothing worth a model's look
        deliver(stack.web, feishu, chat_id=TRIAGE_CHAT, chat_type="group", thread_id=chatty, root_id=chatty_root,
                text=text, sender_open_id="ou_tester")
    assert _pending_triage(r, stack) == 1  # the evidence topic's; none for the chatty one
    cursor = len(claude.requests)
    later(r, stack, QUIET + 5)
    wait_for(lambda: len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread)) > first, 30, what="the triage note")
    idle(r, stack.keys, rk)
    assert len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread)) == first + 1
    # more evidence within the post period: one more call at most, and no second post
    deliver(stack.web, feishu, chat_id=TRIAGE_CHAT, chat_type="group", thread_id=thread, root_id=root,
            text="生产环境也复现了，错误码 500，堆栈一样", sender_open_id="ou_tester")
    later(r, stack, QUIET + 5)  # the next quiet period ends, still inside the post period
    wait_for(lambda: _pending_triage(r, stack) == 0, 30)
    idle(r, stack.keys, rk)
    time.sleep(0.5)
    assert len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread)) == first + 1
    calls = [q for q in claude.requests_since(cursor) if "QUIET TRIAGE" in json.dumps(q["body"].get("system"))]
    assert len(calls) == 1  # the second period falls in the post period: no call, nothing could be posted
    metrics = r.hgetall(stack.keys.metrics)
    assert int(metrics.get("triage|capped", 0)) >= 1
    assert len(feishu.bot_messages(QUIET_CHAT, thread_id=other_thread)) == 1  # only the first answer's card
    assert not [q for q in calls if QUIET_CHAT in json.dumps(q["body"])]


def test_a_dead_lettered_triage_note_is_posted_once_by_its_replay(stack, feishu, r) -> None:
    """Found by chaos 18: the run takes the topic's post period before posting; when the note's post fails for
    good, the replay (a new batch) is the same firing and may post it — once."""
    stack.set_clock(r, datetime(2026, 12, 11, 14, 0, tzinfo=TZ))
    _c, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys, chat=TRIAGE_CHAT)
    rk = topic_rk(stack.keys, TRIAGE_CHAT, thread)
    first = len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread))
    deliver(stack.web, feishu, chat_id=TRIAGE_CHAT, chat_type="group", thread_id=thread, root_id=root,
            text="预发环境也能复现，日志里有超时报错", sender_open_id="ou_tester")
    feishu.inject("reply", code=230002, times=1)  # the note's post is refused for good
    later(r, stack, QUIET + 5)
    [letter] = wait_for(lambda: stack.dead_letters(rk), 60, what="the dead-lettered triage run")
    assert len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread)) == first
    assert stack.admin("POST", f"deadletters/{letter['id']}/replay").status_code == 200
    wait_for(lambda: len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread)) == first + 1, 30, what="the note")
    idle(r, stack.keys, rk)
    assert len(feishu.bot_messages(TRIAGE_CHAT, thread_id=thread)) == first + 1
