"""Load generator processes: raw keep-alive HTTP/1.1 on loopback, closed loop and open loop (wrk2-style)."""

from __future__ import annotations

import importlib
import itertools
import os
import socket
import threading
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Literal

from bench.procstat import MachineCpu
from sandbox.feishu.events import message_event, signed_request

PATH = "/feishu/events"
IO_ERROR = "io"  # error bucket for timeouts, resets and malformed responses (no HTTP status seen)


@dataclass(frozen=True)
class Phase:
    """One process's share of a phase; the parent splits connections and rate across processes."""

    port: int
    mode: Literal["closed", "open"]
    duration: float
    connections: int
    requests: int  # pre-generated pool size: closed loop stops early when it runs out
    rate: float = 0.0  # open loop: requests per second for this process
    offset: float = 0.0  # open loop: shift of this process's schedule, so processes interleave
    chats: int = 0  # 0: a fresh p2p chat per event (every request enqueues a drain run)
    encrypt_key: str = ""
    token: str = ""
    app_id: str = ""
    connection_close: bool = False  # send `Connection: close`: a new TCP connection per request
    builder: str = ""  # `module:function(phase) -> [raw request]` for another endpoint's requests; "" = Feishu's


@dataclass
class PhaseResult:
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    latencies_ms: list[float] = field(default_factory=list)
    reconnects: int = 0
    elapsed: float = 0.0
    cpu_s: float = 0.0  # this process's CPU while the phase ran (all threads)
    exhausted: bool = False
    machine: MachineCpu = field(default_factory=lambda: MachineCpu(0.0, 0.0, 0.0))  # machine-wide, same span


class _Closed(Exception):
    """The server closed the connection before a full response arrived."""


def build_requests(phase: Phase) -> list[bytes]:
    """Signed+encrypted events as raw HTTP bytes, each with fresh message/event ids (repeats are deduped)."""
    if phase.builder:  # another endpoint's requests (bench/hooks.py: GitHub's webhook)
        module, _, name = phase.builder.partition(":")
        built: list[bytes] = getattr(importlib.import_module(module), name)(phase)
        return built
    run = uuid.uuid4().hex[:8]
    out = []
    for i in range(phase.requests):
        chat = f"oc_bench_{run}_{i if phase.chats <= 0 else i % phase.chats}"
        event = message_event(chat_id=chat, chat_type="p2p", text=f"bench message {i}", token=phase.token,
                              app_id=phase.app_id, sender_open_id=f"ou_bench_{i % 97}")
        body, headers = signed_request(event, encrypt_key=phase.encrypt_key)
        head = [f"POST {PATH} HTTP/1.1", f"Host: 127.0.0.1:{phase.port}", f"Content-Length: {len(body)}",
                *(f"{k}: {v}" for k, v in headers.items())]
        if phase.connection_close:
            head.append("Connection: close")
        out.append(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + body)
    return out


class HttpConn:
    """One keep-alive connection; far cheaper per request than `requests`, so the client steals less CPU."""

    def __init__(self, port: int, timeout: float = 10.0) -> None:
        self.port, self.timeout = port, timeout
        self.sock: socket.socket | None = None
        self.reconnects = 0

    def close(self) -> None:
        if self.sock is not None:
            self.sock.close()
            self.sock = None

    def roundtrip(self, raw: bytes) -> int:
        """Send one request, return the status. A keep-alive socket the server already dropped (worker
        recycling) is retried once on a fresh connection, as HTTP clients do; anything else raises."""
        for attempt in (0, 1):
            if self.sock is None:
                self.sock = socket.create_connection(("127.0.0.1", self.port), timeout=self.timeout)
                self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            got = bytearray()
            try:
                self.sock.sendall(raw)
                return self._read(got)
            except (_Closed, ConnectionError):
                self.close()
                if attempt or got:
                    raise
                self.reconnects += 1
        raise AssertionError("unreachable")

    def _recv(self, got: bytearray) -> None:
        assert self.sock is not None
        chunk = self.sock.recv(65536)
        if not chunk:
            raise _Closed()
        got += chunk

    def _read(self, got: bytearray) -> int:
        while (end := got.find(b"\r\n\r\n")) < 0:
            self._recv(got)
        lines = bytes(got[:end]).decode("latin-1").split("\r\n")
        status = int(lines[0].split(" ", 2)[1])
        pairs = (line.partition(":") for line in lines[1:])
        headers = {k.strip().lower(): v.strip().lower() for k, _, v in pairs}
        if "content-length" in headers:
            while len(got) < end + 4 + int(headers["content-length"]):
                self._recv(got)
        elif headers.get("transfer-encoding") == "chunked":
            while not got.endswith(b"0\r\n\r\n"):
                self._recv(got)
        else:  # no framing: the body ends when the server closes
            headers["connection"] = "close"
        if headers.get("connection") == "close":
            self.close()
        return status


def _record(result: PhaseResult, lock: threading.Lock, status: int | None, latency_s: float) -> None:
    with lock:
        if status == 200:
            result.ok += 1
            result.latencies_ms.append(latency_s * 1000)
        else:
            result.errors[IO_ERROR if status is None else str(status)] += 1


def _send(conn: HttpConn, raw: bytes) -> int | None:
    try:
        return conn.roundtrip(raw)
    except (OSError, _Closed, ValueError, IndexError):
        conn.close()
        return None


def _closed_worker(phase: Phase, pool: list[bytes], cursor: itertools.count[int], deadline: float,
                   result: PhaseResult, lock: threading.Lock) -> None:
    conn = HttpConn(phase.port)
    while (now := time.monotonic()) < deadline:
        i = next(cursor)  # atomic under the GIL
        if i >= len(pool):
            result.exhausted = True
            break
        status = _send(conn, pool[i])
        _record(result, lock, status, time.monotonic() - now)
    conn.close()
    with lock:
        result.reconnects += conn.reconnects


def _open_worker(phase: Phase, pool: list[bytes], slot: int, start: float, result: PhaseResult,
                 lock: threading.Lock) -> None:
    """Sends slots slot, slot+K, ... on their schedule. Latency counts from the scheduled time, so a
    stalled server is charged for the queue it causes instead of slowing the client (coordinated omission)."""
    conn = HttpConn(phase.port)
    for i in range(slot, len(pool), phase.connections):
        scheduled = start + phase.offset + i / phase.rate
        if (wait := scheduled - time.monotonic()) > 0:
            time.sleep(wait)
        status = _send(conn, pool[i])
        _record(result, lock, status, time.monotonic() - scheduled)
    conn.close()
    with lock:
        result.reconnects += conn.reconnects


def run_phase(phase: Phase, pool: list[bytes], start: float) -> PhaseResult:
    """Run from `start` (a CLOCK_MONOTONIC time, system-wide on Linux, shared with the parent)."""
    result, lock = PhaseResult(), threading.Lock()
    cursor = itertools.count()
    deadline = start + phase.duration
    # Daemon threads: on Ctrl-C the process exits at once instead of finishing the phase.
    if phase.mode == "closed":
        threads = [threading.Thread(target=_closed_worker, daemon=True,
                                    args=(phase, pool, cursor, deadline, result, lock))
                   for _ in range(phase.connections)]
    else:
        threads = [threading.Thread(target=_open_worker, daemon=True,
                                    args=(phase, pool, k, start, result, lock))
                   for k in range(phase.connections)]
    if (wait := start - time.monotonic()) > 0:
        time.sleep(wait)
    cpu0, machine0 = time.process_time(), MachineCpu.now()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    result.elapsed = time.monotonic() - start
    result.cpu_s = time.process_time() - cpu0
    result.machine = MachineCpu.now() - machine0
    return result


def pool_bytes(pool: list[bytes]) -> bytes:
    """Requests for an outside driver (bench/wrk_pool.lua): each as `<length>\\n<raw request>`."""
    return b"".join(b"%d\n%s" % (len(raw), raw) for raw in pool)


def serve(pipe: Connection, own_session: bool = False) -> None:
    """Child process loop: ("prepare", Phase) → "ready"; ("go", start) → PhaseResult;
    ("build", Phase) → pool_bytes for an outside driver; ("stop",) → exit.
    `own_session`: a session (and so an autogroup) of its own, for `--priority`."""
    if own_session:
        os.setsid()
    phase: Phase | None = None
    pool: list[bytes] = []
    try:
        while True:
            msg = pipe.recv()
            if msg[0] == "prepare":
                phase = msg[1]
                pool = build_requests(phase)  # just before the run: signatures expire after 300 s
                pipe.send("ready")
            elif msg[0] == "build":
                pipe.send_bytes(pool_bytes(build_requests(msg[1])))
            elif msg[0] == "go" and phase is not None:
                pipe.send(run_phase(phase, pool, msg[1]))
                pool = []
            else:
                return
    except (KeyboardInterrupt, EOFError, BrokenPipeError):
        return  # Ctrl-C reaches the whole process group; the parent cleans up
