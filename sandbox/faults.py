"""Fault bookkeeping shared by the stand-ins: queued faults, seeded random profiles, call and fault counts."""

from __future__ import annotations

import random
import threading
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import accumulate
from typing import Any

FaultMaker = Callable[[str, Mapping[str, float]], "Fault"]
FAULT_FIELD = "_fault"  # a request record's own fault, set by a "before" hook: no concurrent call can take it


@dataclass
class Fault:
    """One injected failure, for `remaining` more calls.

    `body` None means the real response (sent after `delay`: a timeout); `after` applies the request
    first and fails only then; `drop` resets the connection instead of answering; `midstream` > 0 streams that
    many text deltas of the real answer, then `body` as an SSE `event: error` (a non-streamed call gets `body`).
    """

    status: int
    body: dict[str, Any] | None
    headers: dict[str, str] = field(default_factory=dict)
    remaining: int = 1
    kind: str = "injected"
    after: bool = False
    delay: float = 0.0
    drop: bool = False
    midstream: int = 0


class FaultProfile:
    """Fail a seeded random fraction of calls with a weighted mix of fault kinds (reproducible per seed)."""

    def __init__(
        self, rate: float, mix: Mapping[str, float], seed: int | str | None = None, **options: float
    ) -> None:
        if not 0.0 <= rate <= 1.0:
            raise ValueError("rate must be between 0 and 1")
        weights = {str(k): float(v) for k, v in mix.items()}
        if not weights or min(weights.values()) < 0 or sum(weights.values()) <= 0:
            raise ValueError("mix needs at least one kind with a positive weight")
        self.rate, self.mix, self.seed, self.options = float(rate), weights, seed, dict(options)
        self._kinds = list(weights)
        self._cumulative = list(accumulate(weights.values()))
        self._rng = random.Random(seed)  # str seeds are hashed deterministically, whatever PYTHONHASHSEED
        self._lock = threading.Lock()

    def roll(self) -> str | None:
        """The fault kind for this call, or None when it should succeed."""
        with self._lock:
            if self._rng.random() >= self.rate:
                return None
            return self._rng.choices(self._kinds, cum_weights=self._cumulative)[0]

    def describe(self) -> dict[str, Any]:
        return {"rate": self.rate, "mix": dict(self.mix), "seed": self.seed, **self.options}


class Counters:
    """Thread-safe call counts per operation and fault counts per operation and kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._calls: Counter[str] = Counter()
        self._faults: dict[str, Counter[str]] = {}

    def call(self, op: str) -> None:
        with self._lock:
            self._calls[op] += 1

    def fault(self, op: str, kind: str) -> None:
        with self._lock:
            self._faults.setdefault(op, Counter())[kind] += 1

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"calls": dict(self._calls), "faults": {op: dict(c) for op, c in self._faults.items()}}

    def clear(self) -> None:
        with self._lock:
            self._calls.clear()
            self._faults.clear()


class FaultBook:
    """Per-operation faults: queued ones first, then the op's random profile; counts what it hands out."""

    def __init__(self, make: FaultMaker | None = None) -> None:
        self._make = make
        self._lock = threading.Lock()
        self._queues: dict[str, deque[Fault]] = {}
        self._profiles: dict[str, FaultProfile] = {}
        self.counters = Counters()

    def add(self, op: str, fault: Fault) -> None:
        if fault.remaining < 1:
            return
        with self._lock:
            self._queues.setdefault(op, deque()).append(fault)

    def set_profile(self, op: str, profile: FaultProfile) -> None:
        if self._make is None:
            raise ValueError("this fault book has no fault kinds")
        with self._lock:
            self._profiles[op] = profile

    def clear_profiles(self, ops: Iterable[str] | None = None) -> None:
        with self._lock:
            for op in list(self._profiles) if ops is None else ops:
                self._profiles.pop(op, None)

    def profiles(self) -> dict[str, dict[str, Any]]:
        with self._lock:
            return {op: p.describe() for op, p in self._profiles.items()}

    def take(self, op: str, bound: Fault | None = None) -> Fault | None:
        """The fault bound to this call (`bound`), else one use of the oldest queued fault for `op`, else a roll of
        its profile; None = no fault. Counted whichever it is."""
        with self._lock:
            fault = bound or self._pop(op)
            profile = self._profiles.get(op) if fault is None else None
        if profile is not None and self._make is not None:
            kind = profile.roll()
            fault = self._make(kind, profile.options) if kind is not None else None
        if fault is not None:
            self.counters.fault(op, fault.kind)
        return fault

    def _pop(self, op: str) -> Fault | None:
        queue = self._queues.get(op)
        if not queue:
            return None
        fault = queue[0]
        fault.remaining -= 1
        if fault.remaining <= 0:
            queue.popleft()
        return fault

    def clear(self) -> None:
        """Forget queued faults, profiles and counts."""
        with self._lock:
            self._queues.clear()
            self._profiles.clear()
        self.counters.clear()
