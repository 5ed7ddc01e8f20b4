"""`python -m chaos [--quick] [--only 1,5]`: run the fault-injection scenarios against the real stack, print
one Markdown row per scenario, and write chaos/results/latest.md and latest.json. Exit 1 if any failed."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from pathlib import Path

from chaos.measure import Leaks
from chaos.report import RESULTS, Result, details, table, write
from chaos.scenarios import load_all
from chaos.scenarios.base import Context, Scenario, execute
from chaos.stack import Stack


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    p.add_argument("--quick", action="store_true", help="small sizes (the versions tests/test_chaos.py runs)")
    p.add_argument("--only", default="", help="comma-separated scenario numbers, e.g. 1,4,10")
    p.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "7")))
    p.add_argument("--workers", type=int, default=8, help="WORKER_CONCURRENCY of the stack")
    p.add_argument("--out", type=Path, default=RESULTS, help="report directory")
    p.add_argument("--keep", action="store_true", help="keep the scratch directory (logs, Redis files)")
    return p.parse_args(argv)


class Suite:
    """One stack shared by the scenarios, replaced when a scenario leaves it unhealthy or asks for a fresh one."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.stack: Stack | None = None
        self.leaks: Leaks | None = None
        self.stack_starts = 0
        self.results: dict[int, Result] = {}

    def context(self) -> Context:
        if self.stack is not None and self.stack.problems():
            log(f"stack unhealthy ({self.stack.problems()}); starting a fresh one")
            self.close()
        if self.stack is None:
            t0 = time.monotonic()
            self.stack = Stack(workers=self.args.workers, keep=self.args.keep).start()
            self.leaks = Leaks(self.stack)
            self.stack_starts += 1
            log(f"stack up in {time.monotonic() - t0:.0f}s: {self.stack.dir} (profile {self.stack.profile})")
        assert self.leaks is not None
        return Context(self.stack, self.args.quick, self.args.seed, self.leaks)

    def run(self, sc: Scenario) -> Result:
        log(f"scenario {sc.num}: {sc.name} ...")
        result = execute(self.context(), sc)
        log(f"scenario {sc.num}: {'ok' if result.ok else 'FAIL'} in {result.seconds:.0f}s "
            f"{[c.name for c in result.failures()]} {result.error}")
        if sc.fresh_stack_after:
            self.close()
        self.results[sc.num] = result
        return result

    def close(self) -> None:
        if self.stack is not None:
            self.stack.close()
            self.stack = None


def log(text: str) -> None:
    print(f"[chaos {time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C, so every process is cleaned up


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _interrupt)
    scenarios = load_all()
    wanted = [int(x) for x in args.only.split(",") if x.strip()] or list(scenarios)
    suite, results, t0 = Suite(args), [], time.monotonic()
    try:
        for num in wanted:
            results.append(suite.run(scenarios[num]))
    except KeyboardInterrupt:
        log("interrupted; cleaning up")
        return 130
    finally:
        suite.close()
    wall = time.monotonic() - t0
    command = "python -m chaos" + (" --quick" if args.quick else "") + (f" --only {args.only}" if args.only else "")
    meta = {"command": command, "wall_s": round(wall, 1), "quick": args.quick, "seed": args.seed,
            "stack_starts": suite.stack_starts, "cpus": os.cpu_count(), "loadavg": os.getloadavg()}
    path = write(results, meta, args.out)
    print(table(results))
    print()
    print(details(results))
    print(f"total {wall:.0f} s, {suite.stack_starts} stack start(s); report: {path}")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
