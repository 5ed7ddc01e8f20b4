"""Scenarios 1 and 2: RQ workers and work-horses SIGKILLed mid-run; orphaned horses fenced by the lease."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

from chaos.load import Event, group_targets, p2p_targets
from chaos.report import Result
from chaos.scenarios.base import Context, scenario
from chaos.stack import Stack
from sandbox.claude.faults import overlaps

KILL_KINDS = ("horse", "parent", "both")


class Killer(threading.Thread):
    """SIGKILLs a random busy slot every `every` seconds: its horse, its RQ worker (the horse lives on as an
    orphan), or both. The supervisor starts a new RQ worker in place of a dead one."""

    def __init__(self, ctx: Context, every: float, kinds: tuple[str, ...] = KILL_KINDS) -> None:
        super().__init__(daemon=True, name="chaos-killer")
        self.ctx, self.every, self.kinds = ctx, every, kinds
        self.stopped = threading.Event()
        self.kills: Counter[str] = Counter()
        self.idle_ticks = 0

    def run(self) -> None:
        while not self.stopped.wait(self.every * self.ctx.rng.uniform(0.5, 1.5)):
            busy = self.ctx.stack.horses()
            if not busy:
                self.idle_ticks += 1
                continue
            horse, parent = self.ctx.rng.choice(busy)
            kind = self.ctx.rng.choice(self.kinds)
            victims = {"horse": [horse], "parent": [parent], "both": [parent, horse]}[kind]
            if self.ctx.stack.kill(victims):
                self.kills[kind] += 1

    def stop(self) -> None:
        self.stopped.set()
        self.join(5)


def respawns(stack: Stack, since: int) -> int:
    """RQ workers the supervisor restarted (it logs one line per dead worker)."""
    text = stack.services["worker"].log_path.read_bytes()[since:].decode("utf-8", "replace")
    return text.count("starting another in")


def log_size(stack: Stack, name: str) -> int:
    return stack.services[name].log_path.stat().st_size


def wait_workers(ctx: Context, result: Result, timeout: float = 60.0) -> None:
    """The supervisor has replaced every killed RQ worker (its respawn backoff grows for a slot killed often)."""
    deadline = time.monotonic() + timeout
    while (problems := ctx.stack.problems()) and time.monotonic() < deadline:
        time.sleep(0.3)
    result.check("stack healthy again", not problems, "; ".join(problems))


@scenario(1, "workers and horses SIGKILLed at random")
def worker_kills(ctx: Context, result: Result) -> None:
    n, routes = ctx.size(60, 300), ctx.size(10, 30)
    result.size = f"{n} msgs / {routes} routes"
    ctx.stack.claude.set_delay(0.3)  # so a kill usually lands inside a model call or a reply
    targets = p2p_targets(routes - routes // 3, "s1") + group_targets(1, routes // 3, "s1")
    run = ctx.run(result, dup_rate=0.1)
    log_from = log_size(ctx.stack, "worker")
    killer = Killer(ctx, every=0.8)
    killer.start()
    try:
        run.sender.open_loop(targets, rate=ctx.size(15, 20), count=n)
        run.sender.wait(60)
        time.sleep(2)  # a few more kills while the backlog drains
        run.phase("sending under kills")
    finally:
        killer.stop()
    try:
        run.settle(idle_timeout=ctx.size(30, 60))  # a lease lasts 3 s, a sweep 0.5 s: a crashed run is redone fast
        run.finish()
        wait_workers(ctx, result)
        result.check("kills happened", sum(killer.kills.values()) >= 3, f"{dict(killer.kills)}")
        result.notes.append(f"kills: {dict(killer.kills)}; RQ workers respawned: {respawns(ctx.stack, log_from)}; "
                            f"orphaned horses seen at the end: {len(ctx.stack.orphans())}")
    finally:
        run.close()


def route_of(tokens: dict[str, Event]) -> Any:
    """Timeline key: the route of the first token the model was asked about."""
    import re

    token_re = re.compile("|".join(map(re.escape, tokens)) or "^$")

    def key(entry: dict[str, Any]) -> str | None:
        found = token_re.search(entry.get("last_user") or "")
        return tokens[found.group(0)].route if found else None

    return key


def in_model_calls(stack: Stack, cursor: int, tokens: set[str]) -> int:
    """How many of our model calls are being answered right now."""
    return sum(1 for e in stack.claude.timeline_since(cursor)
               if e["end"] is None and any(t in (e["last_user"] or "") for t in tokens))


def seen_orphaned(stack: Stack, horses: set[int], patience: float = 3.0) -> set[int]:
    """The horses seen re-parented after their RQ workers' SIGKILL. A killed process hands its children over when it
    runs its exit path, which on a loaded machine (four test workers on 2 cores) can take longer than a fixed 0.2 s:
    look again until one shows up or `patience` runs out."""
    deadline = time.monotonic() + patience
    while True:
        found = horses & set(stack.orphans())
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


@scenario(2, "RQ worker killed while its horse runs (orphan fenced)")
def orphaned_horses(ctx: Context, result: Result) -> None:
    routes, rounds = ctx.size(6, 16), ctx.size(1, 3)
    result.size = f"{routes} routes x {rounds} kill round(s)"
    stack = ctx.stack
    # The horse is inside its model call when its parent dies, and the call outlasts the lease (but not the
    # client's timeout): only the orphan's own renewals keep a second run of its route from starting beside it.
    lease, patience = float(stack.env["RUN_LEASE_SECONDS"]), float(stack.env["LLM_TIMEOUT_SECONDS"])
    assert lease + 1.0 < patience, "the stack's LLM timeout must outlast the lease by more than a second"
    stack.claude.set_delay(lease + 1.0)
    targets = p2p_targets(routes, "s2")
    run = ctx.run(result)
    model_from = len(stack.claude.requests_since(0))
    orphaned: set[int] = set()
    killed = 0
    try:
        for _ in range(rounds):
            wave = [run.sender.event(t) for t in targets]
            for e in wave:
                run.sender.send(e)
            want, deadline = min(routes, stack.concurrency) // 2, time.monotonic() + 30
            while in_model_calls(stack, model_from, {e.token for e in wave}) < want and time.monotonic() < deadline:
                time.sleep(0.05)
            busy = stack.horses()
            killed += len(stack.kill(sorted({p for _, p in busy})))  # parents only: each horse lives on, reparented
            orphaned |= seen_orphaned(stack, {h for h, _ in busy})
            for t in targets:  # more mail while the orphans run: a second run of these routes would now start
                run.sender.send(run.sender.event(t))
            run.phase("kill round")
        run.settle(idle_timeout=60)
        run.finish()
        wait_workers(ctx, result, timeout=60)
        tokens = {e.token: e for e in run.sender.events}
        timeline = [e for e in stack.claude.timeline_since(model_from) if e["fault"] != "timeout"]
        pairs = overlaps(timeline, route_of(tokens))
        result.check("horses orphaned while running", len(orphaned) >= 1,
                     f"{len(orphaned)} orphaned horses, {killed} RQ workers killed")
        result.check("never two model calls of one route at once", not pairs, f"overlapping calls (seq): {pairs[:5]}")
        result.notes.append(f"{killed} RQ workers killed while their horse ran; {len(orphaned)} horses lived on "
                            f"as orphans; {len(timeline)} model calls checked for overlap")
    finally:
        run.close()
