"""Routes in parallel: time until the last answer when R routes ask at once, for N concurrent runs per queue.

Each N gets a fresh stack (chaos.stack: gunicorn, the worker supervisor with WORKER_CONCURRENCY=N, the
sweeper, embedded Redis, the emulators); the model takes `--model-seconds` per call. The baseline,
measured in the same stack, is one route asking alone; the ideal for R routes is ceil(R / N) baselines,
and the report gives measured ÷ ideal (1.0 = runs perfectly parallel up to N). Memory per run is the
PSS of a busy work-horse and of an idle RQ worker, sampled while N horses are busy.

    python -m bench.runs                       # 8/32/128 routes × N = 1/4/8/16, 3 s model (~15 min)
    python -m bench.runs --quick               # 8/32 routes × N = 1/8, 1 s model
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from chaos.load import Sender, p2p_targets
from chaos.stack import Stack

OUT = Path(__file__).resolve().parent / "results" / "runs.json"


def ask_at_once(stack: Stack, routes: int, tag: str, timeout: float) -> dict[str, Any]:
    """R routes each send one message at the same moment; seconds until every answer is stored."""
    sender = Sender(stack, threads=min(64, routes))
    targets = p2p_targets(routes, tag)
    events = [sender.event(t) for t in targets]
    start = time.time()
    for ev in events:
        sender.send(ev)
    sender.wait(timeout)
    deadline = time.monotonic() + timeout
    answered: dict[str, float] = {}
    while len(answered) < len(events) and time.monotonic() < deadline:
        for ev in events:
            if ev.token not in answered:
                replies = stack.feishu.replies_to(ev.message_id)
                if replies:
                    answered[ev.token] = int(replies[0]["create_time"]) / 1000
        time.sleep(0.05)
    sender.close()
    times = sorted(t - start for t in answered.values())
    return {"routes": routes, "answered": len(times), "last_s": round(times[-1], 3) if times else None,
            "median_s": round(statistics.median(times), 3) if times else None}


def memory_while_busy(stack: Stack, n: int, stop: threading.Event) -> dict[str, float]:
    """PSS (MB) of a busy horse and of an RQ worker, sampled while the runs are in flight."""
    samples: list[dict[str, int]] = []
    while not stop.is_set():
        mem = stack.worker_memory()
        if mem["horses"] >= max(1, n // 2):
            samples.append(mem)
        stop.wait(0.5)
    if not samples:
        return {}
    best = max(samples, key=lambda m: m["horses"])
    return {"horse_pss_mb": round(best["horses_pss"] / best["horses"] / 1024, 1),
            "worker_pss_mb": round(best["pss"] / best["processes"] / 1024, 1), "busy_horses": best["horses"]}


def _sample_into(box: dict[str, Any], stack: Stack, n: int, stop: threading.Event) -> None:
    box.update(memory_while_busy(stack, n, stop))


def run_for(n: int, route_counts: list[int], model_s: float) -> dict[str, Any]:
    with Stack(workers=n, env={"LLM_TIMEOUT_SECONDS": str(model_s * 4 + 10),
                               "RUN_BUDGET_SECONDS": "3600"}) as stack:
        stack.claude.set_delay(model_s)
        baseline = ask_at_once(stack, 1, f"b{n}", timeout=model_s * 10 + 30)["last_s"]
        rows = []
        for routes in route_counts:
            stop = threading.Event()
            box: dict[str, Any] = {}
            sampler = threading.Thread(target=_sample_into, args=(box, stack, n, stop), daemon=True)
            sampler.start()
            row = ask_at_once(stack, routes, f"r{n}x{routes}", timeout=math.ceil(routes / n) * model_s * 4 + 60)
            stop.set()
            sampler.join()
            ideal = math.ceil(routes / n) * baseline
            row.update(workers=n, baseline_s=baseline, ideal_s=round(ideal, 3),
                       ratio=round(row["last_s"] / ideal, 3) if row["last_s"] else None, **box)
            rows.append(row)
            print(json.dumps(row), flush=True)
        return {"workers": n, "baseline_s": baseline, "rows": rows}


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| N runs | routes | last answer (s) | ideal ceil(R/N)×baseline (s) | measured ÷ ideal | "
             "busy horse PSS (MB) | RQ worker PSS (MB) |", "|---|---|---|---|---|---|---|"]
    for res in results:
        for row in res["rows"]:
            lines.append(f"| {row['workers']} | {row['routes']} | {row['last_s']} | {row['ideal_s']} | {row['ratio']} "
                         f"| {row.get('horse_pss_mb', '–')} | {row.get('worker_pss_mb', '–')} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", default="8,32,128")
    parser.add_argument("--workers", default="1,4,8,16")
    parser.add_argument("--model-seconds", type=float, default=3.0)
    parser.add_argument("--quick", action="store_true", help="8/32 routes, N = 1/8, 1 s model")
    args = parser.parse_args(argv)
    if args.quick:
        args.routes, args.workers, args.model_seconds = "8,32", "1,8", 1.0
    routes = [int(x) for x in args.routes.split(",")]
    results = [run_for(int(n), routes, args.model_seconds) for n in args.workers.split(",")]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps({"model_seconds": args.model_seconds, "results": results}, indent=2))
    print(table(results))
    print(f"\nfull report: {OUT}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
