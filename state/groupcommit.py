"""Group commit: concurrent request threads share one pipelined Redis round trip for their script calls.

Under load a web process has several threads waiting on Redis at once; sending their EVALSHAs in one
write saves most of the per-call socket and wake-up cost on both sides. Leader/follower, no extra
thread: the first caller sends everything queued so far, then hands the lead to the next waiter. Each
call still gets its own result or error; nothing is acknowledged before Redis has answered it, and, when
replicas are connected, before one of them has the group's writes: a `WAIT 1` closes the same write
(state/store.py ReplicaWait), so a whole group pays one round trip for it. A group the replica did not
confirm in time fails with NotReplicated (the webhook answers 503; Feishu's redelivery is deduped).

The webhook's hot path (issue 32), so it talks to one connection of the client's own pool directly: each
call is packed into RESP by its own thread before it queues, and the leader writes the group in one
`send_packed_command` and reads the replies with `read_response`. No redis-py Pipeline, no pool checkout
per group; what that machinery gave is kept: the pool's connection class (unix socket, TLS, AUTH,
Sentinel's master lookup and its READONLY → reconnect), the client's Retry across dropped connections and
failovers (the group is sent again on a fresh connection; a PUSH that already ran answers as a duplicate),
and NOSCRIPT → SCRIPT LOAD → the refused calls again.
"""

from __future__ import annotations

import hashlib
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import redis
from redis.exceptions import NoScriptError, ResponseError

from state.store import NotReplicated, ReplicaWait

MAX_BATCH = 64


def pack_python(args: Sequence[Any]) -> bytes:
    """One command in RESP, as redis-py's encoder writes it: str as UTF-8, numbers as their repr."""
    out = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = arg if isinstance(arg, bytes) else arg.encode() if isinstance(arg, str) else repr(arg).encode()
        out.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(out)


try:  # the same in C; redis-py packs with it too when it is there (requirements.txt pins it)
    from hiredis import pack_command as _hiredis_pack
except ImportError:  # pragma: no cover - a deployment without hiredis
    _hiredis_pack = None  # type: ignore[assignment]


def pack(args: tuple[Any, ...]) -> bytes:
    return _hiredis_pack(args) if _hiredis_pack is not None else pack_python(args)


class _Call:
    __slots__ = ("error", "gate", "lead", "packed", "result")

    def __init__(self, packed: bytes) -> None:
        self.packed = packed
        self.gate: Any = None  # a held lock the leader releases: the result is in, or the lead is ours
        self.result: Any = None
        self.error: BaseException | None = None
        self.lead = False


class GroupCommit:
    def __init__(self, r: redis.Redis, script: str, replicas: ReplicaWait | None = None) -> None:
        self.r, self.script = r, script
        self.replicas = replicas or ReplicaWait(r)
        self.sha = hashlib.sha1(script.encode("utf-8")).hexdigest()
        self._wait = pack(("WAIT", 1, self.replicas.timeout_ms))
        self._lock = threading.Lock()
        self._pending: list[_Call] = []
        self._leading = False
        self._conn: Any = None  # the leader's connection, from the client's pool; only a leader touches it
        self._pid = 0

    def __call__(self, keys: Sequence[Any], args: Sequence[Any]) -> Any:
        call = _Call(pack(("EVALSHA", self.sha, len(keys), *keys, *args)))
        with self._lock:
            if self._leading:
                call.gate = threading.Lock()
                call.gate.acquire()
            self._leading = True
            self._pending.append(call)
        if call.gate is not None:
            call.gate.acquire()  # released by the leader: our result is in, or the lead passed to us
            if call.lead:
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
            successor = self._pending[0] if self._pending else None
            self._leading = successor is not None
        for call in batch:
            if call.gate is not None and not call.lead:
                call.gate.release()
        if successor is not None:
            successor.lead = True
            successor.gate.release()

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
        waited = self.replicas.wanted()
        conn = self._connection()
        exchange: Callable[[], list[Any]] = lambda: self._exchange(conn, batch, waited)  # noqa: E731
        return list(conn.retry.call_with_retry(exchange, lambda _error: conn.disconnect()))

    def _connection(self) -> Any:
        """Our pool connection, taken once per process (a forked child takes its own). Checked before each group
        as the pool checks one it hands out: data nobody asked for, or the server's close (an idle timeout, a
        restart), means a fresh connection instead of a failed group."""
        if self._conn is None or self._pid != os.getpid():
            self._conn, self._pid = self.r.connection_pool.get_connection(), os.getpid()
            return self._conn
        conn = self._conn
        try:
            stale = conn.can_read()
        except redis.ConnectionError:
            stale = True
        if stale:
            conn.disconnect()
        return conn

    def _exchange(self, conn: Any, batch: list[_Call], waited: bool) -> list[Any]:
        results = self._round_trip(conn, [call.packed for call in batch], waited)
        refused = [i for i, result in enumerate(results) if isinstance(result, NoScriptError)]
        if refused:  # Redis restarted or flushed its scripts: load it, then send only the refused calls again
            conn.send_packed_command([pack(("SCRIPT", "LOAD", self.script))])
            _read(conn)
            again = self._round_trip(conn, [batch[i].packed for i in refused], waited)
            for i, result in zip(refused, again, strict=True):
                results[i] = result
        return results

    def _round_trip(self, conn: Any, packed: list[bytes], waited: bool) -> list[Any]:
        conn.send_packed_command([b"".join([*packed, self._wait] if waited else packed)])
        results = [_read(conn) for _ in packed]
        if waited and not self.replicas.confirmed(_read(conn)):
            shortfall = NotReplicated(f"no replica confirmed the writes within {self.replicas.timeout_ms} ms")
            return [r if isinstance(r, Exception) else shortfall for r in results]
        return results


def _read(conn: Any) -> Any:
    """One reply; an error reply is this call's result, not the group's failure."""
    try:
        return conn.read_response()
    except ResponseError as exc:
        return exc
