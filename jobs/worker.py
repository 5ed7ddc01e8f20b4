"""Worker entry point: load settings once, preload heavy modules, then run RQ workers (JSON serializer).

Equivalent to `rq worker <queue> --with-scheduler -S json --maintenance-interval 60`, plus the
embedded Redis when REDIS_URL is unset. Heavy imports happen here, before RQ forks a work-horse per job.
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import sys

from rq import Worker
from rq.serializers import JSONSerializer

from bot import logs
from bot.settings import Settings, load_settings
from jobs import drain, runtime  # noqa: F401  (preload: the horse inherits imported modules)
from jobs.queues import rq_queue_name
from memory.store import resolve_url, rq_client
from routing.policy import policy_from


def run_one(settings: Settings, queue_name: str, url: str, name: str | None) -> None:
    logs.setup(settings.log_level)
    runtime.configure(settings)
    conn = rq_client(url)
    queue = rq_queue_name(settings.bot_profile, queue_name)
    worker = Worker([queue], connection=conn, serializer=JSONSerializer, maintenance_interval=60, name=name)
    worker.work(with_scheduler=True, logging_level=settings.log_level)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--queue", action="append", help="queue to serve (default: every routing queue)")
    parser.add_argument("--name", default=None, help="worker name prefix")
    args = parser.parse_args(argv)
    settings = load_settings()
    url = resolve_url(settings)
    queues = args.queue or policy_from(settings).queue_names
    base = args.name or f"{socket.gethostname()}-{multiprocessing.current_process().pid}"
    if len(queues) == 1:
        run_one(settings, queues[0], url, base)
        return
    # One worker per queue, so each uses RQ's reliable single-queue dequeue (BLMOVE).
    procs = [multiprocessing.Process(target=run_one, args=(settings, q, url, f"{base}-{q}")) for q in queues]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    sys.exit(max(p.exitcode or 0 for p in procs))


if __name__ == "__main__":
    main()
