"""Worker entry point: WORKER_CONCURRENCY RQ workers on every routing queue, supervised.

Each worker is `rq worker <queue> -S json --maintenance-interval 60`: one queue per worker, so RQ uses its
reliable BLMOVE dequeue, and no RQ scheduler, since retries wait in our own delayed set (jobs/queues.py).
Workers are forked from this supervisor after the heavy imports, so their code pages are shared. Runs are
I/O-bound (a model call takes seconds), so the default of 8 concurrent runs per queue suits 2 cores; one
run per route is enforced by the lease, not by the worker count. A worker that dies is started again.
The first SIGTERM is a graceful stop: each worker lets its busy work-horse hand its route to a fresh run
at once (jobs/shutdown.py), then exits."""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import signal
import socket
import sys
import time
from multiprocessing.process import BaseProcess
from types import FrameType

from rq import Worker
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

from bot import logs
from bot.settings import Settings, load_settings
from jobs import drain, runtime, warmup  # noqa: F401  (preload: every horse inherits the imported modules)
from jobs.queues import rq_queue_name
from memory.store import resolve_url, rq_client
from routing.policy import policy_from

RESPAWN_MIN_S, RESPAWN_MAX_S = 1.0, 30.0


class RouteWorker(Worker):
    """RQ's forking worker whose warm shutdown also tells the busy horse, so its run hands the route over."""

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        if self.horse_pid and self.get_state() == WorkerStatus.BUSY:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.horse_pid, signal.SIGTERM)
        super().request_stop(signum, frame)


def run_one(settings: Settings, queue_name: str, url: str, name: str) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # RQ installs its own handlers in work()
    logs.setup(settings.log_level)
    runtime.configure(settings)
    warmup.prepare()
    worker = RouteWorker([rq_queue_name(settings.bot_profile, queue_name)], connection=rq_client(url),
                         serializer=JSONSerializer, maintenance_interval=60, name=name)
    worker.work(with_scheduler=False, logging_level=settings.log_level)


class Supervisor:
    """Keeps `concurrency` workers alive on each queue; forwards stop signals to them."""

    def __init__(self, settings: Settings, url: str, queues: list[str], concurrency: int, base: str) -> None:
        self.settings, self.url, self.base = settings, url, base
        self.slots = [(q, i) for q in queues for i in range(concurrency)]
        self.procs: dict[tuple[str, int], BaseProcess] = {}
        self.started: dict[tuple[str, int], float] = {}
        self.backoff: dict[tuple[str, int], float] = {}
        self.due: dict[tuple[str, int], float] = {}
        self.stopping = False
        self.ctx = multiprocessing.get_context("fork")

    def start(self, slot: tuple[str, int]) -> None:
        queue, i = slot
        name = f"{self.base}-{queue}-{i}-{os.urandom(2).hex()}"
        proc = self.ctx.Process(target=run_one, args=(self.settings, queue, self.url, name), name=name)
        proc.start()
        self.procs[slot], self.started[slot] = proc, time.monotonic()

    def stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        for proc in self.procs.values():
            if proc.pid and proc.is_alive():
                os.kill(proc.pid, signum)

    def serve(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        for slot in self.slots:
            self.start(slot)
        while not self.stopping:
            time.sleep(0.5)
            self._tend(time.monotonic())
        for proc in self.procs.values():
            proc.join()
        return 0

    def _tend(self, now: float) -> None:
        """Schedule a restart for each newly dead worker and start those that are due; slots never wait on
        each other, so after a mass kill every worker is back within one backoff."""
        for slot, proc in list(self.procs.items()):
            if slot not in self.due and not proc.is_alive():
                self.due[slot] = now + self._backoff(slot, proc, now)
        for slot, at in list(self.due.items()):
            if at <= now and not self.stopping:
                del self.due[slot]
                self.start(slot)

    def _backoff(self, slot: tuple[str, int], proc: BaseProcess, now: float) -> float:
        lived = now - self.started[slot]
        wait = RESPAWN_MIN_S if lived > RESPAWN_MAX_S else min(self.backoff.get(slot, 0.5) * 2, RESPAWN_MAX_S)
        self.backoff[slot] = wait
        print(f"worker {proc.name} exited ({proc.exitcode}); starting another in {wait:g}s", file=sys.stderr,
              flush=True)
        return wait


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", action="append", help="queue to serve (default: every routing queue)")
    parser.add_argument("--name", default=None, help="worker name prefix")
    parser.add_argument("--concurrency", type=int, default=None, help="workers per queue (WORKER_CONCURRENCY)")
    args = parser.parse_args(argv)
    settings = load_settings()
    url = resolve_url(settings)
    queues = args.queue or policy_from(settings).queue_names
    base = args.name or f"{socket.gethostname()}-{os.getpid()}"
    concurrency = args.concurrency or settings.worker_concurrency or 8  # elastic pool: jobs/pool.py (issue 16)
    sys.exit(Supervisor(settings, url, queues, concurrency, base).serve())


if __name__ == "__main__":
    main()
