"""`make bench`: every benchmark in turn, each reporting ratios against a baseline measured in the same run.

    python -m bench                 # ingest, hooks, pipeline, state, runs, assembly, items, render, … (~60 min)
    python -m bench pipeline state  # a selection
"""

from __future__ import annotations

import importlib
import sys
import time

ORDER = ("ingest", "hooks", "pipeline", "state", "retention", "runs", "elastic", "assembly", "items", "documents",
         "longconn", "render", "recovery", "streaming", "timers", "memory", "console")


def main(argv: list[str]) -> int:
    chosen = argv or list(ORDER)
    unknown = [name for name in chosen if name not in ORDER]
    if unknown:
        print(f"unknown benchmark(s) {unknown}; choose from {ORDER}", file=sys.stderr)
        return 2
    failed = []
    for name in chosen:
        started = time.monotonic()
        print(f"\n=== bench.{name}", flush=True)
        code = importlib.import_module(f"bench.{name}").main([])
        print(f"=== bench.{name}: exit {code} in {time.monotonic() - started:.0f} s", flush=True)
        if code:
            failed.append(name)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
