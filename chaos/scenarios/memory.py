"""Scenario 19: memory that outlives sessions under concurrent writers, kills and a killed consolidation (issue 25).

Several people in one group ask the offline model to remember things at once, each from their own group route:
team rules ("团队约定：…", a line in the chat's instructions.md), owner facts ("记住：模块N负责人是张三", a note of
the team's) and their own instructions ("以后…", their instructions.md). In one item's topic, with
ROUTING_TOPIC_SCOPE=per_sender so that every sender there is a route of its own, they report progress
("已确认：…", "待查：…", lines in the item's progress.md). So ONE chat scope and ONE item scope are written by many
routes at once: each route says its lines one after another, all routes together. Meanwhile:

- a work-horse is SIGKILLed right after its turn's memory write was applied and before its reply (the stand-in's
  request hook finds the process holding the connection of the request that carries the write's tool result), so
  the turn is retried and writes the same line again;
- busy horses and RQ workers are SIGKILLed at random (scenario 11's killer);
- the service clock moves a day and the owners change ("模块N负责人是李四"); then it moves to the night's
  MEMORY_DREAM_CRON slot: every scope changed before it is consolidated, while more rules and progress are written;
  the chat's consolidation is SIGKILLed after the model staged its merges and before they were applied, and its
  retry meets a rule written between its read and its apply (so that run applies nothing and is retried again).

Every change any process applies is witnessed by `redis-cli monitor` (the store's script: HSET/HDEL of the files,
then the HSET of the scope's version), so the checks compare Redis with what was written, not with what the
service says about it: versions 1, 2, … with no gap or repeat; the version counter equals the number of applied
changes; each file holds exactly the text last written to it (never a mix of two writers), with its version and
the scope's character count; the undo stack ≤ UNDO_KEPT; no line twice; every line a turn said it remembered in
its scope exactly once, also for the retried turns; the consolidation applied all or nothing: nothing before its
kill, then one change holding every merge.
"""

from __future__ import annotations

import json
import os
import re
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from bitable import keys as item_keys
from bitable.index import Items
from chaos.load import Event, Target
from chaos.measure import Run, Tap, dead_records, reply_text, wait_idle
from chaos.procs import proc_table, signal_pids
from chaos.report import Counts, Result, percentile
from chaos.scenarios.base import Context, scenario
from chaos.scenarios.crashes import log_size, wait_workers
from chaos.scenarios.items import Kills
from chaos.stack import Stack
from core.clock import Clock
from core.settings import Settings
from memory.scopes import keys as scope_keys
from memory.scopes.paths import Scope
from memory.scopes.settings import memory_settings
from memory.scopes.store import UNDO_KEPT, Memories
from routing.keys import memory_route

APP, TABLE = "bascnChaosMemory19", "tblChaosMemory19"
REMEMBERED, REFUSED = "记住了", "没能记下"
LUA = re.compile(r"^(\d+\.\d+) \[\d+ lua\] (.*)$")
MESSAGE = re.compile(r"<message [^>]*>(.*?)</message>", re.DOTALL)
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"')
ESCAPES = {"n": b"\n", "r": b"\r", "t": b"\t", "a": b"\a", "b": b"\b"}
WRITTEN = ("The file /memories/", "File created successfully at: /memories/")


@dataclass
class Plan:
    """The people, the chat, the item's topic, and the days the scenario plays on."""

    tag: str
    chat: str
    thread: str
    senders: list[str]
    day1: datetime  # 16:00: the night's slot (03:30) is more than 12 h behind, so nothing is consolidated early
    late: str = ""  # a memory admin who speaks only while the team's memory is being consolidated
    root: str = ""
    item_id: str = ""

    @property
    def day2(self) -> datetime:
        return self.day1 + timedelta(days=1)

    @property
    def dream_at(self) -> datetime:
        return (self.day1 + timedelta(days=2)).replace(hour=3, minute=30, second=2)

    @property
    def team(self) -> Scope:
        return Scope("chats", self.chat)

    @property
    def item(self) -> Scope:
        return Scope("items", self.item_id)

    def person(self, i: int) -> Scope:
        return Scope("people", self.senders[i])

    def scopes(self) -> list[Scope]:
        return [self.team, self.item, *(self.person(i) for i in range(len(self.senders)))]

    def group(self, i: int) -> Target:
        return Target(self.chat, "group", self.senders[i])

    def topic(self, i: int) -> Target:
        return Target(self.chat, "group", self.senders[i], thread_id=self.thread, root_id=self.root)

    def routes(self, profile: str) -> list[str]:
        """Every route that runs: each sender's group and topic route, each scope's consolidation route."""
        people = [f"feishu:{profile}:group:{self.chat}:{s}" for s in [*self.senders, self.late]]
        topics = [f"feishu:{profile}:topic:{self.chat}:{self.thread}:{s}" for s in self.senders]
        return people + topics + [memory_route(profile, s.name) for s in self.scopes()]


@dataclass
class Ask:
    """One message asking to remember something, and the scope its line must end up in."""

    event: Event
    kind: str  # rule | instruction | owner | progress
    scope: Scope
    phase: int


Script = dict[Target, list[tuple[str, str, Scope]]]  # per route: (kind, text, scope) in the order said


def day(when: datetime) -> str:
    return when.strftime("%m-%d")


def afternoon(tz: Any) -> datetime:
    """16:00 local on the Monday of next week: the service clock's start."""
    when = datetime.now(tz) + timedelta(days=7)
    return (when - timedelta(days=when.weekday())).replace(hour=16, minute=0, second=0, microsecond=0)


def set_clock(clock: Clock, when: datetime) -> None:
    clock.reset()
    clock.advance(when.timestamp() - time.time())


# -- what is said -------------------------------------------------------------------------------------------------

def script(plan: Plan, phase: int, rules: int, progress: int) -> Script:
    """Phase 1: rules, an instruction and an owner fact; phase 2: rules and the owner changed; phase 3 (while the
    consolidations run): one rule. In the topic: progress lines in every phase."""
    out: Script = {}
    step = ("一", "二", "三")[phase - 1]
    for i in range(len(plan.senders)):
        said = [("rule", f"团队约定：规则{step}{j}", plan.team) for j in range(rules if phase < 3 else 1)]
        if phase == 1:
            said += [("instruction", "以后回答我带上", plan.person(i)),
                     ("owner", f"记住：模块{i}负责人是张三", plan.team)]
        elif phase == 2:
            said.append(("owner", f"记住：模块{i}负责人是李四", plan.team))
        out[plan.group(i)] = said
        word = "已确认：现象" if phase % 2 else "待查：原因"
        out[plan.topic(i)] = [("progress", f"{word}{step}{j}", plan.item) for j in range(progress if phase < 3 else 1)]
    return out


def converse(run: Run, said: Script, phase: int, timeout: float = 90.0) -> list[Ask]:
    """Each route says its lines one after another (the next once the last was answered); all routes at once."""
    feishu = run.stack.feishu

    def route(target: Target, lines: list[tuple[str, str, Scope]]) -> list[Ask]:
        asks = []
        for kind, text, scope in lines:
            ask = Ask(run.sender.event(target, text), kind, scope, phase)
            run.sender.send(ask.event)
            asks.append(ask)
            deadline = time.monotonic() + timeout
            while not feishu.replies_to(ask.event.message_id):
                if time.monotonic() > deadline:
                    return asks  # the rest would only batch behind it: counted as lost at the end
                time.sleep(0.05)
        return asks

    with ThreadPoolExecutor(max_workers=len(said), thread_name_prefix="chaos-s19") as pool:
        futures = [pool.submit(route, target, lines) for target, lines in said.items()]
        return [a for f in futures for a in f.result()]


# -- every applied change, from Redis itself ----------------------------------------------------------------------

def unquote(text: str) -> str:
    """One argument as redis-cli prints it (sdscatrepr: \\xHH bytes, \\n, \\", \\\\) back to its text."""
    out, i = bytearray(), 0
    while i < len(text):
        if text[i] == "\\" and i + 1 < len(text):
            nxt = text[i + 1]
            if nxt == "x":
                out.append(int(text[i + 2:i + 4], 16))
                i += 4
                continue
            out += ESCAPES.get(nxt, nxt.encode())
            i += 2
            continue
        out += text[i].encode()
        i += 1
    return out.decode("utf-8", "replace")


@dataclass
class Change:
    """One change the store's script applied: the files it wrote (None: deleted) and the version it ended with."""

    at: float  # Redis' clock (MONITOR), epoch seconds
    scope: str
    version: int
    by: str
    files: dict[str, str | None]
    stamped: dict[str, int]  # path → the version in the written file's JSON


@dataclass
class Witnessed:
    changes: dict[str, list[Change]] = field(default_factory=dict)
    runs: Counter[str] = field(default_factory=Counter)  # executions of the script (won or lost the race)


class Trace:
    """`redis-cli monitor` filtered by `grep -F` on the profile's memory keys: the store's script's own commands."""

    def __init__(self, stack: Stack) -> None:
        self.prefix = f"{stack.keys.prefix}:mem:{{"
        self.tap = Tap(stack, self.prefix, "memory-trace")

    def stop(self) -> None:
        self.tap.stop(drain=0.3)  # the last lines through the pipe

    def read(self) -> Witnessed:
        seen = Witnessed()
        pending: dict[str, tuple[dict[str, str | None], dict[str, int]]] = {}
        for line in self.tap.lines():
            m = LUA.match(line)
            args = [unquote(a) for a in QUOTED.findall(m.group(2))] if m else []
            if m is None or len(args) < 3 or not args[1].startswith(self.prefix):
                continue
            scope, _, part = args[1][len(self.prefix):].partition("}:")
            command = args[0].upper()
            files, stamped = pending.setdefault(scope, ({}, {}))
            if (part, command) == ("meta", "HGET") and args[2] == "version":
                seen.runs[scope] += 1  # the script's first command
            elif (part, command) == ("files", "HSET"):
                body = json.loads(args[3])
                files[args[2]], stamped[args[2]] = str(body["text"]), int(body["version"])
            elif (part, command) == ("files", "HDEL"):
                files.update(dict.fromkeys(args[2:]))
            elif (part, command) == ("meta", "HSET") and "version" in args[2::2]:
                fields = dict(zip(args[2::2], args[3::2], strict=False))
                files, stamped = pending.pop(scope)
                seen.changes.setdefault(scope, []).append(Change(float(m.group(1)), scope, int(fields["version"]),
                                                                 fields.get("updated_by", ""), files, stamped))
        return seen


# -- kills at the worst moments -----------------------------------------------------------------------------------

def holders(port: int, server_port: int, candidates: list[int]) -> list[int]:
    """The processes among `candidates` holding the client end of a loopback connection from `port`."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            cols = row.split()
            if int(cols[1].rsplit(":", 1)[1], 16) == port and int(cols[2].rsplit(":", 1)[1], 16) == server_port:
                inodes.add(f"socket:[{cols[9]}]")
    found = []
    for pid in candidates:
        try:
            fds = os.listdir(f"/proc/{pid}/fd")
        except OSError:
            continue
        for fd in fds:
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") in inodes:
                    found.append(pid)
                    break
            except OSError:
                continue
    return found


def tool_results(body: dict[str, Any]) -> list[str]:
    """The tool results the request's last message carries (what the previous step's tool calls answered)."""
    last = (body.get("messages") or [{}])[-1]
    content = last.get("content") if last.get("role") == "user" else None
    if not isinstance(content, list):
        return []
    return [str(b.get("content")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]


def batch_text(body: dict[str, Any]) -> str:
    """The messages of the request's batch (its last user turn that is not tool results), without the memory
    loaded before them (which names lines remembered earlier)."""
    for m in reversed(body.get("messages") or []):
        content = m.get("content")
        if m.get("role") != "user" or (isinstance(content, list) and any(
                isinstance(b, dict) and b.get("type") == "tool_result" for b in content)):
            continue
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        return "\n".join(MESSAGE.findall(text))
    return ""


class Race:
    """Someone else writes the team's memory while it is consolidated: at the first request of the retried
    consolidation a memory admin who has said nothing so far asks for a rule, and each request of that run waits
    (under the client's timeout) until the rule is applied, so it lands between the run's read and its apply."""

    def __init__(self, run: Run, plan: Plan, store: Memories, hold_s: float) -> None:
        self.run, self.plan, self.store, self.hold_s = run, plan, store, hold_s
        self.ask: Ask | None = None
        self.landed_at: float | None = None

    def hold(self, first: bool) -> None:
        if first and self.ask is None:
            self.ask = Ask(self.run.sender.event(Target(self.plan.chat, "group", self.plan.late),
                                                 "团队约定：整理记忆时定的规则"), "rule", self.plan.team, 3)
            self.run.sender.send(self.ask.event)
        if self.ask is None or self.landed_at is not None:
            return
        deadline = time.monotonic() + self.hold_s
        while time.monotonic() < deadline:
            found = self.store.file(self.plan.team, "instructions.md")
            if found is not None and self.ask.event.token in found.text:
                self.landed_at = time.time()
                return
            time.sleep(0.05)


class MidWrite:
    """The stand-in's request hook. A turn's request carrying the result of a write to the chat's or the item's
    memory comes after the write was applied and before the reply: the process that sent it is SIGKILLed (its horse,
    or horse and RQ worker), once per batch, `writes` times. The chat's consolidation is SIGKILLed once at its
    request carrying the staged tool results (the merges are staged in the horse, not yet applied); its retry meets
    the `race`."""

    def __init__(self, ctx: Context, plan: Plan, writes: int, token_re: re.Pattern[str], store: Memories) -> None:
        self.ctx, self.plan, self.token_re, self.store = ctx, plan, token_re, store
        self.lock = threading.Lock()
        self.active = False
        self.writes_left, self.dream_left = writes, 1
        self.kills: list[dict[str, Any]] = []
        self.killed_tokens: set[str] = set()
        self.dream_killed_at: float | None = None
        self.at_dream_kill: dict[str, str] = {}  # the chat's files right after the consolidation was killed
        self.race: Race | None = None
        ctx.stack.claude.on_request(self)

    def __call__(self, body: dict[str, Any]) -> None:
        if not self.active:
            return
        results = tool_results(body)
        first = (body.get("messages") or [{}])[0].get("content")
        if "MEMORY CONSOLIDATION" in json.dumps(body.get("system"), ensure_ascii=False):
            shown = first if isinstance(first, str) else "".join(  # text blocks with breakpoints (issue 34)
                str(b.get("text", "")) for b in first or [] if isinstance(b, dict))
            if f'<scope name="{self.plan.team.name}"' in shown:
                self._dream(staged=bool(results))
            return
        if results:
            self._after_write(body, results)

    def _after_write(self, body: dict[str, Any], results: list[str]) -> None:
        roots = (self.plan.team.root + "/", self.plan.item.root + "/")
        if not all(r.startswith(WRITTEN) for r in results) or not any(root in r for r in results for root in roots):
            return
        tokens = set(self.token_re.findall(batch_text(body)))
        with self.lock:
            if self.writes_left <= 0 or not tokens or tokens & self.killed_tokens:
                return
            self.writes_left -= 1
            self.killed_tokens |= tokens
            kind = ("horse", "both")[self.writes_left % 2]
        hit = self._kill(kind)
        with self.lock:
            self.kills.append({"after": "write", "kind": kind, "tokens": sorted(tokens), "pids": hit,
                               "at": time.time()})

    def _dream(self, staged: bool) -> None:
        with self.lock:
            retried, kill = self.dream_left <= 0, staged and self.dream_left > 0
            self.dream_left -= kill
        if retried and self.race is not None:
            self.race.hold(first=not staged)
        if not kill:
            return
        hit = self._kill("horse")
        self.dream_killed_at = time.time()
        self.at_dream_kill = {p: f.text for p, f in self.store.files(self.plan.team).items()}
        with self.lock:
            self.kills.append({"after": "staged consolidation", "kind": "horse", "pids": hit,
                               "at": self.dream_killed_at})

    def _kill(self, kind: str) -> list[int]:
        from flask import request  # the hook runs inside the stand-in's request

        stack = self.ctx.stack
        port = int(request.environ.get("REMOTE_PORT") or 0)
        owners = holders(port, stack.claude.port, stack.services["worker"].members())
        table = proc_table()
        horses = [p for p in owners if p in table and table[p].pgid == p] or owners
        victims = horses + ([table[p].ppid for p in horses if p in table] if kind == "both" else [])
        return signal_pids(victims, signal.SIGKILL)


# -- the deployment ------------------------------------------------------------------------------------------------

def deploy(ctx: Context, plan: Plan) -> float:
    """Items on (the topic's item), a movable clock, the senders as memory admins, per-sender topic routes; the web,
    the worker and the sweeper restarted with it. Returns the seconds the restart took."""
    stack = ctx.stack
    stack.feishu.add_table(APP, TABLE)
    stack.feishu.add_chat(plan.chat, owner=plan.senders[0])
    stack.r.delete(item_keys.bitable_status(stack.keys))
    return stack.reconfigure(("web", "worker", "sweeper"), 300.0, (), CLOCK_ADJUSTABLE="1",
                             BITABLE_APP_TOKEN=APP, BITABLE_TABLE_ID=TABLE, ROUTING_TOPIC_SCOPE="per_sender",
                             MEMORY_ADMINS=",".join([*plan.senders, plan.late]))


def seed(store: Memories, plan: Plan) -> None:
    """The files many routes append to exist before they do (a careful model inserts into what it was shown)."""
    store.change(plan.team, "chaos", "seed", lambda f: {"instructions.md": "- 团队约定：群里说中文（seed）"})
    store.change(plan.item, "chaos", "seed", lambda f: {"progress.md": "- 待查：从哪天开始（seed）"})


def settle(ctx: Context, plan: Plan, result: Result, name: str, timeout: float) -> bool:
    state = wait_idle(ctx.stack, plan.routes(ctx.stack.profile), timeout)
    return not state or result.check(f"idle after {name}", False, json.dumps(state, default=str)[:300])


def wait_dreams(ctx: Context, plan: Plan, timeout: float) -> int | None:
    """The night's slot pushed its consolidation events (the sweeper marks the slot after its pushes)."""
    key = scope_keys.memory_dream_slot(ctx.stack.keys, int(plan.dream_at.replace(second=0).timestamp()))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (pushed := ctx.stack.r.get(key)) is not None:
            return int(pushed)
        time.sleep(0.1)
    return None


# -- checks ---------------------------------------------------------------------------------------------------------

def replay(changes: list[Change]) -> tuple[dict[str, str], dict[str, int]]:
    """The files the witnessed changes leave, and the version each was last written at."""
    files: dict[str, str] = {}
    stamped: dict[str, int] = {}
    for c in changes:
        for path, text in c.files.items():
            if text is None:
                files.pop(path, None)
            else:
                files[path], stamped[path] = text, c.stamped[path]
    return files, stamped


def check_store(ctx: Context, result: Result, plan: Plan, seen: Witnessed, store: Memories) -> None:
    """Each scope against every change Redis applied to it."""
    gaps, counters, torn, stamps, undo = {}, {}, {}, {}, {}
    for scope in plan.scopes():
        changes = seen.changes.get(scope.name, [])
        versions = [c.version for c in changes]
        if versions != list(range(1, len(versions) + 1)):
            gaps[scope.name] = versions
        meta = ctx.stack.r.hgetall(scope_keys.memory_meta(ctx.stack.keys, scope.name))
        if int(meta.get("version") or 0) != len(changes):
            counters[scope.name] = (meta.get("version"), len(changes))
        files, stamped = replay(changes)
        now = store.files(scope)
        if {p: f.text for p, f in now.items()} != files:
            torn[scope.name] = sorted(set(now) ^ set(files)) or [p for p in files if now[p].text != files[p]]
        wrong = [p for p, f in now.items() if f.version != stamped.get(p) or f.version > len(changes)]
        if wrong or int(meta.get("chars") or 0) != sum(len(f.text) for f in now.values()):
            stamps[scope.name] = (wrong, meta.get("chars"), sum(len(f.text) for f in now.values()))
        if store.undoable(scope) > UNDO_KEPT:
            undo[scope.name] = store.undoable(scope)
    applied = sum(len(v) for v in seen.changes.values())
    result.check("every change witnessed (MONITOR) and versions strictly increasing: 1, 2, … with no gap or repeat",
                 not gaps and applied > 0, f"{gaps}"[:300])
    result.check("the version counter equals the number of applied changes", not counters, f"{counters}"[:300])
    result.check("no torn write: each file holds exactly the text last written to it, never a mix", not torn,
                 f"{torn}"[:300])
    result.check("each file's version and the scope's character count agree with what was written", not stamps,
                 f"{stamps}"[:300])
    result.check(f"undo stack ≤ {UNDO_KEPT} per scope", not undo, f"{undo}")


def check_lines(ctx: Context, result: Result, plan: Plan, asks: list[Ask], store: Memories,
                token_re: re.Pattern[str]) -> dict[str, int]:
    """Every line a turn said it remembered is in its scope exactly once; no line twice; nothing stray."""
    texts = {s.name: {p: f.text for p, f in store.files(s).items()} for s in plan.scopes()}
    where: Counter[tuple[str, str]] = Counter()
    doubled = []
    for scope, files in texts.items():
        for path, text in files.items():
            lines = [x for x in text.split("\n") if x.strip()]
            doubled += [f"{scope}/{path}: {x}" for x, n in Counter(lines).items() if n > 1]
            where.update((scope, tok) for tok in token_re.findall(text))
    said = {a.event.token: a for a in asks}
    replies = {a.event.token: [reply_text(m) for m in ctx.stack.feishu.replies_to(a.event.message_id)] for a in asks}
    remembered = [t for t, got in replies.items() if got and REMEMBERED in got[0] and REFUSED not in got[0]]
    refused = [t for t, got in replies.items() if got and t not in remembered]
    missing = [t for t in remembered if where[(said[t].scope.name, t)] != 1]
    stray = [f"{s}:{t}" for (s, t) in where if t not in said or said[t].scope.name != s]
    result.check("every memory request answered as remembered (none refused)", not refused,
                 f"{[(t, replies[t][0][:80]) for t in refused[:3]]}")
    result.check("no lost write: every line a turn said it remembered is in its scope exactly once", not missing,
                 f"{[(t, said[t].kind, said[t].scope.name, where[(said[t].scope.name, t)]) for t in missing[:5]]}")
    result.check("no duplicate line in any file", not doubled, f"{doubled[:3]}")
    result.check("no line in a scope it was not asked into", not stray, f"{stray[:5]}")
    return {"remembered": len(remembered), "refused": len(refused)}


def check_dream(ctx: Context, result: Result, plan: Plan, seen: Witnessed, hook: MidWrite, asks: list[Ask],
                store: Memories, pushed: int | None) -> None:
    """All or nothing: nothing of the killed run applied; one change holding every merge; the others untouched."""
    team = seen.changes.get(plan.team.name, [])
    dreams = [c for c in team if c.by == "consolidation"]
    owners = {(a.event.target.sender, a.phase): a for a in asks if a.kind == "owner"}
    notes = {a.event.token: p for c in team for p, t in c.files.items() if t for a in owners.values()
             if a.event.token in t and c.by != "consolidation"}
    expected: dict[str, str | None] = {}
    for i, sender in enumerate(plan.senders):
        was, now = owners.get((sender, 1)), owners.get((sender, 2))
        if was and now and was.event.token in notes and now.event.token in notes:
            expected[notes[was.event.token]] = None
            expected[notes[now.event.token]] = (f"模块{i}负责人：李四 {now.event.token}（自 {day(plan.day2)} 起；"
                                                f"原为 张三 {was.event.token}）")
    killed = hook.dream_killed_at
    result.check("the consolidation was SIGKILLed with its merges staged", killed is not None and bool(expected),
                 f"killed at {killed}, {len(expected)} note files to merge")
    result.check("the killed consolidation applied nothing (no change of it before its kill; every note as it was)",
                 killed is not None and all(c.at > killed for c in dreams)
                 and all(hook.at_dream_kill.get(p) is not None for p in expected),
                 f"{[(c.at, c.version) for c in dreams]}; at the kill {len(hook.at_dream_kill)} files")
    one = dreams[0] if len(dreams) == 1 else None
    result.check("the consolidation applied all or nothing: one change holding every merge and delete",
                 one is not None and one.files == expected,
                 f"{len(dreams)} consolidation changes; {sorted((one.files if one else {}).items())[:2]}"[:300])
    final = {p: f.text for p, f in store.files(plan.team).items()}
    merged = all(final.get(p) == text for p, text in expected.items())
    result.check("every owner pair merged into one line 'X负责人：B（自 <day> 起；原为 A）'", merged and bool(expected),
                 f"{[(p, final.get(p)) for p, t in expected.items() if final.get(p) != t][:2]}"[:300])
    untouched = {s.name: len([c for c in seen.changes.get(s.name, []) if c.by == "consolidation"])
                 for s in plan.scopes() if s != plan.team}
    result.check("scopes with nothing to tidy were not changed by their consolidation", not any(untouched.values()),
                 f"{untouched}")
    text = worker_log(ctx.stack, 0)
    done = [s.name for s in plan.scopes() if f"memory {s.name} consolidated" not in text]
    result.check("every scope changed before the slot was consolidated", pushed is not None and not done,
                 f"slot pushed {pushed}; not consolidated: {done[:5]}")


def worker_log(stack: Stack, since: int) -> str:
    return stack.services["worker"].log_path.read_bytes()[since:].decode("utf-8", "replace")


def counts(ctx: Context, run: Run, asks: list[Ask]) -> Counts:
    """Per message: one reply in its chat (and topic), or a dead letter."""
    stack = ctx.stack
    ours = {mid for a in asks for mid in a.event.message_ids}
    dead = {mid for d in dead_records(stack) for mid in d.get("message_ids", []) if mid in ours}
    c = Counts(sent=len(asks), posts=sum(len(a.event.posts) for a in asks))
    for a in asks:
        got = {m["message_id"]: m for m in stack.feishu.replies_to(a.event.message_id)}
        ev, in_dead = a.event, bool(set(a.event.message_ids) & dead)
        c.accepted += ev.accepted_at is not None
        c.answered += bool(got) or in_dead
        c.lost += ev.accepted_at is not None and not got and not in_dead
        c.duplicates += len(got) > 1
        c.dead_lettered += in_dead
        c.redeliveries += ev.redeliveries
        c.misplaced += any(m["chat_id"] != ev.target.chat_id or (ev.target.thread_id and m.get("thread_id")
                                                                  != ev.target.thread_id) for m in got.values())
    lat = run.sender.latencies()
    c.p50_ms, c.p99_ms = percentile(lat, 0.50), percentile(lat, 0.99)
    return c


def standard(result: Result, c: Counts, leaks: list[str]) -> None:
    result.counts = c
    result.check("every event accepted", c.accepted == c.sent, f"{c.sent - c.accepted} never got a 200")
    result.check("none lost", c.lost == 0, f"{c.lost} without a reply")
    result.check("no duplicate replies", c.duplicates == 0, f"{c.duplicates}")
    result.check("answers in the right chat/topic", c.misplaced == 0, f"{c.misplaced} misplaced")
    result.check("dead letters as expected", c.dead_lettered == 0, f"{c.dead_lettered} dead-lettered, expected 0")
    result.check("no secret leaked", not leaks, "; ".join(leaks[:5]))


def retried(ctx: Context, cursor: int, token_re: re.Pattern[str]) -> Counter[str]:
    """Per token, how many times a turn's first request asked about it (more than once: the turn was retried)."""
    out: Counter[str] = Counter()
    for call in ctx.stack.claude.requests_since(cursor):
        body = call["body"]
        names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
        if "memory" in names and not tool_results(body) and "MEMORY CONSOLIDATION" not in json.dumps(
                body.get("system"), ensure_ascii=False):
            out.update(set(token_re.findall(batch_text(body))))
    return out


# -- the scenario ---------------------------------------------------------------------------------------------------

@scenario(19, "memory written from many routes at once under kills; a consolidation killed mid-run",
          fresh_stack_after=True)  # web, worker and sweeper run with items, a movable clock, per-sender topics
def memory_under_kills(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    n, rules, progress = ctx.size(3, 8), ctx.size(1, 3), ctx.size(1, 2)
    write_kills, random_kills = ctx.size(2, 5), ctx.size(1, 4)
    tag = os.urandom(2).hex()
    settings = Settings(_env_file=os.devnull)  # type: ignore[call-arg]
    plan = Plan(tag, f"oc_s19_{tag}", f"omt_s19_{tag}", [f"ou_s19_{tag}_u{i}" for i in range(n)],
                afternoon(settings.tz), late=f"ou_s19_{tag}_late")
    clock = Clock(stack.r, stack.keys, adjustable=True)
    m = memory_settings(settings)
    store = Memories(stack.r, stack.keys, m.caps, clock=clock.now,
                     tz=settings.tz)
    took = deploy(ctx, plan)
    run = ctx.run(result)
    trace: Trace | None = None
    killer = Kills(ctx, every=0.8, limit=random_kills)
    hook = MidWrite(ctx, plan, write_kills, run.token_re, store)
    hook.race = Race(run, plan, store, hold_s=float(stack.env["LLM_TIMEOUT_SECONDS"]) - 1.0)
    result.size = (f"{n} people x {2 * rules + 4} group + {2 * progress + 1} topic msgs into 1 chat + 1 item scope, "
                   f"{write_kills} kills after a write + ≤{random_kills} random, 1 consolidation killed + 1 write "
                   "during its retry")
    try:
        run.phase(f"restart with items, a movable clock, per-sender topics ({took:.0f}s)")
        set_clock(clock, plan.day1)
        plan.root = run.sender.add_topic(plan.chat, plan.thread, plan.senders[0]).root_id or ""
        item, _ = Items(stack.r, stack.keys).claim(thread_id=plan.thread, chat_id=plan.chat, root_id=plan.root,
                                                   reporter=plan.senders[0], origin="chaos")
        plan.item_id = item.item_id
        worker_from = log_size(stack, "worker")
        model_from = len(stack.claude.requests_since(0))
        trace = Trace(stack)
        seed(store, plan)
        stack.claude.set_delay(0.1)
        hook.active = True
        killer.start()
        asks = converse(run, script(plan, 1, rules, progress), 1)
        settle(ctx, plan, result, "day 1", 60)
        run.phase("day 1: many routes write one chat and one item scope")
        set_clock(clock, plan.day2)
        asks += converse(run, script(plan, 2, rules, progress), 2)
        settle(ctx, plan, result, "day 2", 60)
        run.phase("day 2: the owners change")
        set_clock(clock, plan.dream_at)
        pushed = wait_dreams(ctx, plan, 30)  # then write: a scope written after the slot waits for the next one
        asks += converse(run, script(plan, 3, rules, progress), 3)
        idle = not wait_idle(stack, plan.routes(stack.profile), ctx.size(60, 90))
        result.check("drained: every route and consolidation idle", idle)
        run.phase("night: consolidations, one killed, while more is written")
        hook.active = False
        killer.stop()
        trace.stop()
        seen = trace.read()
        asks += [hook.race.ask] if hook.race.ask else []
        conflicts = worker_log(stack, worker_from).count("changed while it was consolidated")
        check_store(ctx, result, plan, seen, store)
        said = check_lines(ctx, result, plan, asks, store, run.token_re)
        check_dream(ctx, result, plan, seen, hook, asks, store, pushed)
        landed = hook.race.landed_at
        dreamt = [c.at for c in seen.changes.get(plan.team.name, []) if c.by == "consolidation"]
        result.check("a rule written between the retried consolidation's read and its apply is kept: nothing of that "
                     "run applied, the consolidation retried from the new files",
                     landed is not None and conflicts >= 1 and all(at > landed for at in dreamt),
                     f"landed at {landed}, {conflicts} conflict(s), consolidation applied at {dreamt}")
        standard(result, counts(ctx, run, asks), run.leaks.scan(run.messages()))
        after_write = [k for k in hook.kills if k["after"] == "write"]
        result.check(f"{write_kills} horses SIGKILLed right after their memory write, before their reply",
                     len(after_write) == write_kills and all(k["pids"] for k in after_write),
                     f"{[(k['kind'], k['pids']) for k in after_write]}")
        wait_workers(ctx, result)
        again = retried(ctx, model_from, run.token_re)
        killed = sorted(t for k in after_write for t in k["tokens"])
        races = {s: seen.runs[s] - len(seen.changes.get(s, [])) for s in seen.runs}
        others = sum(v for s, v in races.items() if s not in (plan.team.name, plan.item.name))
        result.notes.append(
            f"{len(asks)} memory requests ({dict(Counter(a.kind for a in asks))}), {said['remembered']} answered "
            f"remembered; {sum(len(v) for v in seen.changes.values())} changes applied in {len(seen.changes)} scopes "
            f"(chat {len(seen.changes.get(plan.team.name, []))}, item {len(seen.changes.get(plan.item.name, []))}); "
            f"compare-and-set races lost and retried: chat {races.get(plan.team.name, 0)}, item "
            f"{races.get(plan.item.name, 0)}, others {others}")
        result.notes.append(
            f"kills: {len(after_write)} right after a write ({[k['kind'] for k in after_write]}), consolidation "
            f"{[k['pids'] for k in hook.kills if k['after'] != 'write']}, random {dict(killer.kills)}; turns asked "
            f"more than once: {sum(1 for v in again.values() if v > 1)} (of the killed-after-write: "
            f"{sum(1 for t in killed if again[t] > 1)}/{len(killed)}); consolidation conflicts retried: {conflicts}; "
            f"consolidation events pushed for the slot: {pushed}")
        result.extra.update({"changes": {s: len(v) for s, v in seen.changes.items()}, "races": races,
                             "kills": hook.kills, "random_kills": dict(killer.kills)})
    finally:
        hook.active = False
        if killer.ident is not None:
            killer.stop()
        if trace is not None:
            trace.stop()
        clock.reset()
        run.close()
