"""The timer store and the scheduler on the real Redis, without workers: exactly one inbox event per (timer, due)
whatever the number of schedulers, idempotent adds, caps (route, person, person on a route, in all), the
generation fence, a reset's cancel counted once, and the follow-up tool's checks (the asking message, the instant).
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import replace
from datetime import datetime

import pytest
import redis

from core.inbound import Inbound, dumps
from runs.runtime import Runtime
from tests.harness import settings_from, unique
from timers import keys as timer_keys
from timers import scheduler, timers_of
from timers.model import FIRED, FOLLOWUP, PENDING, Timer, dedupe_key
from timers.store import Caps
from timers.tool import FollowupContext, footer, schedule


def runtime(env: dict[str, str], profile: str) -> Runtime:
    return Runtime(settings_from({**env, "BOT_PROFILE": profile}), env["REDIS_URL"])


def followup(n: int, rk: str, due: float) -> Timer:
    return Timer(id=f"f_{n:010d}", kind=FOLLOWUP, route_key=rk, due=due, chat_id="oc_x", what=f"check {n}",
                 created_by="ou_a", created_at=due - 60, source_message_id=f"om_{n}")


def events_per_timer(r: redis.Redis, rt: Runtime, routes: list[str]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for rk in routes:
        for raw in r.lrange(rt.keys.inbox(rk), 0, -1):
            timer_id = json.loads(json.loads(raw)["content"])["timer_id"]
            counts[timer_id] = counts.get(timer_id, 0) + 1
    return counts


def test_two_schedulers_racing_push_each_due_timer_exactly_once(env, r) -> None:
    profile = unique("tm")
    a, b = runtime(env, profile), runtime(env, profile)  # two sweeper processes' views of one Redis
    routes = [f"feishu:{profile}:p2p:oc_{i}" for i in range(40)]
    due = a.clock.now() - 1
    for n in range(600):
        assert timers_of(a).add(followup(n, routes[n % 40], due + n / 1000), now=due) == 1
    start = threading.Barrier(2)

    def run(rt: Runtime) -> None:
        start.wait()
        while scheduler.fire_due(rt) or timers_of(rt).due(rt.clock.now(), 1):
            pass

    threads = [threading.Thread(target=run, args=(x,)) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    counts = events_per_timer(r, a, routes)
    assert len(counts) == 600 and set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    assert timers_of(a).pending_count() == 0
    assert {t.state for t in timers_of(a).many([f"f_{n:010d}" for n in range(600)])} == {FIRED}
    assert int(r.hget(a.keys.metrics, "timers_fired|followup") or 0) == 600  # counted once, by the winner


def test_a_crash_between_the_push_and_the_end_pushes_no_second_event(env, r) -> None:
    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:p2p:oc_crash"
    t = followup(1, rk, rt.clock.now() - 5)
    timers_of(rt).add(t)
    key = dedupe_key(t.id, t.due)  # the dead scheduler pushed, then died before ending the timer
    rt.inbox.push(rk, dumps(scheduler.timer_event(t, rt.clock.now())), message_id=key, content_key=key,
                  queue="runs")
    assert scheduler.fire_due(rt) == 1
    assert r.llen(rt.keys.inbox(rk)) == 1 and timers_of(rt).get(t.id).state == FIRED  # type: ignore[union-attr]


def test_adds_are_idempotent_capped_per_route_and_a_resets_cancel_counts_once(env, r) -> None:
    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:p2p:oc_cap"
    later = rt.clock.now() + 3600
    cap = Caps(route=2)
    assert timers_of(rt).add(followup(1, rk, later), caps=cap) == 1
    assert timers_of(rt).add(followup(1, rk, later), caps=cap) == 0  # a rerun of the turn that set it
    assert timers_of(rt).add(followup(2, rk, later), caps=cap) == 1
    assert timers_of(rt).add(followup(3, rk, later), caps=cap) == -1  # the route is full
    assert [t.id for t in timers_of(rt).of_source("om_1")] == ["f_0000000001"]
    ledger = rt.keys.sent(rk, "batch-reset")
    ids = ["f_0000000001", "f_0000000002", "f_0000000009"]  # one that does not exist
    assert timers_of(rt).cancel_many(rk, ids, ledger, "followups_cancelled", "reset", time.time()) == ids[:2]
    assert timers_of(rt).cancel_many(rk, ids, ledger, "followups_cancelled", "reset", time.time()) == ids[:2]  # rerun
    assert timers_of(rt).pending_of(rk) == [] and timers_of(rt).pending_count() == 0
    assert timers_of(rt).pending_of_person("ou_a") == 0  # the person index follows every end
    assert {t.state for t in timers_of(rt).many(["f_0000000001", "f_0000000002"])} == {"cancelled"}
    assert timers_of(rt).add(followup(3, rk, later), caps=cap) == 1  # room again
    t = timers_of(rt).get("f_0000000003")
    assert t is not None and t.state == PENDING
    assert r.ttl(timer_keys.timer(rt.keys, "f_0000000001")) > 0  # ended timers expire; pending ones do not
    assert r.ttl(timer_keys.timer(rt.keys, "f_0000000003")) == -1


def mine(n: int, rk: str, due: float, who: str) -> Timer:
    return replace(followup(n, rk, due), id=f"f_{who}_{n:04d}", created_by=who, source_message_id=f"om_{who}_{n}")


def test_caps_per_person_across_routes_per_person_on_a_route_and_in_all(env, r) -> None:
    """Issue 23 A4: one sender cannot hold hundreds of reminders across topics, nor fill a shared topic's cap."""
    profile = unique("tm")
    rt = runtime(env, profile)
    later = rt.clock.now() + 3600
    caps = Caps(route=6, person=5, route_person=3, total=0)
    topic = f"feishu:{profile}:topic:oc_t:omt_shared"
    assert [timers_of(rt).add(mine(n, topic, later, "ou_spam"), caps=caps) for n in range(4)] == [1, 1, 1, -3]
    assert [timers_of(rt).add(mine(n, topic, later, "ou_bob"), caps=caps) for n in range(3)] == [1, 1, 1]  # room left
    others = [f"feishu:{profile}:topic:oc_t:omt_{i}" for i in range(5)]
    assert [timers_of(rt).add(mine(10 + i, rk, later, "ou_spam"), caps=caps) for i, rk in enumerate(others)] == \
        [1, 1, -2, -2, -2]  # five in all, wherever they are
    assert timers_of(rt).pending_of_person("ou_spam") == 5
    [one] = [t for t in timers_of(rt).pending_of(others[0])]
    assert timers_of(rt).end(one, "cancelled", "test", time.time())
    assert timers_of(rt).add(mine(20, others[4], later, "ou_spam"), caps=caps) == 1  # a cancel frees a place
    total = Caps(total=timers_of(rt).pending_count())
    assert timers_of(rt).add(mine(1, others[1], later, "ou_carol"), caps=total) == -4  # the deployment's bound


def test_a_timer_set_by_a_turn_a_reset_overtook_is_refused(env, r) -> None:
    """A reset moves the route's generation at once; the overtaken turn's follow-up must not outlive its turn."""
    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:p2p:oc_gen"
    r.hset(rt.keys.route_state(rk), "gen", 2)
    later = rt.clock.now() + 3600
    assert timers_of(rt).add(replace(followup(1, rk, later), gen=1), fence_gen=True) == -5
    assert timers_of(rt).add(replace(followup(1, rk, later), gen=2), fence_gen=True) == 1


def inbound(mid: str, who: str, text: str, chat: str = "oc_rerun") -> Inbound:
    return Inbound(event_id=f"ev_{mid}", message_id=mid, chat_id=chat, chat_type="group", sender_open_id=who,
                   sender_type="user", message_type="text", text=text, content="{}")


def test_a_rerun_of_the_turn_sets_nothing_new_and_states_the_first_runs_time(env, r) -> None:
    """The tool's timer id is (route, batch, call): a turn rerun after a crash — whose model may resolve the time
    differently — finds the first run's timer and the reply states that one."""
    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:p2p:oc_rerun"
    asker = [inbound("om_ask", "ou_a", "明天上午提醒我看日志")]
    at = iso(rt, days=1)
    first = FollowupContext(rk, "batch-1", asker, gen=0)
    said = schedule(rt, first, {"message_id": "om_ask", "at": at, "what": "看日志"})
    again = FollowupContext(rk, "batch-1", asker, gen=0)
    assert schedule(rt, again, {"message_id": "om_ask", "at": iso(rt, days=2), "what": "别的事"}) == said
    assert footer(again, "x") == footer(first, "x") and at[11:16] in footer(first, "提醒")
    assert len(timers_of(rt).pending_of(rk)) == 1
    other = FollowupContext(rk, "batch-2", asker, gen=0)  # another turn: its own timer
    schedule(rt, other, {"message_id": "om_ask", "at": iso(rt, days=2), "what": "别的事"})
    assert len(timers_of(rt).pending_of(rk)) == 2
    bad = FollowupContext(rk, "batch-3", asker, gen=0)
    assert schedule(rt, bad, {"message_id": "om_ask", "at": iso(rt, days=-1), "what": "x"}).startswith("not set:")
    assert not bad.set


def iso(rt: Runtime, days: float = 0, naive: bool = False) -> str:
    at = datetime.fromtimestamp(rt.clock.now() + days * 86400, rt.settings.tz).replace(second=0, microsecond=0)
    return at.replace(tzinfo=None).isoformat() if naive else at.isoformat()


def test_the_follow_up_is_the_asking_messages_sender_s_and_names_a_message_of_the_batch(env, r) -> None:
    """Issue 23 A1: Alice asks, Bob's message lands in the same batch: the timer is Alice's, under her message."""
    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:topic:oc_ab:omt_ab"
    batch = [inbound("om_alice", "ou_alice", "明天上午提醒我核对账单"), inbound("om_bob", "ou_bob", "我先看看日志")]
    ctx = FollowupContext(rk, "batch-ab", batch, gen=0)
    assert "ou_alice" in schedule(rt, ctx, {"message_id": "om_alice", "at": iso(rt, 1), "what": "核对账单"})
    [t] = timers_of(rt).pending_of(rk)
    assert (t.created_by, t.source_message_id) == ("ou_alice", "om_alice")
    assert "@ou_alice" in footer(ctx, "提醒")  # several people spoke: the footer says whose it is
    unnamed = FollowupContext(rk, "batch-ab2", batch, gen=0)  # two people: the message must be named
    out = schedule(rt, unnamed, {"at": iso(rt, 1), "what": "x"})
    assert out.startswith("not set: message_id") and "om_alice (from ou_alice)" in out and not unnamed.set
    stranger = FollowupContext(rk, "batch-ab3", batch, gen=0)  # not a message of this batch
    assert schedule(rt, stranger, {"message_id": "om_other", "at": iso(rt, 1), "what": "x"}).startswith("not set:")
    alone = FollowupContext(rk, "batch-c", [inbound("om_c", "ou_c", "提醒我")], gen=0)  # one message: no naming
    assert "ou_c" in schedule(rt, alone, {"at": iso(rt, 1), "what": "y"})


@pytest.mark.parametrize(("at", "why"), [
    ("tomorrow 10am", "ISO 8601"), ("", "ISO 8601"), ("2026-13-01T10:00:00+08:00", "ISO 8601"),
])
def test_the_time_must_be_an_iso_instant_with_an_offset_ahead_and_within_a_year(env, r, at: str, why: str) -> None:
    rt = runtime(env, unique("tm"))
    ctx = FollowupContext(f"feishu:{rt.settings.bot_profile}:p2p:oc_t", "b", [inbound("om_t", "ou_t", "x")], gen=0)
    assert why in schedule(rt, ctx, {"message_id": "om_t", "at": at, "what": "x"})


def test_instants_naive_past_and_too_far_are_refused_and_others_stated_in_the_bots_zone(env, r) -> None:
    rt = runtime(env, unique("tm"))
    ctx = FollowupContext(f"feishu:{rt.settings.bot_profile}:p2p:oc_t", "b", [inbound("om_t", "ou_t", "x")], gen=0)
    assert "needs a UTC offset" in schedule(rt, ctx, {"message_id": "om_t", "at": iso(rt, 1, True), "what": "x"})
    assert "not in the future" in schedule(rt, ctx, {"message_id": "om_t", "at": iso(rt, -0.001), "what": "x"})
    assert "too far ahead" in schedule(rt, ctx, {"message_id": "om_t", "at": iso(rt, 367), "what": "x"})
    ctx = FollowupContext(ctx.rk, "b2", ctx.batch, gen=0)
    year = schedule(rt, ctx, {"message_id": "om_t", "at": iso(rt, 366), "what": "x"})  # 366 days: allowed
    assert year.startswith("set:")
