"""Pipeline overhead with an instant model: event accepted → model request, and model answer → reply stored.

The whole real stack (chaos.stack) with the Claude stand-in answering at once, driven at a fixed rate
over many routes. For every model call the stand-in records when it arrived and when it answered; the
emulator records when each reply was stored; the sender records when each event got its 200. Targets
(issue): p50 accepted → model request < 150 ms, p50 model answer → reply stored < 100 ms. The ingest
latency of the same events, measured in the same run, is printed next to them as the baseline.

    python -m bench.pipeline                  # 1 event/s for 30 s, then 50 events/s for 20 s (~2 min)
"""

from __future__ import annotations

import argparse
import json
import os
import re
import time
from pathlib import Path
from typing import Any

from bench.procstat import proc_cpu
from chaos.load import Sender, p2p_targets
from chaos.procs import session_members
from chaos.report import percentile
from chaos.stack import Stack

OUT = Path(__file__).resolve().parent / "results" / "pipeline.json"
TARGET_ACCEPT_MS, TARGET_REPLY_MS = 150.0, 100.0


def cpu_by_service(stack: Stack) -> dict[str, float]:
    """CPU seconds so far of each service's processes, reaped children (the work-horses) included."""
    out = {}
    for name, service in stack.services.items():
        total = 0.0
        for pid in session_members(service.pid):
            try:
                total += proc_cpu(pid, children=True)
            except (OSError, ValueError, IndexError):
                continue
        out[name] = total
    if stack.redis_pid():
        out["redis"] = proc_cpu(stack.redis_pid() or 0)
    out["bench (load + emulators)"] = proc_cpu(os.getpid())
    return out


def phase(stack: Stack, rate: float, seconds: float, routes: int, tag: str) -> dict[str, Any]:
    sender = Sender(stack, threads=32)
    cursor = len(stack.claude.timeline)
    _, feed_cursor = stack.feishu.feed(0)
    cpu_before = cpu_by_service(stack)
    events = sender.open_loop(p2p_targets(routes, tag), rate, int(rate * seconds))
    sender.wait(60)
    token_re = re.compile(rf"k{sender.tag}n\d+")
    replies: list[dict[str, Any]] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        new, feed_cursor = stack.feishu.feed(feed_cursor)
        replies += new
        if len({t for m in replies for t in token_re.findall(m["body"]["content"])}) >= len(events):
            break
        time.sleep(0.2)
    calls = [c for c in stack.claude.timeline_since(cursor) if c["status"] == 200 and c["end"]]
    accepted = {e.token: e.accepted_at for e in events if e.accepted_at}
    call_of: dict[str, dict[str, Any]] = {}
    for call in calls:  # a batch's call carries several tokens; the first successful call of each counts
        for tok in token_re.findall(call["last_user"] or ""):
            call_of.setdefault(tok, call)
    to_model = [(call_of[t]["start"] - at) * 1000 for t, at in accepted.items() if t in call_of]
    answered, to_reply = set(), []
    for reply in replies:
        toks = token_re.findall(reply["body"]["content"])
        answered.update(toks)
        if toks and toks[-1] in call_of:
            to_reply.append(int(reply["create_time"]) - call_of[toks[-1]]["end"] * 1000)
    ingest = sender.latencies()
    sender.close()
    turns = max(1, len(calls))
    cpu = {k: round((v - cpu_before.get(k, 0.0)) * 1000 / turns, 1) for k, v in cpu_by_service(stack).items()}
    return {"rate": rate, "events": len(events), "answered": len(answered), "model_calls": len(calls),
            "events_per_turn": round(len(answered) / turns, 2),
            **_stats("accepted_to_model_ms", to_model), **_stats("answer_to_reply_ms", to_reply),
            **_stats("ingest_ms", ingest), "cpu_ms_per_turn": cpu}


def _stats(name: str, values: list[float]) -> dict[str, float | None]:
    return {f"{name}_p50": _round(percentile(values, 0.5)), f"{name}_p99": _round(percentile(values, 0.99))}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| events/s | events | answered | turns (model calls) | accepted → model request p50 / p99 (ms) | "
             "model answer → reply stored p50 / p99 (ms) | ingest p50 / p99 (ms) |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['rate']:g} | {r['events']} | {r['answered']} | {r['model_calls']} | "
                     f"{r['accepted_to_model_ms_p50']} / {r['accepted_to_model_ms_p99']} | "
                     f"{r['answer_to_reply_ms_p50']} / {r['answer_to_reply_ms_p99']} | "
                     f"{r['ingest_ms_p50']} / {r['ingest_ms_p99']} |")
    for r in rows:
        lines.append(f"\nCPU ms per turn at {r['rate']:g}/s: " + ", ".join(f"{k} {v}" for k, v in
                                                                        r["cpu_ms_per_turn"].items()))
    lines.append(f"\nTargets: p50 accepted → model request < {TARGET_ACCEPT_MS:g} ms; "
                 f"p50 model answer → reply stored < {TARGET_REPLY_MS:g} ms.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slow-seconds", type=float, default=30)
    parser.add_argument("--fast-seconds", type=float, default=20)
    parser.add_argument("--workers", type=int, default=8)
    args = parser.parse_args(argv)
    with Stack(workers=args.workers) as stack:
        phase(stack, 5, 2, 10, "warm")  # first requests pay for connections and token fetches
        rows = [phase(stack, 1, args.slow_seconds, 10, "slow"), phase(stack, 50, args.fast_seconds, 100, "fast")]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(rows, indent=2))
    print(table(rows))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
