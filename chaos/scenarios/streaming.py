"""Scenario 17: streaming cards (REPLY_STREAMING=card, issue 16) under worker kills and CardKit faults.

Every answer is streamed over several seconds into one CardKit card per turn, while busy work-horses and RQ
workers are SIGKILLed mid-stream (the rerun must finish the same card) and a tenth of the card's text updates
fail (429, 5xx before or after applying, connection resets, timeouts); one final update is refused for good
(200740), which the design answers with a plain reply. Each turn must end as exactly one card that stopped
streaming and shows the complete answer the model wrote, or, after that refusal, as the plain reply with the
complete answer (its card left showing a partial one): no second card, nothing lost, duplicated or out of order.
"""

from __future__ import annotations

import itertools
import json
import re
import statistics
import threading
import time
from collections import Counter
from typing import Any

from chaos.load import p2p_targets
from chaos.measure import reply_text
from chaos.report import Result
from chaos.scenarios.base import Context, scenario
from chaos.scenarios.crashes import wait_workers
from chaos.scenarios.items import Kills
from feishu.render import card_markdown

CONTENT_FAULT_RATE = 0.1
CONTENT_FAULTS = {"rate_limit": 2.0, "gateway": 1.0, "gateway_after": 1.0, "reset": 1.0, "reset_after": 1.0,
                  "timeout": 1.0}
PARAGRAPH = "这是一段较长的分析，卡片随着模型的输出逐步增长，最后显示完整答案。"


def answer_for(tokens: list[str]) -> str:
    """What the model writes for a batch: plain paragraphs (~500 characters), the batch's tokens at the end, so a
    card that stopped part-way shows none of them."""
    body = [f"第 {i} 段：{PARAGRAPH}" for i in range(12)]
    return "\n\n".join([*body, "回答：" + " ".join(tokens)])


class Writer:
    """The stand-in's responder: answers each batch (the tokens in the last user turn) and remembers every answer."""

    def __init__(self, token_re: re.Pattern[str]) -> None:
        self.token_re, self.answers, self.lock = token_re, set[str](), threading.Lock()

    def __call__(self, body: dict[str, Any]) -> str:
        users = [m for m in body["messages"] if m.get("role") == "user"]
        tokens = list(dict.fromkeys(self.token_re.findall(json.dumps(users[-1], ensure_ascii=False)))) if users else []
        if not tokens:
            return "收到。"
        text = answer_for(tokens)
        with self.lock:
            self.answers.add(text)
        return text


def complete(text: str, answers: set[str], tokens: list[str]) -> bool:
    """A plain reply shows an answer the model wrote, whole: every paragraph once, in order, and its tokens."""
    expected = answer_for(tokens)
    if expected not in answers:
        return False
    marks = [text.find(f"第 {i} 段：{PARAGRAPH}") for i in range(12)]
    return all(m >= 0 for m in marks) and marks == sorted(marks) and ("回答：" + " ".join(tokens)) in text


@scenario(17, "streaming cards under worker kills and CardKit faults",
          fresh_stack_after=True)  # the workers run with REPLY_STREAMING=card: later scenarios get a clean stack
def streaming_under_faults(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    routes, per_route, kill_limit = ctx.size(8, 20), 2, ctx.size(3, 5)
    stream_s = 6.0 if ctx.quick else 8.0
    result.size = (f"{routes} routes x {per_route} msgs, {stream_s:g} s streams, ≤{kill_limit} kills, card_content "
                   f"faults {CONTENT_FAULT_RATE:.0%} + 1 final update refused")
    took = stack.reconfigure(REPLY_STREAMING="card", STREAM_UPDATE_SECONDS="1")
    run = ctx.run(result)
    writer = Writer(run.token_re)
    stack.claude.set_responder(writer)
    stack.claude.set_delay(0.3)
    stack.claude.set_stream(stream_s)
    stack.feishu.set_profile(["card_content"], CONTENT_FAULT_RATE, CONTENT_FAULTS, seed=ctx.seed, reset_seconds=1,
                             timeout_seconds=float(stack.env["FEISHU_TIMEOUT_SECONDS"]) + 1)
    stack.feishu.inject("card_update", code=200740, http_status=400, times=1)  # gone: the plain reply follows
    before = stack.feishu.stats
    cards_before = {c["card_id"] for c in stack.feishu.cards()}
    killer = Kills(ctx, every=1.5, limit=kill_limit)
    try:
        targets = p2p_targets(routes, f"s17{run.sender.tag}")
        now = time.monotonic()
        for t in targets:  # the first message at once, the next while the first answer is being written
            run.sender.send(run.sender.event(t, "请详细分析"), now)
            run.sender.send(run.sender.event(t, "还有呢"), now + ctx.rng.uniform(1.0, stream_s / 2))
        killer.start()
        run.phase(f"streaming on ({took:.0f}s), sending")
        run.settle(idle_timeout=ctx.size(45, 90))
    finally:
        killer.stop()
    try:
        run.finish()
        check_cards(ctx, run.result, run, writer, cards_before)
        faults = {op: {k: v - before["faults"].get(op, {}).get(k, 0) for k, v in kinds.items()}
                  for op, kinds in stack.feishu.stats["faults"].items() if op.startswith("card_")}
        injected = sum(faults.get("card_content", {}).values())
        result.check("card_content faults injected", injected >= 3, f"{faults}")
        result.check("kills happened", sum(killer.kills.values()) >= 1, f"{dict(killer.kills)}")
        wait_workers(ctx, result)
        result.notes.append(f"faults: {faults}; kills: {dict(killer.kills)}")
    finally:
        run.close()


def check_cards(ctx: Context, result: Result, run: Any, writer: Writer, cards_before: set[str]) -> None:
    """One card per turn, finished with the complete answer, or the plain reply after the refused final update;
    no card entity left unsent; how steadily the cards grew."""
    stack = ctx.stack
    asked = {mid for e in run.sender.events for mid in e.message_ids}
    cards = [c for c in stack.feishu.cards() if c["card_id"] not in cards_before]
    by_message = {c["message_id"]: c for c in cards}
    unsent = [c["card_id"] for c in cards if c["message_id"] is None]
    bad: list[str] = []
    per_parent: Counter[str] = Counter()
    fallbacks = finished = 0
    gaps: list[float] = []
    for m in run.messages():
        if m.get("parent_id") not in asked:
            continue
        tokens = list(dict.fromkeys(run.token_re.findall(reply_text(m))))
        entity = by_message.get(m["message_id"])
        if m["msg_type"] == "interactive":
            per_parent[m["parent_id"]] += 1
            if entity is None:
                bad.append(f"{m['message_id']}: a card that is no CardKit entity")
            elif entity["streaming"]:
                pass  # left part-way: the turn's plain reply (below) carries the answer, or the event counts lost
            elif not tokens or entity["text"] != card_markdown(answer_for(tokens)) \
                    or answer_for(tokens) not in writer.answers:
                bad.append(f"{m['message_id']}: finished card text is not the model's complete answer")
            else:
                finished += 1
            if entity is not None:
                shown = [h["at"] for h in stack.feishu.card_history(entity["card_id"])
                         if h["op"] in ("send", "card_content", "card_update")]
                gaps += [b - a for a, b in itertools.pairwise(shown)]
        elif tokens:
            fallbacks += 1
            if not complete(reply_text(m), writer.answers, tokens):
                bad.append(f"{m['message_id']}: plain reply is not a complete answer")
    streamed: Counter[str] = Counter()  # model calls per batch: more than one means a run died and was redone
    for call in stack.claude.requests_since(run.model_cursor):
        users = [m for m in call["body"]["messages"] if m.get("role") == "user"]
        found = run.token_re.findall(json.dumps(users[-1], ensure_ascii=False)) if users else []
        if found:
            streamed[" ".join(dict.fromkeys(found))] += 1
    turns_with_card_and_reply = [p for p, n in per_parent.items() if n > 1]
    result.check("one card per turn, no second card", not turns_with_card_and_reply and not unsent,
                 f"turns with several cards: {turns_with_card_and_reply[:5]}; entities never sent: {unsent[:5]}")
    result.check("every answer complete: a finished card, or the plain reply after a refused final update",
                 not bad and finished >= 1, "; ".join(bad[:5]))
    result.check("the refused final update fell back to one plain reply", fallbacks == 1,
                 f"{fallbacks} plain replies carrying answers")
    result.notes.append(f"{sum(1 for n in streamed.values() if n > 1)} of {len(streamed)} turns streamed again "
                        "after a kill (each still ended with one card)")
    result.notes.append(f"{len(cards)} cards ({finished} finished with the complete answer), {fallbacks} plain "
                        f"fallback(s); gaps between visible card updates: median "
                        f"{statistics.median(gaps) if gaps else 0:.2f} s, max {max(gaps, default=0):.1f} s "
                        "(a failed card_content stops a card's updates until its final update)")
