"""Redis memory per route: what an active route keeps after 1, 10, 100 and 1,000 turns.

Each route asks its next question only after the previous answer arrived, so every message is one turn.
Per-route keys are counted with MEMORY USAGE (the transcript, bounded by TRANSCRIPT_TURNS, apart); the
per-profile dedupe markers (two per message, expiring after 24 h) are reported separately. The ratio is
the transcript's size after N turns ÷ its size after 100 turns, measured in the same run (its cap,
TRANSCRIPT_TURNS=20, is reached after 20 turns): bounded state stays at 1 whatever N is.

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
from memory.keys import route_tag

OUT = Path(__file__).resolve().parent / "results" / "state.json"
CHECKPOINTS = (1, 10, 100, 1000)


def route_bytes(stack: Stack, rk: str) -> dict[str, int]:
    """MEMORY USAGE of every key of one route, split into transcript and the rest."""
    r, tag = stack.r, route_tag(rk)
    out = {"transcript": 0, "other": 0, "keys": 0}
    for key in r.scan_iter(f"{stack.keys.prefix}:*{{{tag}}}*", count=1000):
        size = int(r.memory_usage(key, samples=0) or 0)
        out["transcript" if ":transcript:" in key else "other"] += size
        out["keys"] += 1
    return out


def profile_bytes(stack: Stack, pattern: str) -> int:
    return sum(int(stack.r.memory_usage(k, samples=0) or 0)
               for k in stack.r.scan_iter(f"{stack.keys.prefix}:{pattern}", count=1000))


def converse(stack: Stack, sender: Sender, target: Any, turns: int, marks: dict[int, dict[str, int]]) -> None:
    for turn in range(1, turns + 1):
        ev = sender.event(target)
        sender.send(ev)
        deadline = time.monotonic() + 60
        while not stack.feishu.replies_to(ev.message_id):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer for turn {turn} of {ev.route}")
            time.sleep(0.01)
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
    args = parser.parse_args(argv)
    with Stack(workers=8) as stack:
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
                  "transcript_turns": 20, "per_route": marks, "dedupe_marker_bytes": seen,
                  "messages": len(sender.events)}
        sender.close()
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(report, indent=2))
    print(table(report))
    return 0


def table(report: dict[str, Any]) -> str:
    lines = ["| turns | keys per route | bytes per route besides the transcript | transcript bytes | "
             "transcript ÷ at 100 turns |", "|---|---|---|---|---|"]
    marks = report["per_route"]
    cap = max(m[min(100, report["turns"])]["transcript"] for m in marks)
    for turn in [c for c in CHECKPOINTS if c <= report["turns"]]:
        transcript = max(m[turn]["transcript"] for m in marks)
        lines.append(f"| {turn} | {max(m[turn]['keys'] for m in marks)} | {max(m[turn]['other'] for m in marks)} | "
                     f"{transcript} | {transcript / cap:.2f} |")
    per_message = report["dedupe_marker_bytes"] / max(1, report["messages"])
    lines.append(f"\nDedupe markers (per profile, expire after 24 h): {report['dedupe_marker_bytes']} bytes for "
                 f"{report['messages']} messages = {per_message:.0f} bytes per message. "
                 f"{report['routes']} routes × {report['turns']} turns took {report['seconds']} s.")
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
