"""Webhook ingress benchmark (issue 33): our `POST /hooks/github` against the bare lark-oapi handler, and our own
`POST /feishu/events`, all three in one run on the same machine (bench.ingest's servers, generators and phases).

The target: the code-platform webhook's throughput ratio to the baseline at least 0.9 × our Feishu endpoint's own
ratio — i.e. hooks / feishu ≥ 0.9 (exit 1 below). Each GitHub request is a signed `check_run` completed with
failure, octokit/webhooks' published example (~14 KB) with a fresh delivery id, check id and repository per request,
so every one is stored and kicks a run of its own (as bench.ingest's fresh chat per event does).

    python -m bench.hooks                  # 3 repeats x 6 s per target and mode (~2.5 min)
    python -m bench.hooks --repeats 1 --duration 3
    python -m bench.hooks --priority -15   # on a machine shared with other work (root)
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

from bench import priority
from bench.ingest import (
    ROOT,
    Bench,
    Sample,
    _raise_interrupt,
    failed_requests,
    machine,
    parse_args,
    start,
    summarize,
)
from bench.loadgen import Phase
from bench.wrk import ratio as wrk_ratio
from sandbox.codehost import github_request

SECRET = "bench-github-secret"
FLOOR = 0.9  # hooks / feishu: the webhook keeps at least 90 % of our Feishu endpoint's throughput
EXAMPLE = ROOT / "tests" / "data" / "codehost" / "github" / "check_run.completed.payload.json"
DEFAULT_OUT = ROOT / "bench" / "results" / "hooks.json"
TARGETS = {"hooks": "ours", "feishu": "ours", "baseline": "baseline"}  # target → the server it runs against


def github_requests(phase: Phase) -> list[bytes]:
    """The GitHub check_run deliveries of one generator's pool, as raw HTTP bytes."""
    base = json.loads(EXAMPLE.read_text(encoding="utf-8"))
    base["check_run"]["conclusion"] = "failure"
    run = uuid.uuid4().hex[:8]
    out = []
    for i in range(phase.requests):
        repo = f"bench-{run}/r{i if phase.chats <= 0 else i % phase.chats}"
        base["repository"]["full_name"] = repo
        base["check_run"]["id"] = 10**9 + i
        body, headers = github_request("check_run", base, SECRET)
        head = ["POST /hooks/github HTTP/1.1", f"Host: 127.0.0.1:{phase.port}", f"Content-Length: {len(body)}",
                *(f"{k}: {v}" for k, v in headers.items())]
        if phase.connection_close:
            head.append("Connection: close")
        out.append(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    return out


@dataclass
class HooksBench(Bench):
    """bench.ingest's Bench with a third target: the same server of ours, GitHub's deliveries instead of Feishu's."""

    target: str = ""

    def phase(self, target: str, mode: str, duration: float) -> Sample:
        self.target = target
        sample = super().phase(target, mode, duration)
        sample.target = target
        if target == "hooks":  # every delivery stored kicks a run of its repository's route: a check it was stored
            sample.drain_jobs = self.store.drain_jobs()
        return sample

    def base_phase(self, port: int) -> Phase:
        phase = super().base_phase(port)
        return replace(phase, builder="bench.hooks:github_requests") if self.target == "hooks" else phase


def report(samples: list[Sample], args: argparse.Namespace, started: dict[str, Any], wall: float) -> dict[str, Any]:
    targets = {name: summarize(samples, name) for name in TARGETS}
    rps = {name: t["saturation"]["throughput_rps"] for name, t in targets.items()}

    def ratio(a: str, b: str) -> float | None:
        return wrk_ratio(rps[a], rps[b])

    hooks_vs_feishu = ratio("hooks", "feishu")
    errors = {name: failed_requests(t) for name, t in targets.items()}
    stored = [s.drain_jobs for s in samples if s.target == "hooks" and s.mode == "closed"]
    return {"targets": targets, "throughput_rps": rps, "hooks_kicks_per_phase": stored,
            "hooks_vs_baseline": ratio("hooks", "baseline"),
            "feishu_vs_baseline": ratio("feishu", "baseline"), "hooks_vs_feishu": hooks_vs_feishu,
            "errors": errors, "floor": FLOOR, "ok": passed(hooks_vs_feishu, errors),
            "payload_bytes": len(EXAMPLE.read_bytes()),
            "params": {"duration_s": args.duration, "repeats": args.repeats, "concurrency": args.concurrency,
                       "rate_rps": args.rate, "clients": args.clients, "log_level": args.log_level},
            "machine": {**started, "loadavg_1m_end": round(os.getloadavg()[0], 2)}, "wall_s": round(wall, 1)}


def passed(hooks_vs_feishu: float | None, errors: dict[str, int]) -> bool:
    """The floor held and every target answered every request (a throughput of failures measures nothing). Pure."""
    return hooks_vs_feishu is not None and hooks_vs_feishu >= FLOOR and not any(errors.values())


def print_report(r: dict[str, Any]) -> None:
    print(f"\n{'target':10}{'sat req/s':>11}{'p50 ms':>9}{'p99 ms':>9}   (latency at {r['params']['rate_rps']} req/s)")
    for name, t in r["targets"].items():
        sat, fix = t["saturation"], t["fixed_rate"]
        print(f"{name:10}{sat['throughput_rps'] or 0:>11.1f}{fix['p50_ms'] or 0:>9.2f}{fix['p99_ms'] or 0:>9.2f}")
    print(f"\nhooks/baseline = {r['hooks_vs_baseline']}, feishu/baseline = {r['feishu_vs_baseline']}, "
          f"hooks/feishu = {r['hooks_vs_feishu']} (floor {FLOOR}: {'ok' if r['ok'] else 'MISS'})")
    print(f"GitHub payload {r['payload_bytes']} bytes; machine load {r['machine']['loadavg_1m']} -> "
          f"{r['machine']['loadavg_1m_end']}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args([*(argv or []), "--driver", "python"])
    args.out = DEFAULT_OUT if args.out.name == "ingest.json" else args.out
    os.environ["GITHUB_WEBHOOK_SECRET"] = SECRET  # bench.ingest's servers inherit this process's environment
    if args.priority and not priority.available():
        print("--priority: autogroups are off on this kernel; running without it", file=sys.stderr)
        args.priority = 0
    signal.signal(signal.SIGTERM, _raise_interrupt)
    started, t0 = machine(), time.monotonic()
    with ExitStack() as stack:
        try:
            plain, _scratch = start(stack, args, "bench-hooks-")
            servers = {name: plain.servers[server] for name, server in TARGETS.items()}
            bench = HooksBench(args=args, servers=servers, store=plain.store, gens=plain.gens,
                               gunicorn=plain.gunicorn)
            samples = bench.run()
        except KeyboardInterrupt:
            print("\ninterrupted; cleaning up", file=sys.stderr)
            return 130
    result = report(samples, args, started, time.monotonic() - t0)
    print_report(result)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"report: {args.out}")
    failed = {name: n for name, n in result["errors"].items() if n}
    print(("PASS" if result["ok"] else "FAIL") + f": hooks/feishu {result['hooks_vs_feishu']} (floor {FLOOR})"
          + (f"; errors {failed}" if failed else ""))
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
