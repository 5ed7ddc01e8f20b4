"""An emulated Feishu long-connection endpoint: the bootstrap call and a pbbp2 websocket server (lark-oapi's protobuf).

As the real service (feishu.md §1.9): `POST /callback/ws/endpoint {AppID, AppSecret}` answers a ws:// URL and the
ClientConfig; events go out as DATA frames (`type=event`, split into `sum`/`seq` parts when asked), each to ONE
connected client; a client answers each event with the same frame carrying `{"code": 200}` (handled) or 500;
an event not answered with 200 within `redeliver_after` seconds is delivered again, to another client when one
is connected. Pings get pongs carrying the ClientConfig. Every ack frame is recorded with its status code.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlparse

from lark_oapi.ws.pb.pbbp2_pb2 import Frame
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from sandbox.server import control_body, guarded

if TYPE_CHECKING:
    from flask import Flask

CONTROL, DATA = 0, 1  # lark_oapi.ws.enum.FrameType
SERVICE_ID = 7
TICK_S = 0.01
_quiet = logging.getLogger("sandbox.feishu.ws")  # clients that vanish mid-handshake are routine here
_quiet.addHandler(logging.NullHandler())
_quiet.propagate = False


@dataclass
class Delivery:
    """One event the service owes a client until a client answers it with 200."""

    event_id: str
    payload: bytes
    frames: int
    to: str | None = None
    drop_acks: int = 0  # answers to the first N attempts are lost (as if later than Feishu's 3 s)
    attempts: int = 0
    clients: list[str] = field(default_factory=list)  # who got it, per attempt
    acked: bool = False
    due: float = 0.0  # monotonic time of the next (re)delivery


class WsEndpoint:
    """The websocket side, on its own thread and asyncio loop; started by the first bootstrap or push."""

    def __init__(self, app_id: str, app_secret: str, host: str = "127.0.0.1", *, redeliver_after: float = 1.0,
                 max_attempts: int = 10, ping_interval: int = 5, reconnect_interval: int = 1,
                 reconnect_nonce: int = 0) -> None:
        self.app_id, self.app_secret, self.host = app_id, app_secret, host
        self.redeliver_after, self.max_attempts = redeliver_after, max_attempts
        self.client_config = {"ReconnectCount": -1, "ReconnectInterval": reconnect_interval,
                              "ReconnectNonce": reconnect_nonce, "PingInterval": ping_interval}
        self.port = 0
        self._lock = threading.Lock()
        self._clients: dict[str, ServerConnection] = {}
        self._deliveries: dict[str, Delivery] = {}
        self._frames: dict[str, tuple[str, int]] = {}  # frame message_id → (delivery id, attempt)
        self._acks: list[dict[str, Any]] = []
        self._pings = self._bootstraps = 0
        self._rr = itertools.count()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: Server | None = None
        self._stop: asyncio.Event | None = None

    # -- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> WsEndpoint:
        with self._lock:
            if self._thread is not None:
                return self
            ready = threading.Event()
            self._thread = threading.Thread(target=self._run, args=(ready,), name="feishu-ws", daemon=True)
            self._thread.start()
        ready.wait(10)
        return self

    def _run(self, ready: threading.Event) -> None:
        self._loop = asyncio.new_event_loop()
        self._loop.run_until_complete(self._main(ready))
        self._loop.close()

    async def _main(self, ready: threading.Event) -> None:
        self._stop = asyncio.Event()
        async with serve(self._serve, self.host, 0, max_size=None, logger=_quiet) as server:
            self._server = server
            self.port = next(iter(server.sockets)).getsockname()[1]
            ready.set()
            ticker = asyncio.get_running_loop().create_task(self._deliver_loop())
            await self._stop.wait()
            ticker.cancel()

    def stop(self) -> None:
        thread, loop, stop = self._thread, self._loop, self._stop
        if thread is None or loop is None or stop is None:
            return
        loop.call_soon_threadsafe(stop.set)
        thread.join(timeout=10)
        self._thread = self._loop = self._server = self._stop = None

    def reset(self) -> None:
        """Forget deliveries, acks and pings; connected clients stay connected."""
        with self._lock:
            self._deliveries.clear()
            self._frames.clear()
            self._acks.clear()
            self._pings = self._bootstraps = 0

    # -- the HTTP bootstrap ---------------------------------------------------------------------------------

    def endpoint(self, body: Any) -> dict[str, Any]:
        """`POST /callback/ws/endpoint`: the connection URL for these credentials (code != 0 otherwise)."""
        body = body if isinstance(body, dict) else {}
        if body.get("AppID") != self.app_id or body.get("AppSecret") != self.app_secret:
            return {"code": 1000040343, "msg": "invalid app_id or app_secret"}
        self.start()
        with self._lock:
            self._bootstraps += 1
        device = uuid.uuid4().hex[:16]
        url = f"ws://{self.host}:{self.port}/ws?device_id={device}&service_id={SERVICE_ID}"
        return {"code": 0, "msg": "ok", "data": {"URL": url, "ClientConfig": dict(self.client_config)}}

    # -- Python API -------------------------------------------------------------------------------------------

    def push(self, payload: dict[str, Any], *, frames: int = 1, to: str | None = None, drop_acks: int = 0) -> str:
        """Deliver an event (to client `to`, else to one connected client); returns the delivery id.
        `drop_acks`: lose the answers to the first N deliveries, so it is delivered again (to another client)."""
        self.start()
        raw_header = payload.get("header")
        header: dict[str, Any] = raw_header if isinstance(raw_header, dict) else {}
        delivery_id = uuid.uuid4().hex
        data = json.dumps(payload, ensure_ascii=False).encode("utf-8")
        with self._lock:
            self._deliveries[delivery_id] = Delivery(str(header.get("event_id") or ""), data, max(1, frames), to,
                                                     drop_acks)
        return delivery_id

    def expire(self) -> int:
        """Feishu's answer timer runs out now for every unanswered delivery: each is delivered again."""
        with self._lock:
            waiting = [d for d in self._deliveries.values() if not d.acked and d.attempts]
            for d in waiting:
                d.due = 0.0
        return len(waiting)

    def acked(self) -> int:
        """How many deliveries a client answered with 200 (cheap to poll)."""
        with self._lock:
            return sum(1 for d in self._deliveries.values() if d.acked)

    def acks(self) -> list[dict[str, Any]]:
        """Every answer frame: event_id, client, code (200 handled, else not), attempt, at, data."""
        with self._lock:
            return [dict(a) for a in self._acks]

    def clients(self) -> list[str]:
        with self._lock:
            return list(self._clients)

    def deliveries(self) -> list[dict[str, Any]]:
        with self._lock:
            return [{"event_id": d.event_id, "attempts": d.attempts, "clients": list(d.clients), "acked": d.acked}
                    for d in self._deliveries.values()]

    def pings(self) -> int:
        with self._lock:
            return self._pings

    def bootstraps(self) -> int:
        """Successful `POST /callback/ws/endpoint` calls."""
        with self._lock:
            return self._bootstraps

    def disconnect(self, client: str) -> None:
        """Close one client's connection, as the service does on a deploy (the SDK reconnects)."""
        with self._lock:
            conn = self._clients.get(client)
        if conn is not None and self._loop is not None:
            asyncio.run_coroutine_threadsafe(conn.close(), self._loop).result(5)

    # -- the websocket side ---------------------------------------------------------------------------------

    async def _serve(self, conn: ServerConnection) -> None:
        query = parse_qs(urlparse(conn.request.path if conn.request else "").query)
        client = (query.get("device_id") or [uuid.uuid4().hex[:16]])[0]
        with self._lock:
            self._clients[client] = conn
        try:
            async for message in conn:
                if isinstance(message, bytes):
                    await self._received(client, conn, message)
        except ConnectionClosed:
            pass
        finally:
            with self._lock:
                if self._clients.get(client) is conn:
                    del self._clients[client]

    async def _received(self, client: str, conn: ServerConnection, message: bytes) -> None:
        frame = Frame()
        frame.ParseFromString(message)
        headers = {h.key: h.value for h in frame.headers}
        if frame.method == CONTROL and headers.get("type") == "ping":
            with self._lock:
                self._pings += 1
            await conn.send(_frame(CONTROL, {"type": "pong"}, json.dumps(self.client_config).encode()))
        elif frame.method == DATA:
            self._ack(client, headers, frame.payload)

    def _ack(self, client: str, headers: dict[str, str], payload: bytes) -> None:
        try:
            answer = json.loads(payload)
        except ValueError:
            answer = {}
        code = int(answer.get("code") or 0) if isinstance(answer, dict) else 0
        with self._lock:
            delivery_id, attempt = self._frames.get(headers.get("message_id", ""), ("", 0))
            delivery = self._deliveries.get(delivery_id)
            if delivery is None:
                return
            lost = attempt <= delivery.drop_acks
            self._acks.append({"event_id": delivery.event_id, "client": client, "code": code, "attempt": attempt,
                               "lost": lost, "at": time.time(), "data": answer.get("data")})
            if code == 200 and not lost:
                delivery.acked = True

    async def _deliver_loop(self) -> None:
        while True:
            for conn, frames in self._due():
                for frame in frames:
                    try:
                        await conn.send(frame)
                    except ConnectionClosed:
                        break  # not acked: delivered again when due
            await asyncio.sleep(TICK_S)

    def _due(self) -> list[tuple[ServerConnection, list[bytes]]]:
        now = time.monotonic()
        out = []
        with self._lock:
            for delivery_id, d in self._deliveries.items():
                if d.acked or d.due > now or d.attempts >= self.max_attempts:
                    continue
                client = self._pick(d)
                if client is None:
                    continue  # nobody connected: held until a client connects
                frame_id = uuid.uuid4().hex
                d.attempts, d.due = d.attempts + 1, now + self.redeliver_after
                self._frames[frame_id] = (delivery_id, d.attempts)
                d.clients.append(client)
                out.append((self._clients[client], _event_frames(d.payload, d.frames, frame_id)))
        return out

    def _pick(self, d: Delivery) -> str | None:
        """Cluster mode: ONE client per event (round robin here, random at Feishu); a redelivery prefers
        another client than the last one."""
        connected = list(self._clients)
        if not connected:
            return None
        if d.to in connected and not d.clients:
            return d.to
        others = [c for c in connected if not d.clients or c != d.clients[-1]] or connected
        return others[next(self._rr) % len(others)]


def _frame(method: int, headers: dict[str, str], payload: bytes) -> bytes:
    frame = Frame(SeqID=0, LogID=0, service=SERVICE_ID, method=method, payload=payload)
    for key, value in headers.items():
        frame.headers.add(key=key, value=value)
    return frame.SerializeToString()


def _event_frames(payload: bytes, parts: int, frame_id: str) -> list[bytes]:
    size = -(-len(payload) // parts)
    chunks = [payload[i * size:(i + 1) * size] for i in range(parts)]
    trace = uuid.uuid4().hex
    return [_frame(DATA, {"type": "event", "message_id": frame_id, "trace_id": trace, "sum": str(parts),
                          "seq": str(seq)}, chunk) for seq, chunk in enumerate(chunks)]


def register_ws(app: Flask, ws: WsEndpoint) -> None:
    """The bootstrap route at Feishu's path, and /_sandbox/ws/* controls for other processes (the CLI)."""
    from flask import request

    from sandbox.server import json_response, parse_json_body

    def bootstrap() -> Any:
        return json_response(ws.endpoint(parse_json_body(request)))

    def ws_push() -> dict[str, Any]:
        body = control_body()
        return {"delivery": ws.push(dict(body["payload"]), frames=int(body.get("frames", 1)), to=body.get("to"),
                                    drop_acks=int(body.get("drop_acks", 0)))}

    def ws_state() -> dict[str, Any]:
        return {"clients": ws.clients(), "acks": ws.acks(), "deliveries": ws.deliveries(), "pings": ws.pings(),
                "bootstraps": ws.bootstraps()}

    app.add_url_rule("/callback/ws/endpoint", endpoint="ws_endpoint", view_func=bootstrap, methods=["POST"])
    app.add_url_rule("/_sandbox/ws/push", endpoint="ws_push", view_func=guarded(ws_push), methods=["POST"])
    app.add_url_rule("/_sandbox/ws", endpoint="ws_state", view_func=guarded(ws_state), methods=["GET"])
