"""Redis memory per route: what an active route keeps after 1, 10, 100 and 1,000 turns.

Each route asks its next question only after the previous answer arrived, so every message is one turn.
Per-route keys are counted with MEMORY USAGE, session state (the route pointer, session records, the
current and ended sessions' logs) apart from everything else; the per-profile dedupe markers (two per
message, expiring after 24 h) are reported separately. Session state is bounded by configuration: the
current log by CONTEXT_BUDGET_TOKENS (rotation), ended sessions by KEEP_ENDED and SESSION_RETENTION_DAYS.
A small budget (--budget, default 3,000) makes the routes rotate every few turns, so the bound is reached
within the run; the ratio is session state after N turns ÷ after the last checkpoint before it.

    python -m bench.state                  # 4 routes × 1,000 turns, instant model (~3–5 min)
    python -m bench.state --turns 200      # shorter
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from pathlib import Path
from typing import Any

from chaos.load import Sender, p2p_targets
from chaos.stack import Stack
from core.keys import route_tag

OUT = Path(__file__).resolve().parent / "results" / "state.json"
CHECKPOINTS = (1, 10, 100, 500, 1000)
SESSION_KINDS = ("route", "sess", "log")


def route_bytes(stack: Stack, rk: str) -> dict[str, int]:
    """MEMORY USAGE of every key of one route, split into session state and the rest."""
    r, tag = stack.r, route_tag(rk)
    out = {"session": 0, "other": 0, "keys": 0, "sessions": 0}
    for key in r.scan_iter(f"{stack.keys.prefix}:*{{{tag}}}*", count=1000):
        size = int(r.memory_usage(key, samples=0) or 0)
        out["session" if any(f":{kind}:" in key for kind in SESSION_KINDS) else "other"] += size
        out["keys"] += 1
    out["sessions"] = sum(1 for f in r.hkeys(stack.keys.sessions(rk)) if "#" not in str(f))
    return out


def profile_bytes(stack: Stack, pattern: str) -> int:
    return sum(int(stack.r.memory_usage(k, samples=0) or 0)
               for k in stack.r.scan_iter(f"{stack.keys.prefix}:{pattern}", count=1000))


def converse(stack: Stack, sender: Sender, target: Any, turns: int, marks: dict[int, dict[str, int]]) -> None:
    for turn in range(1, turns + 1):
        ev = sender.event(target)
        sender.ask(ev, stack.feishu.replies_to)
        if turn in CHECKPOINTS:
            _wait_idle(stack, ev.route)
            marks[turn] = route_bytes(stack, ev.route)


def _wait_idle(stack: Stack, rk: str) -> None:
    k = stack.keys
    while stack.r.exists(k.lease(rk)) or stack.r.llen(k.proc(rk)) or stack.r.llen(k.inbox(rk)):
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--routes", type=int, default=4)
    parser.add_argument("--turns", type=int, default=1000)
    parser.add_argument("--budget", type=int, default=7000, help="CONTEXT_BUDGET_TOKENS (small: rotate often)")
    args = parser.parse_args(argv)
    with Stack(workers=8, env={"CONTEXT_BUDGET_TOKENS": str(args.budget), "MAX_OUTPUT_TOKENS": "512"}) as stack:
        sender = Sender(stack, threads=args.routes)
        marks: list[dict[int, dict[str, int]]] = [{} for _ in range(args.routes)]
        threads = [threading.Thread(target=converse, args=(stack, sender, t, args.turns, marks[i]))
                   for i, t in enumerate(p2p_targets(args.routes, "st"))]
        started = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        seen = profile_bytes(stack, "seen:*")
        report = {"routes": args.routes, "turns": args.turns, "seconds": round(time.monotonic() - started, 1),
                  "budget": args.budget, "per_route": marks, "dedupe_marker_bytes": seen,
                  "messages": len(sender.events)}
        sender.close()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print(table(report))
    return 0


def table(report: dict[str, Any]) -> str:
    lines = ["| turns | keys per route | sessions kept | bytes besides session state | session state bytes | "
             "÷ previous checkpoint |", "|---|---|---|---|---|---|"]
    marks = report["per_route"]
    previous = None
    for turn in [c for c in CHECKPOINTS if c <= report["turns"]]:
        state = max(m[turn]["session"] for m in marks)
        ratio = f"{state / previous:.2f}" if previous else "–"
        lines.append(f"| {turn} | {max(m[turn]['keys'] for m in marks)} | {max(m[turn]['sessions'] for m in marks)} | "
                     f"{max(m[turn]['other'] for m in marks)} | {state} | {ratio} |")
        previous = state
    per_message = report["dedupe_marker_bytes"] / max(1, report["messages"])
    lines.append(f"\nDedupe markers (per profile, expire after 24 h): {report['dedupe_marker_bytes']} bytes for "
                 f"{report['messages']} messages = {per_message:.0f} bytes per message. "
                 f"{report['routes']} routes × {report['turns']} turns took {report['seconds']} s.")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
