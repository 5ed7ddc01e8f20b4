"""The sweeper process: keeps the bot identity fresh and re-kicks routes that have work but no live run."""

from __future__ import annotations

import logging
import signal
import threading
import time

from bot import identity, logs
from bot.settings import load_settings
from jobs import runtime
from jobs.queues import enqueue_drain
from jobs.runtime import Runtime

log = logging.getLogger(__name__)
IDENTITY_REFRESH_S = 3600


def sweep_once(rt: Runtime) -> int:
    """Kick every dirty route whose lease is gone (crashed run, lost job, web died before enqueue)."""
    kicked = 0
    for rk in rt.inbox.dirty_routes():
        token = rt.inbox.kick(rk)
        if token:
            enqueue_drain(rt.rq, rt.inbox.route_queue(rk) or "runs", rk, token, rt.settings.retry_delays)
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


def main() -> None:
    settings = load_settings()
    logs.setup(settings.log_level)
    runtime.configure(settings)
    rt = runtime.current()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    next_identity = 0.0
    log.info("sweeper started")
    while not stop.is_set():
        if time.monotonic() >= next_identity:
            ok = _refresh_identity(rt)
            next_identity = time.monotonic() + (IDENTITY_REFRESH_S if ok else 2.0)
        try:
            sweep_once(rt)
        except Exception as exc:
            log.warning("sweep failed", extra={"error": f"{exc.__class__.__name__}: {exc}"})
        stop.wait(min(settings.sweep_interval_seconds, max(0.5, next_identity - time.monotonic())))


if __name__ == "__main__":
    main()
