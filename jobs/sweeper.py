"""The sweeper process: turns kick records into RQ drain runs and keeps the protocol moving.

The webhook's PUSH script queues a kick record in the same atomic step that stores the event, so the
request path costs one Redis round trip and never builds RQ jobs. The main loop only talks to Redis
and RQ: it dispatches kicks, moves due retries to the kick list, sweeps every dirty route (a full ZSCAN
per sweep, so none waits longer than one sweep), runs the watchdog and, while work is paused, probes
the failed credential, and runs each feature's periodic work (due timers into inbox events, digests). Calls to the
Open API (bot identity, admin alerts) run on a side thread, so a
Feishu outage never holds up dispatch. Several sweepers may run: a kick is popped by exactly one of
them, and KICK takes a route's lease with SET NX.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time

from core import boot, logs
from core.settings import load_settings
from feishu import identity
from jobs import doctor, watchdog
from runs import alerts, runtime
from runs.alerts import alert
from runs.queues import rq_queue_name
from runs.runtime import Runtime
from state.store import server_checks
from turn.registry import app_of, load_app

log = logging.getLogger(__name__)
IDENTITY_REFRESH_S = 3600
IDENTITY_RETRY_S = 2.0
HEALTH_CHECK_S = 3600
HELD_PAUSE_S = 0.05
MAX_WAIT_S = 1.0  # upper bound on a blocking pop, so due retries and a stop request are seen quickly
SWEEP_PAGE = 500


def dispatch(rt: Runtime, timeout: float) -> int:
    """Enqueue a drain run for each waiting kick record, while its queue has room.

    A queue has room while fewer jobs wait in it than workers serve it. Beyond that a job would only
    wait, so the kick stays in our list, where a busy work-horse takes it when its run ends (jobs/drain.py
    `chain`): under load, routes run back to back without RQ's per-job cost. A record lost in a crash
    is redone by the sweep.
    """
    kicks = rt.inbox.next_kicks(timeout)
    room = _room(rt, {kick.queue for kick in kicks})
    held = []
    for kick in kicks:
        if room[kick.queue] > 0:
            rt.start_run(kick.route_key, kick.token, kick.queue)
            room[kick.queue] -= 1
        else:
            held.append(kick)
    if held:
        rt.inbox.return_kicks(held)
        if len(held) == len(kicks):
            time.sleep(HELD_PAUSE_S)  # every queue is full: look again shortly, not in a busy loop
    return len(kicks) - len(held)


def _room(rt: Runtime, queues: set[str]) -> dict[str, int]:
    """Free places per queue: its registered workers minus the jobs already waiting in it."""
    from rq import Queue, Worker

    room = {}
    for name in queues:
        queue = Queue(rq_queue_name(rt.settings.bot_profile, name), connection=rt.rq)
        room[name] = max(1, Worker.count(queue=queue)) - queue.count
    return room


def sweep_once(rt: Runtime) -> int:
    """Kick every dirty route nothing will run (crashed run, lost kick record or job, expired backoff)."""
    kicked, page = 0, []
    listed = rt.inbox.listed_kicks()
    for rk, _score in rt.state.zscan_iter(rt.keys.dirty, count=SWEEP_PAGE):
        page.append((str(rk), rt.queue_of(str(rk))))
        if len(page) >= SWEEP_PAGE:
            kicked += rt.inbox.kick_many(page, listed)
            page = []
    if page:
        kicked += rt.inbox.kick_many(page, listed)
    rt.inbox.trim_index(rt.keys.routes)  # the index of all routes, trimmed here rather than by every event
    if kicked:
        log.warning("routes re-kicked by the sweep", extra={"reason": f"{kicked} routes"})
    return kicked


def recover(rt: Runtime) -> int:
    """Re-kick the routes whose run died mid-turn: registered as running, but their run lease has lapsed (a
    living run renews it every third of RUN_LEASE_SECONDS). Costs one round trip per in-flight run, none per
    idle route; KICK decides as in the full sweep, so a route another run already took is left alone."""
    routes = [str(rk) for rk in rt.state.zrange(rt.keys.running, 0, -1)]
    if not routes:
        return 0
    pipe = rt.state.pipeline(transaction=False)
    for rk in routes:
        pipe.exists(rt.keys.lease(rk))
    lapsed = [rk for rk, held in zip(routes, pipe.execute(), strict=True) if not held]
    if not lapsed:
        return 0
    kicked = rt.inbox.kick_many([(rk, rt.queue_of(rk)) for rk in lapsed], rt.inbox.listed_kicks(), front=True)
    if kicked:
        log.warning("routes of dead runs taken over", extra={"reason": f"{kicked} routes"})
    return kicked


def check_redis(rt: Runtime) -> dict[str, str]:
    """Warn loudly (log, metric, /readyz) when Redis could lose or evict our state."""
    checks = server_checks(rt.state)
    rt.state.hset(rt.keys.health, mapping=dict(checks))  # type: ignore[arg-type]
    for name, verdict in checks.items():
        if verdict != "ok":
            log.error("redis is not safe for production", extra={"reason": name, "error": verdict})
    return checks


class Paused:
    """While a credential is broken: no dispatch, a probe every PAUSE_PROBE_SECONDS, resume when it works."""

    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.next_probe = 0.0

    def components(self) -> dict[str, str]:
        return {str(k): str(v) for k, v in self.rt.state.hgetall(self.rt.keys.paused).items()}

    def probe(self, now: float) -> bool:
        """True when work may resume (nothing paused, or every paused credential works again)."""
        paused = self.components()
        if not paused or now < self.next_probe:
            return not paused
        self.next_probe = now + self.rt.settings.pause_probe_seconds
        probes = app_of(self.rt).probes
        for component in paused:
            try:
                if component == "model":
                    self.rt.llm.probe()
                elif component in probes:  # a feature's own (the items table)
                    probes[component].run(self.rt)
                else:
                    self.rt.feishu.bot_open_id()
            except Exception as exc:
                log.warning("still paused", extra={"reason": component, "error": f"{exc.__class__.__name__}: {exc}"})
                continue
            self.rt.state.hdel(self.rt.keys.paused, component)
            since = json.loads(paused[component]).get("since", now)
            log.warning("work resumed", extra={"reason": component, "duration_ms": int((now - since) * 1000)})
            alert(self.rt, f"✅ {component} 已恢复，暂停期间保留的消息正在处理。")
        return not self.components()


class SideTasks(threading.Thread):
    """Open API work off the dispatch loop: the bot's identity, the preflight, the features' side work (the items
    table's check) and admin alerts."""

    def __init__(self, rt: Runtime, stop: threading.Event) -> None:
        super().__init__(daemon=True, name="sweeper-side")
        self.rt, self.stop = rt, stop
        self.next_side: dict[str, float] = {}

    def run(self) -> None:
        next_identity = next_preflight = 0.0
        while not self.stop.is_set():
            now = time.monotonic()
            if now >= next_identity:
                ok = _refresh_identity(self.rt)
                next_identity = now + (IDENTITY_REFRESH_S if ok else IDENTITY_RETRY_S)
            if now >= next_preflight:
                _preflight(self.rt)
                next_preflight = now + IDENTITY_REFRESH_S
            self._side(now)
            try:
                alerts.post_pending(self.rt)
            except Exception as exc:
                log.warning("alerts not posted", extra={"error": f"{exc.__class__.__name__}: {exc}"})
            self.stop.wait(1.0)

    def _side(self, now: float) -> None:
        """Each feature's side work when due; a failed run (False, or an error) comes back after its `retry`."""
        for task in app_of(self.rt).periodic:
            if not task.side or now < self.next_side.get(task.name, 0.0):
                continue
            try:
                ok = task.run(self.rt) is not False
            except Exception as exc:
                log.warning(f"{task.name} failed", extra={"reason": task.name,
                                                          "error": f"{exc.__class__.__name__}: {exc}"})
                ok = False
            wait = task.every(self.rt.settings) if ok or task.retry is None else task.retry(self.rt.settings)
            self.next_side[task.name] = now + wait


def _preflight(rt: Runtime) -> None:
    """`python -m bot.doctor`'s checks at start-up and hourly, summarised for /readyz (`preflight`)."""
    try:
        rows = doctor.check(rt.settings, rt.feishu, app=app_of(rt))
        found = doctor.summary(rows)
        rt.state.set(rt.keys.preflight, json.dumps(found, ensure_ascii=False))
    except Exception as exc:
        log.warning("preflight failed", extra={"error": f"{exc.__class__.__name__}: {exc}"})
        return
    for row in found["missing"]:
        level = logging.ERROR if row["required"] else logging.WARNING
        log.log(level, "preflight: missing", extra={"reason": row["feature"], "error": f"needs {row['needs']}"})


def _refresh_identity(rt: Runtime) -> bool:
    try:
        identity.refresh(rt.feishu, rt.state, rt.keys)
        return True
    except Exception as exc:
        log.warning("bot identity refresh failed", extra={"error": f"{exc.__class__.__name__}: {exc}"})
        return False


class Sweeper:
    def __init__(self, rt: Runtime) -> None:
        self.rt = rt
        self.stop = threading.Event()
        self.paused = Paused(rt)
        self.next_sweep = self.next_health = self.next_recovery = 0.0
        self.next_periodic: dict[str, float] = {}

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self.next_health:
            check_redis(self.rt)
            self.next_health = now + HEALTH_CHECK_S
        if not self.paused.probe(time.time()):
            self.stop.wait(MAX_WAIT_S)  # kicks wait in their list; routes stay dirty; nothing is lost
            return
        self.rt.inbox.pop_due()
        if now >= self.next_sweep:
            watchdog.check(self.rt)
            sweep_once(self.rt)
            self.next_sweep = now + self.rt.settings.sweep_interval_seconds
        if now >= self.next_recovery:
            recover(self.rt)
            self.next_recovery = now + self.rt.settings.recovery_check_seconds
        self._periodic(now)
        wait = min(self.next_sweep, self.next_recovery, *self.next_periodic.values()) - time.monotonic()
        dispatch(self.rt, timeout=max(0.05, min(wait, MAX_WAIT_S)))

    def _periodic(self, now: float) -> None:
        """Each feature's periodic work when it is due: due timers, a digest's next slot, a consolidation slot."""
        for task in app_of(self.rt).periodic:
            if task.side or now < self.next_periodic.get(task.name, 0.0):
                continue
            self.next_periodic[task.name] = now + task.every(self.rt.settings)
            try:
                task.run(self.rt)
            except Exception:  # one feature's work failing must not stop the others or the sweep
                log.exception(f"periodic {task.name} failed", extra={"reason": task.name})

    def serve(self) -> None:
        log.info("sweeper started")
        SideTasks(self.rt, self.stop).start()
        while not self.stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # Redis blips and the like: report, pause briefly, go on
                log.warning("sweeper tick failed", extra={"error": f"{exc.__class__.__name__}: {exc}"})
                self.stop.wait(1.0)


def main() -> None:
    settings = load_settings()
    load_app(settings)  # every feature's settings too, before Redis starts (a bad one exits here, naming it)
    logs.setup(settings.log_level, settings.log_format)
    runtime.configure(settings)
    sweeper = Sweeper(runtime.current())
    signal.signal(signal.SIGTERM, lambda *_: sweeper.stop.set())
    signal.signal(signal.SIGINT, lambda *_: sweeper.stop.set())
    sweeper.serve()


if __name__ == "__main__":
    boot.started()  # the imports are done (core/boot.py)
    main()
