"""Worker entry point: an elastic pool of RQ workers on every routing queue, supervised.

Each worker is `rq worker <queue> -S json --maintenance-interval 60`: one queue per worker, so RQ uses its
reliable BLMOVE dequeue, and no RQ scheduler, since retries wait in our own delayed set (runs/queues.py).

Pool size (jobs/pool.py): WORKER_MIN workers are always kept (a worker that dies is started again);
when runs wait — jobs queued in RQ, or kick records the sweeper holds back because every worker is taken —
the supervisor starts extra workers at once, up to WORKER_MAX per host. An extra worker exits by itself
after WORKER_IDLE_SECONDS without a job and is not replaced; under light steady load, where RQ hands jobs
to the idle workers in turn so none is ever idle that long, the supervisor asks the surplus to retire
after their current job. WORKER_CONCURRENCY=N instead keeps a fixed N workers per queue, as before.
Workers die with their supervisor (die_with), even when it is SIGKILLed: no orphaned pool survives it, and
their horses with them (a warm stop, then SIGKILL after ORPHAN_GRACE_S); a horse whose worker dies takes no
further step of its run.

Workers are forked from this supervisor after the heavy imports, a no-network warm-up of the SDKs
(jobs/warmup.py) and `gc.freeze()`, so their pages and their work-horses' stay shared (copy-on-write):
a run in flight costs little more than the objects it creates. The first SIGTERM is a graceful stop:
each worker lets its busy work-horse hand its route to a fresh run at once (runs/shutdown.py), then exits.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import gc
import logging
import math
import multiprocessing
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import Any

import redis
from rq import Queue, Worker
from rq.serializers import JSONSerializer
from rq.worker import WorkerStatus

from core import boot, logs
from core.keys import Keys
from core.settings import Settings, load_settings
from jobs import drain, pool, warmup  # noqa: F401  (preload: every horse inherits the imported modules)
from routing.policy import policy_from
from runs import runtime, shutdown
from runs.inbox import Kick
from runs.queues import rq_queue_name
from state.store import resolve_url, rq_client
from turn.registry import load_app

log = logging.getLogger("jobs.worker")
RESPAWN_MIN_S, RESPAWN_MAX_S = 1.0, 30.0
TICK_S = 0.2  # how often the supervisor looks at the queues (one pipelined Redis round trip)
STATUS_TTL_S = 30
RETIRE_SIGNAL = signal.SIGUSR2
FIRST_JOB_GRACE_S = 10  # a fresh extra worker waits at least this long for its first job (see RouteWorker)


def gc_freeze_enabled() -> bool:
    """`WORKER_GC_FREEZE=0` turns the freeze off (for bench/elastic.py's comparison; not a user setting)."""
    return os.environ.get("WORKER_GC_FREEZE", "1") != "0"


class RouteWorker(Worker):
    """RQ's forking worker whose warm shutdown also tells the busy horse, so its run hands the route over.

    RETIRE_SIGNAL (from the supervisor, shrinking the pool) is gentler: the worker finishes its current
    job, if any, and exits before taking the next one; it never interrupts a dequeue, so no job is lost.

    With `max_idle_time` (an extra worker), the wait for the first job is at least FIRST_JOB_GRACE_S: the
    worker was started for a run that waits, and under a burst the sweeper may take a moment to hand it
    over; exiting before would leave that run to wait a whole turn for a busy horse."""

    retiring = False
    dequeued = False
    stop_asked = False  # a warm stop was asked: a horse forked from now on hands its route over at once
    told = 0  # the horse (pid) already sent a SIGTERM

    def request_stop(self, signum: int, frame: FrameType | None) -> None:
        self.stop_asked = True
        self._tell_horse()
        super().request_stop(signum, frame)

    def _tell_horse(self) -> None:
        if self.horse_pid and self.told != self.horse_pid and self.get_state() == WorkerStatus.BUSY:
            self.told = self.horse_pid
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.horse_pid, signal.SIGTERM)

    def fork_work_horse(self, job: Any, queue: Any) -> None:
        """A stop asked before the fork reaches the horse as its inherited `stop_asked`; one asked while forking,
        before RQ noted the horse's pid, as a SIGTERM sent here (the horse's early handler takes it)."""
        super().fork_work_horse(job, queue)
        if self.stop_asked:
            self._tell_horse()

    def request_retire(self, _signum: int, _frame: FrameType | None) -> None:
        self.retiring = True

    def main_work_horse(self, job: Any, queue: Any) -> None:
        """In the horse: watch the RQ worker that forked it (`self.pid` is still the worker's); a stop its worker
        was asked before forking it means the job hands its route over before its first step."""
        if self.stop_asked:
            shutdown.before_start()
        if self.pid:
            threading.Thread(target=_watch_worker, args=(self.pid,), daemon=True, name="worker-watch").start()
        super().main_work_horse(job, queue)

    def setup_work_horse_signals(self) -> None:
        """RQ's horse dies of a SIGTERM until its job installs a handler (runs/shutdown.py `install`); ours
        only notes it, so a stop forwarded right after the fork still lets the job hand its route over."""
        super().setup_work_horse_signals()
        signal.signal(signal.SIGTERM, shutdown.before_start)

    def _install_signal_handlers(self) -> None:
        super()._install_signal_handlers()
        signal.signal(RETIRE_SIGNAL, self.request_retire)

    def dequeue_job_and_maintain_ttl(self, timeout: int | None, max_idle_time: int | None = None) -> Any:
        if self.retiring:
            return None  # work() ends its loop as after max_idle_time
        if max_idle_time is not None and not self.dequeued:
            max_idle_time = max(max_idle_time, FIRST_JOB_GRACE_S)
        result = super().dequeue_job_and_maintain_ttl(timeout, max_idle_time)
        self.dequeued = self.dequeued or result is not None
        return result


PR_SET_PDEATHSIG = 1  # linux/prctl.h
PARENT_POLL_S = 0.5  # how often a worker or a horse looks whether its parent is still there
ORPHAN_GRACE_S = 5.0  # a worker whose supervisor died: its warm stop's time, then its horse and it end at once


def die_with(parent: int) -> None:
    """This worker ends when its supervisor ends, however the supervisor ends (SIGKILL included), so a restarted
    supervisor never starts a second pool beside orphans re-parented to PID 1.

    The kernel sends SIGTERM at once (PR_SET_PDEATHSIG; it fires when the *thread* that forked us ends, and the
    supervisor forks from its main thread): a warm stop, in which a horse waiting on the model hands its route
    over. A watcher thread sends it where prctl is missing, and ends the worker ORPHAN_GRACE_S later whatever its
    horse is doing (SIGKILL to the horse's process group, then this process): a warm stop waits for the horse,
    and a horse in a step that cannot be interrupted (an Open API call, a tool) could outlive us by minutes."""
    armed = _pdeathsig(signal.SIGTERM)
    threading.Thread(target=_watch_supervisor, args=(parent, armed), daemon=True, name="parent-watch").start()
    if os.getppid() != parent:  # the supervisor died before the lines above took effect
        os._exit(0)


def _pdeathsig(sig: int) -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False


def wait_parent_gone(parent: int) -> None:
    while os.getppid() == parent:
        time.sleep(PARENT_POLL_S)


def _watch_supervisor(parent: int, armed: bool) -> None:
    wait_parent_gone(parent)
    if not armed:
        os.kill(os.getpid(), signal.SIGTERM)  # with PR_SET_PDEATHSIG the kernel did; twice would be a cold stop
    time.sleep(ORPHAN_GRACE_S)
    horse = _current.horse_pid if _current is not None else 0
    if horse:
        with contextlib.suppress(OSError):
            os.killpg(horse, signal.SIGKILL)  # RQ's horse leads its own process group
    os._exit(1)


def _watch_worker(worker: int) -> None:
    """In a work-horse: once its RQ worker is gone, the run takes no further step (runs/shutdown.py)."""
    wait_parent_gone(worker)
    shutdown.orphaned()


_current: RouteWorker | None = None  # this process's RQ worker (for the watcher's hard stop)


def run_one(settings: Settings, queue_name: str, url: str, name: str, idle_seconds: float | None = None,
            parent: int = 0) -> None:
    """One RQ worker (a forked child of the supervisor). `idle_seconds`: exit after that long without a job."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # RQ installs its own handlers in work()
    if parent:
        die_with(parent)
    signal.signal(RETIRE_SIGNAL, signal.SIG_IGN)  # until work() installs RouteWorker's
    logs.setup(settings.log_level, settings.log_format)
    runtime.configure(settings)
    warmup.prepare()  # a no-op when the supervisor did it before forking
    worker = RouteWorker([rq_queue_name(settings.bot_profile, queue_name)], connection=rq_client(url),
                         serializer=JSONSerializer, maintenance_interval=60, name=name)
    global _current
    _current = worker
    if gc_freeze_enabled():
        gc.freeze()  # every work-horse forked from here leaves the worker's objects' pages alone
    idle = max(1, math.ceil(idle_seconds)) if idle_seconds else None
    worker.work(with_scheduler=False, logging_level=logs.rq_level(settings.log_level),  # type: ignore[arg-type]
                max_idle_time=idle)


@dataclass
class Extra:
    queue: str
    proc: BaseProcess
    retiring: bool = False


@dataclass(frozen=True)
class Seen:
    """One look at the queues: per queue, waiting runs and busy workers; name → RQ state."""

    waiting: dict[str, int]
    busy: dict[str, int]
    states: dict[str, str]


class Supervisor:
    """Keeps the pool's core workers alive on each queue, grows it while runs wait, forwards stop signals."""

    def __init__(self, settings: Settings, url: str, queues: list[str], size: pool.PoolSize, base: str) -> None:
        self.settings, self.url, self.base, self.size, self.queues = settings, url, base, size, queues
        per_queue: dict[str, int] = {}
        self.slots = []
        for q in pool.core_slots(queues, size):
            self.slots.append((q, per_queue.get(q, 0)))
            per_queue[q] = per_queue.get(q, 0) + 1
        self.procs: dict[tuple[str, int], BaseProcess] = {}
        self.started: dict[tuple[str, int], float] = {}
        self.backoff: dict[tuple[str, int], float] = {}
        self.due: dict[tuple[str, int], float] = {}
        self.extras: dict[str, Extra] = {}
        self.grow_after, self.grow_backoff = 0.0, 0.0
        self.window_start, self.low_surplus = time.monotonic(), dict.fromkeys(queues, math.inf)
        self.redis_failing = False
        self.stopping = False
        self.ctx = multiprocessing.get_context("fork")
        self.freeze = gc_freeze_enabled()
        self.keys = Keys(settings.bot_profile)
        self.rq = rq_client(url)
        self.base_name = base
        self.status_key = self.keys.pool(base)

    # -- processes ---------------------------------------------------------------------------------------

    def _fork(self, queue: str, name: str, idle_seconds: float | None) -> BaseProcess:
        proc = self.ctx.Process(target=run_one, args=(self.settings, queue, self.url, name, idle_seconds, os.getpid()),
                                name=name)
        if self.freeze:
            gc.freeze()  # O(1): whatever the supervisor allocated since the last fork joins the shared pages
        proc.start()
        return proc

    def start(self, slot: tuple[str, int]) -> None:
        queue, i = slot
        name = f"{self.base}-{queue}-{i}-{os.urandom(2).hex()}"
        self.procs[slot], self.started[slot] = self._fork(queue, name, None), time.monotonic()

    def start_extra(self, queue: str) -> None:
        name = f"{self.base}-{queue}-x-{os.urandom(3).hex()}"
        self.extras[name] = Extra(queue, self._fork(queue, name, self.size.idle_seconds))

    def alive(self) -> dict[str, int]:
        out = dict.fromkeys(self.queues, 0)
        for (queue, _), proc in self.procs.items():
            out[queue] += proc.is_alive()
        for extra in self.extras.values():
            out[extra.queue] += 1
        return out

    def pool_size(self) -> int:
        return sum(self.alive().values())

    def stop(self, signum: int, _frame: FrameType | None) -> None:
        self.stopping = True
        for proc in self._all_procs():
            if proc.pid and proc.is_alive():
                os.kill(proc.pid, signum)

    def _all_procs(self) -> list[BaseProcess]:
        return [*self.procs.values(), *(e.proc for e in self.extras.values())]

    def serve(self) -> int:
        signal.signal(signal.SIGTERM, self.stop)
        signal.signal(signal.SIGINT, self.stop)
        for slot in self.slots:
            self.start(slot)
        mode = "fixed" if self.size.fixed else f"{self.size.min}..{self.size.max}"
        log.info(f"worker pool started: {len(self.slots)} workers ({mode}) on {', '.join(self.queues)}",
                 extra={"reason": "start"})
        while not self.stopping:
            time.sleep(TICK_S)
            now = time.monotonic()
            self._tend(now)
            if self.size.elastic and not self.stopping:
                self._elastic(now)
        for proc in self._all_procs():
            proc.join()
        return 0

    def _tend(self, now: float) -> None:
        """Schedule a restart for each newly dead core worker and start those that are due; slots never wait
        on each other, so after a mass kill every worker is back within one backoff."""
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

    # -- elasticity --------------------------------------------------------------------------------------

    def _elastic(self, now: float) -> None:
        self._reap_extras(now)
        try:
            seen = self._look()
        except redis.RedisError as exc:
            if not self.redis_failing:
                log.warning("worker pool cannot read the queues", extra={"error": f"{exc.__class__.__name__}: {exc}"})
            self.redis_failing = True
            return
        self.redis_failing = False
        alive = self.alive()
        if now >= self.grow_after:
            self._grow(alive, seen)
        self._shrink(now, alive, seen)

    def _reap_extras(self, now: float) -> None:
        gone = [(name, e) for name, e in self.extras.items() if not e.proc.is_alive()]
        if not gone:
            return
        crashed = 0
        for name, extra in gone:
            del self.extras[name]
            extra.proc.join(0)
            crashed += extra.proc.exitcode != 0
        if crashed:  # extras that die at start (Redis down, a bad deploy) must not become a fork loop
            self.grow_backoff = min(max(self.grow_backoff * 2, RESPAWN_MIN_S), RESPAWN_MAX_S)
            self.grow_after = now + self.grow_backoff
        else:
            self.grow_backoff = 0.0
        log.info(f"worker pool shrank to {self.pool_size()} ({len(gone)} extra workers exited"
                 f"{f', {crashed} with an error' if crashed else ''})", extra={"reason": "shrink"})

    def _look(self) -> Seen:
        """Waiting runs per queue and the RQ state of each live worker, in one pipelined round trip; also
        publishes the last tick's figures (pool size, busy, waiting) for operators, with a TTL."""
        names = [n for n in (p.name for p in self._all_procs()) if n]
        pipe = self.rq.pipeline(transaction=True)  # the status hash and the pools set with their expiry (MULTI)
        for q in self.queues:
            pipe.llen(Queue.redis_queue_namespace_prefix + rq_queue_name(self.settings.bot_profile, q))
        several = len(self.queues) > 1
        if several:
            pipe.lrange(self.keys.kicks, 0, self.size.max - 1)
        else:
            pipe.llen(self.keys.kicks)
        for name in names:
            pipe.hget(Worker.redis_worker_namespace_prefix + name, "state")
        pipe.hset(self.status_key, mapping=self._status())  # type: ignore[arg-type]
        pipe.expire(self.status_key, STATUS_TTL_S)
        pipe.zadd(self.keys.pools, {self.base_name: time.time()})  # the console lists the live ones
        pipe.zremrangebyscore(self.keys.pools, "-inf", time.time() - STATUS_TTL_S)
        pipe.expire(self.keys.pools, STATUS_TTL_S)
        replies = pipe.execute()
        queued = dict(zip(self.queues, replies[:len(self.queues)], strict=True))
        kicks = replies[len(self.queues)]
        waiting = {q: int(n) for q, n in queued.items()}
        if several:
            for raw in kicks:
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    queue = Kick.loads(raw.decode() if isinstance(raw, bytes) else raw).queue
                    if queue in waiting:
                        waiting[queue] += 1
        else:
            waiting[self.queues[0]] += int(kicks)
        states = {}
        for name, raw in zip(names, replies[len(self.queues) + 1:len(self.queues) + 1 + len(names)], strict=True):
            states[name] = raw.decode() if isinstance(raw, bytes) else str(raw or "")
        busy = dict.fromkeys(self.queues, 0)
        for (queue, _), proc in self.procs.items():
            busy[queue] += proc.name in states and states[proc.name] == WorkerStatus.BUSY
        for name, extra in self.extras.items():
            busy[extra.queue] += states.get(name) == WorkerStatus.BUSY
        self.last = Seen(waiting, busy, states)
        return self.last

    def _status(self) -> dict[str, str | int | float]:
        last = getattr(self, "last", None)
        return {"size": self.pool_size(), "min": self.size.min, "max": self.size.max,
                "busy": sum(last.busy.values()) if last else 0, "waiting": sum(last.waiting.values()) if last else 0,
                "pid": os.getpid(), "at": round(time.time(), 3)}

    def _grow(self, alive: dict[str, int], seen: Seen) -> None:
        plan = pool.to_start(alive=alive, busy=seen.busy, waiting=seen.waiting, maximum=self.size.max)
        if not plan:
            return
        for queue, n in plan.items():
            for _ in range(n):
                self.start_extra(queue)
        self.window_start, self.low_surplus = time.monotonic(), dict.fromkeys(self.queues, math.inf)  # see _shrink
        log.info(f"worker pool grew to {self.pool_size()} (+{sum(plan.values())}; {sum(seen.waiting.values())} runs "
                 f"waiting, {sum(seen.busy.values())} busy)", extra={"reason": "grow"})

    def _shrink(self, now: float, alive: dict[str, int], seen: Seen) -> None:
        """Retire the extras a queue never needed over the last WORKER_IDLE_SECONDS (counted again from each
        growth): RQ gives jobs to idle workers in turn, so under light steady load no single worker is ever
        idle that long by itself."""
        for q in self.queues:
            surplus = alive[q] - seen.busy[q] - seen.waiting[q]
            self.low_surplus[q] = min(self.low_surplus[q], surplus)
        if now - self.window_start < self.size.idle_seconds:
            return
        for q in self.queues:
            candidates = [e for e in self.extras.items() if e[1].queue == q and not e[1].retiring]
            retiring = sum(1 for e in self.extras.values() if e.queue == q and e.retiring)
            spare = int(min(self.low_surplus[q], alive[q] - self._core_on(q))) - retiring
            idle_first = sorted(candidates, key=lambda e: seen.states.get(e[0]) == WorkerStatus.BUSY)
            for _name, extra in idle_first[:max(0, spare)]:
                if extra.proc.pid:
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(extra.proc.pid, RETIRE_SIGNAL)
                extra.retiring = True
        self.window_start, self.low_surplus = now, dict.fromkeys(self.queues, math.inf)

    def _core_on(self, queue: str) -> int:
        return sum(1 for q, _ in self.slots if q == queue)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queue", action="append", help="queue to serve (default: every routing queue)")
    parser.add_argument("--name", default=None, help="worker name prefix")
    parser.add_argument("--concurrency", type=int, default=None,
                        help="a fixed pool of N workers per queue (WORKER_CONCURRENCY)")
    args = parser.parse_args(argv)
    settings = load_settings()
    load_app(settings)  # every feature's settings too, before anything starts (a bad one exits here, naming it)
    url = resolve_url(settings)
    queues = args.queue or policy_from(settings).queue_names
    base = args.name or f"{socket.gethostname()}-{os.getpid()}"
    try:
        size = pool.size_pool(queues=len(queues), concurrency=args.concurrency or settings.worker_concurrency,
                              minimum=settings.worker_min, maximum=settings.worker_max,
                              idle_seconds=settings.worker_idle_seconds, mem_bytes=pool.mem_total_bytes())
    except pool.PoolConfigError as exc:
        sys.exit(f"jobs.worker: {exc}")
    logs.setup(settings.log_level, settings.log_format)
    runtime.configure(settings)
    warmup.prepare()  # once, here: every worker and work-horse forked below starts warm
    if gc_freeze_enabled():
        gc.collect()
        boot.started()
    else:
        gc.enable()  # paused since `python -m` imported this package (core/boot.py)
    sys.exit(Supervisor(settings, url, queues, size, base).serve())


if __name__ == "__main__":
    main()
