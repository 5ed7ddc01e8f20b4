"""CPU time from /proc: per process (servers, Redis) and machine-wide (to see idle cores and other work)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

CLK_TCK = os.sysconf("SC_CLK_TCK")


def proc_cpu(pid: int, children: bool = False) -> float:
    """CPU seconds of one process from /proc (with `children`, also its reaped children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / CLK_TCK


def safe_cpu(pid: int) -> float:
    try:
        return proc_cpu(pid)
    except (OSError, ValueError, IndexError):
        return 0.0  # exited between listing and reading


def child_pids(parent: int) -> list[int]:
    kids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == parent:
                kids.append(int(stat.parent.name))
        except (OSError, ValueError, IndexError):
            continue
    return kids


@dataclass(frozen=True)
class MachineCpu:
    """Machine-wide CPU seconds from /proc/stat: busy (all non-idle states) and idle (idle + iowait)."""

    busy: float
    idle: float
    softirq: float

    @classmethod
    def now(cls) -> MachineCpu:
        ticks = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        user, nice, system, idle, iowait, irq, softirq, steal = (ticks + [0] * 8)[:8]
        return cls(busy=(user + nice + system + irq + softirq + steal) / CLK_TCK,
                   idle=(idle + iowait) / CLK_TCK, softirq=softirq / CLK_TCK)

    def __sub__(self, other: MachineCpu) -> MachineCpu:
        return MachineCpu(self.busy - other.busy, self.idle - other.idle, self.softirq - other.softirq)


def machine_json(m: MachineCpu, elapsed: float, ours_s: float) -> dict[str, float | None]:
    """Idle cores and CPU taken by anything but the measured processes (other work, unattributed softirq)."""
    if elapsed <= 0:
        return {"machine_idle_cores": None, "other_cpu_cores": None}
    return {"machine_idle_cores": round(m.idle / elapsed, 3),
            "other_cpu_cores": round((m.busy - ours_s) / elapsed, 3),
            "softirq_cores": round(m.softirq / elapsed, 3)}


def worker_split(before: dict[int, float], after: dict[int, float], elapsed: float) -> list[float]:
    """CPU cores each worker used over a phase, largest first (workers present at both ends)."""
    if elapsed <= 0:
        return []
    return sorted((round((after[pid] - before[pid]) / elapsed, 3) for pid in after if pid in before), reverse=True)


def imbalanced(cores: list[float]) -> bool:
    """One worker did under half of another's work: keep-alive connections landed unevenly on the workers."""
    return len(cores) > 1 and cores[-1] < 0.5 * cores[0]


def other_note(values: list[float | None], limit: float = 0.25) -> str | None:
    """A warning when other work took a noticeable share of the CPUs during the measured phases. Not shown with
    `--priority`: other work then only gets what the bench leaves idle, so it measures slack, not theft."""
    worst = max((v for v in values if v is not None), default=0.0)
    if worst <= limit:
        return None
    return (f"WARNING: other work took up to {worst:.2f} cores during these phases (other_cpu_cores); "
            "throughput is then a scheduler share, not the handler's. Rerun on a quiet machine or with --priority.")
