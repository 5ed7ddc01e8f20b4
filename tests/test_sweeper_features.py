"""The sweeper runs what features declare, and names none of them (issue 31): a feature's `Probe` is how a paused
component of its own is tried again, and its `side` periodic work (Open API calls) runs on the side thread with its
own retry, never on the dispatch loop. On the real Redis, with an App of throwaway features."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis

import app as product
from jobs.sweeper import Paused, SideTasks, Sweeper
from runs.runtime import Runtime
from tests.harness import settings_from, unique
from turn.registry import App, Collision, Feature, Periodic, Probe


def runtime(env: dict[str, str], app: App) -> Runtime:
    rt = Runtime(settings_from({**env, "BOT_PROFILE": unique("sweepf")}), env["REDIS_URL"])
    rt.app = app  # a test may assign one (runs/runtime.py)
    return rt


def test_a_feature_s_probe_resumes_its_own_paused_component(env: dict[str, str], r: redis.Redis) -> None:
    broken = {"yes": True}
    tries: list[float] = []

    def still_broken(_rt: Runtime) -> None:
        tries.append(time.time())
        if broken["yes"]:
            raise RuntimeError("still broken")

    rt = runtime(env, App((Feature("gadget", probes=(Probe("gadget", still_broken),)),)))
    r.hset(rt.keys.paused, "gadget", json.dumps({"since": time.time(), "reason": "the gadget broke"}))
    paused = Paused(rt)
    assert paused.probe(time.time()) is False and len(tries) == 1
    assert r.hexists(rt.keys.paused, "gadget")
    assert paused.probe(time.time()) is False and len(tries) == 1  # not before PAUSE_PROBE_SECONDS
    broken["yes"] = False
    paused.next_probe = 0.0
    assert paused.probe(time.time()) is True and len(tries) == 2
    assert not r.hexists(rt.keys.paused, "gadget")


def test_the_items_table_is_probed_and_checked_through_the_items_feature() -> None:
    app = App(product.FEATURES)
    assert "bitable" in app.probes  # items/table_check.COMPONENT, declared by items, not named by the sweeper
    side = [p for p in app.periodic if p.side]
    assert [p.name for p in side] == ["items table"]


def test_side_work_runs_on_the_side_thread_and_a_failure_comes_back_after_its_retry(env: dict[str, str]) -> None:
    runs: dict[str, list[Any]] = {"side": [], "loop": []}
    outcomes = [False, RuntimeError("Open API down"), True]

    def side(_rt: Runtime) -> object:
        runs["side"].append(time.monotonic())
        outcome = outcomes.pop(0)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    app = App((Feature("gadget", periodic=(
        Periodic("gadget check", side, every=lambda _s: 3600.0, side=True, retry=lambda _s: 30.0),
        Periodic("gadget loop", lambda _rt: runs["loop"].append(1)))),))
    rt = runtime(env, app)
    tasks = SideTasks(rt, stop=None)  # type: ignore[arg-type]  # its loop is not started: one step at a time
    tasks._side(100.0)
    assert len(runs["side"]) == 1 and tasks.next_side["gadget check"] == 130.0  # False: again after the retry
    tasks._side(129.0)
    assert len(runs["side"]) == 1
    tasks._side(130.0)
    assert len(runs["side"]) == 2 and tasks.next_side["gadget check"] == 160.0  # an error: the retry again
    tasks._side(160.0)
    assert len(runs["side"]) == 3 and tasks.next_side["gadget check"] == 3760.0  # passed: hourly
    assert runs["loop"] == []  # the loop's own work is not the side thread's
    sweeper = Sweeper(rt)
    sweeper._periodic(time.monotonic())
    assert runs["loop"] == [1] and len(runs["side"]) == 3  # and side work never runs on the dispatch loop


def test_two_features_cannot_declare_the_same_probe_or_periodic_name() -> None:
    with pytest.raises(Collision):
        App((Feature("a", probes=(Probe("thing", print),)), Feature("b", probes=(Probe("thing", print),))))
    with pytest.raises(Collision):
        App((Feature("a", periodic=(Periodic("job", print),)), Feature("b", periodic=(Periodic("job", print),))))
