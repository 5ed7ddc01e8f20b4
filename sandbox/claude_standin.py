"""A loopback stand-in for the Anthropic Messages API: deterministic answers, faults, delays, inspection."""

from __future__ import annotations

import copy
import threading
import time
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request

from sandbox import claude_wire as wire
from sandbox.server import (
    Fault,
    FaultBook,
    LoopbackServer,
    install_json_errors,
    json_response,
    new_id,
    parse_json_body,
)

Answer = str | list[dict[str, Any]] | dict[str, Any]
Responder = Callable[[dict[str, Any]], Answer]
RequestHook = Callable[[dict[str, Any]], object]
OP = "messages"


class ClaudeStandin(LoopbackServer):
    """POST /v1/messages (+ count_tokens) answering "收到。你说的是：<last user text>" by default."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.RLock()
        self._faults = FaultBook()
        self._delay = 0.0
        self._responder: Responder | None = None
        self._hooks: list[RequestHook] = []
        self._requests: list[dict[str, Any]] = []
        self._count_requests: list[dict[str, Any]] = []
        self._seen_prefixes: set[str] = set()
        app = Flask(f"claude_standin_{id(self)}")
        install_json_errors(app, _render_http_error)
        app.add_url_rule("/v1/messages", "messages", self._messages, methods=["POST"])
        app.add_url_rule("/v1/messages/count_tokens", "count_tokens", self._count_tokens, methods=["POST"])
        app.add_url_rule("/_sandbox/delay", "sandbox_delay", self._ctl_delay, methods=["POST"])
        app.add_url_rule("/_sandbox/fail", "sandbox_fail", self._ctl_fail, methods=["POST"])
        app.add_url_rule("/_sandbox/reset", "sandbox_reset", self._ctl_reset, methods=["POST"])
        app.add_url_rule("/_sandbox/requests", "sandbox_requests", lambda: json_response(self.requests))
        super().__init__(app, host, port)

    # -- controls -----------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget requests, faults, delay, responder, hooks and the prompt-cache memory."""
        self._faults.clear()
        with self._lock:
            self._delay = 0.0
            self._responder = None
            self._hooks.clear()
            self._requests.clear()
            self._count_requests.clear()
            self._seen_prefixes.clear()

    def set_delay(self, seconds: float) -> None:
        with self._lock:
            self._delay = float(seconds)

    def fail(
        self, status: int, error_type: str, times: int = 1, headers: dict[str, str] | None = None,
        message: str = "",
    ) -> None:
        """The next `times` /v1/messages calls answer this error (e.g. 529 overloaded_error)."""
        body = wire.error_body(error_type, message or error_type.replace("_", " "), "")
        self._faults.add(OP, Fault(status, body, dict(headers or {}), times))

    def set_responder(self, fn: Responder | None) -> None:
        """fn(body) → reply text, a list of content blocks, or {"content": [...], "stop_reason": ...}."""
        with self._lock:
            self._responder = fn

    def on_request(self, callback: RequestHook) -> None:
        """Call `callback(body)` as each /v1/messages request arrives, before the delay."""
        with self._lock:
            self._hooks.append(callback)

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Recorded /v1/messages calls: {"headers", "body", "time"} (count_tokens is kept apart)."""
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def count_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._count_requests)

    def describe(self) -> str:
        return f"claude stand-in: {len(self.requests)} /v1/messages requests"

    # -- endpoints ----------------------------------------------------------------------------------

    def _messages(self) -> Response:
        body = parse_json_body(request)
        self._record(self._requests, body)
        with self._lock:
            hooks, delay = list(self._hooks), self._delay
        for hook in hooks:
            hook(copy.deepcopy(body))
        self.sleep(delay)
        request_id = new_id("req_")
        try:
            _authenticate()
            fault = self._faults.take(OP)
            if fault is not None:
                err = {**fault.body, "request_id": request_id}
                return json_response(err, fault.status, {"request-id": request_id, **fault.headers})
            message = self._answer(wire.validate(body))
        except wire.WireError as exc:
            err = wire.error_body(exc.error_type, exc.message, request_id)
            return json_response(err, exc.status, {"request-id": request_id})
        if body.get("stream"):
            return Response(wire.sse_frames(message), mimetype="text/event-stream",
                            headers={"request-id": request_id, "Cache-Control": "no-cache"})
        return json_response(message, 200, {"request-id": request_id})

    def _count_tokens(self) -> Response:
        body = parse_json_body(request)
        self._record(self._count_requests, body)
        request_id = new_id("req_")
        try:
            _authenticate()
            count = wire.input_tokens(wire.validate(body, needs_max_tokens=False))
        except wire.WireError as exc:
            err = wire.error_body(exc.error_type, exc.message, request_id)
            return json_response(err, exc.status, {"request-id": request_id})
        return json_response({"input_tokens": count}, 200, {"request-id": request_id})

    def _record(self, into: list[dict[str, Any]], body: Any) -> None:
        entry = {"headers": dict(request.headers), "body": body, "time": time.time()}
        with self._lock:
            into.append(entry)

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            responder = self._responder
        answer: Answer = responder(body) if responder else wire.default_reply(body)
        if body["max_tokens"] == 0:
            answer = []  # max_tokens=0 only warms the prompt cache
        extra = answer if isinstance(answer, dict) else {}
        content = wire.content_blocks(extra.get("content", []) if isinstance(answer, dict) else answer)
        return {
            "id": "msg_" + wire.stable_hash(body)[:24],
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": content,
            "stop_reason": extra.get("stop_reason") or wire.stop_reason(content, body["max_tokens"]),
            "stop_sequence": None,
            "usage": self._usage(body, content),
        }

    def _usage(self, body: dict[str, Any], content: list[dict[str, Any]]) -> dict[str, Any]:
        total = wire.input_tokens(body)
        created = read = 0
        prefix = wire.cached_prefix(body)
        if prefix is not None:
            key, size = prefix
            with self._lock:
                hit = key in self._seen_prefixes
                self._seen_prefixes.add(key)
            created, read = (0, size) if hit else (size, 0)
        return {
            "input_tokens": max(total - created - read, 0),
            "output_tokens": wire.output_tokens(content),
            "cache_creation_input_tokens": created,
            "cache_read_input_tokens": read,
        }

    # -- /_sandbox/ control -------------------------------------------------------------------------

    def _ctl_delay(self) -> Response:
        self.set_delay(float((parse_json_body(request) or {}).get("seconds", 0)))
        return json_response({"ok": True})

    def _ctl_fail(self) -> Response:
        spec = parse_json_body(request) or {}
        self.fail(int(spec.get("status", 529)), str(spec.get("error_type", "overloaded_error")),
                  int(spec.get("times", 1)), spec.get("headers"), str(spec.get("message", "")))
        return json_response({"ok": True})

    def _ctl_reset(self) -> Response:
        self.reset()
        return json_response({"ok": True})


def _authenticate() -> None:
    """SDK ≥2.0 sends `Authorization: Bearer`, older clients `x-api-key`; either will do."""
    bearer = request.headers.get("Authorization", "")
    if bearer.startswith("Bearer ") and bearer[7:].strip():
        return
    if request.headers.get("x-api-key", "").strip():
        return
    raise wire.WireError(401, "authentication_error", "x-api-key or Authorization: Bearer header is required")


def _render_http_error(status: int, message: str) -> tuple[dict[str, Any], int]:
    kind = {404: "not_found_error", 405: "invalid_request_error"}.get(status)
    kind = kind or ("api_error" if status >= 500 else "invalid_request_error")
    return wire.error_body(kind, message, "req_sandbox"), status
