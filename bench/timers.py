"""Always-on: timer lateness at 10,000 pending timers, Redis bytes per timer, and what quiet triage costs.

One stack (chaos.stack: gunicorn, the worker supervisor, the sweeper, embedded Redis, the emulators) serves the
triage part; the timer cases run real sweepers (`python -m jobs.sweeper`, the service's default settings, so
TIMER_CHECK_SECONDS 0.5) on the same Redis under bot profiles of their own, with no workers, so every timer's
event stays in its route's inbox where it was pushed.

1. Lateness. `--timers` follow-up timers (Timers.add, 5 per p2p route) due evenly over `--window` seconds,
   the first `--lead` (8) s after the adds begin (real time), the sweeper running. Lateness = the pushed event's
   create_time (the scheduler's clock when its pass read the due timers, ms) − the timer's due time. A poller
   beside it also sees each timer leave the due index (pushed and ended) every 0.1 s: an upper bound that
   includes the pushes of a pass's later timers. Every timer must fire exactly once: events per timer id
   across all inboxes. The same with two sweepers at once (duplicate schedulers; `dedupe hits` = pushes of a
   timer both made, which the inbox's dedupe marks dropped). Baseline in the same run: 100 timers over the
   same window; the report gives the ratio of the p99s.
2. Bytes per timer: used_memory before and after adding the pending timers, ÷ their number; and MEMORY USAGE of
   the keys one timer owns (its hash, its source-message set) plus its share of the due and per-route zsets.
3. Triage cost. The labelled set (tests/data/triage_set.jsonl: 200 unaddressed messages in 12 topics, 9 linked to
   items with Bitable records) posted to the web in a TRIAGE_CHATS chat, 8 messages per topic per quiet period
   (as they arrive in the set), the service clock moved past TRIAGE_QUIET_SECONDS (default 600 s) after each
   period. Counted: model requests carrying "QUIET TRIAGE", their input tokens (the `tokens|triage|input`
   counter), calls per topic per quiet period, and which messages never reached a model and why. Baseline: one
   call per unaddressed message in the same request format (tokens counted as the stand-in counts them).

Exit 1 unless every timer fired exactly once, the 10,000-timer p99s are under 2 s, and no topic had two triage
calls in one quiet period.

    python -m bench.timers               # 10,000 timers over 60 s, 1 and 2 sweepers, 100-timer baseline (~4.5 min)
    python -m bench.timers --quick       # 2,000 timers over 20 s
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import tempfile
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import redis
import requests

from bitable.index import Items
from chaos.measure import wait_idle
from chaos.procs import Service
from chaos.stack import APP_ID, BIN, Stack
from core.clock import Clock
from core.keys import Keys
from sandbox.claude.wire import input_tokens
from sandbox.feishu.events import message_event, signed_request
from timers import keys as timer_keys
from timers.model import FOLLOWUP, TRIAGE, Timer, followup_id
from timers.store import Caps, Timers
from triage import keys as triage_keys
from triage.buffer import topic_route
from triage.filter import worth_triage
from triage.protocol import SYSTEM_MARKER, request_text

OUT = Path(__file__).resolve().parent / "results" / "timers.json"
DATA = Path(__file__).resolve().parent.parent / "tests" / "data"
PER_ROUTE = 5
TARGET_P99_S = 2.0
APP, TABLE = "bascnTimerBench01", "tblTimerBench01"
QUIET_S = 600.0  # TRIAGE_QUIET_SECONDS: the service's default
PER_PERIOD = 8  # messages of one topic that arrive within one quiet period (as in tests/test_triage_pure.py)
# chaos' short settings the timer sweepers do not take: they run with the service's defaults
NOT_FOR_SWEEPERS = ("SWEEP_INTERVAL_SECONDS", "RUN_LEASE_SECONDS", "RUN_RETRY_DELAYS", "DEAD_LETTER_AFTER",
                    "RUN_BUDGET_SECONDS", "PAUSE_PROBE_SECONDS", "LLM_TIMEOUT_SECONDS", "FEISHU_TIMEOUT_SECONDS",
                    "CLOCK_ADJUSTABLE", "TRIAGE_CHATS", "TRIAGE_MODEL", "BITABLE_APP_TOKEN", "BITABLE_TABLE_ID")
_MESSAGE_ID = re.compile(r'<message message_id="([^"]*)"')


def pct(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile, ms precision."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def used(r: redis.Redis) -> int:
    return int(r.info("memory")["used_memory"])


def cpu_s(pid: int) -> float:
    """utime + stime of a process, seconds."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return 0.0


# -- 1 + 2: timers ----------------------------------------------------------------------------------------------

class Watch(threading.Thread):
    """Sees each timer leave the due index (the scheduler pushes its event, then ends it): `ended[id]` is the
    first poll that no longer found it, so the push happened at most one interval (+ the poll) before."""

    def __init__(self, url: str, keys: Keys, interval: float = 0.1, horizon: float = 1.0) -> None:
        super().__init__(daemon=True, name="timer-watch")
        self.r = redis.Redis.from_url(url, decode_responses=True)
        self.keys, self.interval, self.horizon = keys, interval, horizon
        self.ended: dict[str, float] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        pending: dict[str, float] = {}
        while not self.stop.is_set():
            raw: list[Any] = self.r.zrangebyscore(timer_keys.timers_due(self.keys), "-inf", time.time() + self.horizon,
                                                  withscores=True)
            seen_at = time.time()
            now = {str(i): float(d) for i, d in raw}
            for timer_id in pending.keys() - now.keys():
                self.ended[timer_id] = seen_at
            pending = now
            self.stop.wait(self.interval)


def sweeper_env(stack: Stack, profile: str) -> dict[str, str]:
    env = {k: v for k, v in stack.env.items() if k not in NOT_FOR_SWEEPERS}
    env["BOT_PROFILE"] = profile
    return env


def log_text(service: Service) -> str:
    try:
        return service.log_path.read_text(errors="replace")
    except OSError:
        return ""


def start_sweepers(stack: Stack, profile: str, n: int) -> list[Service]:
    env = sweeper_env(stack, profile)
    out = []
    for i in range(n):
        svc = Service(f"sweeper-{profile}-{i}", [str(BIN / "python"), "-m", "jobs.sweeper"], env,
                      stack.dir, stack.logs)
        svc.start()
        out.append(svc)
    deadline = time.monotonic() + 60
    while not all("sweeper started" in log_text(s) for s in out):
        if time.monotonic() > deadline or not all(s.running() for s in out):
            raise RuntimeError("timer sweeper did not start:\n" + "\n".join(s.tail() for s in out))
        time.sleep(0.1)
    return out


def make_timers(profile: str, n: int, start: float, window: float) -> list[Timer]:
    """n follow-ups, PER_ROUTE per p2p route, due evenly over the window; fields as the follow-up tool fills them."""
    routes = max(1, n // PER_ROUTE)
    now = time.time()
    out = []
    for i in range(n):
        route = i % routes
        rk = f"feishu:{profile}:p2p:oc_tb{route:05d}"
        source = f"om_{os.urandom(16).hex()}"
        due = round(start + window * i / n, 3)
        out.append(Timer(id=followup_id(rk, f"b{i}", 0), kind=FOLLOWUP, route_key=rk, due=due,
                         chat_id=f"oc_tb{route:05d}", what=f"看负责人有没有回复第 {i} 号问题的处理进展",
                         understood="12月2日（周三）10:00", created_by=f"ou_tb{route:05d}", created_at=now,
                         source_message_id=source, source_time_ms=int(now * 1000), gen=0))
    return out


def memory_of(r: redis.Redis, keys: Keys, timers: list[Timer]) -> dict[str, Any]:
    """MEMORY USAGE (all elements sampled) of what the pending timers own, per timer."""
    n = len(timers)
    sample = timers[:: max(1, n // 200)]
    pipe = r.pipeline(transaction=False)
    for t in sample:
        pipe.memory_usage(timer_keys.timer(keys, t.id), samples=0)
        pipe.memory_usage(timer_keys.timers_by_source(keys, t.source_message_id), samples=0)
    got = [int(x or 0) for x in pipe.execute()]
    hash_b, source_b = sum(got[0::2]) / len(sample), sum(got[1::2]) / len(sample)
    due_b = int(r.memory_usage(timer_keys.timers_due(keys), samples=0) or 0)
    pipe = r.pipeline(transaction=False)
    routes = sorted({t.route_key for t in timers})
    for rk in routes:
        pipe.memory_usage(timer_keys.route_timers(keys, rk), samples=0)
    route_b = sum(int(x or 0) for x in pipe.execute())
    return {"hash": round(hash_b), "source_set": round(source_b), "due_zset_share": round(due_b / n),
            "route_zset_share": round(route_b / n),
            "total": round(hash_b + source_b + due_b / n + route_b / n)}


def inbox_events(r: redis.Redis, keys: Keys, routes: list[str]) -> list[dict[str, Any]]:
    pipe = r.pipeline(transaction=False)
    for rk in routes:
        pipe.lrange(keys.inbox(rk), 0, -1)
    return [json.loads(raw) for entries in pipe.execute() for raw in entries]


def timer_case(stack: Stack, n: int, sweepers: int, window: float, lead: float) -> dict[str, Any]:
    began = time.monotonic()
    profile = f"tm{os.urandom(3).hex()}"
    keys, r = Keys(profile), stack.r
    procs = start_sweepers(stack, profile, sweepers)
    store = Timers(r, keys)
    idle_sweeper = stack.services["sweeper"].pid  # the stack's own sweeper, idle meanwhile: a CPU reference
    cpu0, idle0 = [cpu_s(p.pid) for p in procs], cpu_s(idle_sweeper)
    try:
        start = time.time() + lead
        timers = make_timers(profile, n, start, window)
        before = used(r)
        t0 = time.monotonic()
        added = sum(store.add(t, caps=Caps(route=20), now=time.time()) for t in timers)
        add_s = time.monotonic() - t0
        after = used(r)
        left_to_first = start - time.time()
        memory = memory_of(r, keys, timers)
        watch = Watch(stack.redis_url, keys)
        watch.start()
        last_due = timers[-1].due
        deadline = last_due + 30
        while time.time() < deadline and (time.time() < last_due or store.pending_count()):
            time.sleep(0.2)
        time.sleep(1.5)  # every sweeper has had a few more passes: a late duplicate would show
        watch.stop.set()
        watch.join()
        cpu = [round(cpu_s(p.pid) - c, 2) for p, c in zip(procs, cpu0, strict=True)]
        idle_cpu = round(cpu_s(idle_sweeper) - idle0, 2)
        failed_ticks = sum(log_text(p).count("sweeper tick failed") for p in procs)
    finally:
        for p in procs:
            p.kill()
    routes = sorted({t.route_key for t in timers})
    events = inbox_events(r, keys, routes)
    per_timer: Counter[str] = Counter()
    pushed_at: dict[str, float] = {}
    for ev in events:
        if ev.get("message_type") != "timer":
            continue
        timer_id = str(json.loads(ev["content"])["timer_id"])
        per_timer[timer_id] += 1
        pushed_at.setdefault(timer_id, int(ev["create_time"]) / 1000)
    due = {t.id: t.due for t in timers}
    late = [pushed_at[i] - due[i] for i in due if i in pushed_at]
    observed = [watch.ended[i] - due[i] for i in due if i in watch.ended]
    states = Counter(t.state for t in store.many(list(due)))
    metrics = {str(k): int(v) for k, v in r.hgetall(keys.metrics).items()}
    row = {
        "timers": n, "routes": len(routes), "sweepers": sweepers, "window_s": window, "added": added,
        "add_s": round(add_s, 2), "first_due_after_add_s": round(left_to_first, 2),
        "fired": len(per_timer), "exactly_once": sum(1 for c in per_timer.values() if c == 1),
        "duplicate_events": sum(c - 1 for c in per_timer.values() if c > 1), "missing": n - len(per_timer),
        "early": sum(1 for x in late if x < 0), "states": dict(states),
        "timers_fired_metric": metrics.get(f"timers_fired|{FOLLOWUP}", 0),
        "dedupe_hits": metrics.get("dedupe_hits", 0), "pending_left": store.pending_count(),
        "p50_s": pct(late, 0.50), "p99_s": pct(late, 0.99), "max_s": pct(late, 1.0),
        "observed_p50_s": pct(observed, 0.50), "observed_p99_s": pct(observed, 0.99),
        "observed_max_s": pct(observed, 1.0), "observed_n": len(observed),
        "sweeper_cpu_s": cpu, "idle_sweeper_cpu_s": idle_cpu, "failed_ticks": failed_ticks,
        "used_memory_delta_bytes": after - before, "bytes_per_timer_used_memory": round((after - before) / n),
        "bytes_per_timer_keys": memory,
    }
    pipe = r.pipeline(transaction=False)
    for key in r.scan_iter(f"{keys.prefix}:*", count=5000):  # leave Redis small for the next case
        pipe.unlink(key)
    pipe.execute()
    row["seconds"] = round(time.monotonic() - began, 1)
    print(json.dumps({k: v for k, v in row.items() if k != "bytes_per_timer_keys"}), flush=True)
    return row


# -- 3: triage ------------------------------------------------------------------------------------------------

def labelled() -> tuple[list[dict[str, Any]], dict[str, dict[str, str] | None]]:
    rows = [json.loads(line) for line in (DATA / "triage_set.jsonl").read_text("utf-8").splitlines() if line.strip()]
    return rows, json.loads((DATA / "triage_topics.json").read_text("utf-8"))


def user_text(body: dict[str, Any]) -> str:
    """The text of a request's user turns (a string or text blocks)."""
    out = []
    for m in body.get("messages") or []:
        content = m.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        out += [str(b.get("text") or "") for b in blocks if isinstance(b, dict) and b.get("type") == "text"]
    return "\n".join(out)


def post(stack: Stack, session: requests.Session, chat: str, thread: str, root: str, row: dict[str, Any]) -> str:
    """One unaddressed topic message, registered in the emulator and delivered to the web as Feishu does."""
    env = message_event(chat_id=chat, chat_type="group", text=row["text"], sender_open_id=row["sender"],
                        thread_id=thread, root_id=root, token=stack.secrets.verification_token, app_id=APP_ID)
    m = env["event"]["message"]
    stack.feishu.add_message(m["message_id"], chat, sender_open_id=row["sender"], thread_id=thread, root_id=root,
                             msg_type="text", content=m["content"], chat_mode="group")
    body, headers = signed_request(env, encrypt_key=stack.secrets.encrypt_key)
    resp = session.post(f"{stack.url}/feishu/events", data=body, headers=headers, timeout=10)
    if resp.status_code != 200:
        raise RuntimeError(f"web answered {resp.status_code}: {resp.text[:200]}")
    return str(m["message_id"])


def owner_id(name: str) -> str:
    return "ou_tb_" + name.encode().hex()


def setup_topics(stack: Stack, chat: str, topics: dict[str, dict[str, str] | None]) -> dict[str, tuple[str, str]]:
    """A thread per topic; for the linked ones a Bitable record and the item index entry the web looks up."""
    items = Items(stack.r, stack.keys)
    threads = {}
    for name, facts in sorted(topics.items()):
        thread, root = f"omt_tb_{name}_{os.urandom(3).hex()}", f"om_tb_root_{name}_{os.urandom(3).hex()}"
        stack.feishu.add_message(root, chat, text=(facts or {}).get("title", f"讨论 {name}"), thread_id=thread,
                                 sender_open_id="ou_tb_reporter")
        threads[name] = (thread, root)
        if facts is None:
            continue
        owner = owner_id(facts["owner"])
        stack.feishu.add_user(owner, facts["owner"])
        record = stack.feishu.add_record(APP, TABLE, {"标题": facts["title"], "描述": facts["description"],
                                                      "状态": facts["status"], "负责人": [{"id": owner}],
                                                      "来源群": [{"id": chat}]})
        items.claim(thread_id=thread, chat_id=chat, root_id=root, record_id=record["record_id"],
                    reporter="ou_tb_reporter", origin="topic")
    return threads


def triage_timers(stack: Stack) -> list[Timer]:
    ids = [k.rsplit(":", 1)[-1] for k in stack.r.scan_iter(f"{timer_keys.timer(stack.keys, '')}tr_*", count=1000)]
    return [t for t in Timers(stack.r, stack.keys).many(ids) if t.kind == TRIAGE]


def triage(stack: Stack, chat: str) -> dict[str, Any]:
    rows, topics = labelled()
    threads = setup_topics(stack, chat, topics)
    index: dict[str, int] = defaultdict(int)
    period_of: list[int] = []
    for row in rows:  # the set's order; each topic's 1st-8th message in period 0, 9th-16th in period 1, …
        period_of.append(index[row["topic"]] // PER_PERIOD)
        index[row["topic"]] += 1
    periods = max(period_of) + 1
    clock = Clock(stack.r, stack.keys, adjustable=True)
    cursor = len(stack.claude.requests)
    row_of: dict[str, dict[str, Any]] = {}
    timers_per_period: list[int] = []
    posts_after: list[dict[str, int]] = []  # unasked bot messages per topic after each period
    session = requests.Session()
    started = time.monotonic()
    for period in range(periods):
        known = {t.id for t in triage_timers(stack)}
        for row, p in zip(rows, period_of, strict=True):
            if p == period:
                thread, root = threads[row["topic"]]
                row_of[post(stack, session, chat, thread, root, row)] = {**row, "period": period}
        timers_per_period.append(len([t for t in triage_timers(stack) if t.id not in known]))
        clock.advance(QUIET_S + 30)  # past the quiet period of every message of this one
        deadline = time.monotonic() + 60
        while any(t.state == "pending" for t in triage_timers(stack)) and time.monotonic() < deadline:
            time.sleep(0.1)
        routes = [topic_route(stack.profile, chat, thread) for thread, _ in threads.values()]
        if wait_idle(stack, routes, 60):
            raise RuntimeError("topic routes not idle 60 s after the quiet period")
        posts_after.append({name: len(stack.feishu.bot_messages(chat, thread_id=thread))
                            for name, (thread, _) in threads.items()})
    seconds = time.monotonic() - started
    session.close()
    calls = [q for q in stack.claude.requests_since(cursor) if SYSTEM_MARKER in json.dumps(q["body"].get("system"))]
    metrics = {str(k): int(v) for k, v in stack.r.hgetall(stack.keys.metrics).items()}
    tokens_in = metrics.get("tokens|triage|input", 0)
    standin_tokens = sum(input_tokens(q["body"]) for q in calls)
    reached: set[str] = set()
    per_topic_period: Counter[tuple[str, int]] = Counter()
    for q in calls:
        ids = set(_MESSAGE_ID.findall(user_text(q["body"])))
        reached |= ids
        where = {(row_of[i]["topic"], row_of[i]["period"]) for i in ids if i in row_of}
        for key in where:
            per_topic_period[key] += 1
    buffered: set[str] = set()
    for thread, _ in threads.values():
        for member in stack.r.zrange(triage_keys.triage_buffer(stack.keys, chat, thread), 0, -1):
            buffered.add(str(json.loads(str(member))["message_id"]))
    n = len(row_of)
    first_post = {name: min([p for p in range(periods) if posts_after[p][name]], default=periods)
                  for name in topics}
    capped_calls = sum(c for (name, p), c in per_topic_period.items() if p > first_post[name])
    fast = {i for i, row in row_of.items() if not worth_triage(row["text"])}
    no_item = {i for i, row in row_of.items() if i not in fast and topics[row["topic"]] is None}
    expected_buffer = set(row_of) - fast - no_item
    dropped_in_run = buffered - reached
    never = set(row_of) - reached
    worth_periods = {(row["topic"], row["period"]) for i, row in row_of.items() if i in expected_buffer}
    # the naive baseline: one call per unaddressed message, same system prompt and request format, item fields
    system = calls[0]["body"]["system"] if calls else None
    fields = {name: {**facts, "owner": owner_id(facts["owner"])} if facts else {"title": name}
              for name, facts in topics.items()}
    naive_tokens = sum(input_tokens({"system": system, "messages": [{"role": "user", "content": request_text(
        fields[row["topic"]], [(i, row["sender"], row["text"])])}]}) for i, row in row_of.items())
    return {
        "messages": n, "topics": len(topics), "item_topics": sum(1 for f in topics.values() if f),
        "quiet_periods": periods, "seconds": round(seconds, 1), "model_calls": len(calls),
        "models": sorted({str(q["body"].get("model")) for q in calls}),
        "input_tokens": tokens_in, "input_tokens_standin": standin_tokens,
        "output_tokens": metrics.get("tokens|triage|output", 0),
        "calls_per_100_messages": round(100 * len(calls) / n, 2),
        "input_tokens_per_100_messages": round(100 * tokens_in / n),
        "input_tokens_per_call": round(tokens_in / len(calls)) if calls else None,
        "triage_timers_per_period": timers_per_period,
        "topic_periods_worth_a_look": len(worth_periods),
        "calls_per_topic_period": round(len(calls) / len(worth_periods), 3) if worth_periods else None,
        "max_calls_one_topic_period": max(per_topic_period.values(), default=0),
        "decisions": {k.split("|", 1)[1]: v for k, v in metrics.items() if k.startswith("triage|")},
        "unasked_posts": sum(posts_after[-1].values()) if posts_after else 0,
        "calls_after_the_topics_post": capped_calls,
        "reached_model": len(reached & set(row_of)), "never_reached": len(never),
        "fast_path_filtered": len(fast), "no_item_topic": len(no_item), "dropped_in_run_repeats": len(dropped_in_run),
        "buffer_matches_filter": buffered == expected_buffer,
        "buffer_mismatch": sorted(buffered ^ expected_buffer)[:10],
        "fast_path_share_of_all": round(len(fast) / n, 3),
        "fast_path_share_of_never_reached": round(len(fast) / len(never), 3) if never else None,
        "naive_calls": n, "naive_input_tokens": naive_tokens,
        "calls_ratio_vs_naive": round(len(calls) / n, 3),
        "tokens_ratio_vs_naive": round(tokens_in / naive_tokens, 3) if naive_tokens else None,
    }


# -- report ---------------------------------------------------------------------------------------------------

def report(cases: list[dict[str, Any]], base: dict[str, Any], tri: dict[str, Any] | None) -> str:
    lines = ["| timers | sweepers | fired | exactly once | dup events | missing | early | p50 s | p99 s | max s "
             "| seen-left p99 s (≤0.1 s poll) | dedupe hits | sweeper CPU s | idle sweeper CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for c in [base, *cases]:
        lines.append(f"| {c['timers']} | {c['sweepers']} | {c['fired']} | {c['exactly_once']} | "
                     f"{c['duplicate_events']} | {c['missing']} | {c['early']} | {c['p50_s']} | {c['p99_s']} | "
                     f"{c['max_s']} | {c['observed_p99_s']} | {c['dedupe_hits']} | "
                     f"{'+'.join(map(str, c['sweeper_cpu_s']))} | {c['idle_sweeper_cpu_s']} |")
    big = cases[0]
    ratio = round(big["p99_s"] / base["p99_s"], 2) if big["p99_s"] is not None and base["p99_s"] else None
    lines.append(f"\np99 lateness {big['timers']} ÷ {base['timers']} timers: {ratio} (target p99 < {TARGET_P99_S} s)")
    m = big["bytes_per_timer_keys"]
    lines.append(f"Redis per pending timer: used_memory {big['bytes_per_timer_used_memory']} B "
                 f"({big['used_memory_delta_bytes'] / 1e6:.2f} MB for {big['timers']}); keys {m['total']} B = hash "
                 f"{m['hash']} + source set {m['source_set']} + due zset share {m['due_zset_share']} + route zset "
                 f"share {m['route_zset_share']}")
    if tri:
        lines.append(
            f"Triage on {tri['messages']} unaddressed messages ({tri['topics']} topics, {tri['item_topics']} with "
            f"items, {tri['quiet_periods']} quiet periods): {tri['model_calls']} model calls, {tri['input_tokens']} "
            f"input tokens → {tri['calls_per_100_messages']} calls and {tri['input_tokens_per_100_messages']} "
            f"input tokens per 100 messages (one call per message: 100 calls, "
            f"{round(100 * tri['naive_input_tokens'] / tri['messages'])} tokens; ratio calls "
            f"{tri['calls_ratio_vs_naive']}, tokens {tri['tokens_ratio_vs_naive']}); calls per topic per quiet "
            f"period {tri['calls_per_topic_period']} (max {tri['max_calls_one_topic_period']}, target ≤ 1)")
        lines.append(
            f"Never reached a model: {tri['never_reached']}/{tri['messages']} — fast path {tri['fast_path_filtered']} "
            f"({tri['fast_path_share_of_all']:.0%} of all, {tri['fast_path_share_of_never_reached']:.0%} of those), "
            f"topic without item {tri['no_item_topic']}, repeats dropped in the run {tri['dropped_in_run_repeats']}; "
            f"decisions {tri['decisions']}; unasked posts {tri['unasked_posts']}; calls made in a topic that had "
            f"already posted within TRIAGE_POST_PERIOD_SECONDS (nothing more could be posted) "
            f"{tri['calls_after_the_topics_post']}/{tri['model_calls']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timers", type=int, default=10_000)
    parser.add_argument("--baseline", type=int, default=100)
    parser.add_argument("--window", type=float, default=60.0)
    parser.add_argument("--lead", type=float, default=8.0, help="seconds from the start of the adds to the first due")
    parser.add_argument("--quick", action="store_true", help="2,000 timers over 20 s")
    parser.add_argument("--no-triage", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the stack's directory (logs)")
    args = parser.parse_args(argv)
    if args.quick:
        args.timers, args.window = 2000, 20.0
    chat = f"oc_tb_triage_{os.urandom(3).hex()}"
    env = {"TRIAGE_CHATS": chat, "CLOCK_ADJUSTABLE": "1", "TRIAGE_MODEL": "claude-haiku-4-5",
           "BITABLE_APP_TOKEN": APP, "BITABLE_TABLE_ID": TABLE, "LLM_TIMEOUT_SECONDS": "30"}
    # The stack's directory (logs, Redis' socket) inside one of our own, not among /tmp/chaos-*: other runs on
    # the machine may clear those while this one is under way.
    parent, saved = tempfile.mkdtemp(prefix="tb-"), tempfile.tempdir
    tempfile.tempdir = parent
    try:
        stack = Stack(workers=2, env=env, keep=args.keep)
    finally:
        tempfile.tempdir = saved
    stack.feishu.add_table(APP, TABLE)  # before the sweeper checks the table
    started = time.monotonic()
    with stack:  # starts it
        print(f"stack up in {time.monotonic() - started:.0f} s ({stack.dir})", flush=True)
        tri = None if args.no_triage else triage(stack, chat)
        if tri:
            print(json.dumps(tri, ensure_ascii=False), flush=True)
        base = timer_case(stack, args.baseline, 1, args.window, min(args.lead, 3.0))
        cases = [timer_case(stack, args.timers, 1, args.window, args.lead),
                 timer_case(stack, args.timers, 2, args.window, args.lead)]
    if not args.keep:
        shutil.rmtree(parent, ignore_errors=True)
    out = {"timers": cases, "baseline": base, "triage": tri,
           "p99_ratio": round(cases[0]["p99_s"] / base["p99_s"], 3) if cases[0]["p99_s"] and base["p99_s"] else None,
           "seconds": round(time.monotonic() - started), "loadavg_1m_at_end": round(os.getloadavg()[0], 2)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(out, indent=2, ensure_ascii=False))
    print(report(cases, base, tri))
    print(f"\nfull report: {OUT} ({out['seconds']} s; load average at the end {out['loadavg_1m_at_end']})")
    once = all(c["exactly_once"] == c["timers"] and c["duplicate_events"] == 0 for c in [base, *cases])
    on_time = all(c["p99_s"] is not None and c["p99_s"] < TARGET_P99_S for c in cases)
    quiet = tri is None or (tri["max_calls_one_topic_period"] <= 1)
    return 0 if once and on_time and quiet else 1


if __name__ == "__main__":
    raise SystemExit(main())
