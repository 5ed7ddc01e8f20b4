"""Shared plumbing for the loopback stand-ins: threaded serving, JSON responses, faults and polling."""

from __future__ import annotations

import json
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Self, TypeVar

from flask import Flask, Request, Response
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

T = TypeVar("T")
ErrorRenderer = Callable[[int, str], tuple[dict[str, Any], int]]


class _QuietHandler(WSGIRequestHandler):
    """Request handler that does not print an access-log line per request (tests make thousands)."""

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass


def new_id(prefix: str, nbytes: int = 12) -> str:
    """A random identifier in the platform's style, e.g. om_3f2a…"""
    return prefix + os.urandom(nbytes).hex()


def json_response(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> Response:
    """A JSON response with UTF-8 kept readable, because both real APIs answer JSON on every path."""
    text = json.dumps(body, ensure_ascii=False)
    resp = Response(text, status=status, mimetype="application/json")
    resp.headers["Content-Type"] = "application/json; charset=utf-8"
    for name, value in (headers or {}).items():
        resp.headers[name] = value
    return resp


def parse_json_body(request: Request) -> Any:
    """The body as JSON whatever the Content-Type (lark-oapi's token call sends none); None if bad."""
    raw = request.get_data(cache=True)
    if not raw:
        return None
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        return None


def install_json_errors(app: Flask, render: ErrorRenderer) -> None:
    """Make 404/405/500 answers JSON too: a client SDK that meets HTML here crashes instead of failing."""

    @app.errorhandler(HTTPException)
    def _http_error(exc: HTTPException) -> Response:
        body, status = render(exc.code or 500, exc.description or exc.name)
        return json_response(body, status)

    @app.errorhandler(Exception)
    def _crash(exc: Exception) -> Response:
        body, status = render(500, f"sandbox internal error: {type(exc).__name__}: {exc}")
        return json_response(body, status)


@dataclass
class Fault:
    """One injected failure: the response to send instead of the real one, for `remaining` more calls."""

    status: int
    body: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    remaining: int = 1


class FaultBook:
    """Thread-safe queues of pending faults, keyed by operation name."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Fault]] = {}

    def add(self, op: str, fault: Fault) -> None:
        if fault.remaining < 1:
            return
        with self._lock:
            self._queues.setdefault(op, deque()).append(fault)

    def take(self, op: str) -> Fault | None:
        """Consume one use of the oldest fault for `op`, if any."""
        with self._lock:
            queue = self._queues.get(op)
            if not queue:
                return None
            fault = queue[0]
            fault.remaining -= 1
            if fault.remaining <= 0:
                queue.popleft()
            return fault

    def clear(self) -> None:
        with self._lock:
            self._queues.clear()


def wait_for(
    predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02,
    describe: Callable[[], str] | None = None,
) -> T:
    """Poll `predicate` until it returns something truthy; raise AssertionError with context on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            name = getattr(predicate, "__qualname__", repr(predicate))
            detail = f"\n{describe()}" if describe else ""
            raise AssertionError(f"{name} still false after {timeout:.2f}s (last value {value!r}){detail}")
        time.sleep(interval)


class LoopbackServer:
    """A Flask app served by werkzeug in a daemon thread; subclasses build the app and the state."""

    def __init__(self, app: Flask, host: str = "127.0.0.1", port: int = 0) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: BaseWSGIServer | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()

    def start(self) -> Self:
        if self._server is not None:
            return self
        self._stopping.clear()
        self._server = make_server(
            self.host, self.port, self.app, threaded=True, request_handler=_QuietHandler
        )
        self.port = self._server.server_port
        name = f"{type(self).__name__}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, name=name, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        self._stopping.set()  # cut injected delays short so handler threads finish promptly
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError(f"{type(self).__name__} is not started")
        return f"http://{self.host}:{self.port}"

    def sleep(self, seconds: float) -> None:
        """An injected delay that ends early when the server stops."""
        if seconds > 0:
            self._stopping.wait(seconds)

    def describe(self) -> str:
        """A short state summary appended to wait_for failures; subclasses override."""
        return ""

    def wait_for(self, predicate: Callable[[], T], timeout: float = 10.0, interval: float = 0.02) -> T:
        return wait_for(predicate, timeout, interval, describe=self.describe)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

