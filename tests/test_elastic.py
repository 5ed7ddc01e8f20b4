"""The elastic worker pool through the real stack: a burst of routes all run at once, the pool shrinks back,
and WORKER_CONCURRENCY still means a fixed pool (issue 16).

A bot profile of its own per test module, with its own sweeper, so the supervisor a test starts is the only
one serving its queue.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis

from core.keys import Keys
from runs.queues import rq_queue_name
from tests.harness import (
    Proc,
    WebServer,
    deliver,
    message_id,
    settings_from,
    stop_all,
    unique,
    wait_for,
    worker_count,
)

TURN_S = 5.0  # the model stand-in's delay per call
ROUTES = 24
MARGIN_S = 2.0  # forking and booting the extra workers, the sweeper's dispatch


@dataclass
class Rig:
    web: WebServer
    env: dict[str, str]
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    @property
    def keys(self) -> Keys:
        return Keys(self.env["BOT_PROFILE"])

    @property
    def queue(self) -> str:
        return rq_queue_name(self.env["BOT_PROFILE"], "runs")

    def supervisor(self, **env: str) -> tuple[Proc, str]:
        name = unique("ew")
        proc = Proc(["-m", "jobs.worker", "--name", name], {**self.env, **env}, str(self.workdir),
                    self.workdir / f"{name}.log")
        self.procs.append(proc)
        return proc, name

    def registered(self) -> int:
        return worker_count(redis.Redis.from_url(self.env["REDIS_URL"]), self.queue)


def rq_workers_of(proc: Proc) -> int:
    """The supervisor's live RQ worker processes (its direct children; work-horses are their children)."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            table[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
    return sum(1 for ppid in table.values() if ppid == proc.p.pid)


@pytest.fixture(scope="module")
def _rig(env: dict[str, str], workdir: Path) -> Iterator[Rig]:
    own = {k: v for k, v in env.items() if k != "WORKER_CONCURRENCY"}  # the harness's fixed pool of 2
    own.update(BOT_PROFILE=unique("elastic"), LLM_TIMEOUT_SECONDS="30", RUN_BUDGET_SECONDS="60",
               RUN_LEASE_SECONDS="6")
    rig = Rig(WebServer(settings_from(own)), own, workdir)
    sweeper = Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{own['BOT_PROFILE']}-sweeper.log")
    yield rig
    rig.web.stop()
    sweeper.stop()


@pytest.fixture()
def rig(_rig: Rig) -> Iterator[Rig]:
    yield _rig
    stop_all(_rig.procs)
    _rig.procs.clear()


def ask(rig: Rig, feishu, chats: list[str]) -> float:
    """Every chat asks at once; seconds from the first send until every answer is stored at Feishu."""
    started = time.monotonic()
    envs: list[dict] = []
    lock = threading.Lock()

    def send(chat: str) -> None:
        envelope = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text=f"elastic {chat}")
        with lock:
            envs.append(envelope)

    threads = [threading.Thread(target=send, args=(c,)) for c in chats]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wait_for(lambda: all(feishu.replies_to(message_id(e)) for e in envs), timeout=TURN_S * len(chats) + 30,
             interval=0.05, what=f"answers to {len(chats)} routes")
    return time.monotonic() - started


def most_at_once(calls: list[dict]) -> int:
    """The most model calls in flight at the same moment."""
    edges = sorted([(c["start"], 1) for c in calls] + [(c["end"] or float("inf"), -1) for c in calls],
                   key=lambda e: (e[0], e[1]))
    peak = now = 0
    for _, step in edges:
        now += step
        peak = max(peak, now)
    return peak


def test_a_burst_of_routes_runs_at_once_and_the_pool_shrinks_back(rig: Rig, feishu, claude, r) -> None:
    sup, name = rig.supervisor(WORKER_MIN="1", WORKER_MAX=str(ROUTES), WORKER_IDLE_SECONDS="2")
    wait_for(lambda: sup.alive() and rig.registered() == 1, 60, what="the pool's one core worker")
    claude.set_delay(TURN_S)
    one_turn = ask(rig, feishu, [unique("oc_el1")])
    assert rig.registered() == 1  # one run: the core worker took it, nothing grew

    cursor = len(claude.timeline_since(0))
    burst = ask(rig, feishu, [unique("oc_el") for _ in range(ROUTES)])
    pool_log = [ln for ln in sup.log_path.read_text().splitlines() if "worker pool" in ln]
    # The structural proof, robust to a loaded machine: the routes' model calls were in flight together (all 24 on
    # a quiet machine; a pool that did not grow runs them one after another). The time bound is loose for the same
    # reason; the 1.3 × target is measured by `python -m bench elastic` on a quiet machine.
    at_once = most_at_once(claude.timeline_since(cursor))
    assert at_once >= ROUTES // 2, (at_once, pool_log)  # quiet machine: all 24; a pool that cannot grow: 1
    assert burst <= 2 * one_turn + 3 * MARGIN_S, (burst, one_turn, pool_log)  # a fixed pool of 1: 24 turns
    status = r.hgetall(f"{rig.keys.prefix}:pool:{name}")
    assert int(status["max"]) == ROUTES and int(status["min"]) == 1

    shrink_started = time.monotonic()
    wait_for(lambda: rig.registered() == 1 and rq_workers_of(sup) == 1, timeout=15, interval=0.1,
             what="the pool back at WORKER_MIN")
    assert time.monotonic() - shrink_started < 15
    assert sup.alive()
    log = sup.log_path.read_text()
    assert "worker pool grew to" in log and "worker pool shrank to" in log


def test_worker_concurrency_still_means_a_fixed_pool(rig: Rig, feishu, claude) -> None:
    sup, _ = rig.supervisor(WORKER_CONCURRENCY="3", WORKER_MIN="1", WORKER_MAX="24", WORKER_IDLE_SECONDS="1")
    wait_for(lambda: sup.alive() and rig.registered() == 3, 60, what="three fixed workers")
    claude.set_delay(1.5)
    peak = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            peak.append((rig.registered(), rq_workers_of(sup)))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    took = ask(rig, feishu, [unique("oc_fx") for _ in range(9)])
    done.set()
    sampler.join()
    assert max(p[0] for p in peak) == 3 and max(p[1] for p in peak) == 3  # runs waited; nothing grew
    assert took >= 2 * 1.5  # nine routes on three workers take several turns
    time.sleep(2)  # longer than WORKER_IDLE_SECONDS: a fixed pool never shrinks
    assert rig.registered() == 3 and rq_workers_of(sup) == 3
