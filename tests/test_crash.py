"""SIGKILL a worker mid-run: the other worker on its queue completes the batch, one reply (acceptance 8)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

from core.keys import Keys
from runs.queues import rq_queue_name
from tests.harness import (
    Proc,
    WebServer,
    deliver,
    message_id,
    model_requests_with,
    route_key,
    rq_jobs,
    session_log,
    settings_from,
    stop_all,
    unique,
    wait_for,
    wait_route_idle,
)


@dataclass
class CrashRig:
    """A bot profile of its own, with its own sweeper: the workers a test starts here (and kills) are the
    only ones serving its RQ queue, and every re-kick of its routes lands on that queue."""

    web: WebServer
    env: dict[str, str]
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    @property
    def profile(self) -> str:
        return self.env["BOT_PROFILE"]

    @property
    def keys(self) -> Keys:
        return Keys(self.profile)

    @property
    def queue(self) -> str:
        return rq_queue_name(self.profile, "runs")

    def start_workers(self, n: int) -> dict[str, Proc]:
        """`n` worker processes by name, booted side by side and registered (each RQ worker's name starts with it)."""
        workers = {}
        for _ in range(n):
            name = unique("cw")
            workers[name] = Proc(["-m", "jobs.worker", "--name", name], self.env, str(self.workdir),
                                 self.workdir / f"{name}.log")
        self.procs.extend(workers.values())
        conn = redis.Redis.from_url(self.env["REDIS_URL"])
        wait_for(lambda: all(p.alive() for p in workers.values()) and
                 all(any(w.startswith(name) for w in _worker_names(conn, self.queue)) for name in workers),
                 timeout=120, what="the rig's workers to register")
        return workers

    def runners(self, rk: str) -> list[str]:
        """Names of the workers holding a started (running or abandoned) drain job of `rk`."""
        return [str(job.worker_name) for job in rq_jobs(self.env["REDIS_URL"], self.queue, "started")
                if _route_of(job) == rk]

    def finishers(self, rk: str) -> list[str]:
        """Names of the workers that completed a drain job of `rk` on the rig's queue."""
        return [str(job.worker_name) for job in rq_jobs(self.env["REDIS_URL"], self.queue, "finished")
                if _route_of(job) == rk]


def _worker_names(conn: redis.Redis, queue: str) -> list[str]:
    from rq import Worker

    return [w.name for w in Worker.all(connection=conn) if queue in w.queue_names()]


def _route_of(job: Any) -> str | None:
    args = job.args or [{}]
    return args[0].get("route_key") if isinstance(args[0], dict) else None


@pytest.fixture(scope="module")
def _rig(env: dict[str, str], workdir: Path) -> Iterator[CrashRig]:
    own = {**env, "BOT_PROFILE": unique("crash"), "WORKER_CONCURRENCY": "1"}
    rig = CrashRig(WebServer(settings_from(own)), own, workdir)
    sweeper = Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{rig.profile}-sweeper.log")
    yield rig
    rig.web.stop()
    assert sweeper.alive()
    sweeper.stop()


@pytest.fixture()
def crash_rig(_rig: CrashRig) -> Iterator[CrashRig]:
    """The module's rig; the workers a test starts are stopped after it, so none serves the next test."""
    yield _rig
    stop_all(_rig.procs)
    _rig.procs.clear()


def _kill_when(event: threading.Event, rig: CrashRig, rk: str, workers: dict[str, Proc], what: str) -> str:
    """When `event` fires, SIGKILL the worker running `rk` (and its work-horse); return the other one's name.

    Fails, killing nothing, if the event never fires. Which of the two idle workers took the job is RQ's
    choice; the started registry names it, and the killed job stays there, abandoned."""
    if not event.wait(30):
        pytest.fail(f"{what} never happened within 30 s: no worker was killed, so no crash was tested")
    holder = wait_for(lambda: rig.runners(rk), timeout=5, what="the route's job in RQ's started registry")
    killed = [name for name in workers if all(h.startswith(name) for h in holder)]
    assert len(killed) == 1, (holder, list(workers))
    workers[killed[0]].kill9()
    assert workers[killed[0]].p.poll() is not None, "the worker should be dead"
    assert rig.runners(rk) == holder
    (fresh,) = set(workers) - set(killed)
    return fresh


def test_worker_killed_while_the_model_thinks(crash_rig: CrashRig, feishu, claude, r) -> None:
    workers = crash_rig.start_workers(2)
    arrived = threading.Event()
    claude.on_request(lambda body: arrived.set() if "进程被杀测试" in json.dumps(body, ensure_ascii=False) else None)
    claude.set_delay(3.0)
    chat = unique("oc_p2p")
    env = deliver(crash_rig.web, feishu, chat_id=chat, chat_type="p2p", text="进程被杀测试")
    rk = route_key("p2p", chat, profile=crash_rig.profile)
    fresh = _kill_when(arrived, crash_rig, rk, workers, "the model request")
    claude.set_delay(0)  # the rig's sweeper re-kicks the route once the dead run's lease expires
    replies = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=60)
    wait_route_idle(r, crash_rig.keys, rk, timeout=40)
    assert len(feishu.replies_to(message_id(env))) == 1
    assert replies[0]["parent_id"] == message_id(env)
    assert len(model_requests_with(claude, "进程被杀测试")) == 2  # the killed call and the completed one
    user_turns = [e for e in session_log(r, crash_rig.keys, rk) if e["role"] == "user"]
    assert [("进程被杀测试" in e["text"]) for e in user_turns] == [True]
    finishers = crash_rig.finishers(rk)
    assert finishers and all(name.startswith(fresh) for name in finishers), finishers


def test_worker_killed_right_after_replying(crash_rig: CrashRig, feishu, claude, r) -> None:
    workers = crash_rig.start_workers(2)
    sent = threading.Event()

    def hold_answer(record: dict) -> None:
        if record.get("status") == 200:  # the reply is stored; hold the HTTP answer while the kill lands
            sent.set()
            time.sleep(1.0)

    feishu.on("reply", hold_answer, when="after")
    chat = unique("oc_p2p")
    env = deliver(crash_rig.web, feishu, chat_id=chat, chat_type="p2p", text="回复后被杀测试")
    rk = route_key("p2p", chat, profile=crash_rig.profile)
    fresh = _kill_when(sent, crash_rig, rk, workers, "the reply")
    wait_for(lambda: session_log(r, crash_rig.keys, rk), timeout=60, what="the batch committed by a later run")
    wait_route_idle(r, crash_rig.keys, rk, timeout=40)
    assert len(feishu.replies_to(message_id(env))) == 1
    reply_calls = [q for q in feishu.requests if q["op"] == "reply"]
    assert len(reply_calls) >= 2 and len({q["json"]["uuid"] for q in reply_calls}) == 1
    assert len(model_requests_with(claude, "回复后被杀测试")) == 1  # the answer was kept, not asked again
    finishers = crash_rig.finishers(rk)
    assert finishers and all(name.startswith(fresh) for name in finishers), finishers


@contextmanager
def other_bot(env: dict[str, str], workdir: Path, prefix: str) -> Iterator[tuple[WebServer, str, Callable]]:
    """A second bot profile on the session's Redis; its sweeper and workers start only when the test says."""
    profile = unique(prefix)
    own = {**env, "BOT_PROFILE": profile, "WORKER_CONCURRENCY": "1"}
    web = WebServer(settings_from(own))
    procs: list[Proc] = []

    def start(module: str) -> None:
        procs.append(Proc(["-m", module], own, str(workdir), workdir / f"{profile}-{module}.log"))

    try:
        yield web, profile, start
    finally:
        web.stop()
        stop_all(procs)


def test_lost_kick_is_recovered_by_the_sweep(env, workdir, feishu, claude, r) -> None:
    """A kick record lost before it became an RQ job (dispatcher crash): the sweep re-kicks the route."""
    with other_bot(env, workdir, "lost") as (web, profile, start):
        keys = Keys(profile)
        chat = unique("oc_p2p")
        env_msg = deliver(web, feishu, chat_id=chat, chat_type="p2p", text="丢失的启动信号")
        rk = route_key("p2p", chat, profile=profile)
        assert r.llen(keys.kicks) == 1 and r.llen(keys.inbox(rk)) == 1
        r.delete(keys.kicks)  # the dispatcher popped it and died
        r.pexpire(keys.lease(rk), 1)  # ...and the kick lease has run out since
        wait_for(lambda: not r.exists(keys.lease(rk)), what="the kick lease to expire")
        start("jobs.worker")
        start("jobs.sweeper")
        feishu.wait_for(lambda: feishu.replies_to(message_id(env_msg)), timeout=120)
        wait_route_idle(r, keys, rk)
        assert len(model_requests_with(claude, "丢失的启动信号")) == 1
        assert len(feishu.replies_to(message_id(env_msg))) == 1


def test_two_profiles_on_one_redis_never_run_each_others_routes(crash_rig: CrashRig, feishu, claude, service, r,
                                                                 keys) -> None:
    """BOT_PROFILE lets two bots share one Redis: one bot's workers must not take the other bot's runs.

    The rig is the other bot: its sweeper runs, none of its workers does until the test starts one."""
    chat = unique("oc_p2p")
    env_msg = deliver(crash_rig.web, feishu, chat_id=chat, chat_type="p2p", text="另一个机器人的消息")
    rk = route_key("p2p", chat, profile=crash_rig.profile)

    def queued() -> list[Any]:
        return [job for job in rq_jobs(crash_rig.env["REDIS_URL"], crash_rig.queue, "queued") if _route_of(job) == rk]

    job = wait_for(queued, timeout=120, what="the other bot's drain job on its own RQ queue")[0]
    # Barrier: the session's workers (profile "test") answer a message of their own sent after it.
    own_chat = unique("oc_p2p")
    mine = deliver(service, feishu, chat_id=own_chat, chat_type="p2p", text="本机器人随后的消息")
    feishu.wait_for(lambda: feishu.replies_to(message_id(mine)))
    wait_route_idle(r, keys, route_key("p2p", own_chat))
    assert [j.id for j in queued()] == [job.id], "the other bot's job was taken by this bot's workers"
    assert job.get_status(refresh=True) == "queued"
    assert model_requests_with(claude, "另一个机器人的消息") == []
    assert feishu.replies_to(message_id(env_msg)) == []
    crash_rig.start_workers(1)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env_msg)), timeout=120)
    wait_route_idle(r, crash_rig.keys, rk)
    assert len(model_requests_with(claude, "另一个机器人的消息")) == 1
    assert len(feishu.replies_to(message_id(env_msg))) == 1
