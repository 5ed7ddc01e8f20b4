"""Scenario 18: wake-ups under faults (issue 17, acceptance 5: "A timer or triage run that fails is retried and
dead-lettered like any run").

Follow-up timers on distinct routes (p2p, group, topic; set with `Timers.add` as the schedule_followup tool sets
them), quiet-triage timers (a TRIAGE_CHATS chat, items claimed in the index, messages buffered by the web's own
`triage.buffer.keep`) and two digest chats (DIGEST_CHATS, Bitable on; their timers set by the schedulers) are
set while the service clock (core/clock.py, CLOCK_ADJUSTABLE=1) stands at 09:00 on a Monday; then the clock is moved
past every due time at once. Two schedulers fire them — the stack's sweeper and a second one — held with SIGSTOP
while the clock moves and let go together so their first passes race; the second is SIGKILLed a moment later.
Meanwhile:

- FOLLOW-UP CHECK and QUIET TRIAGE model calls fail on a share of calls (529, 500, connection resets); a few
  follow-ups and one triage carry a marker the model always refuses (`fail_when`): retried, then dead-lettered;
- the Open API fails a share of replies before applying them (502, a 504 after the client's timeout, a reset:
  retried inside the run with the same uuid), the first few with HTTP 500 code 1500 (the run is retried), a few
  after applying them (the retry must be deduped by its uuid), and the first digest card's send with HTTP 500;
- a few follow-ups' request messages are gone (deleted; the Open API answers 231003 and no recall event came): the
  reminder is posted once into the chat instead (timers/followup.py `post`, issue 23), never dead-lettered; one
  digest chat does not have the bot (230002) until the replay: permanent, given up at once;
- busy work-horses and RQ workers are SIGKILLed mid-run.

Every timer must be stored in its route's inbox exactly once (redis MONITOR: the PUSH script's dedupe SET per
attempt, its RPUSH per stored event), end `fired`, and either post exactly one message under its target (one card
for a digest) (a gone request: one top-level post in its chat)
or be in the dead letters — never two, never lost silently, no notice or mention of anyone else; the
dead letters replay (admin API) into exactly one message each.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import requests

from bitable import keys as item_keys
from bitable.index import Items
from chaos.measure import NOTICE_MARKS, Run, Tap, reply_text, wait_idle
from chaos.procs import Service, signal_pids
from chaos.report import Counts, Result
from chaos.scenarios.base import Context, scenario
from chaos.scenarios.crashes import log_size, wait_workers
from chaos.scenarios.items import Kills
from chaos.stack import BIN, Stack
from core.clock import Clock
from core.inbound import Inbound
from core.settings import Settings
from timers.model import FOLLOWUP, TRIAGE, Timer, dedupe_key, digest_id
from timers.store import Timers
from triage.buffer import keep, topic_route

APP, TABLE = "bascnChaosWake18", "tblChaosWake18"
MODEL_FAULTS = {"overloaded": 2.0, "api_error": 2.0, "reset": 1.0}
REPLY_FAULTS = {"gateway": 2.0, "reset": 1.0, "timeout_before": 1.0}  # before applying: nothing posted
MODEL_FAULT_RATE, REPLY_FAULT_RATE = 0.25, 0.2
APPLIED_TRIES = 3  # a reply applied, then answered 502 this often: past the outbox's inline tries, the run is
# retried and its send must be deduped by its uuid (SEND_TRIES in runs/outbox.py)
SERVER_ERROR = 1500  # with HTTP 500: a server error with a code is not retried inline; the run is retried
OPEN, CLOSED = ("待处理", "处理中"), "已解决"
TIMER_REF = re.compile(r"timer:([A-Za-z0-9_\-]+):(\d+\.\d{3})")
MONITOR_LINE = re.compile(r'^\d+\.\d+ \[\d+ lua\] "(SET|RPUSH)" "([^"]*)"')
MENTION = re.compile(r"ou_[A-Za-z0-9_]+|@_all|user_id\W{1,6}all\b")


@dataclass
class Wake:
    """One timer the scenario set, where its message must appear, and what was done to it."""

    timer: Timer
    target: str  # the message its reply goes under (follow-up: the request; triage: the evidence); digest: chat
    token: str  # in the model request (follow-up: its `what`; triage: the evidence message)
    fate: str = "plain"  # plain | doomed (the model always fails) | gone (request 231003) | unknown (230002 until
    # the replay)
    fault: str = ""  # a plain one's targeted Open API fault: "applied" (APPLIED_TRIES x 502 after applying), "500"
    expect_mentions: frozenset[str] = frozenset()
    register: dict[str, Any] = field(default_factory=dict)  # add_chat kwargs, for `unknown` at the replay

    @property
    def key(self) -> str:
        return dedupe_key(self.timer.id, self.timer.due)


class Pushes:
    """Every push of a timer event as Redis executed it, through MONITOR (filtered by `grep -F timer:`): per
    (timer id, due), the PUSH script's dedupe SET (one per attempt, whoever schedules it) and its RPUSH into the
    route's inbox (one per stored event)."""

    def __init__(self, stack: Stack) -> None:
        self.stack = stack
        self.tap = Tap(stack, "timer:", "timer-pushes")

    def stop(self) -> None:
        self.tap.stop()

    def counts(self, wakes: list[Wake]) -> dict[str, Counter[str]]:
        """Per timer id: attempts (dedupe SETs) and stored (RPUSHes into its inbox)."""
        keys = self.stack.keys
        by_key = {w.key: w for w in wakes}
        out: dict[str, Counter[str]] = {w.timer.id: Counter() for w in wakes}
        for line in self.tap.lines():
            m = MONITOR_LINE.match(line)
            if not m:
                continue
            command, redis_key = m.groups()
            for ref in dict.fromkeys(f"timer:{a}:{b}" for a, b in TIMER_REF.findall(line)):
                w = by_key.get(ref)
                if w is None:
                    continue
                inbox = keys.inbox(w.timer.route_key)
                if command == "SET" and redis_key == keys.seen_message(ref):
                    out[w.timer.id]["attempts"] += 1
                elif command == "RPUSH" and redis_key == inbox:
                    out[w.timer.id]["stored"] += 1
        return out


def admin(ctx: Context, method: str, path: str) -> requests.Response:
    return requests.request(method, f"{ctx.stack.url}/admin/api/{path}", timeout=10,
                            headers={"Authorization": f"Bearer {ctx.stack.secrets.admin_token}"})


def monday_nine(tz: Any) -> datetime:
    """09:00 local on the Monday of next week: the service clock's start (a weekday digest slot at 09:30)."""
    day = datetime.now(tz) + timedelta(days=7)
    return (day - timedelta(days=day.weekday())).replace(hour=9, minute=0, second=0, microsecond=0)


def start_second_sweeper(stack: Stack, env: dict[str, str]) -> Service:
    sweeper = Service("s18-sweeper2", [str(BIN / "python"), "-m", "jobs.sweeper"], env, stack.dir, stack.logs)
    sweeper.start()
    return sweeper


def wait_started(service: Service, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service.log_path.exists() and "sweeper started" in service.log_path.read_text(errors="replace"):
            return True
        if not service.running():
            return False
        time.sleep(0.2)
    return False


def fired_by(text: str) -> Counter[str]:
    """Timer ids a sweeper's log says it moved to `fired` ("timer due: pushed to its route", once per winner)."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        if "timer due: pushed" in line:
            out.update(a for a, _ in TIMER_REF.findall(line))
    return out


def run_failures(text: str) -> dict[str, list[str]]:
    """Per timer id, the worker log's verdicts on its runs: retry, give-up (retries ran out), permanent."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "timer:" not in line:
            continue
        verdict = ("retry" if "will retry" in line else "give-up" if "giving up" in line
                   else "permanent" if "failed permanently" in line else "")
        if verdict:
            for a, _ in dict.fromkeys(TIMER_REF.findall(line)):
                out.setdefault(a, []).append(verdict)
    return out


@dataclass
class Plan:
    tag: str
    t0: datetime
    wakes: list[Wake] = field(default_factory=list)
    digest_chats: tuple[str, str] = ("", "")  # a chat the bot is in; one it is not in until the replay (230002)
    triage_chat: str = ""
    marker: str = ""

    def of(self, kind: str, fate: str | None = None) -> list[Wake]:
        return [w for w in self.wakes if w.timer.kind == kind and (fate is None or w.fate == fate)]


def followups(ctx: Context, plan: Plan, n: int, doomed: int, gone: int) -> None:
    """`n` follow-ups on distinct routes (half p2p, a quarter group, a quarter topic), due 20-28 min after t0."""
    stack, tag, now = ctx.stack, plan.tag, Clock(ctx.stack.r, ctx.stack.keys, adjustable=True).now()
    timers = Timers(stack.r, stack.keys)
    seen: Counter[str] = Counter()
    for i in range(n):
        kind = "p2p" if i % 4 in (0, 2) else "group" if i % 4 == 1 else "topic"
        seen[kind] += 1
        chat, sender = f"oc_s18_{tag}_{kind[0]}{i}", f"ou_s18_{tag}_u{i}"
        thread = f"omt_s18_{tag}_{i}" if kind == "topic" else ""
        source = f"om_s18_{tag}_req{i}"
        fate = ("gone" if kind == "p2p" and seen[kind] <= gone
                else "doomed" if kind == "group" and seen[kind] <= doomed else "plain")
        token = f"w{tag}n{i:03d}"
        what = f"看第 {i} 号工单的进展 {token}" + (f" {plan.marker}" if fate == "doomed" else "")
        register: dict[str, Any] = {
            "message_id": source, "chat_id": chat, "text": f"明天上午提醒我{what}", "sender_open_id": sender,
            "thread_id": thread or None, "root_id": f"om_s18_{tag}_root{i}" if thread else None,
            "chat_mode": "p2p" if kind == "p2p" else "group"}
        if thread:
            stack.feishu.add_message(f"om_s18_{tag}_root{i}", chat, text="话题", thread_id=thread)
        created = int(now * 1000)
        if fate == "gone":  # the private chat is there, its request message was deleted
            stack.feishu.add_chat(chat, chat_mode="p2p")
        else:
            created = int(stack.feishu.add_message(**register).get("create_time") or created)
        rk = (f"feishu:{stack.profile}:p2p:{chat}" if kind == "p2p" else
              f"feishu:{stack.profile}:topic:{chat}:{thread}" if thread else
              f"feishu:{stack.profile}:group:{chat}:{sender}")
        due = plan.t0.timestamp() + 20 * 60 + i * 480 / max(n, 1)
        t = Timer(id=f"f_s18{tag}{i:03d}", kind=FOLLOWUP, route_key=rk, due=round(due, 3), chat_id=chat,
                  thread_id=thread, what=what, understood="周一 09:20", created_by=sender, created_at=now,
                  source_message_id=source, source_time_ms=created, gen=0)
        assert timers.add(t, now=now) == 1, t.id
        plan.wakes.append(Wake(t, source, token, fate, expect_mentions=frozenset({sender})))


def triage(ctx: Context, plan: Plan, n: int) -> None:
    """`n` topics of a TRIAGE_CHATS chat, each linked to an item, each with a greeting (filtered) and an evidence
    message buffered by the web's own code; the first topic's evidence carries the model-refused marker."""
    stack, tag = ctx.stack, plan.tag
    settings = Settings(_env_file=os.devnull, bot_profile=stack.profile,  # type: ignore[call-arg]
                        triage_chats=(plan.triage_chat,))
    items, timers = Items(stack.r, stack.keys), Timers(stack.r, stack.keys)
    now = Clock(stack.r, stack.keys, adjustable=True).now()
    for i in range(n):
        chat, thread, root = plan.triage_chat, f"omt_s18_{tag}_tri{i}", f"om_s18_{tag}_troot{i}"
        stack.feishu.add_message(root, chat, text="导出报表为空", thread_id=thread)
        items.claim(thread_id=thread, chat_id=chat, root_id=root, reporter="ou_reporter", origin="chaos")
        token = f"t{tag}n{i:03d}"
        texts = ["好的收到", f"日志里看到 timeout 报错，接口 504 {token}" + (f" {plan.marker}" if i == 0 else "")]
        evidence = ""
        for j, text in enumerate(texts):
            mid = f"om_s18_{tag}_tri{i}m{j}"
            msg = stack.feishu.add_message(mid, chat, text=text, sender_open_id=f"ou_s18_{tag}_p{j}",
                                           thread_id=thread, root_id=root)
            inbound = Inbound(event_id=f"ev_{mid}", message_id=mid, chat_id=chat, chat_type="group",
                              sender_open_id=f"ou_s18_{tag}_p{j}", sender_type="user", message_type="text",
                              text=text, content=json.dumps({"text": text}, ensure_ascii=False),
                              create_time=str(msg.get("create_time") or int(now * 1000)), thread_id=thread,
                              root_id=root)
            keep(settings, stack.r, stack.keys, inbound, now)
            evidence = mid
        [t] = timers.pending_of(topic_route(stack.profile, chat, thread), kind=TRIAGE)
        plan.wakes.append(Wake(t, evidence, token, "doomed" if i == 0 else "plain"))


def digest(ctx: Context, plan: Plan, timeout: float) -> None:
    """Each digest chat's timer for 09:30 on t0's day, set by the schedulers themselves."""
    timers = Timers(ctx.stack.r, ctx.stack.keys)
    for c, chat in enumerate(plan.digest_chats):
        wanted = digest_id(chat, plan.t0.replace(hour=9, minute=30).strftime("%Y-%m-%dT%H%M"))
        deadline = time.monotonic() + timeout
        while (t := timers.get(wanted)) is None and time.monotonic() < deadline:
            time.sleep(0.2)
        if t is None:
            raise RuntimeError(f"no digest timer {wanted} scheduled within {timeout:.0f}s")
        owners = frozenset(f"ou_s18_{plan.tag}_o{c}{i}" for i in range(len(OPEN)))
        plan.wakes.append(Wake(t, chat, "", "unknown" if c else "plain", expect_mentions=owners,
                               register={"chat_id": chat} if c else {}))


def item_title(plan: Plan, chat: int, i: int) -> str:
    return f"s18 事项 {plan.tag} {chat}{i}"


def bitable_records(ctx: Context, plan: Plan) -> None:
    """Per digest chat: two open items and a closed one."""
    ctx.stack.feishu.add_table(APP, TABLE)
    ctx.stack.feishu.add_chat(plan.digest_chats[0])
    for c, chat in enumerate(plan.digest_chats):
        for i, status in enumerate([*OPEN, CLOSED]):
            ctx.stack.feishu.add_record(APP, TABLE, {
                "标题": item_title(plan, c, i), "来源群": [{"id": chat}], "状态": status,
                "负责人": [{"id": f"ou_s18_{plan.tag}_o{c}{i}"}],
                "话题链接": {"text": "话题", "link": f"https://example.feishu.cn/t/s18{plan.tag}{c}{i}"}})


class Targeted:
    """Open API faults for chosen wake-ups: an emulator before-hook queues the fault right before that request
    takes it (another request slipping in between would take it instead: harmless, and rare)."""

    def __init__(self, ctx: Context) -> None:
        self.ctx, self.lock, self.active = ctx, threading.Lock(), False
        self.left: dict[str, list[str]] = {}  # target (message id, or chat for a card send) → faults still to come
        for op in ("reply", "create"):
            ctx.stack.feishu.on(op, self._hook(op), when="before")

    def arm(self, plan: Plan, applied: int, server_errors: int) -> None:
        """Among the plain follow-ups (a mix of p2p, group, topic): some get APPLIED_TRIES replies applied then
        answered 502, others one HTTP 500; the digest chat the bot is in gets one HTTP 500 on its card's send."""
        plain = [w for w in plan.wakes if w.timer.kind == FOLLOWUP and w.fate == "plain"]
        for w in plain[1::5][:applied]:
            w.fault, self.left[w.target] = "applied", ["gateway_after"] * APPLIED_TRIES
        for w in [w for w in plain[3::4] if not w.fault][:server_errors]:
            w.fault, self.left[w.target] = "500", ["500"]
        for w in plan.of("digest", "plain"):
            w.fault, self.left[w.target] = "500", ["500"]
        self.active = True

    def _hook(self, op: str) -> Any:
        def hook(record: dict[str, Any]) -> None:
            target = str(record["params"].get("message_id") or (record.get("json") or {}).get("receive_id") or "")
            with self.lock:
                if not self.active or not self.left.get(target):
                    return
                kind = self.left[target].pop(0)
            # bound to this request: a fault queued for "the next call of op" was taken by a concurrent call of
            # another wake-up (a gone request's reply once met a planned wake-up's dropped connection)
            if kind == "500":
                self.ctx.stack.feishu.inject(op, code=SERVER_ERROR, http_status=500, into=record)
            else:
                self.ctx.stack.feishu.inject_fault(op, kind, into=record)
        return hook


class ReplyLog:
    """Status of every reply/create the Open API answered during the scenario (an emulator after-hook)."""

    def __init__(self, ctx: Context) -> None:
        self.lock = threading.Lock()
        self.active = True
        self.calls: list[tuple[str, str, int]] = []  # (op, target message id or chat, status)
        for op in ("reply", "create"):
            ctx.stack.feishu.on(op, self._hook(op), when="after")

    def _hook(self, op: str) -> Any:
        def hook(record: dict[str, Any]) -> None:
            if self.active:
                target = record["params"].get("message_id") or (record.get("json") or {}).get("receive_id") or ""
                with self.lock:
                    self.calls.append((op, str(target), int(record.get("status") or 0)))
        return hook

    def per_target(self) -> dict[str, list[int]]:
        out: dict[str, list[int]] = {}
        with self.lock:
            for _, target, status in self.calls:
                out.setdefault(target, []).append(status)
        return out


def messages_of(plan: Plan, messages: list[dict[str, Any]]) -> tuple[dict[str, list[dict[str, Any]]], list[str]]:
    """Bot messages per wake-up (follow-up/triage: replies under its target; a follow-up whose request is gone:
    a top-level post in its chat; digest: cards in its chat) and the ids of every other bot message (each one an
    unexpected ping)."""
    by_target = {w.target: w for w in plan.wakes}
    beside = {w.timer.chat_id: w for w in plan.wakes if w.fate == "gone"}
    out: dict[str, list[dict[str, Any]]] = {w.timer.id: [] for w in plan.wakes}
    stray = []
    for m in messages:
        parent = str(m.get("parent_id") or "")
        w = by_target.get(parent) or (by_target.get(m["chat_id"]) if m.get("msg_type") == "interactive" else None) \
            or (beside.get(m["chat_id"]) if not parent else None)
        if w is None or w.timer.chat_id != m["chat_id"]:
            stray.append(m["message_id"])
            continue
        out[w.timer.id].append(m)
    return out, stray


@scenario(18, "wake-ups (follow-ups, triage, digests) under faults, fired by two racing schedulers",
          fresh_stack_after=True)  # worker and sweepers run with a movable clock and Bitable on
def wakeups(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    n_followups, n_triage = ctx.size(16, 40), ctx.size(3, 5)
    doomed, gone = ctx.size(1, 3), ctx.size(1, 3)  # group follow-ups the model refuses, p2p ones 231003
    kill_limit, applied, server_errors = ctx.size(2, 4), ctx.size(2, 3), ctx.size(2, 4)
    tag = os.urandom(2).hex()
    tz = Settings(_env_file=os.devnull).tz  # type: ignore[call-arg]
    plan = Plan(tag, monday_nine(tz), digest_chats=(f"oc_s18_{tag}_dg", f"oc_s18_{tag}_dg_gone"),
                triage_chat=f"oc_s18_{tag}_tri",
                marker=f"REFUSED{os.urandom(3).hex()}")
    result.size = (f"{n_followups} follow-ups + {n_triage} triage + 2 digests, 2 schedulers, model faults "
                   f"{MODEL_FAULT_RATE:.0%} + a refused marker, reply faults {REPLY_FAULT_RATE:.0%} + "
                   f"{server_errors} HTTP 500 + {applied} applied-then-502 x{APPLIED_TRIES}, 231003/230002, "
                   f"≤{kill_limit} kills")
    clock = Clock(stack.r, stack.keys, adjustable=True)
    run = ctx.run(result)
    sweeper2: Service | None = None
    held: list[int] = []
    pushes: Pushes | None = None
    replies = ReplyLog(ctx)
    targeted = Targeted(ctx)
    killer = Kills(ctx, every=0.5, limit=kill_limit)
    try:
        # -- the deployment: a movable clock standing at t0, Bitable, digest and triage chats, two schedulers --
        clock.reset()
        clock.advance(plan.t0.timestamp() - time.time())
        bitable_records(ctx, plan)
        stack.r.delete(item_keys.bitable_status(stack.keys))
        extra = {"CLOCK_ADJUSTABLE": "1", "TIMER_CHECK_SECONDS": "0.2", "BITABLE_APP_TOKEN": APP,
                 "BITABLE_TABLE_ID": TABLE, "DIGEST_CHATS": ",".join(plan.digest_chats),
                 "TRIAGE_CHATS": plan.triage_chat}
        sweeper2 = start_second_sweeper(stack, {**stack.env, **extra})
        took = stack.reconfigure(("worker", "sweeper"), 300.0, (), **extra)
        second = wait_started(sweeper2, 120)
        result.check("a second scheduler (sweeper) runs beside the first", second,
                     "" if second else sweeper2.tail()[-300:])
        run.phase(f"restart with the clock at t0 ({took:.0f}s)")
        worker_from = log_size(stack, "worker")
        sweep_from = log_size(stack, "sweeper"), sweeper2.log_path.stat().st_size
        # -- the timers ------------------------------------------------------------------------------------
        followups(ctx, plan, n_followups, doomed, gone)
        triage(ctx, plan, n_triage)
        digest(ctx, plan, timeout=30)
        time.sleep(0.6)  # three scheduler passes: nothing is due yet
        early = [w.timer.id for w in plan.wakes if (t := Timers(stack.r, stack.keys).get(w.timer.id)) is None
                 or t.state != "pending"]
        result.check("nothing fires before it is due", not early, f"{early[:5]}")
        run.phase(f"{len(plan.wakes)} timers set")
        # -- faults, kills, and the clock moved past every due time at once ---------------------------------
        stack.claude.set_delay(0.3)  # a kill usually lands inside a model call
        stack.claude.fail_when(plan.marker, kind="overloaded")
        stack.claude.set_profile(MODEL_FAULT_RATE, MODEL_FAULTS, seed=ctx.seed)
        targeted.arm(plan, applied, server_errors)
        stack.feishu.set_profile("reply", REPLY_FAULT_RATE, REPLY_FAULTS, seed=ctx.seed,
                                 timeout_seconds=float(stack.env["FEISHU_TIMEOUT_SECONDS"]) + 0.5)
        before = stack.feishu.stats
        model_from = len(stack.claude.requests_since(0))
        feishu_from = len(stack.feishu.requests_since(0))
        pushes = Pushes(stack)
        killer.start()
        # Both schedulers held (SIGSTOP) while the clock moves, then let go at once: their first passes race
        # over the same due timers. The second dies a moment later (between a push and its end, or not).
        schedulers = [stack.services["sweeper"].pid, sweeper2.pid]
        held = signal_pids(schedulers, signal.SIGSTOP)
        clock.advance(plan.t0.timestamp() + 31 * 60 - clock.now())
        time.sleep(0.3)  # past TIMER_CHECK_SECONDS: each is due for a pass when it wakes
        jumped = time.monotonic()
        signal_pids(held, signal.SIGCONT)
        held = []
        time.sleep(ctx.rng.uniform(0.02, 0.25))
        sweeper2.kill()
        killed_after = time.monotonic() - jumped
        all_fired = wait_fired(ctx, plan, jumped, ctx.size(40, 60))
        routes = {w.timer.route_key for w in plan.wakes}
        state = wait_idle(stack, routes, timeout=ctx.size(40, 60))
        killer.stop()
        result.check("drained: every wake-up route idle", not state, json.dumps(state, default=str)[:400])
        run.phase("firing under faults")
        faults = {op: {k: v - before["faults"].get(op, {}).get(k, 0) for k, v in kinds.items()}
                  for op, kinds in stack.feishu.stats["faults"].items() if op in ("reply", "create")}
        model_calls = stack.claude.requests_since(model_from)
        tried = replies.per_target()  # the Open API attempts of the firing, before any replay
        stack.calm()  # the operator fixed the causes: faults off, the refused marker accepted
        dead = [d for d in admin(ctx, "GET", "deadletters").json()["deadletters"]
                if d["route_key"] in routes]
        first = check_firing(ctx, run, plan, pushes, dead, all_fired, model_calls)
        # -- the replays ------------------------------------------------------------------------------------
        replayed = replay(ctx, run, plan, dead, first)
        state = wait_idle(stack, routes, timeout=30)
        result.check("idle after the replays", not state, json.dumps(state, default=str)[:300])
        run.phase("replays")
        check_final(ctx, run, plan, first, replayed)
        verdicts = run_failures(stack.services["worker"].log_path.read_bytes()[worker_from:].decode("utf-8",
                                                                                                    "replace"))
        check_attempts(ctx, result, plan, verdicts, tried, first)
        sweeper_texts = [stack.services["sweeper"].log_path.read_bytes()[sweep_from[0]:],
                         sweeper2.log_path.read_bytes()[sweep_from[1]:]]
        winners = [fired_by(t.decode("utf-8", "replace")) for t in sweeper_texts]
        ours = {w.timer.id for w in plan.wakes}
        ended = Counter({i: winners[0][i] + winners[1][i] for i in ours})
        result.check("each timer moved to fired by exactly one scheduler (the end script's single winner)",
                     all(v == 1 for v in ended.values()), f"{ {k: v for k, v in ended.items() if v != 1} }"[:300])
        counts = pushes.counts(plan.wakes)
        attempts = sum(c["attempts"] for c in counts.values())
        reactions = [q["params"].get("message_id") for q in stack.feishu.requests_since(feishu_from)
                     if q["op"] == "reaction_add"]
        result.check("no reaction added anywhere (a wake-up has no message to mark)", not reactions,
                     f"{reactions[:5]}")
        result.check("kills happened", sum(killer.kills.values()) >= 1, f"{dict(killer.kills)}")
        wait_workers(ctx, result)
        result.counts.redeliveries = sum(max(0, c["attempts"] - c["stored"]) for c in counts.values())
        result.notes.append(
            f"clock moved from t0 {plan.t0:%a %Y-%m-%d %H:%M} to 09:31; all {len(plan.wakes)} timers fired "
            f"{'(not all)' if all_fired is None else f'{all_fired:.1f} s'} after the schedulers resumed: sweeper 1 "
            f"ended {sum(winners[0][i] for i in ours)}, sweeper 2 ended {sum(winners[1][i] for i in ours)} before "
            f"its SIGKILL {killed_after:.2f} s in; {attempts} push attempts for {len(ours)} timers "
            f"({result.counts.redeliveries} duplicates dropped by the inbox dedupe)")
        result.notes.append(f"Open API faults: {faults}; model calls {len(model_calls)}, faults (stand-in lifetime) "
                            f"{stack.claude.stats['faults'].get('messages', {})}; kills: {dict(killer.kills)}")
    finally:
        signal_pids(held, signal.SIGCONT)
        replies.active = targeted.active = False
        killer.stop()
        if pushes is not None:
            pushes.stop()
        if sweeper2 is not None:
            sweeper2.kill()
        with contextlib.suppress(Exception):
            clock.reset()
        run.close()


def wait_fired(ctx: Context, plan: Plan, since: float, timeout: float) -> float | None:
    """Seconds from `since` until every timer of the plan left `pending` (None when some had not by `timeout`)."""
    timers = Timers(ctx.stack.r, ctx.stack.keys)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(t.state != "pending" for t in timers.many([w.timer.id for w in plan.wakes])):
            return time.monotonic() - since
        time.sleep(0.1)
    return None


@dataclass
class Firing:
    """What the firing left, before any replay."""

    sent: dict[str, list[dict[str, Any]]]  # timer id → its messages
    dead: dict[str, list[dict[str, Any]]]  # timer id → its dead letters
    landed: list[str]  # dead-lettered although its message is in the chat (a reply applied, its answer lost)
    fired_once: set[str]  # state fired (reason due) and its event stored exactly once


def check_firing(ctx: Context, run: Run, plan: Plan, pushes: Pushes, dead: list[dict[str, Any]],
                 all_fired: float | None, model_calls: list[dict[str, Any]]) -> Firing:
    result = run.result
    pushes.stop()
    counts = pushes.counts(plan.wakes)
    shown = {w.timer.id: admin(ctx, "GET", f"timers/{w.timer.id}").json() for w in plan.wakes}
    not_fired = {i: (s.get("state"), s.get("end_reason")) for i, s in shown.items()
                 if (s.get("state"), s.get("end_reason")) != ("fired", "due")}
    result.check("every timer fired (admin API: state fired, reason due)", all_fired is not None and not not_fired,
                 f"{not_fired}"[:300])
    wrong = {i: dict(c) for i, c in counts.items() if c["stored"] != 1 or c["attempts"] < 1}
    result.check("every timer's event stored in its route's inbox exactly once (MONITOR: RPUSH per dedupe key)",
                 not wrong, f"{wrong}"[:300])
    by_timer: dict[str, list[dict[str, Any]]] = {w.timer.id: [] for w in plan.wakes}
    keys = {w.key: w.timer.id for w in plan.wakes}
    for d in dead:
        for mid in d.get("message_ids", []):
            if mid in keys:
                by_timer[keys[mid]].append(d)
    sent, stray = messages_of(plan, run.messages())
    landed = [i for i in by_timer if by_timer[i] and sent[i]]
    silent = [i for i in by_timer if not by_timer[i] and not sent[i]]
    twice = {i: len(m) for i, m in sent.items() if len(m) > 1}
    result.check("each wake-up posted one message or is dead-lettered: none lost silently", not silent,
                 f"{silent[:5]}")
    result.check("never two messages for one wake-up", not twice, f"{twice}")
    result.check("no dead letter holds two records of one timer", all(len(v) <= 1 for v in by_timer.values()),
                 f"{ {k: len(v) for k, v in by_timer.items() if len(v) > 1} }")
    doomed = [w.timer.id for w in plan.wakes if w.fate in ("doomed", "unknown")]
    result.check("every refused or unaddressable wake-up (model refuses it; 230002) is in the dead letters",
                 all(by_timer[i] for i in doomed), f"{[i for i in doomed if not by_timer[i]]}")
    beside = {w.timer.id: [(bool(m.get("parent_id")), w.timer.created_by in json.dumps(m.get("body"))) for m in
                            sent[w.timer.id]] for w in plan.wakes if w.fate == "gone"}
    result.check("a follow-up whose request is gone (231003): one top-level post into its chat, mentioning its "
                 "creator; not dead-lettered", bool(beside) and all(v == [(False, True)] and not by_timer[i]
                                                                    for i, v in beside.items()),
                 f"{ {i: (v, len(by_timer[i])) for i, v in beside.items() if v != [(False, True)] or by_timer[i]} }")
    notices = [m["message_id"] for m in run.messages() if any(mark in reply_text(m) for mark in NOTICE_MARKS)]
    result.check("a dead-lettered wake-up tells nobody (no notice)", not notices, f"{notices[:5]}")
    pinged = {w.timer.id: sorted(set(MENTION.findall(json.dumps(m.get("body"), ensure_ascii=False)))
                                 - w.expect_mentions)
              for w in plan.wakes for m in sent[w.timer.id]}
    pinged = {k: v for k, v in pinged.items() if v}
    result.check("nothing pinged anyone unexpected: no stray message, no other mention",
                 not stray and not pinged, f"stray {stray[:5]}, mentions {pinged}"[:300])
    asked = Counter(w.timer.id for w in plan.wakes for q in model_calls if w.token
                    and w.token in json.dumps(q["body"].get("messages"), ensure_ascii=False))
    result.extra["model_calls_per_wake"] = dict(asked)
    result.extra["landed"] = landed
    if landed:
        result.notes.append(f"{len(landed)} wake-up(s) dead-lettered although their reply landed (applied, then "
                            f"answered 5xx until the retries ran out): {landed}; not replayed (a replay posts again)")
    return Firing(sent, by_timer, landed, {w.timer.id for w in plan.wakes if w.timer.id not in not_fired
                                           and w.timer.id not in wrong})


def replay(ctx: Context, run: Run, plan: Plan, dead: list[dict[str, Any]], first: Firing) -> list[str]:
    """Add the bot to the digest chat it was not in, then replay every dead letter of ours once
    (a second replay of one must be refused); returns the timer ids replayed."""
    result = run.result
    for w in plan.wakes:
        if w.fate == "unknown":
            ctx.stack.feishu.add_chat(**w.register)  # the bot was added to the chat
    replayed, statuses = [], []
    for timer_id, letters in first.dead.items():
        if not letters or timer_id in first.landed:
            continue
        got = admin(ctx, "POST", f"deadletters/{letters[0]['id']}/replay")
        statuses.append(got.status_code)
        if got.status_code == 200:
            replayed.append(timer_id)
    result.check("every dead letter replayed (admin API 200)", all(s == 200 for s in statuses) and bool(statuses),
                 f"{Counter(statuses)}")
    if replayed:
        letter = first.dead[replayed[0]][0]["id"]
        again = admin(ctx, "POST", f"deadletters/{letter}/replay").status_code
        result.check("a second replay changes nothing (409)", again == 409, f"HTTP {again}")
    return replayed


def check_final(ctx: Context, run: Run, plan: Plan, first: Firing, replayed: list[str]) -> None:
    result = run.result
    sent, stray = messages_of(plan, run.messages())
    once = {i: len(sent[i]) for i in replayed}
    result.check("each replayed dead letter posted exactly one message", all(v == 1 for v in once.values()),
                 f"{ {k: v for k, v in once.items() if v != 1} }")
    result.check("no stray message after the replays", not stray, f"{stray[:5]}")
    wrong = {}
    for n, w in enumerate(plan.of("digest")):
        cards = [reply_text(m) for m in sent[w.timer.id]]
        if len(cards) != 1 or not all(item_title(plan, n, i) in cards[0] for i in range(len(OPEN))) \
                or item_title(plan, n, len(OPEN)) in cards[0]:
            wrong[w.timer.chat_id] = [card[:120] for card in cards]
    result.check("each digest: one card listing exactly its chat's open items", not wrong, f"{wrong}"[:300])
    leaks = run.leaks.scan(run.messages())
    result.check("no secret leaked", not leaks, "; ".join(leaks[:5]))
    c = Counts(sent=len(plan.wakes))
    c.accepted = len(first.fired_once)
    c.answered = sum(1 for w in plan.wakes if len(sent[w.timer.id]) == 1)
    c.lost = sum(1 for w in plan.wakes if not sent[w.timer.id] and (w.timer.id in replayed
                                                                    or not first.dead[w.timer.id]))
    c.duplicates = sum(1 for w in plan.wakes if len(sent[w.timer.id]) > 1)
    c.dead_lettered = sum(1 for v in first.dead.values() if v)
    result.counts = c
    kinds = Counter(f"{w.timer.kind}:{w.fate}" for w in plan.wakes if first.dead[w.timer.id])
    result.notes.append(f"dead-lettered by the firing: {dict(kinds)}; replayed {len(replayed)}, each into "
                        f"{sorted(set(once.values()))} message(s)")


def check_attempts(ctx: Context, result: Result, plan: Plan, verdicts: dict[str, list[str]],
                   per_target: dict[str, list[int]], first: Firing) -> None:
    """Retried and given up like any run: the worker log's verdict per timer run, the Open API's statuses."""
    after = int(ctx.stack.env.get("DEAD_LETTER_AFTER", "4"))
    refused = [w for w in plan.wakes if w.fate == "doomed"]
    bad = {w.timer.id: verdicts.get(w.timer.id) for w in refused
           if verdicts.get(w.timer.id, []) != ["retry"] * (after - 1) + ["give-up"]}
    result.check(f"a wake-up the model refuses: retried {after - 1} times, then dead-lettered", not bad,
                 f"{bad}"[:300])
    unknown = [w for w in plan.wakes if w.fate == "unknown"]
    permanent: dict[str, Any] = {w.timer.id: (verdicts.get(w.timer.id), per_target.get(w.target)) for w in unknown
           if verdicts.get(w.timer.id, [""])[-1] != "permanent" or verdicts[w.timer.id].count("permanent") != 1
           or [s for s in per_target.get(w.target, []) if s == 400] != [400]}
    result.check("a permanent error (230002) gives up at once: one refused send, no retry after it",
                 not permanent, f"{permanent}"[:300])
    gone = {w.timer.id: (per_target.get(w.target), per_target.get(w.timer.chat_id)) for w in plan.wakes
            if w.fate == "gone"}
    # The reply faults (REPLY_FAULT_RATE) hit a gone request's reply too: a transient 5xx before its 400 is retried
    # as any other (2026-12-06 16:50: [502, 400]); what must hold is that it ends refused, never posted under it.
    result.check("a gone request's reply is refused (400), never answered 200; its chat post succeeded",
                 all(req and req[-1] == 400 and all(st == 400 or st >= 500 for st in req)
                     and chat and chat[-1] == 200 for req, chat in gone.values()),
                 f"{gone}"[:300])
    plain = [w for w in plan.wakes if w.fate == "plain"]
    retried = [w for w in plain if "retry" in verdicts.get(w.timer.id, [])]
    failed_reply = [w for w in plain if any(s != 200 for s in per_target.get(w.target, []))]
    unretried = [w.timer.id for w in failed_reply if len(per_target.get(w.target, [])) < 2
                 and w.timer.id not in first.landed]
    result.check("a wake-up whose reply failed was tried again (>1 Open API attempts)", not unretried,
                 f"{unretried[:5]}")
    result.check("faults made some wake-ups retry", len(retried) >= 2, f"{len(retried)} retried")
    landed = [w for w in plain if w.fault == "applied" and "retry" in verdicts.get(w.timer.id, [])
              and len(per_target.get(w.target, [])) > APPLIED_TRIES and len(first.sent[w.timer.id]) == 1]
    seen = [(w.timer.id, verdicts.get(w.timer.id), per_target.get(w.target), len(first.sent[w.timer.id]))
            for w in plain if w.fault == "applied"]  # (timer, run verdicts, Open API statuses, messages)
    result.check(f"a reply applied but answered 502 x{APPLIED_TRIES}: the run was retried and its resend deduped "
                 "(one message)", len(landed) >= 1, f"{seen}"[:300])
    http500 = [w for w in plain if w.fault == "500" and "retry" in verdicts.get(w.timer.id, [])]
    result.check("an HTTP 500 on a send: the run was retried", len(http500) >= 1,
                 f"{[(w.timer.id, verdicts.get(w.timer.id)) for w in plain if w.fault == '500']}"[:300])
    result.notes.append(f"targeted Open API faults: {len(landed)} of {sum(w.fault == 'applied' for w in plain)} "
                        f"applied-then-502 x{APPLIED_TRIES} replies retried by their run and deduped, "
                        f"{len(http500)} of {sum(w.fault == '500' for w in plain)} HTTP 500 sends retried")
    attempts = Counter(verdicts.get(w.timer.id, []).count("retry") + 1 for w in retried)
    result.notes.append(f"{len(retried)} of {len(plain)} plain wake-ups were retried (runs per wake-up: "
                        f"{dict(sorted(attempts.items()))}); {len(failed_reply)} met a failed reply "
                        f"(Open API attempts per target: "
                        f"{dict(sorted(Counter(len(per_target.get(w.target, [])) for w in failed_reply).items()))})")
