"""The Claude stand-in's fault kinds, content-predicate ("poison") rules and call log with its timeline."""

from __future__ import annotations

import copy
import re
import threading
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from sandbox.claude.wire import block_text, error_body
from sandbox.faults import Fault

# "reset" closes the connection without an answer; "timeout" answers normally, but only after
# timeout_seconds (set it past the client's timeout). "midstream_overloaded" streams after_deltas text deltas of
# the answer, then an SSE `event: error` of type overloaded_error (HTTP 200 already sent), as the API does.
FAULT_KINDS = ("overloaded", "rate_limit", "api_error", "reset", "timeout", "midstream_overloaded")
DEFAULT_MIX = {"overloaded": 3.0, "rate_limit": 2.0, "api_error": 2.0, "reset": 1.0, "timeout": 1.0}
# The service's SDK timeout is 120 s.
FAULT_OPTIONS = {"retry_after": 0.5, "timeout_seconds": 121.0, "after_deltas": 8.0}
ERRORS = {"overloaded": (529, "overloaded_error"), "rate_limit": (429, "rate_limit_error"),
          "api_error": (500, "api_error")}
TimelineKey = Callable[[dict[str, Any]], str | None]
TIMELINE_FIELDS = ("seq", "request_id", "start", "end", "status", "fault", "stream", "last_user")


def error_fault(status: int, error_type: str, message: str = "", headers: Mapping[str, str] | None = None,
                times: int = 1, kind: str = "injected") -> Fault:
    body = error_body(error_type, message or error_type.replace("_", " "), "")
    return Fault(status, body, dict(headers or {}), times, kind)


def fault_options(options: Mapping[str, Any]) -> dict[str, float]:
    unknown = set(options) - set(FAULT_OPTIONS)
    if unknown:
        raise ValueError(f"unknown fault options {sorted(unknown)}; expected {sorted(FAULT_OPTIONS)}")
    return {**FAULT_OPTIONS, **{k: float(v) for k, v in options.items()}}


def check_mix(mix: Mapping[str, float] | None) -> dict[str, float]:
    for kind in mix or {}:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
    return dict(mix) if mix is not None else dict(DEFAULT_MIX)


def check_kind(kind: str) -> str:
    check_mix({kind: 1.0})
    return kind


def make_fault(kind: str, options: Mapping[str, float], times: int = 1) -> Fault:
    """The Fault for one kind, as the Messages API (or the network in front of it) would deliver it."""
    if kind == "reset":
        return Fault(0, None, {}, times, kind, drop=True)
    if kind == "timeout":
        return Fault(200, None, {}, times, kind, delay=options["timeout_seconds"])
    if kind == "midstream_overloaded":
        fault = error_fault(529, "overloaded_error", "Overloaded", times=times, kind=kind)
        return replace(fault, midstream=max(int(options["after_deltas"]), 1))
    if kind not in ERRORS:
        raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
    status, error_type = ERRORS[kind]
    headers = {"retry-after": f"{options['retry_after']:g}"} if kind == "rate_limit" else {}
    return error_fault(status, error_type, headers=headers, times=times, kind=kind)


def last_user_text(body: Any) -> str:
    """The text of the request's last user turn ("" for a malformed body: validation rejects it later)."""
    messages = body.get("messages") if isinstance(body, dict) else None
    if not isinstance(messages, list):
        return ""
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    content = users[-1].get("content") if users else ""
    if isinstance(content, list):
        content = [b for b in content if isinstance(b, dict)]
    return block_text(content) if isinstance(content, str | list) else ""


@dataclass(frozen=True)
class Poison:
    """Every request whose last user turn contains `marker` fails with this fault until it is cleared (or, with
    `left`, for that many more requests)."""

    marker: str
    fault: Fault
    left: int | None = None

    def describe(self) -> dict[str, Any]:
        error = (self.fault.body or {}).get("error", {})
        return {"marker": self.marker, "status": self.fault.status, "error_type": error.get("type"),
                "kind": self.fault.kind, "headers": dict(self.fault.headers)}


class PoisonBook:
    """The stand-in's content-predicate faults, checked before queued faults and the random profile."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._rules: dict[str, Poison] = {}
        self.hits: Counter[str] = Counter()

    def add(self, marker: str, fault: Fault, times: int | None = None) -> None:
        if not marker:
            raise ValueError("marker must be a non-empty string")
        with self._lock:
            self._rules[marker] = Poison(marker, fault, times)

    def remove(self, marker: str | None = None) -> None:
        with self._lock:
            if marker is None:
                self._rules.clear()
            else:
                self._rules.pop(marker, None)

    def match(self, text: str) -> Fault | None:
        with self._lock:
            rule = next((p for p in self._rules.values() if p.marker in text), None)
            if rule is None:
                return None
            self.hits[rule.marker] += 1
            if rule.left is not None:
                if rule.left <= 1:
                    del self._rules[rule.marker]
                else:
                    self._rules[rule.marker] = replace(rule, left=rule.left - 1)
            return replace(rule.fault, remaining=1, kind="poison")  # counted and shown as poison

    def describe(self) -> list[dict[str, Any]]:
        with self._lock:
            return [p.describe() for p in self._rules.values()]

    def clear(self) -> None:
        with self._lock:
            self._rules.clear()
            self.hits.clear()


class CallLog:
    """Each /v1/messages call from arrival to answer: headers and body, plus its timeline entry."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: list[dict[str, Any]] = []
        self._responses: Counter[int] = Counter()
        self._epoch = 0  # a call still sleeping through a timeout at clear() must not count afterwards

    def begin(self, headers: dict[str, str], body: Any, request_id: str) -> dict[str, Any]:
        """Record a call as it arrives; every key exists from the start (readers copy entries)."""
        entry: dict[str, Any] = {
            "headers": headers, "body": body, "request_id": request_id, "end": None, "status": None,
            "fault": None, "stream": bool(isinstance(body, dict) and body.get("stream")),
            "last_user": last_user_text(body), "usage": None,  # the usage answered (the prompt cache's view)
        }
        with self._lock:  # stamped under the lock, so seq order is start order
            now = time.time()
            entry.update(time=now, start=now, seq=len(self._calls), epoch=self._epoch)
            self._calls.append(entry)
        return entry

    def mark(self, entry: dict[str, Any], **fields: Any) -> None:
        with self._lock:
            entry.update(fields)

    def finish(self, entry: dict[str, Any], status: int) -> None:
        with self._lock:
            entry["end"], entry["status"] = time.time(), status
            self._responses[status] += entry["epoch"] == self._epoch

    def calls_since(self, cursor: int) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._calls[max(cursor, 0):])

    def timeline_since(self, cursor: int) -> list[dict[str, Any]]:
        with self._lock:
            return [{k: e[k] for k in TIMELINE_FIELDS} for e in self._calls[max(cursor, 0):]]

    def stats(self) -> dict[str, Any]:
        with self._lock:
            in_flight = sum(1 for e in self._calls if e["end"] is None)
            return {"responses": dict(self._responses), "in_flight": in_flight}

    def __len__(self) -> int:
        return len(self._calls)

    def clear(self) -> None:
        with self._lock:
            self._epoch += 1
            self._calls.clear()
            self._responses.clear()


def key_by_pattern(pattern: str) -> TimelineKey:
    """Group requests by the first match of `pattern` (its first group if it has one) in the last user turn."""
    regex = re.compile(pattern)

    def key(entry: dict[str, Any]) -> str | None:
        found = regex.search(entry.get("last_user") or "")
        if found is None:
            return None
        return found.group(1) if regex.groups else found.group(0)

    return key


def overlaps(timeline: list[dict[str, Any]], key: TimelineKey) -> list[tuple[int, int]]:
    """Pairs of request seqs with the same key whose [start, end] intervals overlap (unfinished = open)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for entry in timeline:
        k = key(entry)
        if k is not None:
            groups.setdefault(k, []).append(entry)
    pairs: list[tuple[int, int]] = []
    for entries in groups.values():
        entries.sort(key=lambda e: (e["start"], e["seq"]))
        for i, first in enumerate(entries):
            end = first["end"] if first["end"] is not None else float("inf")
            for later in entries[i + 1:]:
                if later["start"] >= end:
                    break
                pairs.append((min(first["seq"], later["seq"]), max(first["seq"], later["seq"])))
    return sorted(pairs)
