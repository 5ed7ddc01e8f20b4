"""The timer store and the scheduler on the real Redis, without workers: exactly one inbox event per (timer, due)
whatever the number of schedulers, idempotent adds, per-route caps, a reset's cancel counted once.
"""

from __future__ import annotations

import json
import threading
import time

import redis

from bot.edge.envelope import dumps
from jobs.runtime import Runtime
from jobs.timers import scheduler
from jobs.timers.model import FIRED, FOLLOWUP, PENDING, Timer, dedupe_key
from tests.harness import settings_from, unique


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
        assert a.timers.add(followup(n, routes[n % 40], due + n / 1000), now=due) == 1
    start = threading.Barrier(2)

    def run(rt: Runtime) -> None:
        start.wait()
        while scheduler.fire_due(rt) or rt.timers.due(rt.clock.now(), 1):
            pass

    threads = [threading.Thread(target=run, args=(x,)) for x in (a, b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    counts = events_per_timer(r, a, routes)
    assert len(counts) == 600 and set(counts.values()) == {1}, {k: v for k, v in counts.items() if v != 1}
    assert a.timers.pending_count() == 0
    assert {t.state for t in a.timers.many([f"f_{n:010d}" for n in range(600)])} == {FIRED}
    assert int(r.hget(a.keys.metrics, "timers_fired|followup") or 0) == 600  # counted once, by the winner


def test_a_crash_between_the_push_and_the_end_pushes_no_second_event(env, r) -> None:
    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:p2p:oc_crash"
    t = followup(1, rk, rt.clock.now() - 5)
    rt.timers.add(t)
    key = dedupe_key(t.id, t.due)  # the dead scheduler pushed, then died before ending the timer
    rt.inbox.push(rk, dumps(scheduler.timer_event(t, rt.clock.now())), message_id=key, content_key=key,
                  queue="runs")
    assert scheduler.fire_due(rt) == 1
    assert r.llen(rt.keys.inbox(rk)) == 1 and rt.timers.get(t.id).state == FIRED  # type: ignore[union-attr]


def test_adds_are_idempotent_capped_per_route_and_a_resets_cancel_counts_once(env, r) -> None:
    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:p2p:oc_cap"
    later = rt.clock.now() + 3600
    assert rt.timers.add(followup(1, rk, later), cap=2) == 1
    assert rt.timers.add(followup(1, rk, later), cap=2) == 0  # a rerun of the turn that set it
    assert rt.timers.add(followup(2, rk, later), cap=2) == 1
    assert rt.timers.add(followup(3, rk, later), cap=2) == -1  # the route is full
    assert [t.id for t in rt.timers.of_source("om_1")] == ["f_0000000001"]
    ledger = rt.keys.sent(rk, "batch-reset")
    assert rt.timers.cancel_route(rk, ledger, "followups_cancelled", "reset", time.time()) == 2
    assert rt.timers.cancel_route(rk, ledger, "followups_cancelled", "reset", time.time()) == 2  # the rerun says 2
    assert rt.timers.pending_of(rk) == [] and rt.timers.pending_count() == 0
    assert {t.state for t in rt.timers.many(["f_0000000001", "f_0000000002"])} == {"cancelled"}
    assert rt.timers.add(followup(3, rk, later), cap=2) == 1  # room again
    t = rt.timers.get("f_0000000003")
    assert t is not None and t.state == PENDING
    assert r.ttl(rt.keys.timer("f_0000000001")) > 0  # ended timers expire; pending ones do not
    assert r.ttl(rt.keys.timer("f_0000000003")) == -1


def test_a_rerun_of_the_turn_sets_nothing_new_and_states_the_first_runs_time(env, r) -> None:
    """The tool's timer id is (route, batch, call): a turn rerun after a crash — whose model may read the time
    differently — finds the first run's timer and the reply states that one."""
    from bot.edge.envelope import Inbound
    from jobs.timers.tool import FollowupContext, footer, schedule

    profile = unique("tm")
    rt = runtime(env, profile)
    rk = f"feishu:{profile}:p2p:oc_rerun"
    asker = Inbound(event_id="ev1", message_id="om_ask", chat_id="oc_rerun", chat_type="p2p", sender_open_id="ou_a",
                    sender_type="user", message_type="text", text="明天上午提醒我看日志", content="{}")
    first = FollowupContext(rk, "batch-1", asker, gen=0)
    said = schedule(rt, first, {"when": "明天上午", "what": "看日志"})
    again = FollowupContext(rk, "batch-1", asker, gen=0)
    assert schedule(rt, again, {"when": "后天下午", "what": "别的事"}) == said
    assert footer(again, "x") == footer(first, "x") and "10:00" in footer(first, "提醒")
    assert len(rt.timers.pending_of(rk)) == 1
    other = FollowupContext(rk, "batch-2", asker, gen=0)  # another turn: its own timer
    schedule(rt, other, {"when": "后天下午", "what": "别的事"})
    assert len(rt.timers.pending_of(rk)) == 2
    bad = FollowupContext(rk, "batch-3", asker, gen=0)
    assert schedule(rt, bad, {"when": "昨天", "what": "x"}).startswith("not set:") and not bad.set
