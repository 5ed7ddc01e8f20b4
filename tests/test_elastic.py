"""The elastic worker pool through the real stack: a burst of routes all run at once, the pool shrinks back,
and WORKER_CONCURRENCY still means a fixed pool (issue 16); a SIGKILLed supervisor leaves no worker and no
work-horse behind, in either mode (issue 32).

A bot profile of its own per test module, with its own sweeper, so the supervisor a test starts is the only
one serving its queue.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import redis
from rq import Worker

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
        """RQ workers registered on the queue and alive: a SIGKILLed pool's registrations stay in RQ's registry
        until their heartbeat expires (minutes), and must not count for the next test's pool."""
        r = redis.Redis.from_url(self.env["REDIS_URL"])
        return sum(1 for w in Worker.all(connection=r) if self.queue in w.queue_names() and alive(w.pid))


def alive(pid: int | None) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


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


def tail(proc: Proc, chars: int = 4000) -> str:
    return proc.log_path.read_bytes()[proc.log_from:].decode(errors="replace")[-chars:]


EARLY_STOP = """
import signal, sys
from rq.serializers import JSONSerializer
from core.settings import load_settings
from jobs.worker import RouteWorker
from runs import runtime
from state.store import resolve_url, rq_client

settings = load_settings()
runtime.configure(settings)
url = resolve_url(settings)
worker = RouteWorker([sys.argv[1]], connection=rq_client(url), serializer=JSONSerializer, name=sys.argv[2])
worker.register_birth()
job, queue = worker.dequeue_job_and_maintain_ttl(timeout=30)
worker.prepare_execution(job)  # BUSY, its horse not forked yet
worker.request_stop(signal.SIGTERM, None)  # the supervisor died right now
worker.fork_work_horse(job, queue)
worker.monitor_work_horse(job, queue)
worker.register_death()
"""


def test_a_stop_that_comes_while_a_worker_forks_its_horse_hands_the_route_over(rig: Rig, feishu, claude, r) -> None:
    """The supervisor dies after a worker took a job but before it forked the horse (it has no horse to tell yet):
    the horse takes no turn and hands the route over at once (not held until its lease expires, nor SIGKILLed
    mid-turn after the grace); the next pool answers the message once."""
    chat = unique("oc_early")
    route = f"feishu:{rig.env['BOT_PROFILE']}:p2p:{chat}"
    assert not r.zcard(rig.keys.dirty), "an earlier test left work behind: the driver would take its job"
    sent = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="刚派下来的活")
    wait_for(lambda: r.llen(f"rq:queue:{rig.queue}") >= 1, 30, what="the run's job waiting in RQ")
    driver = Proc(["-c", EARLY_STOP, rig.queue, unique("early")], rig.env, str(rig.workdir),
                  rig.workdir / "early-stop.log")
    rig.procs.append(driver)
    assert driver.p.wait(timeout=90) == 0, tail(driver)
    lease = r.get(rig.keys.lease(route))
    assert lease is not None and lease.startswith("k:"), (lease, tail(driver))  # handed over, not held
    assert not claude.requests, tail(driver)  # no turn was started
    rig.supervisor(WORKER_CONCURRENCY="1")
    wait_for(lambda: feishu.replies_to(message_id(sent)), 90, what="the answer from the next pool")
    time.sleep(1)
    assert len(feishu.replies_to(message_id(sent))) == 1


# -- issue 32: no orphaned pool survives its supervisor's SIGKILL -----------------------------------------------------

ORPHAN_LIMIT_S = 10.0  # acceptance: no worker or work-horse alive 10 s after the supervisor's SIGKILL


def session_of(sid: int) -> dict[int, int]:
    """pid → process group of every live process of a session (a Proc is a session leader: its workers, their
    horses, and any of them re-parented to PID 1 once the supervisor is gone)."""
    out = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] not in ("Z", "X") and int(fields[3]) == sid:
            out[int(stat.parent.name)] = int(fields[2])
    return out


@pytest.mark.parametrize(("mode", "busy_in"), [("fixed", "model"), ("elastic", "model"), ("elastic", "reply")])
def test_a_sigkilled_supervisor_leaves_no_worker_and_no_horse_alive(rig: Rig, feishu, claude, r, mode: str,
                                                                     busy_in: str) -> None:
    """What an operator sees: SIGKILL the supervisor alone while horses are mid-turn, waiting on the model (a wait
    the warm stop interrupts: the route is handed over) or on a Feishu reply (a step nothing interrupts: ended
    after the grace); 10 s later nothing of its pool runs.
    Elastic: one core worker and one extra, both busy; fixed: two workers, one busy."""
    env = ({"WORKER_CONCURRENCY": "2"} if mode == "fixed" else
           {"WORKER_MIN": "1", "WORKER_MAX": "4", "WORKER_IDLE_SECONDS": "60"})
    sup, _ = rig.supervisor(**env)
    wait_for(lambda: sup.alive() and rig.registered() == (2 if mode == "fixed" else 1), 90, what="the pool")
    if busy_in == "model":
        claude.set_delay(60)
    else:
        feishu.set_delay("reply", 60)  # past FEISHU_TIMEOUT_SECONDS: the client waits, then tries again
    chats = [unique("oc_orphan") for _ in range(1 if mode == "fixed" else 2)]
    routes = len(chats)
    for chat in chats:
        deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="孤儿进程")
    if busy_in == "model":
        wait_for(lambda: claude.stats["in_flight"] >= routes, 60, what="every route in its model call")
    else:
        wait_for(lambda: sum(q["op"] == "reply" for q in feishu.requests) >= routes, 60, what="replies sent")
    def busy() -> dict[int, int] | None:
        pool = session_of(sup.p.pid)
        return pool if sum(1 for pid, group in pool.items() if group == pid != sup.p.pid) >= routes else None

    pool = wait_for(busy, 30, what="a work-horse per route")  # a horse leads its own process group
    assert len(pool) >= 1 + 2 * routes, pool  # the supervisor, its RQ workers (two at least), their horses
    os.kill(sup.p.pid, signal.SIGKILL)  # the supervisor alone
    killed_at = time.monotonic()
    sup.p.wait(timeout=10)
    try:
        wait_for(lambda: not session_of(sup.p.pid), ORPHAN_LIMIT_S - (time.monotonic() - killed_at), interval=0.1,
                 what="the pool to end with its supervisor")
        if busy_in == "model":  # the warm stop ended the model waits: each route handed over, none left to expire
            leases = [r.get(rig.keys.lease(f"feishu:{rig.env['BOT_PROFILE']}:p2p:{c}")) for c in chats]
            assert all(lease is None or lease.startswith("k:") for lease in leases), (leases, tail(sup))
    finally:
        claude.set_delay(0)
        feishu.set_delay("reply", 0)
        for pid in session_of(sup.p.pid):  # a failed run must not leave them to the next test
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_a_horse_whose_worker_dies_finishes_its_step_and_takes_no_further_one(rig: Rig, feishu, claude, r) -> None:
    """SIGKILL a busy horse's RQ worker alone: the horse (fenced by its lease) finishes the turn it is in, then hands
    its route over instead of taking the route's next batch; the successor run, under a fresh worker, answers it."""
    sup, _ = rig.supervisor(WORKER_CONCURRENCY="1")
    wait_for(lambda: sup.alive() and rig.registered() == 1, 90, what="the worker")
    wait_for(lambda: not r.zcard(rig.keys.dirty), 60, what="the routes the SIGKILL tests handed over answered")
    claude.set_delay(4)
    chat, seen = unique("oc_horse"), {}
    claude.on_request(lambda body: seen.setdefault("second", session_of(sup.p.pid).get(horse) is not None)
                      if "第二条" in json.dumps(body, ensure_ascii=False) else None)
    deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="第一条")
    wait_for(lambda: claude.stats["in_flight"] >= 1, 60, what="the first turn's model call")
    pool = session_of(sup.p.pid)
    [horse] = [pid for pid, group in pool.items() if group == pid != sup.p.pid]
    second = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="第二条")  # the route's next batch
    worker = int(Path(f"/proc/{horse}/stat").read_text().rsplit(")", 1)[1].split()[1])
    os.kill(worker, signal.SIGKILL)
    wait_for(lambda: feishu.replies_to(message_id(second)), 60, what="the second message's answer")
    assert seen == {"second": False}  # the orphan had ended when the next batch's model call started
