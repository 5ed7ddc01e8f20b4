"""Elastic worker pool: time to the last answer ÷ one turn when R routes ask at once, fixed pool vs elastic,
and memory (PSS) per in-flight run with and without gc.freeze().

Each configuration gets a fresh production-like stack (chaos.stack: gunicorn, the worker supervisor, the
sweeper, embedded Redis, the emulators); the model stand-in takes `--model-seconds` per call.

- fixed: WORKER_CONCURRENCY=8 (the old default); R routes need about ceil(R / 8) turns.
- elastic: WORKER_MIN=2, WORKER_MAX = the largest R; every burst starts cold (the pool back at WORKER_MIN),
  so the ratio includes growing the pool. Ideal: 1.0 (every route runs at once).

The baseline is one route asking alone in the same stack. Memory: the PSS of the whole worker tree (the
supervisor, its RQ workers and their work-horses; /proc/<pid>/smaps_rollup) sampled while the runs are in
flight, minus the tree's PSS when idle, ÷ the number of runs in flight (busy horses). For the elastic pool
that includes the extra RQ worker each run needed. `WORKER_GC_FREEZE=0` turns the supervisor's and the
workers' gc.freeze() off for the comparison.

    python -m bench.elastic              # 8/64/256 routes, 30 s model, fixed and elastic (~25 min)
    python -m bench.elastic --quick      # 8/64 routes, 5 s model (~4 min)
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

from bench.runs import ask_at_once
from chaos.procs import children, memory_kb, proc_table
from chaos.stack import Stack

OUT = Path(__file__).resolve().parent / "results" / "elastic.json"
FIXED = 8
ELASTIC_MIN = 2


def tree(root: int) -> list[int]:
    table = proc_table()
    found, frontier = [root], [root]
    while frontier:
        frontier = [pid for parent in frontier for pid in children(parent, table)]
        found += frontier
    return found


def tree_pss_kb(stack: Stack) -> int:
    return sum(memory_kb(pid)["pss"] for pid in tree(stack.services["worker"].pid))


def sample_peak(stack: Stack, stop: threading.Event, box: dict[str, Any]) -> None:
    """The tree's PSS at the moment the most runs were in flight (most busy horses)."""
    best = (0, 0)
    while not stop.is_set():
        horses = len(stack.horses())
        if horses >= best[0] and horses:
            best = (horses, tree_pss_kb(stack))
        stop.wait(0.5)
    box.update(in_flight=best[0], busy_pss_kb=best[1])


def make_stack(mode: str, most_routes: int, model_s: float, freeze: bool) -> Stack:
    env = {"LLM_TIMEOUT_SECONDS": str(model_s * 4 + 10), "RUN_BUDGET_SECONDS": "3600", "RUN_LEASE_SECONDS": "10",
           "WORKER_GC_FREEZE": "1" if freeze else "0"}
    if mode == "fixed":
        return Stack(workers=FIXED, env=env)
    # WORKER_IDLE_SECONDS stays at its default (30 s): the shrink back to WORKER_MIN is measured as users get it
    env.update(WORKER_MIN=str(ELASTIC_MIN), WORKER_MAX=str(max(most_routes, ELASTIC_MIN)))
    return Stack(workers=ELASTIC_MIN, env=env)


def settle(stack: Stack, timeout: float = 120.0) -> float | None:
    """Wait until the pool is back at its core size and no horse runs (each burst starts cold); the seconds it
    took, None if it did not within `timeout`."""
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        if len(stack.rq_workers()) <= stack.concurrency and not stack.horses():
            took = time.monotonic() - started
            time.sleep(1.0)
            return round(took, 1)
        time.sleep(0.5)
    return None


def run_mode(mode: str, routes: list[int], model_s: float, freeze: bool = True) -> dict[str, Any]:
    with make_stack(mode, max(routes), model_s, freeze) as stack:
        if mode == "elastic":  # Stack always sets WORKER_CONCURRENCY: restart the supervisor with it empty (unset)
            stack.reconfigure(("worker",), WORKER_CONCURRENCY="")
        stack.claude.set_delay(model_s)
        settle(stack)
        baseline = ask_at_once(stack, 1, f"b{mode}", timeout=model_s * 10 + 30)["last_s"]
        rows = []
        for n in routes:
            settle(stack)
            idle_kb = tree_pss_kb(stack)
            stop, box = threading.Event(), dict[str, Any]()
            sampler = threading.Thread(target=sample_peak, args=(stack, stop, box), daemon=True)
            sampler.start()
            turns = -(-n // FIXED) if mode == "fixed" else 1
            row = ask_at_once(stack, n, f"{mode[0]}{n}{int(freeze)}", timeout=turns * model_s * 3 + 120)
            stop.set()
            sampler.join()
            per_run = (box["busy_pss_kb"] - idle_kb) / box["in_flight"] / 1024 if box.get("in_flight") else None
            row.update(mode=mode, gc_freeze=freeze, baseline_s=baseline,
                       ratio=round(row["last_s"] / baseline, 3) if row["last_s"] and baseline else None,
                       idle_tree_pss_mb=round(idle_kb / 1024, 1), in_flight=box.get("in_flight", 0),
                       busy_tree_pss_mb=round(box.get("busy_pss_kb", 0) / 1024, 1),
                       pss_per_run_mb=round(per_run, 1) if per_run is not None else None)
            row["shrink_s"] = settle(stack) if mode == "elastic" else None  # last answer → back at WORKER_MIN
            rows.append(row)
            print(json.dumps(row), flush=True)
        return {"mode": mode, "gc_freeze": freeze, "baseline_s": baseline, "rows": rows}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| pool | gc.freeze | routes | one turn (s) | last answer (s) | last ÷ one turn | runs in flight | "
             "PSS per in-flight run (MB) | back to WORKER_MIN (s) |", "|---|---|---|---|---|---|---|---|---|"]
    for res in results:
        pool = f"fixed {FIXED}" if res["mode"] == "fixed" else "elastic"
        for row in res["rows"]:
            lines.append(f"| {pool} | {'on' if row['gc_freeze'] else 'off'} | {row['routes']} | {row['baseline_s']} "
                         f"| {row['last_s']} | {row['ratio']} | {row['in_flight']} | {row['pss_per_run_mb']} "
                         f"| {row.get('shrink_s') if row.get('shrink_s') is not None else '–'} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="8,64,256")
    parser.add_argument("--model-seconds", type=float, default=30.0)
    parser.add_argument("--modes", default="fixed,elastic")
    parser.add_argument("--pss-routes", type=int, default=64, help="routes for the gc.freeze off comparison")
    parser.add_argument("--quick", action="store_true", help="8/64 routes, 5 s model")
    args = parser.parse_args(argv)
    if args.quick:
        args.routes, args.model_seconds = "8,64", 5.0
    routes = [int(x) for x in args.routes.split(",")]
    results = [run_mode(mode, routes, args.model_seconds) for mode in args.modes.split(",")]
    if args.pss_routes:
        results.append(run_mode("elastic", [args.pss_routes], args.model_seconds, freeze=False))
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model_seconds": args.model_seconds, "results": results}, indent=2))
    print(table(results))
    print(f"\nfull report: {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
