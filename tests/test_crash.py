"""SIGKILL a worker mid-run: a later run completes the batch, the user gets one reply (acceptance 8)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.harness import (
    Proc,
    WebServer,
    deliver,
    message_id,
    model_requests_with,
    settings_from,
    unique,
    wait_for,
)


@pytest.fixture()
def crash_rig(env: dict[str, str], workdir: Path, service: WebServer) -> Iterator[tuple[WebServer, list[Proc]]]:
    """A web app whose p2p routes go to their own queue, served by workers this test may kill.

    `service` is requested so the session's sweeper is running: it is what notices the dead run.
    """
    queue = unique("crashq")
    crash_env = {**env, "ROUTING_QUEUE_P2P": queue}
    web = WebServer(settings_from(crash_env))
    procs: list[Proc] = []

    def start_worker() -> Proc:
        p = Proc(["-m", "jobs.worker", "--queue", queue, "--name", unique("cw")], crash_env, str(workdir),
                 workdir / f"{queue}.log")
        procs.append(p)
        return p

    web.start_worker = start_worker  # type: ignore[attr-defined]
    yield web, procs
    web.stop()
    for p in procs:
        p.stop()


def _kill_when(event: threading.Event, proc: Proc) -> threading.Thread:
    def run() -> None:
        event.wait(30)
        proc.kill9()

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


def test_worker_killed_while_the_model_thinks(crash_rig, feishu, claude, r, keys) -> None:
    web, _ = crash_rig
    worker = web.start_worker()
    arrived = threading.Event()
    claude.on_request(lambda body: arrived.set() if "进程被杀测试" in json.dumps(body, ensure_ascii=False) else None)
    claude.set_delay(3.0)
    killer = _kill_when(arrived, worker)
    chat = unique("oc_p2p")
    env = deliver(web, feishu, chat_id=chat, chat_type="p2p", text="进程被杀测试")
    killer.join(35)
    assert worker.p.poll() is not None, "the worker should be dead"
    claude.set_delay(0)
    web.start_worker()  # a fresh worker; the sweeper re-kicks the route once the dead run's lease expires
    replies = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=40)
    time.sleep(1.5)
    assert len(feishu.replies_to(message_id(env))) == 1
    assert len(model_requests_with(claude, "进程被杀测试")) == 2  # the killed call and the completed one
    transcript = r.lrange(keys.transcript(f"feishu:test:p2p:{chat}"), 0, -1)
    user_turns = [e for e in map(json.loads, transcript) if e["role"] == "user"]
    assert [("进程被杀测试" in e["text"]) for e in user_turns] == [True]
    assert replies[0]["parent_id"] == message_id(env)


def test_worker_killed_right_after_replying(crash_rig, feishu, claude, r, keys) -> None:
    web, _ = crash_rig
    worker = web.start_worker()
    sent = threading.Event()

    def hold_answer(record: dict) -> None:
        if record.get("status") == 200:  # the reply is stored; hold the HTTP answer while the kill lands
            sent.set()
            time.sleep(1.0)

    feishu.on("reply", hold_answer, when="after")
    killer = _kill_when(sent, worker)
    chat = unique("oc_p2p")
    env = deliver(web, feishu, chat_id=chat, chat_type="p2p", text="回复后被杀测试")
    killer.join(35)
    assert worker.p.poll() is not None
    web.start_worker()
    rk = f"feishu:test:p2p:{chat}"
    wait_for(lambda: r.llen(keys.proc(rk)) == 0 and r.llen(keys.inbox(rk)) == 0 and r.llen(keys.transcript(rk)),
             timeout=40, what="the batch to be committed by a later run")
    assert len(feishu.replies_to(message_id(env))) == 1
    reply_calls = [q for q in feishu.requests if q["op"] == "reply"]
    assert len(reply_calls) >= 2 and len({q["json"]["uuid"] for q in reply_calls}) == 1
    assert len(model_requests_with(claude, "回复后被杀测试")) == 1  # the answer was kept, not asked again


@contextmanager
def other_bot(env: dict[str, str], workdir: Path, prefix: str) -> Iterator[tuple[WebServer, str, Callable]]:
    """A second bot profile on the session's Redis; its sweeper and workers start only when the test says."""
    profile = unique(prefix)
    own = {**env, "BOT_PROFILE": profile}
    web = WebServer(settings_from(own))
    procs: list[Proc] = []

    def start(module: str) -> None:
        procs.append(Proc(["-m", module], own, str(workdir), workdir / f"{profile}-{module}.log"))

    try:
        yield web, profile, start
    finally:
        web.stop()
        for p in procs:
            p.stop()


def test_lost_kick_is_recovered_by_the_sweep(env, workdir, feishu, claude, r) -> None:
    """A kick record lost before it became an RQ job (dispatcher crash): the sweep re-kicks the route."""
    from memory.keys import Keys

    with other_bot(env, workdir, "lost") as (web, profile, start):
        keys = Keys(profile)
        chat = unique("oc_p2p")
        env_msg = deliver(web, feishu, chat_id=chat, chat_type="p2p", text="丢失的启动信号")
        rk = f"feishu:{profile}:p2p:{chat}"
        assert r.llen(keys.kicks) == 1 and r.llen(keys.inbox(rk)) == 1
        r.delete(keys.kicks)  # the dispatcher popped it and died
        r.pexpire(keys.lease(rk), 1)  # ...and the kick lease has run out since
        time.sleep(0.05)
        start("jobs.worker")
        start("jobs.sweeper")
        feishu.wait_for(lambda: feishu.replies_to(message_id(env_msg)), timeout=40)
        assert len(model_requests_with(claude, "丢失的启动信号")) == 1


def test_two_profiles_on_one_redis_never_run_each_others_routes(env, workdir, feishu, claude, service) -> None:
    """BOT_PROFILE lets two bots share one Redis: the other bot's workers must not take this bot's runs."""
    with other_bot(env, workdir, "other") as (web, _, start):
        env_msg = deliver(web, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="另一个机器人的消息")
        start("jobs.sweeper")
        time.sleep(3)  # the kick is dispatched; only the session's (profile "test") workers are listening
        assert feishu.replies_to(message_id(env_msg)) == []
        start("jobs.worker")
        feishu.wait_for(lambda: feishu.replies_to(message_id(env_msg)), timeout=40)
        assert len(model_requests_with(claude, "另一个机器人的消息")) == 1
