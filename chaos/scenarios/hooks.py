"""Scenario 21: GitHub and GitLab webhooks arrive while workers die (issue 33). Topics linked to items watch a pull
request or a merge request each; their repositories send CI failures and recoveries and a merge, every delivery
twice (the sender redelivers, as an operator or GitHub's "Redeliver" would), while scenario 1's killer SIGKILLs busy
horses and RQ workers and the first card replies are killed after Feishu applied them (before the answer). Every
delivery is news in its topic, so each must show in exactly one card line there: nothing lost, nothing posted twice,
and a topic's cards never closer together than CODEHOST_CARD_INTERVAL_SECONDS."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import uuid
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

import requests

from bitable.index import Items
from chaos.measure import dead_records, wait_idle
from chaos.report import Result
from chaos.scenarios.base import Context, scenario
from chaos.scenarios.crashes import Killer, wait_workers
from chaos.scenarios.memory import holders
from codehost import keys as ck
from codehost.fanout import topic_route
from codehost.ingress import hook_route
from codehost.links import GITHUB, GITLAB, MR, PR, Thread
from codehost.watches import TOPIC, Bounds, Watches
from sandbox.codehost import github_request, gitlab_request
from sandbox.feishu.cardkit import card_text
from tests.test_codehost_pure import changed, example

APP, TABLE = "bascnChaosHooks1", "tblChaosHooks1"
SECRET, TOKEN = "chaos-gh-secret", "chaos-gl-token"
INTERVAL = 2.0  # CODEHOST_CARD_INTERVAL_SECONDS: a topic's cards at least this far apart
FOOTER = "来自代码平台的 webhook"


@dataclass
class Delivery:
    provider: str
    event: str
    payload: dict[str, Any]
    token: str  # what its card line shows (a check's name, a title)
    line: str  # the words of its line: CI 失败 / CI 已恢复 / 已合并
    id: str = field(default_factory=lambda: str(uuid.uuid4()))
    statuses: list[int | str] = field(default_factory=list)

    def post(self, url: str) -> int | str:
        if self.provider == GITHUB:
            body, headers = github_request(self.event, self.payload, SECRET, delivery=self.id)
        else:
            body, headers = gitlab_request(self.event, self.payload, TOKEN, event_uuid=self.id)
        try:
            status: int | str = requests.post(f"{url}/hooks/{self.provider}", data=body, headers=headers,
                                              timeout=10).status_code
        except requests.RequestException as exc:
            status = exc.__class__.__name__
        self.statuses.append(status)
        return status


@dataclass
class Topic:
    chat: str
    thread: str
    root: str
    repo: str
    provider: str
    deliveries: list[Delivery] = field(default_factory=list)


def plan(ctx: Context, tag: str, n: int, pairs: int) -> list[Topic]:
    """Topics in the emulator, items claimed in the index, each watching one pull/merge request of its own repo."""
    stack = ctx.stack
    items, watches = Items(stack.r, stack.keys), Watches(stack.r, stack.keys)
    topics = []
    for i in range(n):
        provider = GITHUB if i % 2 == 0 else GITLAB
        chat, thread, root = f"oc_s21_{tag}_{i}", f"omt_s21_{tag}_{i}", f"om_s21_{tag}_{i}"
        stack.feishu.add_message(root, chat, text="报表导出一直是空的", thread_id=thread)
        item, _ = items.claim(thread_id=thread, chat_id=chat, root_id=root, reporter="ou_reporter", origin="chaos")
        repo = f"chaos{tag}/r{i}"
        kind, number = (PR, 2) if provider == GITHUB else (MR, 1)
        watches.add(item.item_id, Thread(provider, repo, kind, number), source=TOPIC, who="ou_dev", now=time.time(),
                    bounds=Bounds(20, 10_000, 3600))
        t = Topic(chat, thread, root, repo, provider)
        for p in range(pairs):
            name = f"ci-{tag}-{i}-{p}"
            sha = f"{i:04d}{p:04d}" + "0" * 32
            t.deliveries += [_ci(provider, repo, name, sha, ok=False), _ci(provider, repo, name, sha, ok=True)]
        t.deliveries.append(_merged(provider, repo, f"merge-{tag}-{i}"))
        topics.append(t)
    return topics


def _ci(provider: str, repo: str, name: str, sha: str, *, ok: bool) -> Delivery:
    line = "CI 已恢复" if ok else "CI 失败"
    if provider == GITHUB:
        payload = changed(example("github", "check_run.completed.payload"), repository__full_name=repo,
                          check_run__name=name, check_run__head_sha=sha,
                          check_run__conclusion="success" if ok else "failure")
        payload["check_run"]["pull_requests"][0]["head"]["sha"] = sha
        return Delivery(GITHUB, "check_run", payload, name, line)
    payload = changed(example("gitlab", "pipeline_hook"), project__path_with_namespace=repo,
                      object_attributes__name=name, object_attributes__sha=sha,
                      object_attributes__status="success" if ok else "failed")
    return Delivery(GITLAB, "Pipeline Hook", payload, name, line)


def _merged(provider: str, repo: str, title: str) -> Delivery:
    if provider == GITHUB:
        payload = changed(example("github", "pull_request.closed.payload"), repository__full_name=repo,
                          pull_request__merged=True, pull_request__title=title)
        return Delivery(GITHUB, "pull_request", payload, title, "已合并")
    payload = changed(example("gitlab", "merge_request_hook"), project__path_with_namespace=repo,
                      object_attributes__action="merge", object_attributes__title=title)
    return Delivery(GITLAB, "Merge Request Hook", payload, title, "已合并")


def send(url: str, t: Topic, gap: float, stop: threading.Event) -> int:
    """A repository's deliveries in order, each until a 200 (redelivering a failed one), then once more (a
    redelivery that must be recognised); returns how many redeliveries it made."""
    again = 0
    for d in t.deliveries:
        for attempt in range(20):
            if stop.is_set() or d.post(url) == 200:
                break
            again += 1
            time.sleep(min(0.25 * (attempt + 1), 2.0))
        d.post(url)  # the same delivery again: stored once
        again += 1
        time.sleep(gap)
    return again


class MidReplyKills:
    """The first `limit` card replies: the horse posting it is SIGKILLed after Feishu applied the reply, before the
    answer reaches it; its rerun must not post the card twice (the outbox's uuid, Feishu's dedupe window)."""

    def __init__(self, ctx: Context, limit: int) -> None:
        self.ctx, self.limit, self.kills = ctx, limit, 0
        self.lock = threading.Lock()

    def __call__(self, record: dict[str, Any]) -> None:
        from flask import request  # the hook runs inside the emulator's request

        if FOOTER not in json.dumps(record.get("json") or {}, ensure_ascii=False):
            return
        with self.lock:
            if self.kills >= self.limit:
                return
            self.kills += 1
        stack = self.ctx.stack
        port = int(request.environ.get("REMOTE_PORT") or 0)
        for pid in holders(port, stack.feishu.port, stack.services["worker"].members()):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                continue


def cards_of(ctx: Context, t: Topic) -> list[dict[str, Any]]:
    out = []
    for m in ctx.stack.feishu.bot_messages(thread_id=t.thread):
        if m["msg_type"] != "interactive":
            continue
        text = card_text(ctx.stack.feishu.card_versions(m["message_id"])[-1])
        if FOOTER in text:
            out.append({**m, "text": text})
    return out


def wait_cards_done(ctx: Context, topics: list[Topic], timeout: float) -> bool:
    """Every topic's buffered events posted: no card pending anywhere, nothing buffered."""
    stack, deadline = ctx.stack, time.monotonic() + timeout
    while time.monotonic() < deadline:
        pipe = stack.r.pipeline(transaction=False)
        pipe.zcard(ck.flushes(stack.keys))
        for t in topics:
            pipe.zcard(ck.topic_buffer(stack.keys, topic_route(stack.profile, t.chat, t.thread)))
        if not any(pipe.execute()):
            return True
        time.sleep(0.2)
    return False


@scenario(21, "GitHub/GitLab webhooks while workers and card replies are killed", fresh_stack_after=True)
def hooks_under_kills(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    n, pairs, gap = ctx.size(4, 12), ctx.size(2, 3), ctx.size(4, 6) / 10  # gap: seconds between a repo's deliveries
    tag = os.urandom(3).hex()
    stack.feishu.add_table(APP, TABLE)
    took = stack.reconfigure(services=("web", "worker", "sweeper"), BITABLE_APP_TOKEN=APP, BITABLE_TABLE_ID=TABLE,
                             GITHUB_WEBHOOK_SECRET=SECRET, GITLAB_WEBHOOK_TOKEN=TOKEN, CODEHOST_GATHER_SECONDS="0.5",
                             CODEHOST_CARD_INTERVAL_SECONDS=str(INTERVAL), TIMER_CHECK_SECONDS="0.2")
    result.notes.append(f"web, worker and sweeper restarted with the webhook secrets and items in {took:.0f}s")
    topics = plan(ctx, tag, n, pairs)
    per = len(topics[0].deliveries)
    result.size = f"{n} topics x {per} deliveries (each sent twice), card interval {INTERVAL:g} s"
    stack.feishu.set_delay("reply", 0.2)  # card replies take a while: kills land mid-run
    mid = MidReplyKills(ctx, ctx.size(2, 4))
    stack.feishu.on("reply", mid, when="after")
    killer = Killer(ctx, every=0.6)
    killer.start()
    stop = threading.Event()
    started = time.monotonic()
    try:
        with ThreadPoolExecutor(max_workers=n) as pool:
            redeliveries = sum(pool.map(lambda t: send(stack.url, t, gap, stop), topics))
    finally:
        killer.stop()
    sent_s = time.monotonic() - started
    wait_workers(ctx, result)
    routes = [hook_route(stack.profile, t.provider, t.repo) for t in topics] + \
        [topic_route(stack.profile, t.chat, t.thread) for t in topics]
    pending = wait_idle(stack, routes, timeout=ctx.size(60, 120))
    done = wait_cards_done(ctx, topics, timeout=ctx.size(60, 120))
    pending = pending or wait_idle(stack, routes, timeout=30)
    result.check("drained: every repository's and topic's route idle, every card posted", not pending and done,
                 json.dumps(pending)[:300])
    _count(ctx, result, topics, redeliveries)
    result.check("workers and horses were SIGKILLed while webhooks arrived", sum(killer.kills.values()) > 0,
                 str(dict(killer.kills)))
    result.check("card replies were SIGKILLed after Feishu applied them", mid.kills > 0, str(mid.kills))
    ours = [d for d in dead_records(stack) if str(d.get("route_key", "")).startswith(
        (f"feishu:{stack.profile}:hook:", f"feishu:{stack.profile}:topic:oc_s21_{tag}"))]
    result.check("nothing dead-lettered", not ours, json.dumps(ours)[:300])
    result.notes.append(f"deliveries sent in {sent_s:.1f} s; kills: {dict(killer.kills)} + {mid.kills} mid-reply")


def _count(ctx: Context, result: Result, topics: list[Topic], redeliveries: int) -> None:
    c = result.counts
    lost, twice, close = [], [], []
    for t in topics:
        cards = cards_of(ctx, t)
        lines = Counter(line.strip() for card in cards for line in card["text"].splitlines())
        for d in t.deliveries:
            c.sent += 1
            c.accepted += 200 in d.statuses
            seen = sum(n for line, n in lines.items() if d.token in line and d.line in line)
            if seen == 0:
                lost.append(f"{t.repo}: {d.line} {d.token}")
            elif seen > 1:
                twice.append(f"{t.repo}: {d.line} {d.token} x{seen}")
            c.answered += seen >= 1
        times = sorted(int(card["create_time"]) for card in cards)
        close += [f"{t.repo}: {b - a} ms" for a, b in pairwise(times)
                  if b - a < (INTERVAL - 0.3) * 1000]
    c.lost, c.duplicates, c.redeliveries = len(lost), len(twice), redeliveries
    c.posts = sum(len(d.statuses) for t in topics for d in t.deliveries)
    result.check("every delivery accepted (200)", c.accepted == c.sent, f"{c.accepted}/{c.sent}")
    result.check("every delivery in exactly one card line of its topic: none lost", not lost, "; ".join(lost[:5]))
    result.check("nothing posted twice", not twice, "; ".join(twice[:5]))
    result.check(f"a topic's cards at least {INTERVAL:g} s apart", not close, "; ".join(close[:5]))
    dups = [s for t in topics for d in t.deliveries for s in d.statuses[1:] if s == 200]
    result.notes.append(f"{len(dups)} redeliveries answered 200 (recognised, stored once)")
