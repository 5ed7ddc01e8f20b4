"""Dispatch under load on real Redis and RQ: kicks wait in our list while a queue is full, and a work-horse
that chains routes never runs another queue's route (jobs/sweeper.py `dispatch`, jobs/drain.py `chain`)."""

from __future__ import annotations

import pytest
from rq import Queue

from jobs.drain import chain
from jobs.sweeper import dispatch, sweep_once
from runs.inbox import Kick
from runs.queues import rq_queue_name
from runs.runtime import Runtime
from tests.harness import settings_from, unique, wait_for


@pytest.fixture()
def rt(env: dict[str, str]) -> Runtime:
    settings = settings_from({**env, "BOT_PROFILE": unique("disp")})  # no worker serves this profile
    return Runtime(settings, settings.redis_url or "")


def queued(rt: Runtime, name: str) -> int:
    return Queue(rq_queue_name(rt.settings.bot_profile, name), connection=rt.rq).count


def test_kicks_wait_in_the_list_while_their_queue_is_full(rt: Runtime) -> None:
    kicks = [Kick(route_key=f"feishu:{rt.settings.bot_profile}:p2p:oc_{i}", token=f"t{i}", queue="runs")
             for i in range(3)]
    rt.state.rpush(rt.keys.kicks, *[k.dumps() for k in kicks])
    assert dispatch(rt, timeout=0.1) == 1  # no worker yet: one job waits in RQ, the rest in our list
    assert queued(rt, "runs") == 1
    assert [Kick.loads(x) for x in rt.state.lrange(rt.keys.kicks, 0, -1)] == kicks[1:]  # order kept
    assert dispatch(rt, timeout=0.1) == 0 and queued(rt, "runs") == 1


def test_a_chaining_horse_hands_another_queues_kick_to_rq(rt: Runtime) -> None:
    other = Kick(route_key=f"feishu:{rt.settings.bot_profile}:topic:oc_1:omt_1", token="t", queue="vip")
    rt.state.rpush(rt.keys.kicks, other.dumps())
    assert chain(rt, "job", origin=rq_queue_name(rt.settings.bot_profile, "runs")) == []
    assert queued(rt, "vip") == 1 and not rt.state.exists(rt.keys.lease(other.route_key))


def test_a_horse_stops_chaining_while_jobs_wait_in_its_rq_queue(rt: Runtime) -> None:
    """Jobs in RQ (a recovered route's, or more jobs than live workers after a host died and its workers still
    count) are served in turn: a horse chaining routes from our kick list would otherwise pass them for minutes."""
    listed = Kick(route_key=f"feishu:{rt.settings.bot_profile}:p2p:oc_listed", token="t1", queue="runs")
    rt.state.rpush(rt.keys.kicks, listed.dumps())
    rt.start_run(f"feishu:{rt.settings.bot_profile}:p2p:oc_queued", "t2", "runs")
    assert chain(rt, "job", origin=rq_queue_name(rt.settings.bot_profile, "runs")) == []
    assert [Kick.loads(x) for x in rt.state.lrange(rt.keys.kicks, 0, -1)] == [listed]


def test_one_sweep_visits_every_dirty_route(rt: Runtime) -> None:
    """Defect 12: the sweep used to read only the 1,000 oldest dirty routes."""
    routes = [f"feishu:{rt.settings.bot_profile}:p2p:oc_{i}" for i in range(1_500)]
    pipe = rt.state.pipeline()
    for i, rk in enumerate(routes):  # each has work and no lease: a crashed run's leftovers
        pipe.rpush(rt.keys.inbox(rk), "{}")
        pipe.zadd(rt.keys.dirty, {rk: i})
    pipe.execute()
    assert sweep_once(rt) == len(routes)
    assert rt.state.llen(rt.keys.kicks) == len(routes)


def test_dispatch_never_waits_for_the_open_api(rt: Runtime, feishu) -> None:
    """Defect 12: a Feishu outage during the identity refresh must not hold kicks back."""
    import threading

    from jobs.sweeper import Sweeper

    identity_asked, identity_answered = threading.Event(), threading.Event()
    feishu.on("bot_info", lambda _: identity_asked.set(), when="before")
    feishu.on("bot_info", lambda _: identity_answered.set(), when="after")
    feishu.set_delay("bot_info", 8)  # Feishu hangs
    sweeper = Sweeper(rt)
    thread = threading.Thread(target=sweeper.serve, daemon=True)
    thread.start()
    try:
        assert identity_asked.wait(10)
        kick = Kick(route_key=f"feishu:{rt.settings.bot_profile}:p2p:oc_x", token="t", queue="runs")
        rt.state.rpush(rt.keys.kicks, kick.dumps())
        wait_for(lambda: queued(rt, "runs") == 1, timeout=5, what="the kick dispatched")
        assert not identity_answered.is_set()  # dispatched while the identity call still hung
    finally:
        sweeper.stop.set()
        thread.join(15)
