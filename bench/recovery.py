"""Recovery after SIGKILL: from killing the worker processes that run a route mid-turn until its successor run starts
the turn again (the model stand-in receives the batch's request again), p50/p99 over `--kills` kills.

The production settings (a 6 s run lease renewed every 2 s, the sweeper's recovery pass every second, a full sweep
every 15 s: the service's defaults) against the old ones, measured in the same run on the same stack: a 30 s
lease, the recovery pass effectively off (RECOVERY_CHECK_SECONDS=10, its largest value) and a 15 s sweep. Each
round, `--routes` routes ask, each at a random moment within 10 s (the old lease's renewal interval, so each
route dies at its own phase of its renewals); once all are inside their model call (15 s), a random 0.5-4 s later,
every busy work-horse and its RQ worker is SIGKILLed at once (the supervisor stays and starts new RQ workers).
The report gives p50 and p99 per setting and the ratio new ÷ old.

    python -m bench.recovery                 # 20 kills per setting, 4 routes a round (~10 min)
    python -m bench.recovery --kills 8       # a quicker look
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import time
from pathlib import Path
from typing import Any

from chaos.load import Sender, p2p_targets
from chaos.measure import wait_idle
from chaos.report import percentile
from chaos.stack import Stack

OUT = Path(__file__).resolve().parent / "results" / "recovery.json"
MODEL_S = 15.0  # long enough that routes asking up to STAGGER_S apart are all inside their call at the kill
STAGGER_S = 10.0  # the old lease's renewal interval: each route is killed at its own phase of the renewals
RECOVERY_VARS = ("RUN_LEASE_SECONDS", "RECOVERY_CHECK_SECONDS", "SWEEP_INTERVAL_SECONDS")
SETTINGS: dict[str, dict[str, str]] = {
    "new": {},  # the service's defaults
    "old": {"RUN_LEASE_SECONDS": "30", "RECOVERY_CHECK_SECONDS": "10", "SWEEP_INTERVAL_SECONDS": "15"},
}


def in_calls(stack: Stack, cursor: int, tokens: set[str]) -> set[str]:
    """Our tokens whose model call is being answered right now."""
    return {t for e in stack.claude.timeline_since(cursor) if e["end"] is None
            for t in tokens if t in (e["last_user"] or "")}


def one_round(stack: Stack, sender: Sender, tag: str, routes: int, rng: random.Random) -> list[float]:
    """`routes` routes ask, each at a random moment within STAGGER_S; once all are inside their model call, a
    random 0.5-4 s later, every busy horse and its RQ worker are SIGKILLed at once; seconds until each route's
    model call starts again."""
    cursor = len(stack.claude.timeline_since(0))
    events = [sender.event(t) for t in p2p_targets(routes, tag)]
    now = time.monotonic()
    for ev in events:
        sender.send(ev, now + rng.uniform(0.0, STAGGER_S))
    tokens = {ev.token for ev in events}
    deadline = time.monotonic() + STAGGER_S + 60
    while in_calls(stack, cursor, tokens) != tokens:
        if time.monotonic() > deadline:
            raise RuntimeError(f"only {len(in_calls(stack, cursor, tokens))}/{routes} routes reached the model")
        time.sleep(0.05)
    time.sleep(rng.uniform(0.5, 4.0))
    victims = sorted({pid for pair in stack.horses() for pid in pair})
    killed_at = time.time()
    stack.kill(victims)
    again: dict[str, float] = {}
    deadline = time.monotonic() + 120
    while len(again) < len(tokens) and time.monotonic() < deadline:
        for e in stack.claude.timeline_since(cursor):
            for t in tokens - set(again):
                if e["start"] > killed_at and t in (e["last_user"] or ""):
                    again[t] = e["start"] - killed_at
        time.sleep(0.05)
    answered = time.monotonic() + 60
    while not all(stack.feishu.replies_to(ev.message_id) for ev in events) and time.monotonic() < answered:
        time.sleep(0.1)
    if wait_idle(stack, {ev.route for ev in events}, 60):
        raise RuntimeError("routes not idle 60 s after the round")
    ready = time.monotonic() + 60
    while stack.problems() and time.monotonic() < ready:  # the supervisor has replaced the killed RQ workers
        time.sleep(0.2)
    missing = len(tokens) - len(again)
    if missing:
        raise RuntimeError(f"{missing} routes never started their turn again")
    return [round(x, 3) for x in again.values()]


def measure(stack: Stack, name: str, kills: int, routes: int, seed: int) -> dict[str, Any]:
    took = stack.reconfigure(("worker", "sweeper"), 300.0, RECOVERY_VARS, **SETTINGS[name])
    rng = random.Random(seed)
    sender = Sender(stack, threads=routes)
    samples: list[float] = []
    try:
        for n in range(math.ceil(kills / routes)):
            samples += one_round(stack, sender, f"{name}{n}", routes, rng)
            print(f"  {name}: round {n + 1}, {len(samples)} kills, last {samples[-routes:]}", flush=True)
    finally:
        sender.close()
    samples = samples[:kills]
    return {"setting": name, "env": SETTINGS[name] or "defaults", "restart_s": round(took, 1), "kills": len(samples),
            "p50_s": round(statistics.median(samples), 2), "p99_s": percentile(samples, 0.99),
            "min_s": min(samples), "samples": samples}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--routes", type=int, default=4, help="routes killed per round (≤ 8 workers)")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args(argv)
    env = {"LLM_TIMEOUT_SECONDS": str(MODEL_S * 4), "RUN_BUDGET_SECONDS": "600"}
    with Stack(workers=8, env=env) as stack:
        stack.claude.set_delay(MODEL_S)
        rows = [measure(stack, name, args.kills, args.routes, args.seed) for name in ("new", "old")]
    new, old = rows
    report = {"model_s": MODEL_S, "rows": rows, "p50_ratio": round(new["p50_s"] / old["p50_s"], 3),
              "p99_ratio": round(new["p99_s"] / old["p99_s"], 3)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print("| setting | kills | p50 s | p99 s | min s |\n|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['setting']} {row['env']} | {row['kills']} | {row['p50_s']} | {row['p99_s']} | {row['min_s']} |")
    print(f"new ÷ old: p50 {report['p50_ratio']}, p99 {report['p99_ratio']}\nfull report: {OUT}")
    return 0 if new["p99_s"] < old["p50_s"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
