"""The elastic worker pool's arithmetic: default sizes from the host's memory, validation, when to grow.

Everything here is pure except `mem_total_bytes` (reads /proc/meminfo); jobs/worker.py applies it.

Sizes are per host (one supervisor), across the queues it serves; each queue always keeps at least one
worker, since an RQ worker here serves exactly one queue.

Default sizing (WORKER_MIN / WORKER_MAX unset):

    WORKER_MAX = clamp(MemTotal / 256 MiB, 4, 256)       # 1 GiB → 4, 4 GiB → 16, 16 GiB → 64, ≥ 64 GiB → 256
    WORKER_MIN = min(2, WORKER_MAX)

An in-flight run costs an RQ worker plus its work-horse, both forks of one warmed-up, gc-frozen parent
(measured in bench/elastic.py: ~10–15 MB PSS together, a few times that at the peak of a large context).
256 MiB per run budgets ~64 MB per run against a quarter of the host's memory, leaving the rest to the web
processes, Redis and the page cache, so a burst can never push the host into swap. Runs wait on the model
(10–60 s a turn), not on the CPU, so the core count does not bound them; 256 caps Redis connections (each
RQ worker holds two plus its pub/sub) and fork storms. Two workers are kept warm so a lone message never
waits for a fork, and a second one is served at once while the first runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

MIB = 1024 * 1024
BYTES_PER_WORKER = 256 * MIB
MAX_FLOOR, MAX_CEILING = 4, 256
DEFAULT_MIN = 2
FALLBACK_MEM_BYTES = 2048 * MIB  # when /proc/meminfo cannot be read (not Linux): sized as a 2 GiB host


class PoolConfigError(ValueError):
    """WORKER_MIN / WORKER_MAX / WORKER_CONCURRENCY that cannot describe a pool; stops the supervisor at start."""


@dataclass(frozen=True)
class PoolSize:
    """Per host. `fixed`: WORKER_CONCURRENCY workers per queue, never more, never fewer (min == max)."""

    min: int
    max: int
    idle_seconds: float
    fixed: bool = False

    @property
    def elastic(self) -> bool:
        return not self.fixed and self.max > self.min


def mem_total_bytes(meminfo: str | None = None) -> int:
    """MemTotal from /proc/meminfo (or the given text); FALLBACK_MEM_BYTES when it cannot be read."""
    if meminfo is None:
        try:
            meminfo = Path("/proc/meminfo").read_text()
        except OSError:
            return FALLBACK_MEM_BYTES
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            if len(parts) >= 2 and parts[1].isdigit():
                return int(parts[1]) * 1024 if parts[2:3] in ([], ["kB"]) else int(parts[1])
    return FALLBACK_MEM_BYTES


def default_max(mem_bytes: int) -> int:
    return max(MAX_FLOOR, min(MAX_CEILING, mem_bytes // BYTES_PER_WORKER))


def size_pool(*, queues: int, concurrency: int | None, minimum: int | None, maximum: int | None,
              idle_seconds: float, mem_bytes: int) -> PoolSize:
    """The pool for this host, or PoolConfigError naming the variables to fix.

    `concurrency` (WORKER_CONCURRENCY) wins: a fixed pool of that many workers per queue, as before the
    elastic pool. Else WORKER_MIN..WORKER_MAX across all queues, each unset bound from the host's memory,
    and at least one worker per queue."""
    if queues < 1:
        raise PoolConfigError("no queue to serve")
    if concurrency is not None:
        if concurrency < 1:
            raise PoolConfigError(f"WORKER_CONCURRENCY={concurrency} must be at least 1")
        total = concurrency * queues
        return PoolSize(total, total, idle_seconds, fixed=True)
    if idle_seconds <= 0:
        raise PoolConfigError(f"WORKER_IDLE_SECONDS={idle_seconds:g} must be positive")
    top = maximum if maximum is not None else max(default_max(mem_bytes), queues)
    low = minimum if minimum is not None else max(min(DEFAULT_MIN, top), queues)
    if low < 1 or top < 1:
        raise PoolConfigError(f"WORKER_MIN={low} and WORKER_MAX={top} must be at least 1")
    if top < queues:
        raise PoolConfigError(f"WORKER_MAX={top} is below the {queues} queues this host serves; each queue needs "
                              "a worker (raise WORKER_MAX, or serve fewer queues with --queue)")
    if low > top:
        why = "" if maximum is not None else " (the default for this host's memory)"
        raise PoolConfigError(f"WORKER_MIN={low} is above WORKER_MAX={top}{why}; set WORKER_MIN ≤ WORKER_MAX "
                              "(or WORKER_CONCURRENCY for a fixed pool)")
    return PoolSize(max(low, queues), top, idle_seconds)


def core_slots(queues: Sequence[str], size: PoolSize) -> list[str]:
    """The queue of each always-kept worker: `size.min` spread evenly, at least one per queue, in queue order."""
    n = len(queues)
    return [q for i, q in enumerate(queues) for _ in range(size.min // n + (1 if i < size.min % n else 0))]


def to_start(*, alive: Mapping[str, int], busy: Mapping[str, int], waiting: Mapping[str, int],
             maximum: int) -> dict[str, int]:
    """How many extra workers to start now, per queue.

    A queue needs one more worker for each waiting run (a job queued in RQ, or a kick record the sweeper
    holds back because the queue has no room) that no idle worker will take; a worker still starting
    counts as idle, as it is about to listen. Growth stops at `maximum` workers on the host; when that
    leaves less than needed, queues share what is left in proportion to their need (largest first)."""
    need = {}
    for queue, count in waiting.items():
        idle = max(0, alive.get(queue, 0) - busy.get(queue, 0))
        if count > idle:
            need[queue] = count - idle
    room = max(0, maximum - sum(alive.values()))
    wanted = sum(need.values())
    if wanted <= room:
        return need
    share = {q: n * room // wanted for q, n in need.items()}
    left = room - sum(share.values())
    for q in sorted(need, key=lambda q: (-(need[q] * room % wanted), q))[:left]:
        share[q] += 1
    return {q: n for q, n in share.items() if n > 0}
