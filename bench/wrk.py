"""The ingest benchmark driven by wrk, a C load generator: keep-alive and `Connection: close`, same servers."""

from __future__ import annotations

import json
import math
import resource
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from bench import priority
from bench.procstat import MachineCpu, imbalanced, machine_json, other_note, worker_split

SCRIPT = Path(__file__).with_name("wrk_pool.lua")
MODES = ("keepalive", "close")
MISSING = "wrk is not installed (Debian/Ubuntu: `apt-get install wrk`): the wrk phases are skipped."
WARMUP_S = 2
POOL_MARGIN = 2.0  # pool = margin x best warm-up rate x duration: no event sent twice, even if one thread is faster


def find_wrk() -> str | None:
    return shutil.which("wrk")


@dataclass
class WrkSample:
    """One wrk run against one target."""

    target: str
    mode: str
    ok: int
    errors: dict[str, int]
    elapsed: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    issued: int
    wrapped: int  # times a wrk thread ran out of distinct events and started over (should be 0)
    client_cpu_s: float
    server_cpu_s: float
    redis_cpu_s: float
    drain_jobs: int | None
    machine: MachineCpu
    worker_cores: list[float]
    wall_s: float  # the wrk process from start to exit; far above `elapsed` means a slow start (suspect)

    @property
    def throughput(self) -> float:
        return self.ok / self.elapsed if self.elapsed else 0.0

    def per_request_ms(self, seconds: float) -> float:
        return 1000 * seconds / self.ok if self.ok else math.nan

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok, "errors": self.errors, "elapsed_s": round(self.elapsed, 3),
            "throughput_rps": round(self.throughput, 1), "p50_ms": round(self.p50_ms, 2),
            "p99_ms": round(self.p99_ms, 2), "max_ms": round(self.max_ms, 1), "issued": self.issued,
            "pool_wrapped": self.wrapped, "wrk_wall_s": round(self.wall_s, 3),
            "worker_cores": self.worker_cores, "worker_imbalance": imbalanced(self.worker_cores),
            "client_cpu_cores": round(self.client_cpu_s / self.elapsed, 3) if self.elapsed else None,
            "client_cpu_ms_per_req": _r(self.per_request_ms(self.client_cpu_s), 4),
            "server_cpu_ms_per_req": _r(self.per_request_ms(self.server_cpu_s), 4),
            "redis_cpu_ms_per_req": _r(self.per_request_ms(self.redis_cpu_s), 4),
            "drain_jobs_queued": self.drain_jobs,
            **machine_json(self.machine, self.elapsed, self.server_cpu_s + self.redis_cpu_s + self.client_cpu_s),
        }


def _r(value: float, digits: int = 2) -> float | None:
    return None if math.isnan(value) else round(value, digits)


# `bench.ingest.Bench` is typed Any here: that module imports this one (no import cycles: tests/test_layout.py).
class WrkRunner:
    """Runs wrk phases against the servers of a `Bench`, with request pools built by its generator processes."""

    def __init__(self, bench: Any, wrk: str, scratch: Path) -> None:
        self.bench, self.wrk, self.scratch = bench, wrk, scratch
        self.threads = bench.args.wrk_threads
        self.connections = bench.args.wrk_connections or bench.args.concurrency
        self.cap_rps = 3000.0

    def _pool(self, port: int, close: bool, count: int) -> Path:
        """Fresh events just before the phase (signatures expire after 300 s), built by the generator processes,
        one file per wrk thread (`<prefix>.<k>`)."""
        n = len(self.bench.gens.pipes)
        share = replace(self.bench.base_phase(port), requests=math.ceil(count / n), connection_close=close)
        records = b"".join(self.bench.gens.build([share] * n))
        prefix = self.scratch / "wrk-pool"
        for k, chunk in enumerate(_split_records(records, self.threads)):
            Path(f"{prefix}.{k}").write_bytes(chunk)
        return prefix

    def phase(self, target: str, mode: str, duration: int) -> WrkSample:
        b = self.bench
        b.store.reset()
        server = b.servers[target]
        pool = self._pool(server.port, mode == "close", math.ceil(self.cap_rps * duration))
        cmd = [self.wrk, "-t", str(self.threads), "-c", str(self.connections), "-d", f"{duration}s",
               "--timeout", "5s", "-s", str(SCRIPT), f"http://127.0.0.1:{server.port}/feishu/events",
               "--", str(pool)]
        ru0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        w0 = server.worker_cpu()
        cpu0, rcpu0, machine0, t0 = server.cpu(), b.store.cpu(), MachineCpu.now(), time.monotonic()
        nice = self.bench.args.priority
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              start_new_session=bool(nice)) as proc:
            if nice:
                priority.boost([proc.pid], nice)
            stdout, stderr = proc.communicate(timeout=duration + 60)
        cpu1, rcpu1, machine1, wall = server.cpu(), b.store.cpu(), MachineCpu.now(), time.monotonic() - t0
        w1 = server.worker_cpu()
        ru1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        for k in range(self.threads):
            Path(f"{pool}.{k}").unlink()
        stats = _parse(stdout, stderr)
        errors = {k: stats[k] for k in ("connect", "read", "write", "status", "timeout") if stats[k]}
        return WrkSample(
            target=target, mode=mode, ok=stats["requests"] - stats["status"], errors=errors,
            elapsed=stats["duration_us"] / 1e6, p50_ms=stats["p50_us"] / 1000, p99_ms=stats["p99_us"] / 1000,
            max_ms=stats["max_us"] / 1000, issued=stats["issued"], wrapped=stats["wrapped"],
            client_cpu_s=(ru1.ru_utime + ru1.ru_stime) - (ru0.ru_utime + ru0.ru_stime),
            server_cpu_s=cpu1 - cpu0, redis_cpu_s=rcpu1 - rcpu0,
            drain_jobs=b.store.drain_jobs() if target == "ours" else None, machine=machine1 - machine0,
            wall_s=wall, worker_cores=worker_split(w0, w1, stats["duration_us"] / 1e6),
        )

    def run(self) -> list[WrkSample]:
        a = self.bench.args
        print(f"wrk phases: -t{self.threads} -c{self.connections}, {a.repeats} rounds of {int(a.duration)} s",
              file=sys.stderr, flush=True)
        best = max(self.phase(t, "keepalive", WARMUP_S).throughput for t in self.bench.servers)
        self.cap_rps = max(500.0, POOL_MARGIN * best)
        samples = []
        for mode in MODES:
            for rep in range(a.repeats):
                for target in self.bench.servers:  # interleaved, as in the Python-driver phases
                    s = self.phase(target, mode, max(1, round(a.duration)))
                    samples.append(s)
                    errs = sum(s.errors.values())
                    print(f"  [wrk {mode:9} #{rep + 1}] {target:8} {s.throughput:8.1f} req/s  errors={errs}"
                          f"{'  POOL WRAPPED' if s.wrapped else ''}", file=sys.stderr, flush=True)
        return samples


def _split_records(data: bytes, parts: int) -> list[bytes]:
    """Deal `<length>\\n<request>` records round-robin into `parts` byte strings of the same format."""
    out: list[list[bytes]] = [[] for _ in range(parts)]
    pos = k = 0
    while pos < len(data):
        nl = data.index(b"\n", pos)
        end = nl + 1 + int(data[pos:nl])
        out[k % parts].append(data[pos:end])
        pos, k = end, k + 1
    return [b"".join(chunk) for chunk in out]


def _parse(stdout: str, stderr: str) -> dict[str, int]:
    for line in stdout.splitlines():
        if line.startswith("WRKJSON "):
            return {k: int(v) for k, v in json.loads(line[len("WRKJSON "):]).items()}
    raise RuntimeError(f"wrk printed no result:\n{stdout}\n{stderr}")


def _median(values: list[float]) -> float | None:
    clean = [v for v in values if not math.isnan(v)]
    return round(statistics.median(clean), 3) if clean else None


def summarize(samples: list[WrkSample], runner: WrkRunner, repeats: int) -> dict[str, Any]:
    """Per mode: medians per target, ours ÷ baseline throughput and CPU per request (server + Redis)."""
    out: dict[str, Any] = {"threads": runner.threads, "connections": runner.connections, "rounds": repeats}
    for mode in MODES:
        per: dict[str, Any] = {}
        for target in ("ours", "baseline"):
            sel = [s for s in samples if s.mode == mode and s.target == target]
            per[target] = {
                "throughput_rps": _median([s.throughput for s in sel]),
                "cpu_ms_per_req": _median([s.per_request_ms(s.server_cpu_s + s.redis_cpu_s) for s in sel]),
                "client_cpu_ms_per_req": _median([s.per_request_ms(s.client_cpu_s) for s in sel]),
                "client_cpu_cores": _median([s.client_cpu_s / s.elapsed for s in sel if s.elapsed]),
                "p50_ms": _median([s.p50_ms for s in sel]), "p99_ms": _median([s.p99_ms for s in sel]),
                "errors": sum(sum(s.errors.values()) for s in sel),
                "pool_wrapped": sum(s.wrapped for s in sel),
                "other_cpu_cores": _median([s.to_json()["other_cpu_cores"] or 0.0 for s in sel]),
                "imbalanced_phases": sum(imbalanced(s.worker_cores) for s in sel),
                "repeats": [s.to_json() for s in sel],
            }
        o, b = per["ours"], per["baseline"]
        out[mode] = {
            "targets": per,
            "throughput_ratio": ratio(o["throughput_rps"], b["throughput_rps"]),
            "cpu_per_request_ratio": ratio(o["cpu_ms_per_req"], b["cpu_ms_per_req"]),
        }
    return out


def ratio(a: float | None, b: float | None) -> float | None:
    """a ÷ b to 3 places; 0.0 when a answered nothing (a failure, not "n/a"), None without a yardstick b."""
    return round(a / b, 3) if a is not None and b else None


def print_table(report: dict[str, Any]) -> None:
    print(f"\nwrk -t{report['threads']} -c{report['connections']}, median of {report['rounds']} rounds")
    print(f"{'mode':11}{'target':9}{'req/s':>9}{'cpu ms/req':>12}{'wrk cores':>11}{'p50 ms':>9}{'p99 ms':>9}"
          f"{'errors':>8}")
    for mode in MODES:
        for name, t in report[mode]["targets"].items():
            print(f"{mode:11}{name:9}{_f(t['throughput_rps'], 9, 1)}{_f(t['cpu_ms_per_req'], 12, 3)}"
                  f"{_f(t['client_cpu_cores'], 11, 2)}{_f(t['p50_ms'], 9, 2)}{_f(t['p99_ms'], 9, 2)}"
                  f"{t['errors']:>8}{'  POOL WRAPPED' if t['pool_wrapped'] else ''}")
    for mode in MODES:
        m = report[mode]
        print(f"wrk {mode:9}: throughput ours/baseline = {m['throughput_ratio']}, "
              f"CPU per request ours/baseline = {m['cpu_per_request_ratio']}")
    targets = [t for mode in MODES for t in report[mode]["targets"].values()]
    if uneven := sum(t["imbalanced_phases"] for t in targets):
        print(f"note: {uneven} wrk phase(s) had one worker doing under half of another's work (see worker_cores)")
    if not report.get("priority") and (note := other_note([r["other_cpu_cores"] for t in targets
                                                           for r in t["repeats"]])):
        print(note)


def _f(value: float | None, width: int, digits: int) -> str:
    return f"{'-':>{width}}" if value is None else f"{value:>{width}.{digits}f}"
