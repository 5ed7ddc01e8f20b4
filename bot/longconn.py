"""The `ws` process: Feishu's long connection (lark-oapi `ws.Client`) as a second transport into the ingress core.

Each event the connection delivers runs the webhook's admission → routing → PUSH path (`Ingress.handle_event`).
The SDK writes its response frame after our handler returns: 200 when it returned, 500 when it raised. So an
event is acknowledged only once PUSH stored it; when Redis is unavailable the handler raises and Feishu
delivers the event again. In webhook mode (the default) the process idles, so one Procfile serves both modes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import signal
import threading
import time
from typing import Any

import lark_oapi as lark
from lark_oapi.core import log as sdk_log
from lark_oapi.core.json import JSON
from lark_oapi.event.callback.model.p2_card_action_trigger import P2CardActionTrigger, P2CardActionTriggerResponse
from lark_oapi.event.custom import CustomizedEvent
from lark_oapi.event.dispatcher_handler import EventDispatcherHandler
from lark_oapi.ws import client as ws_client

from bot.envelope import MESSAGE_RECEIVE
from bot.ingress import Ingress
from bot.side_events import CARD_ACTION, SIDE_EVENTS
from core import boot, logs
from core.settings import Settings, load_settings
from state.store import resolve_url, state_client
from turn.registry import load_app

log = logging.getLogger(__name__)

EVENT_TYPES = (MESSAGE_RECEIVE, *(t for t in SIDE_EVENTS if t != CARD_ACTION))
BACKOFF_FIRST_S, BACKOFF_MAX_S = 1.0, 60.0
STABLE_AFTER_S = 30.0  # a connection that lived this long resets the backoff
# The SDK reconnects by itself (after a jitter of up to ReconnectNonce s, then every ReconnectInterval s, both
# from Feishu); past this long without a connection we start over with a fresh client. It also covers the
# SDK giving up for good (ReconnectCount exhausted: its task dies, start() keeps blocking).
STALE_AFTER_S = 60.0
POLL_S = 0.2


class NotStored(Exception):
    """Raised inside the SDK's handler: it answers the frame with 500, so Feishu delivers the event again."""


class Receiver:
    """The SDK's handlers: each event, as delivered, goes to the ingress core; refusal to store raises."""

    def __init__(self, ingress: Ingress) -> None:
        self.ingress = ingress

    def on_event(self, data: CustomizedEvent) -> None:
        self._deliver(data)

    def on_card(self, data: P2CardActionTrigger) -> P2CardActionTriggerResponse:
        return P2CardActionTriggerResponse(self._deliver(data))

    def _deliver(self, data: Any) -> dict[str, Any]:
        payload = json.loads(JSON.marshal(data) or "{}")  # the SDK's model back to the event's JSON object
        raw = json.dumps(payload)  # ASCII escapes: the ingress spots lone surrogates in them as in a body
        header = payload.get("header") if isinstance(payload.get("header"), dict) else {}
        event_id = str(header.get("event_id") or "")
        response = self.ingress.handle_event(payload, raw)
        if response.status >= 500:  # not stored: must not be acknowledged
            log.warning("event not acknowledged", extra={"event_id": event_id, "status": response.status,
                                                         "reason": response.body.get("error")})
            raise NotStored(f"event {event_id} not stored ({response.status})")
        # 400s are authentic but malformed: kept by the ingress, and a redelivery would not change them.
        log.info("event acknowledged", extra={"event_id": event_id, "status": response.status})
        return response.body if "toast" in response.body else {}


def build_handler(receiver: Receiver) -> EventDispatcherHandler:
    """Both arguments empty, as the long-connection docs require: the connection is authenticated already."""
    builder = EventDispatcherHandler.builder("", "")
    for event_type in EVENT_TYPES:
        builder.register_p2_customized_event(event_type, receiver.on_event)
    builder.register_p2_card_action_trigger(receiver.on_card)
    return builder.build()


class Connection:
    """One `ws.Client` on its own thread and asyncio loop.

    The SDK schedules everything on a module-level loop captured at import (oapi-sdk-python#119, #133), so
    the thread installs a fresh loop there before it builds the client; only one Connection runs at a time.
    """

    def __init__(self, settings: Settings, handler: EventDispatcherHandler) -> None:
        self.settings, self.handler = settings, handler
        self.loop = asyncio.new_event_loop()
        self.client: lark.ws.Client | None = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, name="lark-ws", daemon=True)

    def start(self) -> Connection:
        self.thread.start()
        return self

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        ws_client.loop = self.loop
        s = self.settings
        level = lark.LogLevel.DEBUG if s.log_level == "DEBUG" else lark.LogLevel.WARNING
        self.client = lark.ws.Client(s.app_id, s.secret("feishu_app_secret"), log_level=level,
                                     event_handler=self.handler, domain=s.feishu_domain, auto_reconnect=True)
        try:
            self.client.start()  # blocks for as long as the loop runs
        except BaseException as exc:  # reported to the supervisor, which starts over
            self.error = exc
        finally:
            self._close()

    def connected(self) -> bool:
        # The SDK keeps its socket in `_conn` (None while disconnected); no public accessor exists.
        return self.client is not None and getattr(self.client, "_conn", None) is not None

    def alive(self) -> bool:
        return self.thread.is_alive()

    def stop(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.loop.stop)  # start() returns with RuntimeError; _close follows
            self.thread.join(timeout=10)

    def _close(self) -> None:
        """Cancel the SDK's tasks (receive loop, pings, reconnects), then close the socket, on this thread's loop."""
        tasks = asyncio.all_tasks(self.loop)
        for task in tasks:
            task.cancel()
        with contextlib.suppress(Exception):
            self.loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        with contextlib.suppress(Exception):
            if self.client is not None:
                self.loop.run_until_complete(asyncio.wait_for(self.client._disconnect(), 2))
        self.loop.close()


class Supervisor:
    """Keeps one connection up: the SDK's own reconnects first, a fresh client with backoff when it gives up."""

    def __init__(self, settings: Settings, handler: EventDispatcherHandler) -> None:
        self.settings, self.handler = settings, handler
        self.stopping = threading.Event()
        self.failures = 0

    def run(self) -> None:
        while not self.stopping.is_set():
            up_for = self._session()
            if self.stopping.is_set():
                return
            self.failures = 0 if up_for >= STABLE_AFTER_S else self.failures + 1
            delay = min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, self.failures - 1)) * random.uniform(0.5, 1)
            log.warning("long connection lost, starting over", extra={"attempt": self.failures,
                                                                      "duration_ms": int(delay * 1000)})
            self.stopping.wait(delay)

    def _session(self) -> float:
        """Run one client until it dies, stays disconnected too long, or we stop; seconds it was connected."""
        conn = Connection(self.settings, self.handler).start()
        up_since: float | None = None
        down_since, up_total = time.monotonic(), 0.0
        try:
            while not self.stopping.wait(POLL_S):
                now = time.monotonic()
                if conn.connected():
                    if up_since is None:
                        up_since = now
                        log.info("long connection up", extra={"reason": self.settings.feishu_domain})
                    continue
                if up_since is not None:
                    up_total, up_since, down_since = up_total + now - up_since, None, now
                    log.warning("long connection down, the SDK reconnects")
                if not conn.alive():
                    log.error("long connection client stopped", extra={"error": type(conn.error).__name__})
                    break
                if now - down_since > STALE_AFTER_S:
                    log.error("long connection not restored", extra={"reason": f"{STALE_AFTER_S:g}s"})
                    break
        finally:
            conn.stop()
        return up_total + (time.monotonic() - up_since if up_since is not None else 0.0)

    def stop(self) -> None:
        self.stopping.set()


class _Stop(Exception):
    """Raised by the signal handler to unwind the main thread (setting an Event there can deadlock)."""


def _raise_stop(signum: int, _frame: object) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second signal during cleanup ends the process outright
    raise _Stop


def main() -> int:
    settings = load_settings()
    load_app(settings)  # every feature's settings too, before anything starts (a bad one exits here, naming it)
    logs.setup(settings.log_level, settings.log_format)
    sdk_log.logger.handlers.clear()  # the SDK's own plain-text handler: its records reach our JSON lines anyway
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _raise_stop)
    try:
        if settings.feishu_connection_mode != "websocket":  # honcho stops everything when one process exits
            print("ws: FEISHU_CONNECTION_MODE=webhook, events arrive at /feishu/events; long connection idle.",
                  flush=True)
            while True:
                time.sleep(3600)
        ingress = Ingress(settings, state_client(resolve_url(settings)))
        log.info("long connection starting", extra={"reason": settings.feishu_domain})
        Supervisor(settings, build_handler(Receiver(ingress))).run()
    except _Stop:
        log.info("long connection stopped")
    return 0


if __name__ == "__main__":
    boot.started()  # the imports are done (core/boot.py)
    raise SystemExit(main())
