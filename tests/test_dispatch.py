"""Dispatch under load on real Redis and RQ: kicks wait in our list while a queue is full, and a work-horse
that chains routes never runs another queue's route (jobs/sweeper.py `dispatch`, jobs/drain.py `chain`)."""

from __future__ import annotations

import pytest
from rq import Queue

from jobs.drain import chain
from jobs.inbox import Kick
from jobs.queues import rq_queue_name
from jobs.runtime import Runtime
from jobs.sweeper import dispatch
from tests.harness import settings_from, unique


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
