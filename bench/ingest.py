"""Ingest benchmark: our webhook vs a bare lark-oapi handler, both under gunicorn, measured in one run."""

from __future__ import annotations

import argparse
import http.client
import json
import math
import multiprocessing as mp
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass, field, replace
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from pathlib import Path
from typing import Any

import redis

from bench import loadgen, priority
from bench.loadgen import Phase, PhaseResult
from bench.procstat import (
    MachineCpu,
    child_pids,
    imbalanced,
    machine_json,
    other_note,
    proc_cpu,
    safe_cpu,
    worker_split,
)
from bench.wrk import MISSING, WrkRunner, find_wrk
from bench.wrk import print_table as wrk_print_table
from bench.wrk import ratio as wrk_ratio
from bench.wrk import summarize as wrk_summarize
from core.keys import Keys
from state.embedded import ensure_server

ROOT = Path(__file__).resolve().parent.parent
CONF = ROOT / "gunicorn.conf.py"
DEFAULT_OUT = ROOT / "bench" / "results" / "ingest.json"
GUNICORN = Path(sys.executable).parent / "gunicorn"  # the venv's, whatever PATH says

APP_ID = "cli_bench"
ENCRYPT_KEY = "bench-encrypt-key"
VERIFICATION_TOKEN = "bench-verification-token"
PROFILE = "bench"
BOT_OPEN_ID = "ou_bot"
TARGET_RATIO = 0.6
FLOOR_RATIO = 0.9  # issue 32: below this the run fails (exit 1), so a slower request path never goes unnoticed
TARGET_P99_MS = 20.0
WARMUP_S = 2.0


# --- processes we own ------------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def server_env(redis_url: str, var_dir: Path, log_level: str) -> dict[str, str]:
    """One environment for both servers, so gunicorn.conf.py resolves to identical settings for both."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "ANTHROPIC_", "ROUTING_"))}
    return {
        **base, "PYTHONPATH": str(ROOT), "PATH": f"{GUNICORN.parent}:{base.get('PATH', '')}",
        "FEISHU_APP_ID": APP_ID, "FEISHU_APP_SECRET": "bench-app-secret",
        "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN, "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_DOMAIN": "http://127.0.0.1:1",  # never called on the request path; fails fast if it were
        "ANTHROPIC_API_KEY": "sk-bench", "REDIS_URL": redis_url, "BOT_PROFILE": PROFILE,
        "VAR_DIR": str(var_dir),
        # WARNING by default: one JSON line per accepted event would be a large share of the measured cost.
        "LOG_LEVEL": log_level,
    }


@dataclass
class Server:
    name: str
    app: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None

    def start(self, env: dict[str, str], cwd: Path, extra: list[str]) -> None:
        # cwd is a scratch dir so a developer's .env cannot leak into the measured app.
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(self.command(extra), env=env, cwd=cwd, stdout=out,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def command(self, extra: list[str]) -> list[str]:
        return [str(GUNICORN), "-c", str(CONF), "--bind", f"127.0.0.1:{self.port}", *extra, self.app]

    def wait_ready(self, path: str, want: int | None, timeout: float = 90.0) -> None:
        """Poll until `path` answers (with status `want`, or any status when None)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc is None or self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited during start-up:\n{self.tail()}")
            if (status := self._probe(path)) is not None and (want is None or status == want):
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} not ready after {timeout:.0f}s:\n{self.tail()}")

    def _probe(self, path: str) -> int | None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
        try:
            conn.request("GET", path)
            return conn.getresponse().status
        except OSError:
            return None
        finally:
            conn.close()

    def cpu(self) -> float:
        """Master + live workers + workers already recycled (their time lands in the master's cutime)."""
        assert self.proc is not None
        pid = self.proc.pid
        return proc_cpu(pid, children=True) + sum(safe_cpu(k) for k in child_pids(pid))

    def worker_cpu(self) -> dict[int, float]:
        assert self.proc is not None
        return {pid: safe_cpu(pid) for pid in child_pids(self.proc.pid)}

    def boots(self) -> int:
        return self.log.read_text(errors="replace").count("Booting worker") if self.log.exists() else 0

    def tail(self, lines: int = 20) -> str:
        return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])

    def interrupt(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)  # gunicorn: quick shutdown (SIGTERM waits for requests)

    def reap(self, deadline: float) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)  # its own session: only the master and its workers
            self.proc.wait(timeout=10)


def stop_servers(servers: list[Server]) -> None:
    """Signal all first, then wait: each takes a second or two to exit, no need to pay that in series."""
    for s in servers:
        s.interrupt()
    deadline = time.monotonic() + 10
    for s in servers:
        s.reap(deadline)


class Generators:
    """Client processes: Python load generation costs CPU, so it gets its own GILs, away from bookkeeping."""

    def __init__(self, count: int, own_session: bool = False) -> None:
        ctx = mp.get_context("spawn")  # no inherited sockets, locks or Redis connections
        self.pipes: list[Connection] = []
        self.procs: list[BaseProcess] = []
        for _ in range(count):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=loadgen.serve, args=(child, own_session), daemon=True)
            p.start()
            self.pipes.append(parent)
            self.procs.append(p)

    def run(self, shares: list[Phase]) -> list[PhaseResult]:
        for pipe, share in zip(self.pipes, shares, strict=True):
            pipe.send(("prepare", share))
        for pipe in self.pipes:
            if pipe.recv() != "ready":
                raise RuntimeError("load generator failed to prepare")
        start = time.monotonic() + 0.2
        for pipe in self.pipes:
            pipe.send(("go", start))
        return [pipe.recv() for pipe in self.pipes]

    def build(self, shares: list[Phase]) -> list[bytes]:
        """Request pools for an outside driver (wrk), built in parallel, in `loadgen.pool_bytes` format."""
        for pipe, share in zip(self.pipes, shares, strict=True):
            pipe.send(("build", share))
        return [pipe.recv_bytes() for pipe in self.pipes]

    def stop(self) -> None:
        for pipe in self.pipes:
            with suppress(OSError, ValueError):
                pipe.send(("stop",))
        for p in self.procs:
            p.join(timeout=3)
            if p.is_alive():
                p.terminate()
                p.join(timeout=3)


# --- measurement -----------------------------------------------------------------------------------------

@dataclass
class Sample:
    """One phase against one target, merged across generator processes."""

    target: str
    mode: str
    ok: int
    errors: dict[str, int]
    elapsed: float
    latencies_ms: list[float] = field(repr=False)
    reconnects: int
    client_cpu_s: float
    server_cpu_s: float
    redis_cpu_s: float
    drain_jobs: int | None
    exhausted: bool
    machine: MachineCpu
    worker_cores: list[float]

    @property
    def throughput(self) -> float:
        return self.ok / self.elapsed if self.elapsed else 0.0

    def pct(self, q: float) -> float:
        return percentile(self.latencies_ms, q)

    def per_request_ms(self, seconds: float) -> float:
        return 1000 * seconds / self.ok if self.ok else math.nan

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "errors": self.errors, "elapsed_s": round(self.elapsed, 3),
            "throughput_rps": round(self.throughput, 1),
            "p50_ms": _r(self.pct(50)), "p99_ms": _r(self.pct(99)), "max_ms": _r(self.pct(100)),
            "reconnects": self.reconnects, "pool_exhausted": self.exhausted,
            "client_cpu_cores": _r(self.client_cpu_s / self.elapsed if self.elapsed else math.nan),
            "client_cpu_ms_per_req": _r(self.per_request_ms(self.client_cpu_s), 4),
            "server_cpu_ms_per_req": _r(self.per_request_ms(self.server_cpu_s), 4),
            "redis_cpu_ms_per_req": _r(self.per_request_ms(self.redis_cpu_s), 4),
            "drain_jobs_queued": self.drain_jobs,
            **machine_json(self.machine, self.elapsed, self.server_cpu_s + self.redis_cpu_s + self.client_cpu_s),
            "worker_cores": self.worker_cores, "worker_imbalance": imbalanced(self.worker_cores),
        }


def percentile(values: list[float], q: float) -> float:
    """Nearest-rank percentile (no interpolation: p99 is a latency some request really had)."""
    if not values:
        return math.nan
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q / 100 * len(ordered)) - 1)]


def _r(value: float, digits: int = 2) -> float | None:
    return None if math.isnan(value) else round(value, digits)


def split(total: int | float, parts: int) -> list[float]:
    """Divide connections or rate across generator processes, remainder to the first ones."""
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


class Redis:
    def __init__(self, var_dir: Path) -> None:
        self.var_dir = var_dir
        self.url = ensure_server(str(var_dir))
        self.client = redis.Redis.from_url(self.url, decode_responses=True)
        self.pid = int((var_dir / "redis.pid").read_text().strip())

    def reset(self) -> None:
        """Drop what the last phase piled up (no worker drains it), keep the identity groups need."""
        self.client.flushdb()
        self.client.set(Keys(PROFILE).bot_open_id, BOT_OPEN_ID)

    def drain_jobs(self) -> int:
        # The PUSH script queues one kick record per new run; no sweeper runs here to turn them into RQ jobs.
        return sum(int(self.client.llen(k)) for k in self.client.scan_iter("fb:*:kicks"))

    def cpu(self) -> float:
        return safe_cpu(self.pid)

    def stop(self) -> None:
        """SIGTERM (Redis saves and exits) to the server this run started. Not `stop_server`: its SHUTDOWN
        drops the connection and redis-py then sleeps through ~4 s of retry backoff before giving up."""
        self.client.close()
        try:
            os.kill(self.pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 10
        while _running(self.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _running(self.pid):
            os.kill(self.pid, signal.SIGKILL)


def _running(pid: int) -> bool:
    """True while `pid` exists and is not a zombie (the daemonized server is not our child to reap)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


@dataclass
class Bench:
    args: argparse.Namespace
    servers: dict[str, Server]
    store: Redis
    gens: Generators
    gunicorn: dict[str, Any] = field(default_factory=dict)
    cap_rps: float = 3000.0  # closed-loop pool size per second of phase; tightened after warm-up

    def phase(self, target: str, mode: str, duration: float) -> Sample:
        self.store.reset()
        server, n = self.servers[target], self.args.clients
        shares = self._shares(server.port, mode, duration, n)
        cpu0, rcpu0, w0 = server.cpu(), self.store.cpu(), server.worker_cpu()
        results = self.gens.run(shares)
        cpu1, rcpu1, w1 = server.cpu(), self.store.cpu(), server.worker_cpu()
        errors: Counter[str] = Counter()
        for r in results:
            errors.update(r.errors)
        return Sample(
            target=target, mode=mode, ok=sum(r.ok for r in results), errors=dict(errors),
            elapsed=max(r.elapsed for r in results),
            latencies_ms=[x for r in results for x in r.latencies_ms],
            reconnects=sum(r.reconnects for r in results), client_cpu_s=sum(r.cpu_s for r in results),
            server_cpu_s=cpu1 - cpu0, redis_cpu_s=rcpu1 - rcpu0,
            drain_jobs=self.store.drain_jobs() if target == "ours" else None,
            exhausted=any(r.exhausted for r in results), machine=results[0].machine,
            worker_cores=worker_split(w0, w1, max(r.elapsed for r in results)),
        )

    def base_phase(self, port: int) -> Phase:
        return Phase(port=port, mode="closed", duration=0, connections=0, requests=0, chats=self.args.chats,
                     encrypt_key=ENCRYPT_KEY, token=VERIFICATION_TOKEN, app_id=APP_ID,
                     connection_close=self.args.connection_close)

    def _shares(self, port: int, mode: str, duration: float, n: int) -> list[Phase]:
        common = replace(self.base_phase(port), duration=duration)
        if mode == "closed":
            pool = math.ceil(self.cap_rps * duration / n)
            return [replace(common, connections=int(c), requests=pool)
                    for c in split(self.args.concurrency, n)]
        rate = self.args.rate / n
        conns = [max(1, int(c)) for c in split(self.args.rate_connections, n)]
        return [replace(common, mode="open", connections=c, rate=rate, requests=round(rate * duration),
                        offset=i / self.args.rate) for i, c in enumerate(conns)]

    def warm_up(self) -> None:
        """Import-on-first-use, connection pools and Lua script loading happen here, not in a sample."""
        best = max(self.phase(t, "closed", WARMUP_S).throughput for t in self.servers)
        # Pool generation costs client CPU before each phase; size it to what this machine can reach.
        self.cap_rps = max(500.0, 2.0 * best)

    def run(self) -> list[Sample]:
        self.warm_up()
        samples = []
        for mode in ("closed", "open"):
            for rep in range(self.args.repeats):
                for target in self.servers:  # interleaved, so drift in machine load hits both alike
                    s = self.phase(target, mode, self.args.duration)
                    samples.append(s)
                    _progress(rep, s)
        return samples


def _progress(rep: int, s: Sample) -> None:
    what = f"{s.throughput:8.1f} req/s" if s.mode == "closed" else f"p99 {s.pct(99):7.2f} ms"
    errs = sum(s.errors.values())
    print(f"  [{s.mode:6} #{rep + 1}] {s.target:8} {what}  errors={errs}", file=sys.stderr, flush=True)


# --- report ----------------------------------------------------------------------------------------------

def summarize(samples: list[Sample], target: str) -> dict[str, Any]:
    sat = [s for s in samples if s.target == target and s.mode == "closed"]
    rate = [s for s in samples if s.target == target and s.mode == "open"]

    def med(values: list[float]) -> float | None:
        clean = [v for v in values if not math.isnan(v)]
        return _r(statistics.median(clean)) if clean else None

    return {
        "saturation": {
            "throughput_rps": med([s.throughput for s in sat]),
            "p50_ms": med([s.pct(50) for s in sat]), "p99_ms": med([s.pct(99) for s in sat]),
            "server_cpu_ms_per_req": med([s.per_request_ms(s.server_cpu_s) for s in sat]),
            "redis_cpu_ms_per_req": med([s.per_request_ms(s.redis_cpu_s) for s in sat]),
            "client_cpu_ms_per_req": med([s.per_request_ms(s.client_cpu_s) for s in sat]),
            "other_cpu_cores": med([s.to_json()["other_cpu_cores"] or 0.0 for s in sat]),
            "imbalanced_phases": sum(imbalanced(s.worker_cores) for s in sat),
            "errors": _sum_errors(sat), "repeats": [s.to_json() for s in sat],
        },
        "fixed_rate": {
            "p50_ms": med([s.pct(50) for s in rate]), "p99_ms": med([s.pct(99) for s in rate]),
            "max_ms": _r(max((s.pct(100) for s in rate), default=math.nan)),
            "achieved_rps": med([(s.ok + sum(s.errors.values())) / s.elapsed for s in rate]),
            "errors": _sum_errors(rate), "repeats": [s.to_json() for s in rate],
        },
    }


def _sum_errors(samples: list[Sample]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for s in samples:
        total.update(s.errors)
    return dict(total)


def gunicorn_overrides(args: argparse.Namespace) -> list[str]:
    """Flags added to both command lines. A worker boot costs ~2 CPU-seconds (lark-oapi's import), and
    max_requests recycles a worker every few seconds at saturation, so by default recycling is off for both:
    otherwise the faster server pays more boots and the ratio measures gunicorn.conf.py, not the handlers."""
    return [] if args.recycle else ["--max-requests", "0"]


REPORTED = ("workers", "worker_class", "threads", "worker_connections", "keepalive", "timeout",
            "graceful_timeout", "max_requests", "max_requests_jitter", "backlog", "preload_app")
PER_APP = ("bind", "default_proc_name")  # the only settings allowed to differ between the two


def resolved_config(servers: list[Server], env: dict[str, str], cwd: Path,
                    extra: list[str]) -> dict[str, Any]:
    """gunicorn's own fully resolved settings (`--print-config`) for both command lines, and a check that
    they differ in nothing but the bind address and the app."""
    procs = [subprocess.Popen([*s.command(extra), "--print-config"], env=env, cwd=cwd, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.DEVNULL) for s in servers]
    configs = [_parse_config(p.communicate(timeout=120)[0]) for p in procs]
    differ = sorted(k for k in configs[0].keys() | configs[1].keys()
                    if k not in PER_APP and configs[0].get(k) != configs[1].get(k))
    return {"identical": not differ, "differences": differ, "config": str(CONF.relative_to(ROOT)),
            "overrides": extra, "settings": {k: configs[0].get(k) for k in REPORTED},
            "commands": {s.name: " ".join(s.command(extra)) for s in servers}}


def _parse_config(text: str) -> dict[str, str]:
    pairs = (line.partition(" = ") for line in text.splitlines() if " = " in line)
    return {k.strip(): v.strip() for k, _, v in pairs}


def machine() -> dict[str, Any]:
    return {"nproc": os.cpu_count(), "usable_cpus": len(os.sched_getaffinity(0)),
            "python": platform.python_version(), "platform": platform.platform(),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def build_report(args: argparse.Namespace, samples: list[Sample], bench: Bench, started: dict[str, Any],
                 wall_s: float) -> dict[str, Any]:
    ours, base = summarize(samples, "ours"), summarize(samples, "baseline")
    t_ours, t_base = ours["saturation"]["throughput_rps"], base["saturation"]["throughput_rps"]
    ratio = wrk_ratio(t_ours, t_base)
    p99 = ours["fixed_rate"]["p99_ms"]
    cpu_ours, cpu_base = _cpu_per_request(ours), _cpu_per_request(base)
    return {
        "targets": {"ours": ours, "baseline": base},
        "throughput_ratio": ratio, "throughput_ratio_target": TARGET_RATIO,
        "throughput_ratio_ok": ratio is not None and ratio >= TARGET_RATIO,
        "p99_at_rate_ms": p99, "p99_target_ms": TARGET_P99_MS,
        "p99_ok": p99 is not None and p99 < TARGET_P99_MS,
        "cpu_per_request_ratio": wrk_ratio(cpu_ours, cpu_base),
        "params": {"duration_s": args.duration, "repeats": args.repeats, "concurrency": args.concurrency,
                   "rate_rps": args.rate, "rate_connections": args.rate_connections, "clients": args.clients,
                   "chats": args.chats or "fresh chat per event", "warmup_s": WARMUP_S,
                   "log_level": args.log_level, "recycle": args.recycle, "priority": args.priority,
                   "wall_s": round(wall_s, 1)},
        "worker_boots": {name: s.boots() for name, s in bench.servers.items()},
        "gunicorn": bench.gunicorn,
        "machine": {**started, "loadavg_1m_end": round(os.getloadavg()[0], 2)},
    }


def verdict(report: dict[str, Any]) -> tuple[int, str]:
    """Exit code and the line saying why: 1 when any measured throughput ratio (the Python driver's, wrk's
    keep-alive and `Connection: close`) is below FLOOR_RATIO, when a measured phase had errors (a throughput of
    failed requests measures nothing), or when a target was measured but answered nothing (no ratio). A run
    that measured nothing (wrk missing under `--driver wrk`) passes. Pure."""
    sections = {"python": report}
    for mode in ("keepalive", "close"):
        sections[f"wrk {mode}"] = (report.get("wrk") or {}).get(mode, {})
    problems, ratios = [], {}
    for name, section in sections.items():
        targets = section.get("targets") or {}
        ratio = section.get("throughput_ratio")
        if targets and ratio is None:
            problems.append(f"{name}: a target answered no request")
        for target, summary in targets.items():
            if n := failed_requests(summary):
                problems.append(f"{name}: {n} errors from {target}")
        if ratio is not None:
            ratios[name] = float(ratio)
    problems += [f"{name} {r:.3f}" for name, r in ratios.items() if r < FLOOR_RATIO]
    if problems:
        return 1, f"FAIL: throughput ours/baseline below {FLOOR_RATIO} or not measured: {', '.join(problems)}"
    shown = ", ".join(f"{name} {r:.3f}" for name, r in ratios.items()) or "no ratio measured"
    return 0, f"PASS: throughput ours/baseline at least {FLOOR_RATIO} ({shown})"


def failed_requests(target: dict[str, Any]) -> int:
    """A target's failed requests: wrk's count, or the Python driver's per-kind counts of both phases."""
    if isinstance(target.get("errors"), int):
        return int(target["errors"])
    phases = (target.get(phase) or {} for phase in ("saturation", "fixed_rate"))
    return sum(sum((p.get("errors") or {}).values()) for p in phases)


def _cpu_per_request(summary: dict[str, Any]) -> float | None:
    """Server plus Redis CPU per request at saturation: the load-independent view of the cost."""
    sat = summary["saturation"]
    if sat["server_cpu_ms_per_req"] is None:
        return None
    return float(sat["server_cpu_ms_per_req"] + (sat["redis_cpu_ms_per_req"] or 0))


def _fmt(value: float | None, width: int, digits: int = 1) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"


def print_table(report: dict[str, Any]) -> None:
    print(f"\n{'target':9}{'sat req/s':>11}{'cpu ms/req':>12}{'p50 ms':>9}{'p99 ms':>9}{'max ms':>9}"
          f"{'errors':>8}   (latency at {report['params']['rate_rps']} req/s)")
    for name, t in report["targets"].items():
        sat, fix = t["saturation"], t["fixed_rate"]
        cpu = _cpu_per_request(t)
        errors = sum(sat["errors"].values()) + sum(fix["errors"].values())
        print(f"{name:9}{_fmt(sat['throughput_rps'], 11)}{_fmt(cpu, 12, 3)}{_fmt(fix['p50_ms'], 9, 2)}"
              f"{_fmt(fix['p99_ms'], 9, 2)}{_fmt(fix['max_ms'], 9, 1)}{errors:>8}")
    ok = {True: "ok", False: "MISS"}
    print(f"\nthroughput ours/baseline = {report['throughput_ratio']}  (target >= {TARGET_RATIO}: "
          f"{ok[report['throughput_ratio_ok']]})")
    print(f"ours p99 at {report['params']['rate_rps']} req/s = {report['p99_at_rate_ms']} ms  "
          f"(target < {TARGET_P99_MS:g} ms: {ok[report['p99_ok']]})")
    print(f"CPU per request ours/baseline (server + Redis) = {report['cpu_per_request_ratio']}")
    m = report["machine"]
    print(f"machine: {m['nproc']} cpus, python {m['python']}, load {m['loadavg_1m']} -> "
          f"{m['loadavg_1m_end']}; worker boots {report['worker_boots']}")
    sat = [t["saturation"] for t in report["targets"].values()]
    if uneven := sum(s["imbalanced_phases"] for s in sat):
        print(f"note: {uneven} saturation phase(s) had one worker doing under half of another's work "
              "(keep-alive connections landed unevenly): see worker_cores in the JSON")
    if not report["params"]["priority"] and (note := other_note([r["other_cpu_cores"] for s in sat
                                                                   for r in s["repeats"]])):
        print(note)


# --- entry point -----------------------------------------------------------------------------------------

def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.ingest", description=__doc__)
    p.add_argument("--duration", type=float, default=6.0, help="seconds per measured phase (default 6)")
    p.add_argument("--concurrency", type=int, default=32, help="closed-loop connections (default 32)")
    p.add_argument("--rate", type=float, default=200.0, help="open-loop requests per second (default 200)")
    p.add_argument("--rate-connections", type=int, default=32, help="open-loop connections (default 32)")
    p.add_argument("--repeats", type=int, default=3, help="phases per target and mode; medians reported")
    p.add_argument("--clients", type=int, default=2, help="load generator processes (default 2)")
    p.add_argument("--chats", type=int, default=0,
                   help="distinct p2p chats; 0 = a fresh chat per event, so every event kicks a run")
    p.add_argument("--log-level", default="WARNING", choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="our app's LOG_LEVEL (default WARNING; INFO logs a JSON line per event)")
    p.add_argument("--recycle", action="store_true",
                   help="keep gunicorn.conf.py's max_requests worker recycling (off by default, for both)")
    p.add_argument("--driver", default="both", choices=("python", "both", "wrk"),
                   help="load generator: the in-tree Python one, wrk (keep-alive and Connection: close), or "
                        "both, one after the other against the same servers (default both; without wrk "
                        "installed its phases are skipped with a note)")
    p.add_argument("--connection-close", action="store_true",
                   help="Python driver: send `Connection: close`, one TCP connection per request")
    p.add_argument("--wrk-threads", type=int, default=2, help="wrk threads (default 2)")
    p.add_argument("--wrk-connections", type=int, default=0, help="wrk connections (default: --concurrency)")
    p.add_argument("--priority", type=int, default=0, metavar="NICE",
                   help="on a shared machine: set the autogroup nice value (e.g. -15, needs root) of every process "
                        "the bench starts, so other work only gets what the bench leaves idle (default 0: off)")
    p.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"JSON report (default {DEFAULT_OUT})")
    args = p.parse_args(argv)
    numbers = (args.duration, args.concurrency, args.rate, args.repeats, args.clients, args.rate_connections)
    if min(numbers) <= 0:
        p.error("numeric options must be positive")
    if args.concurrency < args.clients or args.rate_connections < args.clients:
        p.error("need at least one connection per client process")
    return args


@contextmanager
def environment(stack: ExitStack, scratch: Path, args: argparse.Namespace,
                gens: Generators) -> Iterator[Bench]:
    """Redis, both servers and the generators; everything is torn down when the stack unwinds."""
    store = Redis(scratch / "var")
    stack.callback(store.stop)
    store.reset()  # identity first: our app must never try to fetch it (FEISHU_DOMAIN is a dead port)
    env = server_env(store.url, scratch / "var", args.log_level)
    servers = {
        "ours": Server("ours", "app:app", free_port(), scratch / "ours.log"),
        "baseline": Server("baseline", "bench.baseline_app:app", free_port(), scratch / "baseline.log"),
    }
    stack.callback(stop_servers, list(servers.values()))
    for s in servers.values():
        s.start(env, scratch, gunicorn_overrides(args))
    servers["ours"].wait_ready("/healthz", 200)
    servers["baseline"].wait_ready("/", None)
    config = resolved_config(list(servers.values()), env, scratch, gunicorn_overrides(args))
    if not config["identical"]:
        raise RuntimeError(f"gunicorn settings differ between the servers: {config['differences']}")
    yield Bench(args=args, servers=servers, store=store, gens=gens, gunicorn=config)


def _raise_interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt  # SIGTERM unwinds like Ctrl-C, so the cleanup below runs


def start(stack: ExitStack, args: argparse.Namespace, prefix: str) -> tuple[Bench, Path]:
    """A scratch directory, the load generators, Redis and the two gunicorn servers, all closed by `stack`; with
    `--priority`, raised above the machine's other work. Returns the bench and its scratch directory."""
    scratch = Path(tempfile.mkdtemp(prefix=prefix))
    stack.callback(shutil.rmtree, scratch, ignore_errors=True)
    gens = Generators(args.clients, own_session=bool(args.priority))
    stack.callback(gens.stop)
    print(f"starting redis + 2 gunicorn servers in {scratch} ...", file=sys.stderr, flush=True)
    bench = stack.enter_context(environment(stack, scratch, args, gens))
    if args.priority:  # on a shared machine: other work gets what the bench leaves idle
        priority.boost([bench.store.pid, *(s.proc.pid for s in bench.servers.values() if s.proc),
                        *(p.pid for p in gens.procs if p.pid)], args.priority)
    return bench, scratch


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    wrk = find_wrk() if args.driver != "python" else None
    if args.priority and not priority.available():
        print("--priority: autogroups are off on this kernel; running without it", file=sys.stderr)
        args.priority = 0
    if wrk is None and args.driver == "wrk":
        print(MISSING)
        return 0  # a fresh machine without root still runs `make bench`; nothing to measure here
    signal.signal(signal.SIGTERM, _raise_interrupt)
    started, t0 = machine(), time.monotonic()
    with ExitStack() as stack:
        try:
            bench, scratch = start(stack, args, "bench-ingest-")
            samples = bench.run() if args.driver != "wrk" else []
            wrk_samples, runner = [], None
            if wrk is not None:
                runner = WrkRunner(bench, wrk, scratch)
                wrk_samples = runner.run()
            report = build_report(args, samples, bench, started, time.monotonic() - t0) if samples else {}
            if runner is not None:
                report["wrk"] = {**wrk_summarize(wrk_samples, runner, args.repeats), "priority": args.priority}
            report.setdefault("machine", {**started, "loadavg_1m_end": round(os.getloadavg()[0], 2)})
            report["wall_s"] = round(time.monotonic() - t0, 1)
        except KeyboardInterrupt:
            print("\ninterrupted; cleaning up", file=sys.stderr)
            return 130
    if samples:
        print_table(report)
    if "wrk" in report:
        wrk_print_table(report["wrk"])
    elif args.driver != "python":
        print(f"\n{MISSING}")
    print(f"total wall time {report['wall_s']:.0f} s")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"report: {args.out}")
    code, line = verdict(report)
    print(line)
    return code


if __name__ == "__main__":
    sys.exit(main())
