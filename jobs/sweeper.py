"""The sweeper process: turns kick records into RQ drain runs, re-kicks stalled routes, keeps the bot identity.

The webhook's PUSH script queues a kick record in the same atomic step that stores the event, so the
request path costs one Redis round trip and never builds RQ jobs. Several sweepers may run: a kick is
popped by exactly one of them, and KICK takes a route's lease with SET NX.
"""

from __future__ import annotations

import logging
import signal
import threading
import time

from bot import identity, logs
from bot.settings import load_settings
from jobs import runtime
from jobs.runtime import Runtime

log = logging.getLogger(__name__)
IDENTITY_REFRESH_S = 3600
IDENTITY_RETRY_S = 2.0
MAX_WAIT_S = 1.0  # upper bound on a blocking pop, so a stop request is seen quickly


def dispatch(rt: Runtime, timeout: float) -> int:
    """Enqueue a drain run for each waiting kick record. A record lost in a crash is redone by the sweep."""
    kicks = rt.inbox.next_kicks(timeout)
    for kick in kicks:
        rt.start_run(kick.route_key, kick.token, kick.queue)
    return len(kicks)


def sweep_once(rt: Runtime) -> int:
    """Kick every dirty route whose lease is gone (crashed run, lost kick or job, exhausted retries)."""
    kicked = 0
    for rk in rt.inbox.dirty_routes():
        token = rt.inbox.kick(rk)
        if token:
            rt.start_run(rk, token)
            log.warning("route re-kicked", extra={"route_key": rk})
            kicked += 1
    return kicked


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
        self.next_sweep = self.next_identity = 0.0

    def tick(self) -> None:
        now = time.monotonic()
        if now >= self.next_identity:
            ok = _refresh_identity(self.rt)
            self.next_identity = now + (IDENTITY_REFRESH_S if ok else IDENTITY_RETRY_S)
        if now >= self.next_sweep:
            sweep_once(self.rt)
            self.next_sweep = now + self.rt.settings.sweep_interval_seconds
        wait = min(self.next_sweep, self.next_identity) - time.monotonic()
        dispatch(self.rt, timeout=max(0.05, min(wait, MAX_WAIT_S)))

    def serve(self) -> None:
        log.info("sweeper started")
        while not self.stop.is_set():
            try:
                self.tick()
            except Exception as exc:  # Redis blips and the like: report, pause briefly, go on
                log.warning("sweeper tick failed", extra={"error": f"{exc.__class__.__name__}: {exc}"})
                self.stop.wait(1.0)


def main() -> None:
    settings = load_settings()
    logs.setup(settings.log_level)
    runtime.configure(settings)
    sweeper = Sweeper(runtime.current())
    signal.signal(signal.SIGTERM, lambda *_: sweeper.stop.set())
    signal.signal(signal.SIGINT, lambda *_: sweeper.stop.set())
    sweeper.serve()


if __name__ == "__main__":
    main()
