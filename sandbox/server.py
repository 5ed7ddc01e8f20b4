"""Shared plumbing for the loopback stand-ins: threaded serving, JSON responses, dropped connections, polling."""

from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Self, TypeVar

from flask import Flask, Request, Response, request
from werkzeug.exceptions import HTTPException
from werkzeug.serving import BaseWSGIServer, WSGIRequestHandler, make_server

T = TypeVar("T")
LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
ErrorRenderer = Callable[[int, str], tuple[dict[str, Any], int]]
WsgiApp = Callable[[dict[str, Any], Any], Iterable[bytes]]
_DROP = "sandbox.drop_connection"


class DropConnection(ConnectionResetError):
    """Raised past Flask so werkzeug treats the request as a dropped connection and writes nothing."""


class _QuietHandler(WSGIRequestHandler):
    """No access-log line per request (tests make thousands); resets the socket for dropped connections."""

    _reset = False

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        pass

    def connection_dropped(self, error: BaseException, environ: Any = None) -> None:
        if isinstance(error, DropConnection):
            # Linger 0 makes close() send RST: the client sees "connection reset", never a response.
            self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.close_connection = True
            self._reset = True

    def finish(self) -> None:
        super().finish()
        if self._reset:  # close now, before socketserver's shutdown(SHUT_WR) would send a polite FIN
            self.connection.close()


def drop_connection() -> None:
    """Answer the current request by resetting its connection (the view's own response is discarded)."""
    request.environ[_DROP] = True


def _droppable(wsgi_app: WsgiApp) -> WsgiApp:
    def app(environ: dict[str, Any], start_response: Any) -> Iterable[bytes]:
        result = wsgi_app(environ, start_response)
        if environ.get(_DROP):
            close = getattr(result, "close", None)
            if close is not None:
                close()
            raise DropConnection("sandbox: connection dropped on purpose")
        return result

    return app


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


def control_body() -> dict[str, Any]:
    """A /_sandbox/ request's JSON object body ({} when empty)."""
    body = parse_json_body(request)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return body


def guarded(action: Callable[[], Any]) -> Callable[[], Response]:
    """Wrap a /_sandbox/ control action: loopback callers only; bad arguments → 400 with the reason."""

    def view() -> Response:
        if request.remote_addr not in LOOPBACK:
            return json_response({"code": 403, "msg": "the sandbox control API is loopback-only"}, 403)
        try:
            return json_response(action())
        except (ValueError, TypeError, KeyError) as exc:
            return json_response({"code": 400, "msg": f"bad request: {exc}"}, 400)

    view.__name__ = action.__name__
    return view


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
        app.wsgi_app = _droppable(app.wsgi_app)  # type: ignore[method-assign,assignment]
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
        server = self._server  # a short poll interval makes stop() quick (tests stop servers often)
        self._thread = threading.Thread(target=lambda: server.serve_forever(0.05), name=name, daemon=True)
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

