"""A loopback stand-in for the Anthropic Messages API: deterministic answers, faults, delays, inspection."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from flask import Flask, Response, request

from sandbox.claude import wire
from sandbox.claude.cache import PromptCache
from sandbox.claude.control import register_control
from sandbox.claude.documents import document_reply
from sandbox.claude.dream import dream_reply
from sandbox.claude.faults import (
    CallLog,
    PoisonBook,
    TimelineKey,
    check_kind,
    check_mix,
    error_fault,
    fault_options,
    key_by_pattern,
    make_fault,
    overlaps,
)
from sandbox.claude.followups import check_reply, schedule_reply
from sandbox.claude.instructions import instructed_reply
from sandbox.claude.items import analysis_reply, propose_reply
from sandbox.claude.memory import memory_reply
from sandbox.claude.recall import recall_reply
from sandbox.claude.triage import triage_reply
from sandbox.faults import Fault, FaultBook, FaultProfile
from sandbox.server import (
    LoopbackServer,
    drop_connection,
    install_json_errors,
    json_response,
    new_id,
    parse_json_body,
)

Answer = str | list[dict[str, Any]] | dict[str, Any]
Responder = Callable[[dict[str, Any]], Answer]
FirstResponder = Callable[[dict[str, Any]], Answer | None]
RequestHook = Callable[[dict[str, Any]], object]
OP = "messages"


class ClaudeStandin(LoopbackServer):
    """POST /v1/messages (+ count_tokens) answering "收到。你说的是：<last user text>" by default."""

    def __init__(self, host: str = "127.0.0.1", port: int = 0) -> None:
        self._lock = threading.RLock()
        self._faults = FaultBook(make_fault)
        self._poison = PoisonBook()
        self._calls = CallLog()
        self._delay = 0.0
        self._stream_seconds = 0.0  # a streamed answer's text is spread over this long (see set_stream)
        self._responder: Responder | None = None
        self._first: list[FirstResponder] = []  # features' stand-in behaviour, asked before the built-in chain
        self._hooks: list[RequestHook] = []
        self._count_requests: list[dict[str, Any]] = []
        self.cache = PromptCache()  # the prompt cache the requests share (sandbox/claude/cache.py)
        self._revoked: set[str] = set()
        app = Flask(f"claude_standin_{id(self)}")
        install_json_errors(app, _render_http_error)
        app.add_url_rule("/v1/messages", "messages", self._messages, methods=["POST"])
        app.add_url_rule("/v1/messages/count_tokens", "count_tokens", self._count_tokens, methods=["POST"])
        register_control(app, self)
        super().__init__(app, host, port)

    # -- controls -----------------------------------------------------------------------------------

    def reset(self) -> None:
        """Forget requests, faults, profile, poison rules, stats, delay, responder, hooks and the prompt cache."""
        self._faults.clear()
        self._poison.clear()
        self._calls.clear()
        with self._lock:
            self._delay = 0.0
            self._stream_seconds = 0.0
            self._responder = None
            self._hooks.clear()
            self._count_requests.clear()
            self.cache.clear()
            self._revoked.clear()

    def revoke_key(self, api_key: str) -> None:
        """Answer 401 authentication_error to this key on every endpoint, as a revoked key gets."""
        with self._lock:
            self._revoked.add(api_key)

    def restore_keys(self) -> None:
        with self._lock:
            self._revoked.clear()

    def set_delay(self, seconds: float) -> None:
        with self._lock:
            self._delay = float(seconds)

    def set_stream(self, seconds: float) -> None:
        """Streamed answers emit their text deltas evenly over `seconds` (after `set_delay`, the time to the
        first token), like a model writing a long answer; non-streamed calls are unaffected."""
        with self._lock:
            self._stream_seconds = float(seconds)

    def fail(
        self, status: int, error_type: str, times: int = 1, headers: dict[str, str] | None = None,
        message: str = "",
    ) -> None:
        """The next `times` /v1/messages calls answer this error (e.g. 529 overloaded_error)."""
        self._faults.add(OP, error_fault(status, error_type, message, headers, times))

    def inject_fault(self, kind: str, times: int = 1, **options: float) -> None:
        """The next `times` calls get one fault kind: overloaded, rate_limit, api_error, reset or timeout.

        options: retry_after (seconds, the rate_limit's retry-after header), timeout_seconds (how long
        a timeout holds the answer; set it past the client's timeout).
        """
        self._faults.add(OP, make_fault(check_kind(kind), fault_options(options), times))

    def set_profile(
        self, rate: float, mix: Mapping[str, float] | None = None, *, seed: int | None = None, **options: float
    ) -> None:
        """Fail a random `rate` of /v1/messages calls with a weighted `mix` of kinds (default: all five).

        A seed replays the same fault sequence; queued fail/inject_fault faults still come first.
        """
        self._faults.set_profile(OP, FaultProfile(rate, check_mix(mix), seed, **fault_options(options)))

    def clear_profile(self) -> None:
        self._faults.clear_profiles()

    @property
    def profile(self) -> dict[str, Any] | None:
        return self._faults.profiles().get(OP)

    def fail_when(
        self, marker: str, status: int = 500, error_type: str = "api_error", *, kind: str | None = None,
        message: str = "", headers: dict[str, str] | None = None, times: int | None = None, **options: float,
    ) -> None:
        """Until cleared (or for the next `times` of them), every call whose last user turn contains `marker`
        fails: with this status and error type, or with a fault `kind` (then `options` as inject_fault)."""
        if kind is not None:
            fault = make_fault(check_kind(kind), fault_options(options))
        else:
            fault = error_fault(status, error_type, message, headers, kind="error")
        self._poison.add(marker, fault, times)

    def clear_fail_when(self, marker: str | None = None) -> None:
        self._poison.remove(marker)

    @property
    def poison(self) -> list[dict[str, Any]]:
        return self._poison.describe()

    def set_responder(self, fn: Responder | None) -> None:
        """fn(body) → reply text, a list of content blocks, or {"content": [...], "stop_reason": ...}."""
        with self._lock:
            self._responder = fn

    def add_responder(self, fn: FirstResponder) -> None:
        """Ask `fn(body)` before the built-in chain (a feature's offline-model behaviour, `Feature.standin`); None
        passes the request on. Kept across `reset`, like the App that declares it."""
        with self._lock:
            if fn not in self._first:
                self._first.append(fn)

    def remove_responder(self, fn: FirstResponder) -> None:
        with self._lock:
            self._first = [f for f in self._first if f is not fn]

    def on_request(self, callback: RequestHook) -> None:
        """Call `callback(body)` as each /v1/messages request arrives, before the delay."""
        with self._lock:
            self._hooks.append(callback)

    # -- inspection ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Recorded /v1/messages calls: {"headers", "body", "time", "usage" (as answered), + the timeline fields}
        (count_tokens apart)."""
        return self.requests_since(0)

    def requests_since(self, cursor: int = 0) -> list[dict[str, Any]]:
        """Recorded calls from position `cursor` on (the next cursor is cursor + len(result))."""
        return self._calls.calls_since(cursor)

    @property
    def count_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._count_requests)

    @property
    def timeline(self) -> list[dict[str, Any]]:
        """Per /v1/messages call: seq, request_id, start/end (time.time()), status (0 = connection reset),
        fault kind, stream, last_user text. end is None while the call is still being answered."""
        return self.timeline_since(0)

    def timeline_since(self, cursor: int = 0) -> list[dict[str, Any]]:
        return self._calls.timeline_since(cursor)

    def overlaps(self, key: str | TimelineKey, *, include_timeouts: bool = False) -> list[tuple[int, int]]:
        """Pairs of seqs of calls with the same key that were being answered at the same time.

        key: a regex matched against the last user turn (first group, or the whole match), or a function
        of a timeline entry. Calls given a timeout fault are left out unless include_timeouts: their
        client gave up long before their late end, so a retry beside them is no overlap.
        """
        timeline = [e for e in self.timeline if include_timeouts or e["fault"] != "timeout"]
        return overlaps(timeline, key_by_pattern(key) if isinstance(key, str) else key)

    @property
    def stats(self) -> dict[str, Any]:
        """Calls per endpoint, faults by kind, poison hits per marker, responses by status, in flight."""
        return {**self._faults.counters.snapshot(), "poison_hits": dict(self._poison.hits), **self._calls.stats()}

    def describe(self) -> str:
        return f"claude stand-in: {len(self._calls)} /v1/messages requests"

    # -- endpoints ----------------------------------------------------------------------------------

    def _messages(self) -> Response:
        body = parse_json_body(request)
        self._faults.counters.call(OP)
        entry = self._calls.begin(dict(request.headers), body, new_id("req_"))
        with self._lock:
            hooks, delay = list(self._hooks), self._delay
        for hook in hooks:
            hook(copy.deepcopy(body))
        self.sleep(delay)
        request_id = entry["request_id"]
        try:
            _authenticate(self._revoked)
            fault = self._poisoned(entry["last_user"]) or self._faults.take(OP)  # poison wins
            broken = fault if fault is not None and fault.midstream and body.get("stream") else None
            if fault is not None and broken is None:
                response = self._fault_response(fault, entry)
                if response is not None:
                    return response
            message = self._answer(wire.validate(body))
            self._calls.mark(entry, usage=dict(message["usage"]))
        except wire.WireError as exc:
            err = wire.error_body(exc.error_type, exc.message, request_id)
            return self._finish(entry, json_response(err, exc.status, {"request-id": request_id}))
        if body.get("stream"):
            with self._lock:
                spread = self._stream_seconds
            frames = list(wire.sse_frames(message))
            if broken is not None:
                self._calls.mark(entry, fault=broken.kind)
                frames = _broken_off(frames, broken, request_id)
            return Response(self._stamped(entry, self._paced(entry, frames, spread)), mimetype="text/event-stream",
                            headers={"request-id": request_id, "Cache-Control": "no-cache"})
        return self._finish(entry, json_response(message, 200, {"request-id": request_id}))

    def _fault_response(self, fault: Fault, entry: dict[str, Any]) -> Response | None:
        """The error or dropped connection for `fault`; None when the real answer follows (a timeout)."""
        self._calls.mark(entry, fault=fault.kind)
        self.sleep(fault.delay)  # a timeout: the client has given up by the time the answer is ready
        if fault.drop:
            drop_connection()
            return self._finish(entry, Response(status=200), status=0)
        if fault.body is None:
            return None
        request_id = entry["request_id"]
        err = {**fault.body, "request_id": request_id}
        return self._finish(entry, json_response(err, fault.status, {"request-id": request_id, **fault.headers}))

    def _poisoned(self, text: str) -> Fault | None:
        fault = self._poison.match(text)
        if fault is not None:
            self._faults.counters.fault(OP, "poison")
        return fault

    def _count_tokens(self) -> Response:
        body = parse_json_body(request)
        self._faults.counters.call("count_tokens")
        entry = {"headers": dict(request.headers), "body": body, "time": time.time()}
        with self._lock:
            self._count_requests.append(entry)
        request_id = new_id("req_")
        try:
            _authenticate(self._revoked)
            count = wire.input_tokens(wire.validate(body, needs_max_tokens=False))
        except wire.WireError as exc:
            err = wire.error_body(exc.error_type, exc.message, request_id)
            return json_response(err, exc.status, {"request-id": request_id})
        return json_response({"input_tokens": count}, 200, {"request-id": request_id})

    def _finish(self, entry: dict[str, Any], response: Response, status: int | None = None) -> Response:
        self._calls.finish(entry, response.status_code if status is None else status)
        return response

    def _stamped(self, entry: dict[str, Any], frames: Iterator[str]) -> Iterator[str]:
        """Stream the frames; the call ends when the last one is written (or the client goes away)."""
        self._calls.mark(entry, status=200)
        try:
            yield from frames
        finally:
            self._calls.finish(entry, 200)

    def _paced(self, entry: dict[str, Any], frames: list[str], spread: float) -> Iterator[str]:
        """The frames, text deltas `spread` seconds apart in total; the first text delta's send time is kept
        on the call (`first_text_at`, epoch seconds) so tests measure first token → first visible text."""
        texts = sum(1 for f in frames if '"text_delta"' in f)
        gap = spread / max(texts - 1, 1) if texts > 1 else 0.0
        seen = 0
        for frame in frames:
            if '"text_delta"' in frame:
                if seen:
                    self.sleep(gap)
                else:
                    self._calls.mark(entry, first_text_at=time.time())
                seen += 1
            yield frame

    def _answer(self, body: dict[str, Any]) -> dict[str, Any]:
        with self._lock:
            responder, first = self._responder, list(self._first)
        answer: Answer = wire.compression_reply(body) or (
            responder(body) if responder else next((a for f in first if (a := f(body)) is not None), None)
            or builtin_reply(body))
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
        """As the API reports it: what the prompt cache read and wrote, and the input after the last breakpoint."""
        used = self.cache.use(body)
        return {
            "input_tokens": used.input_tokens,
            "output_tokens": wire.output_tokens(content),
            "cache_creation_input_tokens": used.cache_creation_input_tokens,
            "cache_read_input_tokens": used.cache_read_input_tokens,
        }

def builtin_reply(body: dict[str, Any]) -> Answer:
    """The stand-in's own chain, asked in order: the first that recognises the request answers it."""
    return (check_reply(body) or triage_reply(body) or analysis_reply(body) or dream_reply(body)
            or memory_reply(body) or schedule_reply(body) or propose_reply(body) or recall_reply(body)
            or document_reply(body) or instructed_reply(body) or wire.default_reply(body))


def _broken_off(frames: list[str], fault: Fault, request_id: str) -> list[str]:
    """The stream up to its `fault.midstream`-th text delta, then the error event the API sends mid-stream:
    `event: error` / {"type": "error", "error": {...}} (the HTTP status, 200, was sent with the first byte)."""
    out: list[str] = []
    deltas = 0
    for frame in frames:
        if deltas >= fault.midstream:
            break
        out.append(frame)
        deltas += '"text_delta"' in frame
    error = {**(fault.body or {}), "request_id": request_id}
    return [*out, f"event: error\ndata: {json.dumps(error, ensure_ascii=False)}\n\n"]


def _authenticate(revoked: set[str]) -> None:
    """SDK ≥2.0 sends `Authorization: Bearer`, older clients `x-api-key`; either will do."""
    bearer = request.headers.get("Authorization", "")
    key = bearer[7:].strip() if bearer.startswith("Bearer ") else request.headers.get("x-api-key", "").strip()
    if not key:
        raise wire.WireError(401, "authentication_error", "x-api-key or Authorization: Bearer header is required")
    if key in revoked:
        raise wire.WireError(401, "authentication_error", "invalid x-api-key")


def _render_http_error(status: int, message: str) -> tuple[dict[str, Any], int]:
    kind = {404: "not_found_error", 405: "invalid_request_error"}.get(status)
    kind = kind or ("api_error" if status >= 500 else "invalid_request_error")
    return wire.error_body(kind, message, "req_sandbox"), status
