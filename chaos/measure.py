"""After a scenario: wait until the system is idle, then count from the emulator's bot messages and Redis what
happened to every event (answered, lost, duplicated, out of order, dead-lettered) and look for leaked secrets."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.load import Event, Sender
from chaos.report import Counts, Result, percentile
from chaos.stack import BIN, Stack
from feishu.render import plain_of
from runs.inbox import KICK_TTL_MS
from sandbox.feishu.cardkit import card_text

NOTICE_MARKS = ("抱歉", "Sorry")
KICK_LEASE_S = KICK_TTL_MS / 1000  # how long a kick lease outlives a lost kick record or job


def idle_state(stack: Stack, routes: Iterable[str]) -> dict[str, Any]:
    """What is still pending: dirty routes, kick records, delayed retries, and per route inbox/proc/lease."""
    k, routes = stack.keys, sorted(set(routes))
    pipe = stack.r.pipeline(transaction=False)
    pipe.zcard(k.dirty)
    pipe.llen(k.kicks)
    pipe.zcard(k.delayed)
    for rk in routes:
        pipe.llen(k.inbox(rk))
        pipe.llen(k.proc(rk))
        pipe.get(k.lease(rk))
    res = pipe.execute()
    busy = {rk: res[3 + 3 * i: 6 + 3 * i] for i, rk in enumerate(routes) if any(res[3 + 3 * i: 6 + 3 * i])}
    state = {"dirty": res[0], "kicks": res[1], "delayed": res[2], "routes": busy}
    return {name: v for name, v in state.items() if v}


def wait_idle(stack: Stack, routes: Iterable[str], timeout: float = 60.0, polls: int = 5,
              interval: float = 0.1) -> dict[str, Any]:
    """{} once idle and still idle `polls` checks later (every redo path keeps a route dirty until it ran);
    else the last pending state. Redis errors (a restart) count as not idle."""
    routes = list(routes)
    deadline, streak, state = time.monotonic() + timeout, 0, {}
    while streak < polls:
        try:
            state = idle_state(stack, routes)
        except Exception as exc:  # Redis restarting
            state = {"error": exc.__class__.__name__}
        streak = 0 if state else streak + 1
        if time.monotonic() > deadline:
            return state or {"flapping": True}
        time.sleep(interval)
    return {}


def reply_text(message: dict[str, Any]) -> str:
    """What a bot message shows as text. A card (a CardKit entity's message shows the entity's current JSON) shows
    its markdown / plain_text; one still streaming shows a partial answer and counts as showing nothing, so only a
    finished card, or the plain reply a turn falls back on, carries an event's token."""
    try:
        content = json.loads(message["body"]["content"])
        if message.get("msg_type") == "interactive" and isinstance(content.get("body"), dict):
            return "" if (content.get("config") or {}).get("streaming_mode") is True else card_text(content)
        if message.get("msg_type") == "post":
            return plain_of("post", content)
        return str(content.get("text", ""))
    except (ValueError, KeyError, AttributeError, TypeError):
        return ""


def dead_records(stack: Stack) -> list[dict[str, Any]]:
    return [json.loads(raw) for raw in stack.r.hvals(stack.keys.dead)]


@dataclass
class Ledger:
    """Bot messages matched to events: which messages carry each token, notices, misplaced answers."""

    carriers: dict[str, list[str]] = field(default_factory=dict)  # token → distinct bot message ids
    order: dict[str, list[str]] = field(default_factory=dict)  # route → tokens in reply order
    notices: set[str] = field(default_factory=set)  # message ids that got a dead-letter notice
    misplaced: list[str] = field(default_factory=list)


def ledger(events: list[Event], messages: list[dict[str, Any]], token_re: re.Pattern[str]) -> Ledger:
    by_token = {e.token: e for e in events}
    ours = {mid for e in events for mid in e.message_ids}
    out = Ledger()
    for m in messages:  # creation order
        text = reply_text(m)
        if m.get("parent_id") in ours and any(mark in text for mark in NOTICE_MARKS):
            out.notices.add(m["parent_id"])
        for tok in dict.fromkeys(token_re.findall(text)):
            ev = by_token.get(tok)
            if ev is None:
                continue
            out.carriers.setdefault(tok, []).append(m["message_id"])
            out.order.setdefault(ev.route, []).append(tok)
            if m["chat_id"] != ev.target.chat_id or (ev.target.thread_id and m.get("thread_id") != ev.target.thread_id):
                out.misplaced.append(tok)
    return out


def disorder(sequence: list[int]) -> int:
    """How many items must be removed for the rest to be increasing (length minus the longest increasing run)."""
    import bisect

    tails: list[int] = []
    for x in sequence:
        i = bisect.bisect_left(tails, x)
        tails[i:i + 1] = [x]
    return len(sequence) - len(tails)


def count(events: list[Event], book: Ledger, dead: list[dict[str, Any]], exclude_order: set[str]) -> Counts:
    dead_mids = {mid for rec in dead for mid in rec.get("message_ids", [])}
    dead_with_notice = {mid for rec in dead for mid in rec.get("message_ids", [])
                        if set(rec.get("message_ids", [])) & book.notices}
    c = Counts(sent=len(events), posts=sum(len(e.posts) for e in events))
    accept = {e.token: e.accept_order for e in events if e.accept_order is not None and not e.uncertain
              and e.token not in exclude_order}
    for e in events:
        in_dead = any(mid in dead_mids for mid in e.message_ids)
        noticed = any(mid in dead_with_notice for mid in e.message_ids)
        c.accepted += e.accepted_at is not None
        c.answered += bool(book.carriers.get(e.token)) or noticed
        c.dead_lettered += in_dead
        c.lost += e.accepted_at is not None and not book.carriers.get(e.token) and not in_dead
        c.duplicates += len(set(book.carriers.get(e.token, []))) > 1
        c.redeliveries += e.redeliveries
    for tokens in book.order.values():
        seen = [accept[t] for t in dict.fromkeys(tokens) if t in accept]
        c.out_of_order += disorder(seen)
    c.misplaced = len(set(book.misplaced))
    return c


class Leaks:
    """Finds canary secrets in new log lines (each file read from where the last look stopped), model requests
    (bodies and every header but the API key's own), and the bot's messages."""

    AUTH_HEADERS = ("authorization", "x-api-key")

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.offsets: dict[Path, int] = {}
        self.model_cursor = 0
        self.canaries = list(stack.secrets.by_env().items())

    def mark(self) -> None:
        """Start looking from here (called when a scenario starts)."""
        for path in self.stack.log_files():
            self.offsets[path] = path.stat().st_size if path.exists() else 0
        self.model_cursor = len(self.stack.claude.requests_since(0))

    def scan(self, messages: list[dict[str, Any]]) -> list[str]:
        found = []
        for path in self.stack.log_files():
            if not path.exists():
                continue
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                text = f.read().decode("utf-8", "replace")
                self.offsets[path] = f.tell()
            found += [f"{name} in {path.name}" for name, v in self.canaries if v in text]
        calls = self.stack.claude.requests_since(self.model_cursor)
        self.model_cursor += len(calls)
        for call in calls:
            headers = {k: v for k, v in call["headers"].items() if k.lower() not in self.AUTH_HEADERS}
            blob = json.dumps([call["body"], headers], ensure_ascii=False)
            found += [f"{name} in a model request" for name, v in self.canaries if v in blob]
        for m in messages:
            found += [f"{name} in bot message {m['message_id']}" for name, v in self.canaries if v in reply_text(m)]
        return sorted(set(found))


class Run:
    """One scenario's bookkeeping: cursors at the start, a sender, and the standard invariants at the end."""

    def __init__(self, stack: Stack, leaks: Leaks, result: Result, quick: bool = False, **sender_kw: Any) -> None:
        self.stack, self.leaks, self.result, self.quick = stack, leaks, result, quick
        self.started = time.monotonic()
        self.feed_cursor = stack.feishu.feed(10**9)[1]
        self.model_cursor = len(stack.claude.requests_since(0))
        self.feishu_requests_from = len(stack.feishu.requests_since(0))
        leaks.mark()
        self.sender = Sender(stack, **sender_kw)
        self.token_re = re.compile(rf"k{self.sender.tag}n\d{{5}}")
        self.book = Ledger()
        self.dead: list[dict[str, Any]] = []
        self._phase_at = self.started
        self.phases: list[str] = []

    def phase(self, name: str) -> None:
        """Note how long the part of the scenario that ends now took (the report shows where time goes)."""
        now = time.monotonic()
        self.phases.append(f"{name} {now - self._phase_at:.1f}s")
        self._phase_at = now

    def messages(self) -> list[dict[str, Any]]:
        return self.stack.feishu.feed(self.feed_cursor)[0]

    def settle(self, idle_timeout: float = 90.0, send_timeout: float = 120.0) -> bool:
        """Every delivery made and the system idle within `idle_timeout`; records a check for each. When it is
        not idle in time, waits on (see `recover`) so lateness is told apart from loss."""
        r = self.result
        sent = self.sender.wait(send_timeout)
        r.check("deliveries finished", sent, "" if sent else f"pending after {send_timeout:.0f}s")
        self.phase("deliveries")
        routes = {e.route for e in self.sender.events}
        state = wait_idle(self.stack, routes, idle_timeout)
        self.phase("until idle")
        ok = r.check(f"drained within {idle_timeout:.0f}s", not state,
                     json.dumps(state, default=str)[:400] if state else "")
        if not ok:
            self.recover(routes)
        return ok

    def barrier(self, name: str, timeout: float = 60.0) -> bool:
        """Deliveries made and the system idle before the scenario's next step (a check only when it fails)."""
        state = {} if self.sender.wait(timeout) else {"deliveries": "pending"}
        state = state or wait_idle(self.stack, {e.route for e in self.sender.events}, timeout)
        self.phase(name)
        return not state or self.result.check(f"idle before {name}", False, json.dumps(state, default=str)[:300])

    def recover(self, routes: set[str]) -> None:
        """After a missed deadline: routes held by a kick lease with no job behind it wait for the lease to
        expire (runs.inbox.KICK_TTL_MS). Quick runs free them at once to save time; full runs wait it out."""
        started = time.monotonic()
        if self.quick:
            freed = [rk for rk in routes if str(self.stack.r.get(self.stack.keys.lease(rk)) or "").startswith("k:")]
            for rk in freed:
                self.stack.r.delete(self.stack.keys.lease(rk))
            self.result.notes.append(f"quick mode: chaos deleted {len(freed)} kick leases left without a job")
        state = wait_idle(self.stack, routes, 30.0 if self.quick else KICK_LEASE_S + 30.0)
        took = time.monotonic() - started
        self.result.notes.append(f"still not idle {took:.0f}s later: {json.dumps(state, default=str)[:300]}"
                                 if state else f"idle {took:.0f}s after the deadline")
        self.phase("recovery")

    def finish(self, exclude_order: set[str] | None = None, expect_dead: int = 0, expect_lost: int = 0) -> Counts:
        """Count, record the standard checks (nothing lost, duplicated, reordered, misplaced, leaked)."""
        messages = self.messages()
        self.book = ledger(self.sender.events, messages, self.token_re)
        ours = {mid for e in self.sender.events for mid in e.message_ids}
        self.dead = [d for d in dead_records(self.stack) if set(d.get("message_ids", [])) & ours]
        c = count(self.sender.events, self.book, self.dead, exclude_order or set())
        lat = self.sender.latencies()
        c.p50_ms, c.p99_ms = percentile(lat, 0.50), percentile(lat, 0.99)
        r = self.result
        r.counts = c
        r.check("every event accepted", c.accepted == c.sent, f"{c.sent - c.accepted} never got a 200")
        r.check("none lost", c.lost == expect_lost, f"{c.lost} lost: {self.lost_tokens()[:5]}")
        r.check("no duplicate replies", c.duplicates == 0, f"{c.duplicates}: {self.duplicate_tokens()[:5]}")
        r.check("order kept per route", c.out_of_order == 0, f"{c.out_of_order} replies out of order")
        r.check("answers in the right chat/topic", c.misplaced == 0, f"{c.misplaced} misplaced")
        r.check("dead letters as expected", c.dead_lettered == expect_dead,
                f"{c.dead_lettered} dead-lettered, expected {expect_dead}")
        leaks = self.leaks.scan(messages)
        r.check("no secret leaked", not leaks, "; ".join(leaks[:5]))
        unsure = sum(1 for e in self.sender.events if e.uncertain)
        if unsure:
            r.notes.append(f"{unsure} events had a delivery whose connection broke mid-request (left out of the "
                           "order check: their storage time is unknown)")
        return c

    def lost_tokens(self) -> list[str]:
        dead = {mid for d in self.dead for mid in d.get("message_ids", [])}
        return [e.token for e in self.sender.events if e.accepted_at is not None
                and not self.book.carriers.get(e.token) and not set(e.message_ids) & dead]

    def duplicate_tokens(self) -> list[str]:
        return [t for t, ms in self.book.carriers.items() if len(set(ms)) > 1]

    def close(self) -> None:
        self.sender.close()
        self.result.events = [{"token": e.token, "route": e.route, "message_ids": e.message_ids,
                               "status": e.final_status, "redeliveries": e.redeliveries,
                               "posts": [[round(p.at, 3), round(p.ms, 1), p.status, p.kind, p.error, p.host]
                                         for p in e.posts]}
                              for e in self.sender.events]
        self.result.extra["phases"] = self.phases
        if self.phases:
            self.result.notes.append("time: " + ", ".join(self.phases))


@dataclass(frozen=True)
class Acquire:
    at: float  # Redis' clock (the MONITOR timestamp), seconds since the epoch
    route: str
    kick_token: str
    exec_id: str


class Tap:
    """`redis-cli monitor` piped through `grep -F <needle>` into a file of the stack's directory, so the chaos
    process parses only the lines it wants of everything Redis executed (MONITOR is on once this returns)."""

    def __init__(self, stack: Stack, needle: str, name: str) -> None:
        self.path = stack.dir / f"{name}-{os.urandom(3).hex()}.txt"
        cli = BIN / "redis-cli" if (BIN / "redis-cli").exists() else Path(shutil.which("redis-cli") or "redis-cli")
        sock = stack.redis_url.removeprefix("unix://").split("?")[0]
        self._cli = subprocess.Popen([str(cli), "-s", sock, "monitor"], stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL)
        assert self._cli.stdout is not None
        with open(self.path, "wb") as out:  # grep keeps its own descriptor
            self._grep = subprocess.Popen(["grep", "--line-buffered", "-F", needle], stdin=self._cli.stdout,
                                          stdout=out)
        self._cli.stdout.close()  # grep owns the pipe now
        time.sleep(0.2)  # MONITOR is on before the scenario's first command

    def stop(self, drain: float = 0.0) -> None:
        """End the monitor, `drain` seconds after the last lines may still be in the pipe."""
        time.sleep(drain)
        end_all((self._cli, self._grep))

    def lines(self) -> list[str]:
        return self.path.read_text(errors="replace").splitlines()


class Acquires:
    """Every ACQUIRE a run made (a run taking its route's lease with its kick token), as Redis executed it: read
    through MONITOR by `redis-cli` and filtered by the script's SHA1 in `grep`, so the chaos process parses only
    those lines. A kick token that started runs under more than one execution id was dispatched twice (two
    sweepers, or a sweeper and a chaining horse, took the same kick record), whatever the script answered."""

    def __init__(self, stack: Stack) -> None:
        from runs import inbox_lua as scripts

        self.sha = hashlib.sha1(scripts.ACQUIRE.encode()).hexdigest()  # what redis-py's EVALSHA names
        self.tap = Tap(stack, self.sha, "acquires")

    def stop(self) -> list[Acquire]:
        """End the monitor; every ACQUIRE seen, once per (kick token, execution id), in Redis' order."""
        self.tap.stop()
        seen: dict[tuple[str, str], Acquire] = {}
        for line in self.tap.lines():
            stamp, _, rest = line.partition(" [")
            _, _, command = rest.partition("] ")
            try:
                words = shlex.split(command)
            except ValueError:
                continue
            # EVALSHA sha 2 lease dirty | kick_token exec_id ttl_ms route_key now
            if len(words) >= 9 and words[0].upper() == "EVALSHA" and words[1] == self.sha:
                found = Acquire(float(stamp), words[8], words[5], words[6])
                seen.setdefault((found.kick_token, found.exec_id), found)
        return sorted(seen.values(), key=lambda a: a.at)

    @staticmethod
    def twice(acquires: list[Acquire]) -> dict[str, list[Acquire]]:
        """Kick tokens that started more than one run."""
        by_token: dict[str, list[Acquire]] = {}
        for a in acquires:
            by_token.setdefault(a.kick_token, []).append(a)
        return {token: runs for token, runs in by_token.items() if len(runs) > 1}


def end_all(procs: Sequence[subprocess.Popen[bytes]]) -> None:
    """Stop helper processes (a MONITOR tap and its grep): politely, then for good."""
    for proc in procs:
        if proc.poll() is None:
            proc.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(5)
        if proc.poll() is None:
            proc.kill()
            proc.wait(5)
