"""The webhooks' short way through the web process (issue 32): a POST to a lane's path is read from the WSGI environ
and answered by the lane's framework-neutral handler, without Flask's request context, URL map and response objects
(about 90 µs of CPU per request in-process, more than half of the Feishu event's own cost before it; bench/README.md).

Everything else goes to Flask unchanged, and so does every request a lane does not take on: another method, no
Content-Length (a chunked body), a body over the lane's cap (Flask answers its 413). The lane's route stays on its
blueprint, so either way gives the same answer; only the cost differs. A body shorter than its Content-Length (the
client went away) is a 400, as werkzeug answers it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, cast

from werkzeug.datastructures import EnvironHeaders
from werkzeug.http import HTTP_STATUS_CODES

from turn.registry import Lane

WSGIApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]
DISCONNECTED = b'{"error": "Bad Request"}'  # what the web's HTTP error handler answers for werkzeug's BadRequest


class Lanes:
    """WSGI middleware around the Flask app (`app.wsgi_app = Lanes(app.wsgi_app, lanes)`, Flask's documented way)."""

    def __init__(self, wsgi_app: WSGIApp, lanes: Iterable[Lane]) -> None:
        self.wsgi_app = wsgi_app
        self.by_path = {lane.path: lane for lane in lanes}

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        lane = self.by_path.get(environ.get("PATH_INFO", ""))
        if lane is None or environ.get("REQUEST_METHOD") != "POST":
            return self.wsgi_app(environ, start_response)
        length = content_length(environ)
        if length is None or length > lane.max_body:
            return self.wsgi_app(environ, start_response)
        body = environ["wsgi.input"].read(length) if length else b""
        if len(body) != length:
            return _answer(start_response, 400, DISCONNECTED)
        mimetype = str(environ.get("CONTENT_TYPE") or "").partition(";")[0].strip().lower()
        headers = cast(Mapping[str, str], EnvironHeaders(environ))  # case-insensitive, as Flask's request.headers
        status, text = lane.serve(headers, body, mimetype)
        return _answer(start_response, status, text)


def content_length(environ: dict[str, Any]) -> int | None:
    """The declared length; None when there is none to trust (absent, malformed, negative, or a chunked body)."""
    if environ.get("wsgi.input_terminated") and "HTTP_TRANSFER_ENCODING" in environ:
        return None
    raw = environ.get("CONTENT_LENGTH")
    if raw is None or not str(raw).strip().isdigit():
        return None
    return int(raw)


def _answer(start_response: Callable[..., Any], status: int, text: bytes) -> list[bytes]:
    """The status line and headers Flask's `Response(text, status, content_type="application/json")` sends."""
    start_response(f"{status} {HTTP_STATUS_CODES.get(status, 'UNKNOWN').upper()}",
                   [("Content-Type", "application/json"), ("Content-Length", str(len(text)))])
    return [text]
