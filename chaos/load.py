"""A load sender that behaves like Feishu: signed, encrypted `im.message.receive_v1` events, redelivered on any
non-200 or connection error on a compressed schedule, and duplicated now and then on purpose."""

from __future__ import annotations

import heapq
import os
import random
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import requests

from chaos.stack import APP_ID, BOT_OPEN_ID, Stack
from sandbox.feishu.events import mention, message_event, signed_request

# Feishu redelivers at ~15 s, 5 min, 1 h, 6 h; compressed here so an outage plays out in seconds.
REDELIVERY = (0.5, 1.0, 2.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0)
POST_TIMEOUT_S = 5.0
DUP_KINDS = ("same", "new-event", "new-message")


@dataclass(frozen=True)
class Target:
    """Where a message is written: a p2p chat, a group (the route is per sender) or a topic (shared)."""

    chat_id: str
    chat_type: str = "p2p"
    sender: str = "ou_user"
    thread_id: str | None = None
    root_id: str | None = None

    def route_key(self, profile: str) -> str:
        if self.chat_type == "p2p":
            return f"feishu:{profile}:p2p:{self.chat_id}"
        if self.thread_id:
            return f"feishu:{profile}:topic:{self.chat_id}:{self.thread_id}"
        return f"feishu:{profile}:group:{self.chat_id}:{self.sender}"


def p2p_targets(n: int, tag: str) -> list[Target]:
    return [Target(f"oc_{tag}_p{i}", "p2p", f"ou_{tag}_u{i}") for i in range(n)]


def group_targets(chats: int, senders: int, tag: str) -> list[Target]:
    return [Target(f"oc_{tag}_g{c}", "group", f"ou_{tag}_s{s}") for c in range(chats) for s in range(senders)]


@dataclass
class Post:
    at: float
    ms: float
    status: int  # HTTP status; 0 = no response
    kind: str  # first | redelivery | dup-same | dup-new-event | dup-new-message
    error: str = ""
    host: int = 0  # index into the sender's urls (the "load balancer" in front of several hosts)


@dataclass
class Event:
    seq: int
    token: str
    route: str
    target: Target
    envelope: dict[str, Any]
    message_ids: list[str]
    posts: list[Post] = field(default_factory=list)
    accepted_at: float | None = None
    accept_order: int | None = None
    uncertain: bool = False  # a failed attempt may still have been stored (the connection broke mid-request)
    done: bool = False

    @property
    def message_id(self) -> str:
        return self.message_ids[0]

    @property
    def redeliveries(self) -> int:
        return sum(1 for p in self.posts if p.kind == "redelivery")

    @property
    def final_status(self) -> int:
        firsts = [p.status for p in self.posts if not p.kind.startswith("dup")]
        return 200 if self.accepted_at is not None else (firsts[-1] if firsts else -1)


class Sender:
    """Posts to `stack.url`, or, given several `urls` (hosts behind a load balancer), to each in turn: a delivery
    that failed is redelivered to the next host, as Feishu redelivers a non-2xx or timed-out event and the
    balancer sends it elsewhere."""

    def __init__(self, stack: Stack, *, threads: int = 16, dup_rate: float = 0.0, seed: int = 0,
                 schedule: tuple[float, ...] = REDELIVERY, urls: list[str] | None = None) -> None:
        self.stack, self.schedule, self.dup_rate = stack, schedule, dup_rate
        self.urls = list(urls or [stack.url])
        self._turn = 0  # round-robin position of first deliveries
        self.tag = os.urandom(2).hex()
        self.rng = random.Random(seed)
        self.events: list[Event] = []
        self._lock = threading.Lock()
        self._heap: list[tuple[float, int, int, str]] = []  # (due, tie, event seq, kind)
        self._queues: dict[str, deque[tuple[Event, str]]] = {}
        self._busy: set[str] = set()
        self._pending = 0
        self._accepted = 0
        self._tie = 0
        self._local = threading.local()
        self._sessions: list[requests.Session] = []
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="chaos-send")
        self._wake = threading.Condition(self._lock)
        self._stopped = False
        self._clock = threading.Thread(target=self._dispatch, daemon=True, name="chaos-sched")
        self._clock.start()

    # -- building events -------------------------------------------------------------------------------

    def token(self, seq: int) -> str:
        return f"k{self.tag}n{seq:05d}"

    def event(self, target: Target, text: str = "", marker: str = "") -> Event:
        """A new event for `target`, registered in the emulator so the bot can reply to it."""
        with self._lock:
            seq = len(self.events)
            tok = self.token(seq)
            body = f"{marker} {text or '问题'} {tok}".strip()
            group = target.chat_type != "p2p"
            env = message_event(chat_id=target.chat_id, chat_type=target.chat_type, sender_open_id=target.sender,
                                text=f"@_user_1 {body}" if group else body, thread_id=target.thread_id,
                                root_id=target.root_id, parent_id=target.root_id,
                                mentions=[mention(BOT_OPEN_ID, "助手")] if group else None,
                                token=self.stack.secrets.verification_token, app_id=APP_ID)
            ev = Event(seq, tok, target.route_key(self.stack.profile), target, env,
                       [env["event"]["message"]["message_id"]])
            self.events.append(ev)
        self._register(env)
        return ev

    def add_topic(self, chat_id: str, thread_id: str, sender: str) -> Target:
        root = f"om_{self.tag}_{thread_id}"
        self.stack.feishu.add_message(root, chat_id, text="root", thread_id=thread_id)
        return Target(chat_id, "group", sender, thread_id=thread_id, root_id=root)

    def _register(self, env: dict[str, Any]) -> None:
        m = env["event"]["message"]
        self.stack.feishu.add_message(
            m["message_id"], m["chat_id"], sender_open_id=env["event"]["sender"]["sender_id"]["open_id"],
            thread_id=m.get("thread_id"), root_id=m.get("root_id"), parent_id=m.get("parent_id"),
            msg_type=m["message_type"], content=m["content"], chat_mode="p2p" if m["chat_type"] == "p2p" else "group")

    # -- sending -----------------------------------------------------------------------------------------

    def send(self, ev: Event, at: float | None = None, kind: str = "first") -> None:
        """Schedule a delivery of `ev` at `at` (monotonic; default now)."""
        with self._lock:
            self._pending += 1
            self._tie += 1
            heapq.heappush(self._heap, (at if at is not None else time.monotonic(), self._tie, ev.seq, kind))
            self._wake.notify()

    def ask(self, ev: Event, replies: Callable[[str], list[Any]], timeout: float = 60.0) -> None:
        """Deliver `ev` now and wait until `replies(message_id)` shows the bot's answer (closed-loop turns)."""
        self.send(ev)
        deadline = time.monotonic() + timeout
        while not replies(ev.message_id):
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer for {ev.message_id} of {ev.route} within {timeout:g}s")
            time.sleep(0.01)

    def open_loop(self, targets: list[Target], rate: float, count: int, text: str = "",
                  pick: Callable[[int], Target] | None = None) -> list[Event]:
        """`count` events at a fixed `rate` per second, round-robin over `targets` (or `pick(i)`)."""
        start = time.monotonic()
        evs = []
        for i in range(count):
            due = start + i / rate
            time.sleep(max(0.0, due - time.monotonic()))
            ev = self.event(pick(i) if pick else targets[i % len(targets)], text)
            self.send(ev, due)
            evs.append(ev)
        return evs

    def wait(self, timeout: float = 120.0) -> bool:
        """Until every delivery (redeliveries and duplicates included) has been made; False on timeout."""
        deadline = time.monotonic() + timeout
        with self._lock:
            while self._pending:
                if not self._wake.wait(timeout=max(0.0, min(0.5, deadline - time.monotonic()))) \
                        and time.monotonic() >= deadline:
                    return False
        return True

    def close(self) -> None:
        with self._lock:
            self._stopped = True
            self._wake.notify_all()
        self._pool.shutdown(wait=True, cancel_futures=True)
        for session in self._sessions:
            session.close()

    def _dispatch(self) -> None:
        """Move due deliveries to their route's queue; one POST per route at a time keeps send order defined."""
        with self._lock:
            while not self._stopped:
                now = time.monotonic()
                while self._heap and self._heap[0][0] <= now:
                    _, _, seq, kind = heapq.heappop(self._heap)
                    ev = self.events[seq]
                    self._queues.setdefault(ev.route, deque()).append((ev, kind))
                    if ev.route not in self._busy:
                        self._busy.add(ev.route)
                        self._pool.submit(self._drain_route, ev.route)
                wait = self._heap[0][0] - now if self._heap else 0.5
                self._wake.wait(timeout=min(max(wait, 0.001), 0.5))

    def _drain_route(self, route: str) -> None:
        while True:
            with self._lock:
                queue = self._queues.get(route)
                if not queue:
                    self._busy.discard(route)
                    return
                ev, kind = queue.popleft()
            try:
                self._deliver(ev, kind)
            finally:
                with self._lock:
                    self._pending -= 1
                    self._wake.notify_all()

    def _deliver(self, ev: Event, kind: str) -> None:
        envelope = self._variant(ev, kind)
        post = self._post(envelope, kind, self._host_for(ev, kind))
        with self._lock:
            ev.posts.append(post)
            if post.status == 200 and ev.accepted_at is None and not kind.startswith("dup"):
                ev.accepted_at, ev.accept_order = time.time(), self._accepted
                self._accepted += 1
            elif post.status == 0 and post.error != "refused" and ev.accepted_at is None:
                ev.uncertain = True
        if kind.startswith("dup"):
            return
        if post.status != 200:
            attempt = sum(1 for p in ev.posts if not p.kind.startswith("dup"))
            if attempt <= len(self.schedule):
                self.send(ev, time.monotonic() + self.schedule[attempt - 1], "redelivery")
                return
        elif self.dup_rate and self.rng.random() < self.dup_rate:
            self.send(ev, time.monotonic() + self.rng.uniform(0.1, 1.5), "dup-" + self.rng.choice(DUP_KINDS))
            return
        ev.done = True

    def _variant(self, ev: Event, kind: str) -> dict[str, Any]:
        """The envelope of this delivery: the same event again, a new event_id, or a new message_id too."""
        if kind in ("first", "redelivery", "dup-same"):
            return ev.envelope
        env = {**ev.envelope, "header": {**ev.envelope["header"], "event_id": os.urandom(16).hex()}}
        if kind == "dup-new-message":
            mid = "om_" + os.urandom(16).hex()
            env["event"] = {**env["event"], "message": {**env["event"]["message"], "message_id": mid}}
            with self._lock:
                ev.message_ids.append(mid)
            self._register(env)
        return env

    def _host_for(self, ev: Event, kind: str) -> int:
        """Round robin for new deliveries; after a failure the next host (the failed one is likely down)."""
        if len(self.urls) == 1:
            return 0
        with self._lock:
            if kind == "redelivery" and ev.posts:
                return (ev.posts[-1].host + 1) % len(self.urls)
            self._turn += 1
            return self._turn % len(self.urls)

    def _post(self, envelope: dict[str, Any], kind: str, host: int = 0) -> Post:
        body, headers = signed_request(envelope, encrypt_key=self.stack.secrets.encrypt_key)
        session = self._session()
        at, t0 = time.time(), time.perf_counter()
        try:
            resp = session.post(f"{self.urls[host]}/feishu/events", data=body, headers=headers, timeout=POST_TIMEOUT_S)
            return Post(at, (time.perf_counter() - t0) * 1000, resp.status_code, kind, host=host)
        except requests.RequestException as exc:
            session.close()  # a broken keep-alive connection is not reused
            self._local.session = None
            return Post(at, (time.perf_counter() - t0) * 1000, 0, kind, _classify(exc), host)

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = self._local.session = requests.Session()
            with self._lock:
                self._sessions.append(session)
        return session

    def accepted(self) -> list[Event]:
        return [e for e in self.events if e.accepted_at is not None]

    def latencies(self, kinds: Iterable[str] = ("first", "redelivery")) -> list[float]:
        wanted = set(kinds)
        return [p.ms for e in self.events for p in e.posts if p.status == 200 and p.kind in wanted]


def _classify(exc: requests.RequestException) -> str:
    """`refused` when nothing reached the server (so nothing can have been stored); otherwise the cause."""
    text = repr(exc)
    if "ConnectionRefusedError" in text or "Connection refused" in text:
        return "refused"
    return "timeout" if isinstance(exc, requests.Timeout) else exc.__class__.__name__
