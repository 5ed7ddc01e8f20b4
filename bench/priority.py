"""Opt-in (`--priority`): raise the bench's processes above other work on a shared machine, via Linux autogroups.

With autogroups on (the default on most distributions), the scheduler shares the CPUs between sessions
first, so a plain `nice` inside one session changes nothing against other sessions. Every process the bench
starts runs in a session of its own (servers, Redis, load generators, wrk), and `boost` sets each of those
sessions' autogroup nice value. The caller's own session is never touched. Needs root for negative values.
"""

from __future__ import annotations

import sys
from pathlib import Path

ENABLED = Path("/proc/sys/kernel/sched_autogroup_enabled")


def available() -> bool:
    try:
        return ENABLED.read_text().strip() == "1"
    except OSError:
        return False


def boost(pids: list[int], nice: int) -> None:
    """Set the autogroup nice value of each pid's session; warn (once per pid) instead of failing."""
    for pid in pids:
        try:
            Path(f"/proc/{pid}/autogroup").write_text(str(nice))
        except OSError as exc:
            print(f"--priority: cannot set autogroup of pid {pid}: {exc}", file=sys.stderr)
