"""Scenario 11: business items under faults. @bot messages open topics; each must become exactly one item with one
Bitable record and one first-answer card (placeholder → summary → full, mirrored into the record) while Bitable
rate-limits a third of its calls, every write keeps the table busy, horses are SIGKILLed and the Open API fails
now and then; redelivered opening events make nothing new."""

from __future__ import annotations

import json
import re
import statistics
import time
from collections import Counter
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from bitable import keys as item_keys
from bitable.index import FAILED, FULL, PLACEHOLDER, SUMMARY, Item, Items
from chaos.load import Event, Target
from chaos.measure import Run, dead_records, wait_idle
from chaos.report import Counts, Result
from chaos.scenarios.base import Context, scenario
from chaos.scenarios.crashes import Killer, log_size, wait_workers
from feishu.cards import STATUS_ZH, footer_of
from routing.keys import item_route

APP, TABLE = "bascnChaosItems1", "tblChaosItems1"
BITABLE_OPS = ("bitable_search", "bitable_batch_get", "bitable_create", "bitable_update")
# Open API faults on the card's post and patches: rate limits are sat out in the run, a gateway error hands the
# route to a retry, a reset is resent at once (same uuid).
CARD_FAULTS = {"rate_limit": 1.0, "gateway": 1.0, "reset": 1.0}
CARD_FAULT_RATE = 0.1
DONE, GAVE_UP = [PLACEHOLDER, SUMMARY, FULL], [PLACEHOLDER, FAILED]
FOOTER = re.compile(r"第 (\d+) 版")


class Kills(Killer):
    """Killer (scenario 1) that stops after `limit` kills: a few crashes, not a siege."""

    def __init__(self, ctx: Context, every: float, limit: int) -> None:
        super().__init__(ctx, every)
        self.limit = limit

    def run(self) -> None:
        while sum(self.kills.values()) < self.limit:
            if self.stopped.wait(self.every * self.ctx.rng.uniform(0.5, 1.5)):
                return
            busy = self.ctx.stack.horses()
            if not busy:
                self.idle_ticks += 1
                continue
            horse, parent = self.ctx.rng.choice(busy)
            kind = self.ctx.rng.choice(self.kinds)
            if self.ctx.stack.kill({"horse": [horse], "parent": [parent], "both": [parent, horse]}[kind]):
                self.kills[kind] += 1


@dataclass
class Topic:
    event: Event
    item: Item | None = None

    @property
    def chat(self) -> str:
        return self.event.target.chat_id

    @property
    def thread(self) -> str:
        return str(self.event.target.thread_id)


def text_of(cell: Any) -> str:
    if isinstance(cell, list):
        return "".join(str(seg.get("text", "")) for seg in cell if isinstance(seg, dict))
    return "" if cell is None else str(cell)


def items_on(ctx: Context, result: Result) -> None:
    """Bitable configured: the table exists before the sweeper checks it, the worker and sweeper restart."""
    stack = ctx.stack
    stack.feishu.add_table(APP, TABLE)
    stack.r.delete(item_keys.bitable_status(stack.keys))
    took = stack.reconfigure(BITABLE_APP_TOKEN=APP, BITABLE_TABLE_ID=TABLE, ITEM_CREATE_POLICY="topic_root")
    status = stack.r.hgetall(item_keys.bitable_status(stack.keys))
    result.check("items table checked at start", status.get("schema") == "ok", json.dumps(status, ensure_ascii=False))
    result.notes.append(f"worker and sweeper restarted with BITABLE_* set in {took:.0f}s")


def wait_all_done(ctx: Context, items: Items, topics: list[Topic], started: float, timeout: float) -> float | None:
    """Seconds from the first report until every topic's item has finished its analysis (done or failed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for t in topics:
            if t.item is None or t.item.analysis not in ("done", "failed"):
                t.item = items.by_thread(t.thread)
        if all(t.item is not None and t.item.analysis in ("done", "failed") for t in topics):
            return time.monotonic() - started
        time.sleep(0.1)
    return None


def redeliver(run: Run, events: list[Event], spread: float) -> None:
    """Each event again as Feishu would: the same delivery, and the same message under a new event_id."""
    now = time.monotonic()
    for ev in events:
        run.sender.send(ev, now + run.sender.rng.uniform(0.0, spread), "dup-same")
        run.sender.send(ev, now + run.sender.rng.uniform(0.0, spread), "dup-new-event")


def snapshot(ctx: Context, topics: list[Topic]) -> dict[str, int]:
    """What redeliveries must not change: items, records, bot messages in our chats, card patches."""
    stack, chats = ctx.stack, {t.chat for t in topics}
    return {"items": stack.r.zcard(item_keys.items_order(stack.keys)), "records": len(stack.feishu.records(APP, TABLE)),
            "bot_messages": sum(len(stack.feishu.bot_messages(c)) for c in chats),
            "card_versions": sum(len(stack.feishu.card_versions(str(t.item.answer_message_id)))
                                 for t in topics if t.item is not None)}


def longest_stall(ctx: Context, since: float) -> float:
    """The longest gap between accepted writes to the table: a horse killed while holding the per-table write
    lock leaves it to its TTL, and every writer waits."""
    times = sorted(w["time"] for w in ctx.stack.feishu.bitable_writes(APP, TABLE) if w["time"] >= since)
    return max((b - a for a, b in pairwise(times)), default=0.0)


def bitable_retries(text: str) -> dict[str, int]:
    """The service's own log of Bitable answers it retried locally or gave up on, by code."""
    found = Counter(f"{m.group(2)} {m.group(1)}" for m in re.finditer(r"bitable \w+ (will retry|failed): code=(\S+)",
                                                                        text))
    return dict(sorted(found.items()))


@scenario(11, "items under Bitable rate limits, write conflicts, horse kills and card faults",
          fresh_stack_after=True)  # the worker and sweeper run with BITABLE_* set: later scenarios get a clean stack
def items_under_faults(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    n = ctx.size(5, 30)
    kill_limit = ctx.size(2, 6)
    result.size = (f"{n} topics, Bitable 30% 1254290 + busy writes, ≤{kill_limit} kills, "
                   f"card faults {CARD_FAULT_RATE:.0%}")
    items_on(ctx, result)
    items = Items(stack.r, stack.keys)
    stack.claude.set_delay(0.3)  # a kill usually lands inside a model call or a write
    stack.feishu.set_bitable_write_time(0.2)  # a write keeps the table busy: an unserialised writer gets 1254291
    stack.feishu.set_profile(BITABLE_OPS, 0.3, {"bitable_rate_limit": 1.0}, seed=ctx.seed)
    stack.feishu.set_profile(["reply", "message_patch"], CARD_FAULT_RATE, CARD_FAULTS, seed=ctx.seed, reset_seconds=1)
    before = stack.feishu.stats
    worker_log = log_size(stack, "worker")
    run = ctx.run(result)
    topics = [Topic(run.sender.event(Target(f"oc_s11_{run.sender.tag}_{i}", "group", f"ou_s11_u{i}",
                                            thread_id=f"omt_s11_{run.sender.tag}_{i}"),
                                     text=f"报表导出 rpt-{i:03d} 一直是空的\n从昨天 18:00 开始，客户 {i} 受影响。"))
              for i in range(n)]
    killer = Kills(ctx, every=0.8, limit=kill_limit)
    started, wall = time.monotonic(), time.time()
    killer.start()
    try:
        for i, t in enumerate(topics):  # open-loop, a few per second
            time.sleep(max(0.0, started + i / ctx.size(5, 10) - time.monotonic()))
            run.sender.send(t.event)
        redeliver(run, [t.event for t in topics[:3]], spread=1.5)  # racing the first runs
        run.phase("sending")
        all_done = wait_all_done(ctx, items, topics, started, timeout=ctx.size(90, 180))
        run.phase("until every analysis ended")
    finally:
        killer.stop()
    try:
        sent = run.sender.wait(60)
        result.check("deliveries finished", sent)
        routes = {t.event.route for t in topics} | {item_route(stack.profile, t.item.item_id) for t in topics if t.item}
        state = wait_idle(stack, routes, timeout=ctx.size(60, 90))
        result.check("drained: topic and item routes idle", not state, json.dumps(state, default=str)[:400])
        run.phase("until idle")
        faults = {op: {k: v - before["faults"].get(op, {}).get(k, 0) for k, v in kinds.items()}
                  for op, kinds in stack.feishu.stats["faults"].items()
                  if op in (*BITABLE_OPS, "reply", "message_patch")}
        stack.calm()  # faults off for the last step: redeliveries then must be pure dedupe
        first = snapshot(ctx, topics)
        redeliver(run, [t.event for t in topics[:3]], spread=0.3)
        run.sender.wait(30)
        # Barrier: a PUSH that stored anything marked its route dirty before answering 200, so idle means done.
        state = wait_idle(stack, routes, timeout=30)
        result.check("redeliveries after the answer made nothing new", not state and snapshot(ctx, topics) == first,
                     f"before {first}, after {snapshot(ctx, topics)}, {state}")
        run.phase("redeliveries")
        check_items(ctx, run, topics, all_done)
        injected = sum(v for op, kinds in faults.items() if op in BITABLE_OPS for v in kinds.values())
        result.check("Bitable faults injected", injected >= max(3, n // 2), f"{faults}")
        result.check("kills happened", sum(killer.kills.values()) >= 1, f"{dict(killer.kills)}")
        wait_workers(ctx, result)
        worker_text = stack.services["worker"].log_path.read_bytes()[worker_log:].decode("utf-8", "replace")
        result.notes.append(f"faults injected: {faults}; kills: {dict(killer.kills)}; Bitable answers the service "
                            f"retried or gave up on (worker log): {bitable_retries(worker_text)}; longest gap between "
                            f"accepted table writes: {longest_stall(ctx, wall):.1f} s")
    finally:
        run.close()


def check_items(ctx: Context, run: Run, topics: list[Topic], all_done: float | None) -> None:
    """The named checks: one item, one record, one card per topic; versions and mirror complete."""
    stack, result = ctx.stack, run.result
    items = Items(stack.r, stack.keys)
    for t in topics:
        t.item = items.by_thread(t.thread)
    got = [t.item for t in topics if t.item is not None]
    ids = {i.item_id for i in got}
    all_items = stack.r.zcard(item_keys.items_order(stack.keys))
    result.check("every topic has exactly one item", len(got) == len(topics) and len(ids) == len(topics)
                 and all_items == len(topics),
                 f"{len(got)} topics with an item, {len(ids)} distinct, {all_items} in all")
    records = stack.feishu.records(APP, TABLE)
    by_item = Counter(text_of(r["fields"].get("事项ID")) for r in records)
    linked = {i.item_id: i.record_id for i in got}
    wrong_link = [i for i, rec in linked.items() if not rec or rec not in {r["record_id"] for r in records
                                                                            if text_of(r["fields"].get("事项ID")) == i}]
    result.check("exactly one record per item", len(records) == len(topics) and set(by_item) == ids
                 and max(by_item.values(), default=0) == 1 and not wrong_link,
                 f"{len(records)} records for {len(ids)} items; repeated: {[k for k, v in by_item.items() if v > 1]}; "
                 f"items not linked to their record: {wrong_link[:5]}")
    versions = {i.item_id: [v.status for v in items.versions(i.item_id)] for i in got}
    dead = [d for d in dead_records(stack) if any(d.get("route_key") == item_route(stack.profile, i) for i in ids)
            or d.get("route_key") in {t.event.route for t in topics}]
    dead_items = {str(d.get("route_key", "")).rsplit(":", 1)[-1] for d in dead}
    gave_up = [i for i in got if i.analysis == "failed"]
    bad = {i.item_id: (i.analysis, versions[i.item_id]) for i in got
           if not (i.analysis == "done" and versions[i.item_id] == DONE)
           and not (i.analysis == "failed" and versions[i.item_id] == GAVE_UP and i.item_id in dead_items)}
    result.check("every item ends [placeholder, summary, full], or [placeholder, failed] with a dead letter",
                 not bad, f"{bad}"[:400])
    result.check("with these faults every analysis is done", not gave_up and not dead,
                 f"{len(gave_up)} gave up, {len(dead)} dead letters")
    cards, others, stale = {}, {}, {}
    for t in topics:
        sent = stack.feishu.bot_messages(t.chat, t.thread)
        cards[t.thread] = [m["message_id"] for m in sent if m["msg_type"] == "interactive"]
        others[t.thread] = [m["message_id"] for m in sent if m["msg_type"] != "interactive"]
        if t.item is not None:
            shown = [int(m.group(1)) for c in stack.feishu.card_versions(t.item.answer_message_id)
                     if (m := FOOTER.search(footer_of(c)))]
            if shown != sorted(shown) or not shown or shown[-1] != len(versions[t.item.item_id]):
                stale[t.item.item_id] = shown
    result.check("exactly one card per topic, the item's", all(len(c) == 1 for c in cards.values()) and
                 all(t.item is not None and cards[t.thread] == [t.item.answer_message_id] for t in topics),
                 f"{ {k: v for k, v in cards.items() if len(v) != 1} }"[:400])
    result.check("no other bot message in the topics", not any(others.values()),
                 f"{ {k: v for k, v in others.items() if v} }"[:300])
    result.check("each card shows its item's latest version, never going back", not stale,
                 f"card versions shown (item: footers' numbers): {stale}"[:400])
    mirror = {text_of(r["fields"].get("事项ID")): (r["fields"].get("首答版本"), text_of(r["fields"].get("首答状态")),
                                                  bool(r["fields"].get("首答链接"))) for r in records}
    unmirrored = {i: m for i, m in mirror.items() if i in versions and m != (len(versions[i]), STATUS_ZH[
        FULL if versions[i] == DONE else FAILED], True)}
    result.check("the record mirrors the latest version (首答版本 3, 首答状态, 首答链接)", not unmirrored,
                 f"{unmirrored}"[:400])
    answered = [t for t in topics if t.item and t.item.analysis == "done" and len(cards[t.thread]) == 1]
    lat = [round(vs[-1].created_at - i.created_at, 1) for i in got if (vs := items.versions(i.item_id))
           and vs[-1].status == FULL]
    c = Counts(sent=len(topics), posts=sum(len(t.event.posts) for t in topics))
    c.accepted = sum(t.event.accepted_at is not None for t in topics)
    c.answered = len(answered)
    c.lost = sum(t.event.accepted_at is not None and (t.item is None or not cards[t.thread]) for t in topics)
    c.duplicates = sum(len(cards[t.thread]) > 1 or by_item.get(t.item.item_id if t.item else "", 0) > 1
                       for t in topics)
    c.dead_lettered = len(dead)
    c.redeliveries = sum(t.event.redeliveries for t in topics)
    latencies = run.sender.latencies()
    c.p50_ms = round(statistics.median(latencies), 1) if latencies else None
    c.p99_ms = round(sorted(latencies)[min(len(latencies) - 1, int(0.99 * len(latencies)))], 1) if latencies else None
    result.counts = c
    result.check("every report accepted", c.accepted == c.sent, f"{c.sent - c.accepted} never got a 200")
    result.check("no lost or duplicated first answers", c.lost == 0 and c.duplicates == 0 and c.answered == c.sent,
                 f"{c.lost} lost, {c.duplicates} duplicated, {c.answered}/{c.sent} answered")
    leaks = run.leaks.scan(run.messages())
    result.check("no secret leaked", not leaks, "; ".join(leaks[:5]))
    result.extra["all_done_s"] = None if all_done is None else round(all_done, 1)
    result.notes.append(f"time to all done: {'not reached' if all_done is None else f'{all_done:.1f} s'} "
                        f"after the first report; report → full answer per item: p50 "
                        f"{statistics.median(lat) if lat else '–'} s, max {max(lat, default='–')} s")
