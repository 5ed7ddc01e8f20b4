"""Group commit: concurrent request threads share one pipelined Redis round trip for their script calls.

Under load a web process has several threads waiting on Redis at once; sending their EVALSHAs in one
pipeline saves most of the per-call socket and wake-up cost on both sides. Leader/follower, no extra
thread: the first caller sends everything queued so far, then hands the lead to the next waiter. Each
call still gets its own result or error; nothing is acknowledged before Redis has answered it, and, when
replicas are connected, before one of them has the group's writes: a `WAIT 1` closes the same pipeline
(state/store.py ReplicaWait), so a whole group pays one round trip for it. A group the replica did not
confirm in time fails with NotReplicated (the webhook answers 503; Feishu's redelivery is deduped).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from redis.exceptions import NoScriptError

from state.store import NotReplicated, ReplicaWait

MAX_BATCH = 64


@dataclass
class _Call:
    sha: str
    keys: Sequence[Any]
    args: Sequence[Any]
    done: threading.Event = field(default_factory=threading.Event)
    result: Any = None
    error: BaseException | None = None
    lead: bool = False


class GroupCommit:
    def __init__(self, r: redis.Redis, script: str, replicas: ReplicaWait | None = None) -> None:
        self.r, self.script = r, script
        self.replicas = replicas or ReplicaWait(r)
        self.sha = hashlib.sha1(script.encode("utf-8")).hexdigest()
        self._lock = threading.Lock()
        self._pending: list[_Call] = []
        self._leading = False

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        call = _Call(self.sha, keys, args)
        with self._lock:
            self._pending.append(call)
            lead = not self._leading
            self._leading = True
        if not lead:
            call.done.wait()
            if call.lead:  # handed the lead while our own call was still queued
                self._lead()
        else:
            self._lead()
        if call.error is not None:
            raise call.error
        return call.result

    def _lead(self) -> None:
        with self._lock:
            batch, self._pending = self._pending[:MAX_BATCH], self._pending[MAX_BATCH:]
        self._send(batch)
        with self._lock:
            if self._pending:
                successor = self._pending[0]
                successor.lead = True
                successor.done.set()
            else:
                self._leading = False
        for call in batch:
            call.done.set()

    def _send(self, batch: list[_Call]) -> None:
        try:
            results = self._execute(batch)
        except BaseException as exc:  # every caller learns of the failure; none is left waiting
            for call in batch:
                call.error = exc
            return
        for call, result in zip(batch, results, strict=True):
            if isinstance(result, Exception):
                call.error = result
            else:
                call.result = result

    def _execute(self, batch: list[_Call]) -> list[Any]:
        results = self._pipeline(batch)
        if any(isinstance(r, NoScriptError) for r in results):  # Redis restarted or flushed its scripts
            self.r.script_load(self.script)
            results = self._pipeline(batch)
        return results

    def _pipeline(self, batch: list[_Call]) -> list[Any]:
        pipe = self.r.pipeline(transaction=False)
        for call in batch:
            pipe.evalsha(call.sha, len(call.keys), *call.keys, *call.args)
        waited = self.replicas.add(pipe)
        results = list(pipe.execute(raise_on_error=False))
        if not waited:
            return results
        acked, results = results[-1], results[:-1]
        if not self.replicas.confirmed(acked) and not any(isinstance(r, NoScriptError) for r in results):
            shortfall = NotReplicated(f"no replica confirmed the writes within {self.replicas.timeout_ms} ms")
            return [r if isinstance(r, Exception) else shortfall for r in results]
        return results
