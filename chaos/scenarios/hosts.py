"""Scenarios 14 and 15 (issue 16): every worker process of a host SIGKILLed mid-turn under the production
recovery settings, and two whole hosts on one Redis with one of them SIGKILLed mid-load. Scenario 20 (issue 32):
a host's worker supervisor SIGKILLed alone, its RQ workers and horses ending with it."""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import threading
import time
from collections.abc import Iterator
from typing import Any

from chaos.load import Event, p2p_targets
from chaos.measure import Acquire, Acquires
from chaos.procs import session_members, signal_pids
from chaos.report import Result, percentile
from chaos.scenarios.base import Context, scenario
from chaos.scenarios.crashes import in_model_calls, route_of, wait_workers
from chaos.stack import Stack
from core.settings import Settings
from runs.queues import job_id
from sandbox.claude.faults import overlaps

# The chaos stack shortens these; unset, the service's own defaults apply (what users get): a 6 s run lease
# renewed every 2 s, a recovery pass every second, a full sweep every 15 s.
RECOVERY_SETTINGS = ("RUN_LEASE_SECONDS", "RECOVERY_CHECK_SECONDS", "SWEEP_INTERVAL_SECONDS")
SERVICES = ("worker", "sweeper")
RECOVERY_LIMIT_S = 10.0  # acceptance: the answer arrives ≤ 10 s after the kill plus one turn


def default(name: str) -> Any:
    return Settings.model_fields[name].default


@contextlib.contextmanager
def configured(stack: Stack, unset: tuple[str, ...] = (), **env: str) -> Iterator[float]:
    """Worker supervisor and sweeper restarted with `env` and without `unset`; put back as they were afterwards
    (yields the seconds the restart took)."""
    before = {k: stack.env.get(k) for k in (*unset, *env)}
    took = stack.reconfigure(SERVICES, 300.0, unset, **env)
    try:
        yield took
    finally:
        stack.reconfigure(SERVICES, 300.0, tuple(k for k, v in before.items() if v is None),
                          **{k: v for k, v in before.items() if v is not None})


def answer_times(stack: Stack, cursor: int, tokens: set[str]) -> dict[str, float]:
    """token → when the first bot message carrying it was stored (the emulator's create_time, seconds)."""
    from chaos.measure import reply_text

    out: dict[str, float] = {}
    for m in stack.feishu.feed(cursor)[0]:
        text = reply_text(m)
        for tok in tokens:
            if tok not in out and tok in text:
                out[tok] = int(m["create_time"]) / 1000
    return out


def wait_answers(stack: Stack, cursor: int, tokens: set[str], timeout: float) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while len(found := answer_times(stack, cursor, tokens)) < len(tokens) and time.monotonic() < deadline:
        time.sleep(0.1)
    return found


def restarts(stack: Stack, cursor: int, tokens: dict[str, Event], after: float) -> dict[str, float]:
    """route → when its first model call after `after` started (the successor run starting the turn again)."""
    key = route_of(tokens)
    out: dict[str, float] = {}
    for e in stack.claude.timeline_since(cursor):
        rk = key(e)
        if rk is not None and e["start"] >= after and rk not in out:
            out[rk] = e["start"]
    return out


def fmt(values: list[float]) -> str:
    return "–" if not values else (f"p50 {statistics.median(values):.1f} s, max {max(values):.1f} s "
                                   f"(n={len(values)})")


def kill_round(ctx: Context, result: Result, run: Any, label: str, turn_s: float, supervisor: bool,
               model_cursor: int, feed_cursor: int) -> dict[str, Any]:
    """Every route asks; once all are inside their model call, SIGKILL every RQ worker and work-horse of the host
    at once (with `supervisor`, the supervisor too, restarted at once like a process manager would); a follow-up
    per route a second later. Per route: answer − kill − one turn."""
    stack = ctx.stack
    targets = sorted({e.target for e in run.sender.events}, key=lambda t: t.chat_id)
    wave = [run.sender.event(t) for t in targets]
    for e in wave:
        run.sender.send(e)
    tokens = {e.token for e in wave}
    deadline = time.monotonic() + 60
    while in_model_calls(stack, model_cursor, tokens) < len(wave) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(ctx.rng.uniform(0.5, 3.0))  # somewhere inside the turn, at a random phase of the lease renewals
    busy = len(stack.horses())
    worker = stack.services["worker"]
    log_from = worker.log_path.stat().st_size
    if supervisor:
        kill_at = time.time()
        worker.kill()  # SIGSTOP the supervisor, SIGKILL its whole session: RQ workers, horses, the supervisor
        time.sleep(0.1)  # systemd's Restart=always (RestartSec 100 ms)
        worker.start()
        killed = -1
    else:
        victims = stack.hosts[0].worker_processes()  # RQ workers, busy horses, any orphan: all at once
        kill_at = time.time()
        killed = len(signal_pids(victims, 9))
    time.sleep(1.0)
    for t in targets:
        run.sender.send(run.sender.event(t, text="追问"))
    answered = wait_answers(stack, feed_cursor, tokens, timeout=90)
    restarted = restarts(stack, model_cursor, {e.token: e for e in wave}, kill_at)
    late = {e.route: round(answered[e.token] - kill_at - turn_s, 2) for e in wave if e.token in answered}
    again = [restarted[e.route] - kill_at for e in wave if e.route in restarted]
    what = "supervisor, RQ workers and horses" if supervisor else f"{killed} RQ workers and horses"
    wait_workers(ctx, result, timeout=120)
    up = pool_started(worker.log_path, log_from)  # a restarted supervisor: its RQ workers serve from here
    boot = round(up - kill_at, 1) if supervisor and up else None
    # A cold start of the worker service (imports, warm-up, forks) cannot be recovered from faster than it
    # takes: with the supervisor killed too, the bound is the later of 10 s and its workers serving + 2 s.
    limit = max(RECOVERY_LIMIT_S, (boot or 0.0) + 2.0)
    over = {rk: v for rk, v in late.items() if v > limit}
    bound = (f"≤ max({RECOVERY_LIMIT_S:g} s, the supervisor's cold start + 2 s)" if supervisor
             else f"≤ {RECOVERY_LIMIT_S:g} s")
    result.check(f"{label}: every route answered {bound} after the kill plus one turn",
                 len(late) == len(wave) and not over,
                 f"{len(late)}/{len(wave)} answered; limit {limit:g} s; over it: {over}")
    result.notes.append(f"{label}: {what} SIGKILLed with {busy} routes mid-turn; answer − kill − turn: "
                        f"{fmt(list(late.values()))}; successor's model call started after the kill: {fmt(again)}"
                        + (f"; the restarted supervisor's workers served {boot} s after the kill" if supervisor
                           else ""))
    return {"label": label, "busy": busy, "killed": killed, "answer_minus_kill_minus_turn_s": late,
            "model_call_again_s": [round(x, 2) for x in again], "cold_start_s": boot}


def pool_started(log: Any, offset: int) -> float | None:
    """When a restarted worker supervisor's RQ workers serve (after `offset`): its "worker pool started" line,
    else the last RQ worker's "started with PID" line."""
    import json

    with open(log, "rb") as f:
        f.seek(offset)
        lines = f.read().decode("utf-8", "replace").splitlines()
    stamps: dict[str, list[float]] = {"pool": [], "rq": []}
    for line in lines:
        kind = "pool" if "worker pool started" in line else "rq" if "started with PID" in line else ""
        if kind:
            with contextlib.suppress(ValueError, KeyError):
                stamps[kind].append(float(json.loads(line)["ts"]))
    return stamps["pool"][0] if stamps["pool"] else max(stamps["rq"], default=None)


@scenario(14, "every worker process of a host SIGKILLed mid-turn (production lease and recovery pass)")
def host_workers_killed(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    routes, model_s = ctx.size(4, 8), 8.0
    lease, check = default("run_lease_seconds"), default("recovery_check_seconds")
    result.size = f"{routes} routes mid-turn, model {model_s:g} s, lease {lease:g} s, recovery pass {check:g} s"
    env = {"LLM_TIMEOUT_SECONDS": str(model_s * 3), "RUN_BUDGET_SECONDS": "120"}
    with configured(stack, unset=RECOVERY_SETTINGS, **env) as took:
        stack.claude.set_delay(model_s)
        run = ctx.run(result)
        acquires = Acquires(stack)
        try:
            targets = p2p_targets(routes, "s14")
            feed_cursor, model_cursor = run.feed_cursor, run.model_cursor
            # One turn, measured in this run: every route asks at once, nothing killed.
            warm = [run.sender.event(t) for t in targets]
            for e in warm:
                run.sender.send(e)
            answered = wait_answers(stack, feed_cursor, {e.token for e in warm}, timeout=60)
            run.sender.wait(10)
            turns = [answered[e.token] - e.accepted_at for e in warm if e.token in answered and e.accepted_at]
            turn_s = statistics.median(turns) if turns else model_s
            result.check("a turn measured", len(turns) == len(warm), f"{len(turns)}/{len(warm)} answered")
            run.barrier("turn measured")
            rounds = [kill_round(ctx, result, run, "workers and horses", turn_s, False, model_cursor, feed_cursor)]
            run.barrier("round 1")
            rounds.append(kill_round(ctx, result, run, "supervisor too, restarted", turn_s, True, model_cursor,
                                     feed_cursor))
            run.settle(idle_timeout=60)
            run.finish()
            twice = Acquires.twice(acquires.stop())
            result.notes.append(f"one turn (accepted → answered, every route at once): {fmt(turns)}; "
                                f"worker and sweeper restarted with the production settings in {took:.0f} s")
            result.notes.append(f"kick tokens that started more than one run (RQ retrying the job of a killed "
                                f"horse is one): {len(twice)}")
            result.extra.update(turn_s=turn_s, rounds=rounds, lease_s=lease, recovery_check_s=check)
        finally:
            with contextlib.suppress(Exception):
                acquires.stop()
            run.close()


def jobs_on(stack: Stack, host_index: int) -> set[str]:
    """The RQ jobs a host's workers are running now."""
    import redis
    from rq import Worker

    live = set(stack.hosts[host_index].rq_workers())
    conn = redis.Redis.from_url(stack.redis_url)
    try:
        return {str(j) for w in Worker.all(connection=conn) if w.pid in live and (j := w.get_current_job_id())}
    finally:
        conn.close()


def runs_on(stack: Stack, host_index: int) -> dict[str, str]:
    """route → execution id of every run a host's work-horses are in now: the runs registered in `runinfo` whose
    RQ job is the current job of one of the host's RQ workers (a chained route runs under its horse's job)."""
    import json

    import redis
    from rq import Worker

    live = set(stack.hosts[host_index].rq_workers())
    conn = redis.Redis.from_url(stack.redis_url)
    try:
        jobs = {w.get_current_job_id() for w in Worker.all(connection=conn) if w.pid in live} - {None}
    finally:
        conn.close()
    out = {}
    for rk, raw in stack.r.hgetall(stack.keys.runinfo).items():
        info = json.loads(raw)
        if info.get("job_id") in jobs:
            out[str(rk)] = str(info["exec_id"])
    return out


class HostKiller(threading.Thread):
    """SIGKILLs host 1 whole after `after` seconds; notes the runs its horses were in just before."""

    def __init__(self, stack: Stack, after: float) -> None:
        super().__init__(daemon=True, name="chaos-host-killer")
        self.stack, self.after = stack, after
        self.killed_at: float | None = None
        self.dying: dict[str, str] = {}  # route → execution id of the runs that died with host 1
        self.dying_jobs: set[str] = set()  # their RQ jobs (RQ re-runs a job whose horse died, with its first token)
        self.cancel = threading.Event()

    def run(self) -> None:
        if self.cancel.wait(self.after):
            return
        with contextlib.suppress(Exception):
            self.dying = runs_on(self.stack, 0)
            self.dying_jobs = jobs_on(self.stack, 0)
        self.killed_at = self.stack.hosts[0].kill()


def excused(pairs: list[tuple[int, int]], timeline: list[dict[str, Any]], key: Any, dying: set[str],
            killed_at: float) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Overlaps whose earlier call belonged to a run that died with host 1 (its route's run was on host 1 and the
    call was in flight at the kill): the stand-in went on answering a client that no longer existed, which could
    not act. The rest are real: two living runs of one route at once."""
    by_seq = {e["seq"]: e for e in timeline}
    dead: list[tuple[int, int]] = []
    real: list[tuple[int, int]] = []
    for a, b in pairs:
        first = min(by_seq[a], by_seq[b], key=lambda e: e["start"])
        was_dying = key(first) in dying and first["start"] < killed_at and (first["end"] is None
                                                                            or first["end"] > killed_at)
        (dead if was_dying else real).append((a, b))
    return dead, real


@scenario(15, "two hosts on one Redis; host 1 SIGKILLed whole mid-load", fresh_stack_after=True)
def two_hosts(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    rate, seconds, routes = ctx.size(20, 50), ctx.size(12, 60), ctx.size(20, 100)
    model_s = 2.0 if ctx.quick else 5.0
    lease = default("run_lease_seconds")
    result.size = (f"2 hosts x {stack.concurrency} workers, {rate}/s x {seconds}s / {routes} routes, model "
                   f"{model_s:g} s, host 1 killed at {seconds / 2:g} s")
    # The production lease and recovery pass; the full sweep stays at the chaos stack's 0.5 s, so the two
    # sweepers' sweeps (and KICKs) overlap as often as possible.
    took = stack.reconfigure(unset=("RUN_LEASE_SECONDS", "RECOVERY_CHECK_SECONDS"),
                             LLM_TIMEOUT_SECONDS=str(model_s * 4 + 10), RUN_BUDGET_SECONDS="120")
    started = time.monotonic()
    second = stack.add_host()
    result.notes.append(f"host 1's worker and sweeper restarted in {took:.0f} s; host 2 up in "
                        f"{time.monotonic() - started:.0f} s (port {second.port})")
    stack.claude.set_delay(model_s)
    run = ctx.run(result, threads=24, urls=[h.url for h in stack.hosts])
    acquires = Acquires(stack)
    killer = HostKiller(stack, seconds / 2)
    try:
        killer.start()
        run.sender.open_loop(p2p_targets(routes, "s15"), rate=rate, count=rate * seconds)
        run.phase("sending")
        killer.join(seconds)
        drained = run.settle(idle_timeout=ctx.size(90, 240))
        c = run.finish()
        killed_at = killer.killed_at
        found = acquires.stop()
        result.check("host 1 SIGKILLed mid-load", killed_at is not None)
        killed_at = killed_at or time.time()
        result.check("nothing of host 1 left running", not stack.hosts[0].members(),
                     f"{stack.hosts[0].members()}")
        result.check("host 2 serving at the end", not second.problems(), "; ".join(second.problems()))
        result.check("the survivor drained the backlog", drained)
        messages = run.messages()
        after = [m for m in messages if int(m["create_time"]) / 1000 > killed_at]
        result.check("answers after the kill", bool(after), f"{len(after)} bot messages after the kill")
        posts = [p for e in run.sender.events for p in e.posts]
        failed_h1 = sum(1 for p in posts if p.host == 0 and p.status != 200 and p.at >= killed_at - 1)
        served = [sum(1 for p in posts if p.host == h and p.status == 200) for h in range(2)]
        # Duplicate dispatch: a kick token that started runs under two execution ids. Before the kill nothing
        # may; after it only RQ's own retry of a job whose horse died with host 1 (the same job, a new run).
        twice = Acquires.twice(found)
        before = {t: runs for t, runs in twice.items() if min(a.at for a in runs) < killed_at
                  and max(a.at for a in runs) < killed_at}
        result.check("no kick dispatched twice while both sweepers ran", not before,
                     f"{len(before)} tokens: {list(before)[:3]}")
        dying = set(killer.dying.values())
        # A horse that died while chaining a second route leaves its job's FIRST token to be re-run by RQ: that
        # token's first run finished before the kill, under another execution id, so the job, not the run, names it.
        stray = [t for t, runs in twice.items() if t not in before and runs[0].exec_id not in dying
                 and job_id(runs[0].route, t) not in killer.dying_jobs]
        result.check("a kick started twice after the kill only for a run that died with host 1", not stray,
                     f"{len(stray)} other tokens: {stray[:3]}")
        tokens = {e.token: e for e in run.sender.events}
        timeline = [e for e in stack.claude.timeline_since(run.model_cursor) if e["fault"] != "timeout"]
        key = route_of(tokens)
        pairs = overlaps(timeline, key)
        dead, real = excused(pairs, timeline, key, set(killer.dying), killed_at)
        result.check("never two living runs of one route at once", not real, f"overlapping calls (seq): {real[:5]}")
        result.notes.append(
            f"deliveries: host 1 answered {served[0]}, host 2 {served[1]}; {failed_h1} failed on host 1 around "
            f"or after its death and were redelivered to host 2; {c.redeliveries} redeliveries in all")
        result.notes.append(
            f"runs started (ACQUIRE, by kick token and execution id, from Redis' MONITOR): {len(found)} for "
            f"{len({a.kick_token for a in found})} kick tokens; started twice: {len(twice)} "
            f"({len(twice) - len(before)} after the kill: the job of a run that died with host 1, re-run by "
            f"RQ once host 2's worker maintenance found it abandoned); {len(timeline)} model calls, "
            f"{len(dead)} overlaps with a call of a run that died with host 1 (lease {lease:g} s)")
        gaps = recovery_gaps(found, killer.dying, killed_at)
        result.notes.append(f"{len(killer.dying)} runs died with host 1; their successors took the lease "
                            f"{fmt(gaps)} after the kill (a re-kicked route waits its turn behind the backlog)")
        result.extra.update(killed_at=killed_at, served=served, twice=len(twice), twice_before_kill=len(before),
                            acquires=len(found), p99_ingest_ms=percentile(run.sender.latencies(), 0.99))
    finally:
        killer.cancel.set()
        with contextlib.suppress(Exception):
            acquires.stop()
        run.close()


def recovery_gaps(found: list[Acquire], dying: dict[str, str], killed_at: float) -> list[float]:
    """For each run that died with host 1: seconds from the kill to its route's next run taking the lease."""
    gaps = []
    for rk, exec_id in dying.items():
        later = [a.at for a in found if a.route == rk and a.at > killed_at and a.exec_id != exec_id]
        if later:
            gaps.append(round(min(later) - killed_at, 2))
    return gaps


ORPHAN_LIMIT_S = 10.0  # acceptance (issue 32): no worker or work-horse alive 10 s after the supervisor's SIGKILL


def pool_gone(sid: int, limit: float) -> tuple[float | None, list[int]]:
    """Seconds until no process of the worker session was left (None past `limit`), and what was left then."""
    started = time.monotonic()
    while (left := session_members(sid)) and time.monotonic() - started < limit:
        time.sleep(0.05)
    return (None, left) if left else (time.monotonic() - started, [])


@scenario(20, "the worker supervisor SIGKILLed alone mid-turn; its workers and horses end with it")
def supervisor_killed_alone(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    routes, model_s = ctx.size(4, 8), 30.0
    result.size = f"{routes} routes mid-turn (model {model_s:g} s), the supervisor alone SIGKILLed"
    # The model call outlasts the limit and the client waits for it: only the warm stop (or, for a step it cannot
    # interrupt, the grace's SIGKILL) ends a horse in time.
    with configured(stack, LLM_TIMEOUT_SECONDS=str(model_s * 2), RUN_BUDGET_SECONDS=str(model_s * 4)):
        stack.claude.set_delay(model_s)
        orphan_round(ctx, result, routes, model_s)


def orphan_round(ctx: Context, result: Result, routes: int, model_s: float) -> None:
    stack = ctx.stack
    run = ctx.run(result)
    model_from = len(stack.claude.requests_since(0))
    worker = stack.services["worker"]
    old = worker.pid  # its session's id: the pool's processes keep it after the supervisor is gone
    try:
        wave = [run.sender.event(t) for t in p2p_targets(routes, "s20")]
        for e in wave:
            run.sender.send(e)
        deadline = time.monotonic() + 60
        while in_model_calls(stack, model_from, {e.token for e in wave}) < routes and time.monotonic() < deadline:
            time.sleep(0.05)
        busy, pool = len(stack.horses()), len(worker.members())
        os.kill(old, signal.SIGKILL)  # the supervisor alone: its workers and their horses are not touched
        assert worker.proc is not None
        worker.proc.wait(10)
        took, left = pool_gone(old, ORPHAN_LIMIT_S)  # a model call retried after the stop still waits its 30 s
        stack.claude.set_delay(0.3)  # the successors' turns
        result.check(f"no worker or work-horse alive {ORPHAN_LIMIT_S:g} s after the supervisor's SIGKILL",
                     took is not None, f"still alive: {left}")
        result.check("horses were busy when the supervisor died", busy >= 1, f"{busy} busy horses")
        worker.start()  # the process manager's restart: one pool, not two
        wait_workers(ctx, result, timeout=120)
        run.settle(idle_timeout=60)
        run.finish()
        result.notes.append(f"supervisor SIGKILLed with {pool - 1} processes under it ({busy} busy horses, "
                            f"model {model_s:g} s); its pool gone {took:.1f} s later" if took is not None else
                            f"pool still alive {ORPHAN_LIMIT_S:g} s later: {left}")
        result.extra.update(pool_gone_s=took, busy=busy, processes=pool - 1)
    finally:
        for pid in session_members(old):  # a failed run leaves nothing of the old pool to later scenarios
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        run.close()
