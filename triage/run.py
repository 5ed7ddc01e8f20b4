"""A quiet triage run: one small-model call per topic per quiet period, and at most one unasked message.

The run belongs to the topic's route (leased, fenced, retried, dead-lettered like any run). Within the post
period after an unasked message it makes no call at all (nothing could be posted; the messages wait for the
next period). Otherwise it reads the messages the web buffered since the last triage (recalled ones dropped,
repeats dropped), the item's record fresh, and asks TRIAGE_MODEL within TRIAGE_BUDGET_TOKENS. Quiet is the
default; a note or a proposal (the existing approval card) is posted only when no unasked message went to this
topic within TRIAGE_POST_PERIOD_SECONDS. The decision and the post are keyed by the firing (timer and due
time), so a rerun or an admin's replay of a dead-lettered run posts the same thing once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, replace
from typing import Any

from bitable.client import Record
from bitable.index import Item
from claude.prompt import estimate_tokens
from core import metrics
from core.inbound import Inbound
from items import propose_changes
from memory import withdrawn
from runs.outbox import BATCH_CACHE_TTL_S, Destination
from runs.runtime import Runtime
from timers import Timer, run_key, timers_of
from triage import keys as triage_keys
from triage.filter import dedupe, normalise
from triage.protocol import QUIET, Decision, parse_decision, request_text, system_prompt
from triage.settings import triage_settings
from turn.registry import Context

log = logging.getLogger(__name__)
MAX_OUTPUT = 200
FIELD_CHARS = 400


def run_triage(c: Context, t: Timer) -> str:
    """A due triage timer `t` of the topic route `c.rk`: look at what was said since, decide, maybe speak once."""
    rt, rk, s = c.rt, c.rk, c.rt.settings
    if t.chat_id not in triage_settings(s).triage_chats:
        return _done(rt, rk, "skipped", "the chat is no longer in TRIAGE_CHATS")
    item = rt.items.by_thread(t.thread_id)
    if item is None:
        return _done(rt, rk, "skipped", "the topic has no item")
    state_key = triage_keys.triage_state(rt.keys, rk)
    key = run_key(t)  # a replay of a dead-lettered run is the same firing: same decision, same post, once
    held = _held_back(rt, state_key, key)
    if held:  # nothing could be posted: no call now; the messages stay after the cursor for the next period
        return _noted(rt, t, _done(rt, rk, "capped", held))
    cursor = float(rt.state.hget(state_key, "cursor") or 0)
    fresh, seen = _new_messages(rt, t, cursor)
    if not fresh:
        _advance(rt, state_key, seen)
        return _noted(rt, t, _done(rt, rk, "skipped", "nothing new worth a look"))
    decision = _decide(rt, rk, item, fresh, key)
    outcome = _act(replace(c, batch_id=key), t, item, decision, fresh)
    _advance(rt, state_key, seen)
    return _noted(rt, t, outcome)


def _noted(rt: Runtime, t: Timer, outcome: str) -> str:
    timers_of(rt).note(t.id, outcome)
    return outcome


def _held_back(rt: Runtime, state_key: str, firing: str) -> str:
    """Why this firing may not post (another one posted within TRIAGE_POST_PERIOD_SECONDS), or ""."""
    last, posted_by = rt.state.hmget(state_key, ["posted_at", "posted_by"])
    ago = rt.clock.now() - float(last or 0)
    if posted_by != firing and ago < triage_settings(rt.settings).triage_post_period_seconds:
        return f"an unasked message went here {ago:.0f} s ago"
    return ""


def _new_messages(rt: Runtime, t: Timer, cursor: float) -> tuple[list[dict[str, Any]], float]:
    """Messages after the cursor worth a look (recalled and repeated ones dropped), and the newest time seen."""
    key = triage_keys.triage_buffer(rt.keys, t.chat_id, t.thread_id)
    raw = [json.loads(str(x)) for x in rt.state.zrangebyscore(key, f"({cursor}", "+inf")]
    if not raw:
        return [], cursor
    seen = max(float(m.get("at") or 0) for m in raw)
    older = {normalise(str(json.loads(str(x)).get("text") or ""))
             for x in rt.state.zrangebyscore(key, "-inf", cursor)}
    kept = withdrawn.apply_to_related(rt.state, rt.keys, t.chat_id, raw)
    kept = [m for m in kept if normalise(str(m.get("text") or "")) not in older
            and str(m.get("text") or "") != withdrawn.RECALLED_TEXT]
    firsts = dedupe([str(m.get("text") or "") for m in kept])
    return [kept[i] for i in firsts], seen


def _advance(rt: Runtime, key: str, seen: float) -> None:
    pipe = rt.state.pipeline(transaction=True)  # the state with its expiry
    pipe.hset(key, "cursor", repr(seen))
    pipe.expire(key, 30 * 86400)
    pipe.execute()


def _decide(rt: Runtime, rk: str, item: Item, fresh: Sequence[dict[str, Any]], firing: str) -> Decision:
    """The model's decision, stored per firing (a rerun or a replay asks nothing new)."""
    key = rt.keys.answer(rk, firing)
    cached = rt.state.get(key)
    if not cached:
        text = _fitted(rt, _fields(rt, item), fresh)
        completion = rt.llm.complete([{"type": "text", "text": system_prompt()}],
                                     [{"role": "user", "content": text}],
                                     model=triage_settings(rt.settings).triage_model or None, max_tokens=MAX_OUTPUT)
        metrics.count(rt.state, rt.keys, "tokens", "triage", "input", n=completion.input_tokens)
        metrics.count(rt.state, rt.keys, "tokens", "triage", "output", n=completion.output_tokens)
        decided = asdict(parse_decision(completion.text))
        rt.state.set(key, json.dumps(decided, ensure_ascii=False), nx=True, ex=BATCH_CACHE_TTL_S)
        cached = rt.state.get(key) or json.dumps(decided)
    stored = json.loads(cached)
    return Decision(kind=str(stored.get("kind") or "quiet"), note=str(stored.get("note") or ""),
                    field=str(stored.get("field") or ""), value=str(stored.get("value") or ""),
                    evidence=tuple(str(e) for e in stored.get("evidence") or ()))


def _fields(rt: Runtime, item: Item) -> dict[str, str]:
    record: Record | None = None
    if rt.bitable is not None and item.record_id:
        record = rt.bitable.batch_get([item.record_id]).get(item.record_id)
    if record is None or rt.bitable is None:
        return {"title": item.item_id}
    name = rt.bitable.schema().name
    return {"title": record.text(name("title"))[:FIELD_CHARS], "status": record.text(name("status"))[:FIELD_CHARS],
            "owner": ",".join(record.users(name("owner"))),
            "description": record.text(name("description"))[:FIELD_CHARS]}


def _fitted(rt: Runtime, fields: dict[str, str], fresh: Sequence[dict[str, Any]]) -> str:
    """The request within TRIAGE_BUDGET_TOKENS: the newest messages that fit (older ones were quieter anyway)."""
    budget = triage_settings(rt.settings).triage_budget_tokens - estimate_tokens(system_prompt()) - 50
    msgs = [(str(m["message_id"]), str(m["sender"]), str(m["text"])[:500]) for m in fresh]
    while True:
        text = request_text(fields, msgs)
        if estimate_tokens(text) <= budget or len(msgs) <= 1:
            return text
        msgs = msgs[1:]


def _act(c: Context, t: Timer, item: Item, d: Decision, fresh: Sequence[dict[str, Any]]) -> str:
    """What the decision does, keyed by the firing (`c.batch_id`): a proposal's card, or one short note."""
    rt, rk, firing = c.rt, c.rk, c.batch_id
    if d.kind == QUIET.kind:
        return _done(rt, rk, "quiet", f"{len(fresh)} messages, nothing to say")
    state_key = triage_keys.triage_state(rt.keys, rk)
    held = _held_back(rt, state_key, firing)  # checked again: the decision may be a stored one of a rerun
    if held:
        return _done(rt, rk, "capped", f"{d.kind} held back: {held}")
    target = _target(fresh, d)
    if not str(target["message_id"]).startswith("om_"):  # handed over by another feature: under the topic's root
        target = {**target, "message_id": item.root_id}
    # Taken before posting, so no other firing posts in the period; this firing's reruns and replays may finish it.
    rt.state.hset(state_key, mapping={"posted_at": repr(rt.clock.now()), "posted_by": firing})
    if d.kind == "propose" and item.record_id and rt.bitable is not None:
        # The proposal's id and card keyed by the firing, the card under the message that moved it.
        propose_changes(replace(c, batch=(_as_inbound(t, target),)), item,
                        [{"field": d.field, "value": d.value, "reason": d.note or "quiet triage"}])
        timers_of(rt).told(t.id, f"审批卡：建议把 {d.field} 改为 {d.value}（{d.note or '新证据'}）")
        return _done(rt, rk, "propose", f"proposed {d.field} → {d.value}")
    note = d.note or "新证据已记录。"
    rt.outbox.reply(Destination(rk, t.chat_id, str(target["message_id"]), True, c.fence), firing, note)
    timers_of(rt).told(t.id, note)
    return _done(rt, rk, "note", note)


def _target(fresh: Sequence[dict[str, Any]], d: Decision) -> dict[str, Any]:
    """The message the note answers: the first evidence message the model named, else the newest — a Feishu message
    (`om_…`): a message another feature handed over (a code platform's comment) has none to reply under."""
    said = [m for m in fresh if str(m["message_id"]).startswith("om_")] or list(fresh)
    by_id = {str(m["message_id"]): m for m in said}
    return next((by_id[e] for e in d.evidence if e in by_id), said[-1])


def _as_inbound(t: Timer, m: dict[str, Any]) -> Inbound:
    return Inbound(event_id=str(m["message_id"]), message_id=str(m["message_id"]), chat_id=t.chat_id,
                   chat_type="group", sender_open_id=str(m.get("sender") or ""), sender_type="user",
                   message_type="text", text=str(m.get("text") or ""), content="{}", thread_id=t.thread_id)


def _done(rt: Runtime, rk: str, decision: str, why: str) -> str:
    metrics.count(rt.state, rt.keys, "triage", decision)
    log.info(f"triage: {decision} ({why})", extra={"route_key": rk, "reason": why})
    return f"{decision}: {why}"
