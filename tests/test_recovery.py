"""Recovery paths through the real stack: crashes, restarts, graceful stops, stuck runs (issue defects 9, 14).

A bot profile of its own, with its own sweeper, so the workers this module starts and kills are the
only ones that can run its routes.
"""

from __future__ import annotations

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
import requests

from core.keys import Keys
from tests.harness import (
    Proc,
    WebServer,
    deliver,
    message_id,
    model_requests_with,
    reply_text,
    settings_from,
    unique,
    wait_for,
    wait_route_idle,
    worker_count,
)

ADMIN_CHAT = "oc_admin_alerts"


@dataclass
class Rig:
    web: WebServer
    env: dict[str, str]
    keys: Keys
    workdir: Path
    procs: list[Proc] = field(default_factory=list)

    def start_worker(self) -> Proc:
        """A fresh worker process (one RQ worker); the module's tests hand it on to each other."""
        name = unique("rw")
        proc = Proc(["-m", "jobs.worker", "--name", name], self.env, str(self.workdir), self.workdir / f"{name}.log")
        self.procs.append(proc)
        rq = redis.Redis.from_url(self.env["REDIS_URL"])
        # generous: at the suite's start every test worker is starting its stacks on the same 2 cores
        wait_for(lambda: not proc.alive() or any(w.name.startswith(name) for w in _workers(rq)), 120,
                 what="worker registered")
        assert proc.alive(), proc.log_path.read_text(errors="replace")[-2000:]
        return proc

    @property
    def worker(self) -> Proc:
        live = [p for p in self.procs if p.p.poll() is None]
        return live[-1] if live else self.start_worker()

    def rk(self, chat: str) -> str:
        return f"feishu:{self.env['BOT_PROFILE']}:p2p:{chat}"


def _workers(rq: redis.Redis) -> list:
    from rq import Worker

    return Worker.all(connection=rq)


@pytest.fixture(scope="module")
def rig(env: dict[str, str], workdir: Path, r: redis.Redis) -> Iterator[Rig]:
    profile = unique("rec")
    own = {**env, "BOT_PROFILE": profile, "WORKER_CONCURRENCY": "1", "RUN_BUDGET_SECONDS": "6",
           "LLM_TIMEOUT_SECONDS": "30", "PAUSE_PROBE_SECONDS": "1", "ADMIN_CHAT_ID": ADMIN_CHAT}
    rig = Rig(WebServer(settings_from(own)), own, Keys(profile), workdir)
    sweeper = Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{profile}-sweeper.log")
    wait_for(lambda: r.get(rig.keys.bot_open_id), 40, what="the rig's sweeper")
    yield rig
    rig.web.stop()
    for p in [*rig.procs, sweeper]:
        p.stop()


@pytest.fixture()
def worker(rig: Rig) -> Proc:
    """The module's live worker, started once and replaced by the tests that kill it."""
    return rig.worker


def _kill_on(event: threading.Event, proc: Proc) -> threading.Thread:
    def run() -> None:
        if event.wait(40):
            proc.kill9()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def test_answered_then_killed_on_its_last_attempt_is_committed_not_buried(rig, worker, feishu, claude, r) -> None:
    """Defect 9: two failed attempts, the third replies and dies before COMMIT; the next run commits."""
    claude.fail(529, "overloaded_error", times=4)  # two attempts of two calls each (the SDK retries once)
    replied = threading.Event()

    def hold(record: dict) -> None:
        if record.get("status") == 200 and "最后一次才成功" in json.loads(record["json"]["content"])["text"]:
            replied.set()
            time.sleep(1.0)  # the reply is stored at Feishu; the worker dies before it hears back

    feishu.on("reply", hold, when="after")
    killer = _kill_on(replied, worker)
    chat = unique("oc_p2p")
    env = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="最后一次才成功")
    killer.join(45)
    assert replied.is_set() and worker.p.poll() is not None
    rig.start_worker()
    wait_route_idle(r, rig.keys, rig.rk(chat), timeout=40)
    replies = feishu.replies_to(message_id(env))
    assert [("最后一次才成功" in reply_text(m)) for m in replies] == [True]  # the answer, and no failure notice
    assert not any(message_id(env) in json.loads(x)["message_ids"] for x in r.hvals(rig.keys.dead))
    assert len(model_requests_with(claude, "最后一次才成功")) == 5  # nothing asked again after the answer


def test_retries_run_on_time_after_a_worker_is_killed_and_restarted(rig, worker, feishu, claude, r) -> None:
    """Defect 14: a retry must not wait for RQ's scheduler lock, which a restarted worker cannot win back."""
    worker.kill9()
    rig.start_worker()
    claude.fail(529, "overloaded_error", times=2)  # the first attempt fails; its retry is due after 1 s
    chat = unique("oc_p2p")
    env = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="重启后的重试")
    replies = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=25)
    assert "重启后的重试" in reply_text(replies[0])
    wait_route_idle(r, rig.keys, rig.rk(chat))
    assert len(feishu.replies_to(message_id(env))) == 1


def test_sigterm_hands_the_route_over_at_once_and_a_fresh_worker_answers(rig, worker, feishu, claude, r) -> None:
    claude.inject_fault("timeout", times=1, timeout_seconds=25)  # the model takes 25 s for the first call
    asked = threading.Event()
    claude.on_request(lambda body: asked.set() if "部署时的消息" in json.dumps(body, ensure_ascii=False) else None)
    chat = unique("oc_p2p")
    env = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="部署时的消息")
    assert asked.wait(40)
    stopped_at = time.monotonic()
    os.killpg(worker.p.pid, signal.SIGTERM)  # what honcho and systemd send
    worker.p.wait(timeout=15)  # well before the model would have answered
    assert time.monotonic() - stopped_at < 15
    lease = r.get(rig.keys.lease(rig.rk(chat)))
    assert lease is None or lease.startswith("k:")  # handed over, not left to expire
    rig.start_worker()
    replies = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    wait_route_idle(r, rig.keys, rig.rk(chat))
    assert len(feishu.replies_to(message_id(env))) == 1 and "部署时的消息" in reply_text(replies[0])


def test_watchdog_breaks_a_run_stuck_past_its_budget(rig, worker, feishu, claude, r) -> None:
    feishu.add_chat(ADMIN_CHAT)
    claude.inject_fault("timeout", times=1, timeout_seconds=25)  # hangs far past RUN_BUDGET_SECONDS=6
    chat = unique("oc_p2p")
    env = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="卡住的一轮")
    replies = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=40)
    wait_route_idle(r, rig.keys, rig.rk(chat))
    assert len(feishu.replies_to(message_id(env))) == 1 and "卡住的一轮" in reply_text(replies[0])
    assert int(r.hget(rig.keys.metrics, "stuck_runs") or 0) >= 1
    metrics = requests.get(f"{rig.web.url}/metrics", timeout=5).text
    assert "stuck_runs_total 1.0" in metrics
    alerts = feishu.wait_for(lambda: feishu.bot_messages(chat_id=ADMIN_CHAT), timeout=20)
    assert "超过" in reply_text(alerts[0]) and rig.rk(chat) in reply_text(alerts[0])
    assert worker_count(redis.Redis.from_url(rig.env["REDIS_URL"]), f"{rig.env['BOT_PROFILE']}-runs") >= 1


def test_app_credential_error_pauses_work_keeps_messages_and_resumes(rig, worker, feishu, claude, r) -> None:
    """Defect 13: a Feishu app credential error is the service's fault, not the message's."""
    k = rig.keys
    feishu.inject("token", code=10014, times=10_000)  # "app secret invalid" for every token fetch
    r.delete(*r.keys(f"{k.prefix}:lark:*") or ["none"])
    feishu.expire_tokens()
    chat, other = unique("oc_p2p"), unique("oc_p2p")
    first = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="凭证坏了的时候")
    wait_for(lambda: r.hexists(k.paused, "feishu"), timeout=30, what="work paused")
    second = deliver(rig.web, feishu, chat_id=other, chat_type="p2p", text="暂停期间的新消息")
    metrics = requests.get(f"{rig.web.url}/metrics", timeout=5).text
    assert 'paused{component="feishu"} 1.0' in metrics
    ready = requests.get(f"{rig.web.url}/readyz", timeout=5)
    assert ready.status_code == 200 and ready.json()["status"] == "degraded"  # still accepting events
    assert ready.json()["paused"]["feishu"]["code"] == "10014"
    assert r.llen(k.proc(rig.rk(chat))) == 1  # the batch is kept, not buried
    assert not any(message_id(first) in x for x in r.hvals(k.dead))
    time.sleep(2)  # a few probe intervals: still paused, nothing answered, nothing buried
    assert feishu.replies_to(message_id(first)) == [] and feishu.replies_to(message_id(second)) == []
    assert r.hexists(k.paused, "feishu") and r.hlen(k.dead) == 0
    feishu.clear_faults()  # the operator fixes the secret
    for env, chat_id, text in ((first, chat, "凭证坏了的时候"), (second, other, "暂停期间的新消息")):
        replies = feishu.wait_for(lambda e=env: feishu.replies_to(message_id(e)), timeout=30)
        wait_route_idle(r, k, rig.rk(chat_id))
        assert [text in reply_text(m) for m in feishu.replies_to(message_id(env))] == [True]
        assert replies
    assert not r.exists(k.paused)
    assert len(model_requests_with(claude, "凭证坏了的时候")) == 1  # its answer was kept while paused


def test_a_revoked_model_key_pauses_work_and_everything_is_answered_once_it_works(rig, worker, feishu, claude,
                                                                                  r) -> None:
    """Defect 13: 401 from the model is an operator's problem: no dead letters, no 'failed' notices."""
    k = rig.keys
    claude.revoke_key(rig.env["ANTHROPIC_API_KEY"])
    chats = [unique("oc_p2p") for _ in range(3)]
    envs = [deliver(rig.web, feishu, chat_id=c, chat_type="p2p", text=f"钥匙失效第{i}条") for i, c in enumerate(chats)]
    wait_for(lambda: r.hexists(k.paused, "model"), timeout=30, what="work paused")
    time.sleep(2)  # probes keep failing: still paused, nothing answered, nothing buried
    assert r.hexists(k.paused, "model") and r.hlen(k.dead) == 0
    assert all(feishu.replies_to(message_id(e)) == [] for e in envs)
    assert len(claude.count_requests) >= 1  # the sweeper probed the key
    claude.restore_keys()  # the operator puts a working key in place
    for i, (env, chat) in enumerate(zip(envs, chats, strict=True)):
        feishu.wait_for(lambda e=env: feishu.replies_to(message_id(e)), timeout=30)
        wait_route_idle(r, k, rig.rk(chat))
        assert [f"钥匙失效第{i}条" in reply_text(m) for m in feishu.replies_to(message_id(env))] == [True]
    assert not r.exists(k.paused) and r.hlen(k.dead) == 0


def test_the_supervisor_restarts_every_killed_worker_side_by_side(env, workdir, r) -> None:
    """After a mass kill (or a Redis restart, when every RQ worker exits) all slots come back after one
    backoff: a restart must not wait for the slots restarted before it."""
    from rq import Worker

    profile = unique("sup")
    own = {**env, "BOT_PROFILE": profile, "WORKER_CONCURRENCY": "4"}
    rq = redis.Redis.from_url(env["REDIS_URL"])

    def ours() -> list[Worker]:
        return [w for w in Worker.all(connection=rq) if any(q.startswith(profile) for q in w.queue_names())]

    sup = Proc(["-m", "jobs.worker", "--queue", "runs", "--name", profile], own, str(workdir),
               workdir / f"{profile}.log")
    try:
        def four(exclude: set[str]) -> list[Worker] | None:
            ws = [w for w in ours() if w.name not in exclude]
            return ws if len(ws) == 4 else None

        first = wait_for(lambda: four(set()), 60, what="4 workers")
        for w in first:
            os.kill(w.pid, signal.SIGKILL)  # a dead RQ worker does not unregister itself
            w.register_death()
        before = {w.name for w in first}
        fresh = wait_for(lambda: four(before), 60, what="4 new workers")
        births = sorted(w.birth_date.timestamp() for w in fresh)
        # One at a time, each waiting its 1 s backoff, the births would spread over 3 s or more.
        assert births[-1] - births[0] < 1.5, births
        assert sup.alive()
    finally:
        sup.stop()


def test_watchdog_charges_the_stuck_segment_not_the_whole_batch(rig, worker, feishu, claude, r) -> None:
    """Issue 14 A9: with a command in the same batch behind a turn that always hangs, the watchdog charges the
    turn's own segment, so it is given up after DEAD_LETTER_AFTER breaks (not after CRASH_LIMIT runs); then the
    command is answered."""
    claude.fail_when("永远卡住", kind="timeout", timeout_seconds=25)
    chat = unique("oc_p2p")
    try:
        claude.set_delay(2.0)  # the first turn holds the route: the next two messages are taken as one batch
        first = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="先来一轮")
        wait_for(lambda: model_requests_with(claude, "先来一轮"), 20, what="the first turn's model call")
        stuck = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="永远卡住的一轮")
        status = deliver(rig.web, feishu, chat_id=chat, chat_type="p2p", text="/status")
        feishu.wait_for(lambda: feishu.replies_to(message_id(first)), timeout=20)
        claude.set_delay(0)
        dead = wait_for(lambda: [json.loads(x) for x in r.hvals(rig.keys.dead)
                                 if message_id(stuck) in json.loads(x)["message_ids"]], 90, what="the dead letter")
        assert dead[0]["reason"].startswith("failed 3 times")  # charged by the watchdog, not worn out by crashes
        assert dead[0]["message_ids"] == [message_id(stuck)]
        feishu.wait_for(lambda: feishu.replies_to(message_id(status)), timeout=40)
    finally:
        claude.clear_fail_when("永远卡住")
        claude.set_delay(0)
