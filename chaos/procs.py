"""Service processes in their own sessions, and /proc helpers: process trees, sessions, memory (PSS)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class ProcInfo:
    pid: int
    ppid: int
    pgid: int
    sid: int
    state: str


def proc_table() -> dict[int, ProcInfo]:
    """Every live process on the machine (zombies included, marked by state "Z")."""
    table = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            pid = int(stat.parent.name)
            table[pid] = ProcInfo(pid, int(fields[1]), int(fields[2]), int(fields[3]), fields[0])
        except (OSError, ValueError, IndexError):
            continue
    return table


def children(pid: int, table: dict[int, ProcInfo] | None = None) -> list[int]:
    table = table if table is not None else proc_table()
    return sorted(p.pid for p in table.values() if p.ppid == pid and p.state != "Z")


def session_members(sid: int, table: dict[int, ProcInfo] | None = None) -> list[int]:
    """Every live process of a session: orphans that left the tree (a horse whose parent died) too."""
    table = table if table is not None else proc_table()
    return sorted(p.pid for p in table.values() if p.sid == sid and p.state != "Z")


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def memory_kb(pid: int) -> dict[str, int]:
    """RSS, PSS (shared pages split among their users) and USS (pages only this process maps: what a leak
    grows; PSS also moves as forked horses come and go) in kB; zeros when the process is gone."""
    out = {"rss": 0, "pss": 0, "uss": 0}
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            name, _, rest = line.partition(":")
            if name in ("Rss", "Pss"):
                out[name.lower()] = int(rest.split()[0])
            elif name in ("Private_Clean", "Private_Dirty"):
                out["uss"] += int(rest.split()[0])
    except (OSError, ValueError, IndexError):
        out["rss"] = rss_kb(pid)
    return out


def rss_kb(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def signal_pids(pids: list[int], sig: int) -> list[int]:
    """Send `sig` to each pid; returns the ones it reached."""
    hit = []
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
            hit.append(pid)
    return hit


@dataclass
class Service:
    """One service command (gunicorn, the worker supervisor, the sweeper) started in a session of its own,
    so a kill or a stop reaches exactly its processes, orphans included, and nothing else."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    log_dir: Path
    starts: int = 0
    proc: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def log_path(self) -> Path:
        return self.log_dir / f"{self.name}.log"

    @property
    def pid(self) -> int:
        assert self.proc is not None, f"{self.name} was never started"
        return self.proc.pid

    def start(self) -> None:
        self.starts += 1
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            log.write(f"--- chaos: start #{self.starts} of {self.name} at {time.time():.3f}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(self.argv, env=self.env, cwd=self.cwd, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def members(self) -> list[int]:
        """The session's live processes (the leader, its tree, and orphans that left the tree)."""
        return session_members(self.pid) if self.proc is not None else []

    def kill(self) -> None:
        """SIGKILL the whole session at once: a crash, not a shutdown."""
        if self.proc is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGSTOP)  # a supervisor must not respawn while we collect its tree
        for _ in range(3):
            if not signal_pids(self.members(), signal.SIGKILL):
                break
            time.sleep(0.05)
        self._reap(5.0)

    def stop(self, timeout: float = 10.0) -> None:
        """SIGTERM (graceful), then SIGKILL whatever of the session is left."""
        if self.proc is None:
            return
        signal_pids(self.members(), signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.members() and time.monotonic() < deadline:
            self.proc.poll()
            time.sleep(0.1)
        self.kill()

    def _reap(self, timeout: float) -> None:
        assert self.proc is not None
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=timeout)

    def tail(self, lines: int = 30) -> str:
        if not self.log_path.exists():
            return ""
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
