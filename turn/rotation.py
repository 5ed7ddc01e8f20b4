"""Capacity and rotation: fit a turn into CONTEXT_BUDGET_TOKENS, rotating S1 → S2 when it no longer fits.

When the session's turns do not fit next to the batch, the older ones are compressed by the model
(memory/compress.py), the summary is checked and completed verbatim, and Sessions.start ends S1 with
`end_reason=compression` and starts S2 (parent S1) with the summary and the newest turns, under the
run's lease and the route's generation. A retried run does not pay twice: the summary is cached per
(S1, compressed turns), and a rotation already done shows as the route's new session id.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import redis

from claude import budget as bud
from claude.client import Completion
from claude.prompt import Entry, estimate_tokens, session_messages
from core import metrics
from core.keys import Keys
from memory import withdrawn
from memory.compress import (
    COMPRESSION_SYSTEM,
    compression_request,
    extract_facts,
    missing,
    restore_within,
    summary_entry_text,
)
from memory.sessions import END_COMPRESSION, SessionFenced, entry
from runs import shutdown
from runs.outbox import BATCH_CACHE_TTL_S, LeaseLost, Superseded
from runs.runtime import Runtime
from turn.registry import Context

log = logging.getLogger(__name__)
SUMMARY_IDS_KEPT = 2000  # message ids a summary remembers it covers (the newest, when a route talks for months)
TAIL_ENTRIES = 200  # assembly reads at most this many newest entries (+ the summary): cost never grows with history
PAGE = 16  # the first read; later reads double until the turns read fill the room
MIN_SUMMARY_TOKENS = 64
# Tokens a topic's request keeps free for tool results: a read_thread page's frame and at least the head of one unseen
# message, with the model's tool call and the result's framing (~300 measured). History that would leave less rotates.
READ_ROOM = 400


@dataclass(frozen=True)
class Prepared:
    session_id: str
    messages: list[dict[str, Any]]
    raw_estimate: int  # uncalibrated, for calibration against the usage the API reports
    cost: int  # calibrated, output reserve excluded


@dataclass(frozen=True)
class Loaded:
    summary: str
    turns: list[Entry]
    raw: list[str]  # the turns' log entries, verbatim (a rotation carries the newest into S2 as they are)
    complete: bool  # False when the log is longer than the tail read
    summary_ids: list[str] = field(default_factory=list)  # the messages the summary speaks for


def budget_of(rt: Runtime) -> bud.Budget:
    s = rt.settings
    return bud.Budget(s.context_budget_tokens, s.max_output_tokens, bud.factor(rt.state, rt.keys))


def load(r: redis.Redis, keys: Keys, rk: str, sid: str, b: bud.Budget | None = None, room: int = 0) -> Loaded:
    """The session's summary (its first entry, when it began with one) and its newest turns: pages read
    from the end until they fill `room` (by `b`), at most TAIL_ENTRIES, whatever the length of the log."""
    key = keys.session_log(rk, sid)
    pipe = r.pipeline(transaction=False)
    pipe.llen(key)
    pipe.lindex(key, 0)
    pipe.lrange(key, -PAGE, -1)
    length, first, page = pipe.execute()
    head = json.loads(first) if first else {}
    summary = head["text"] if head.get("kind") == "summary" else ""
    summary_ids = list(head.get("message_ids") or []) if summary else []
    if summary_ids and withdrawn.any_recalled(r, keys, rk, summary_ids):
        summary = withdrawn.SUMMARY_WITHDRAWN  # it may repeat a recalled message: none of it is shown again
    body_len = length - (1 if summary else 0)
    raw, parsed = _turns(page)
    used = sum(bud.entry_cost(b, d) for d in parsed) if b else 0
    read = len(page)
    while read < min(length, TAIL_ENTRIES) and (b is None or used <= room):
        n = min(read, TAIL_ENTRIES - read)  # doubling: few round trips, little read beyond the room
        more: list[str] = r.lrange(key, -(read + n), -(read + 1))  # type: ignore[assignment]
        if not more:
            break
        read += len(more)
        more_raw, dicts = _turns(more)
        used += sum(bud.entry_cost(b, d) for d in dicts) if b else 0
        raw, parsed = more_raw + raw, dicts + parsed
    withdrawn.apply_to_entries(r, keys, rk, parsed)  # recalled messages withdrawn, edits at their newest
    turns = [_entry(d) for d in parsed]
    return Loaded(summary, turns, raw, complete=len(raw) >= body_len, summary_ids=summary_ids)


def _entry(d: dict[str, Any]) -> Entry:
    """A log entry as history: its role and text, and an answer's tool rounds (as the requests carried them)."""
    e = Entry(role=d["role"], text=d["text"])
    if d.get("rounds"):
        e["rounds"] = list(d["rounds"])
    return e


def _turns(entries: list[str]) -> tuple[list[str], list[dict[str, Any]]]:
    """The turn entries (not the summary), verbatim and parsed."""
    pairs = [(e, json.loads(e)) for e in entries]
    kept = [(e, d) for e, d in pairs if d.get("kind") != "summary"]
    return [e for e, _ in kept], [d for _, d in kept]


@dataclass(frozen=True)
class Request:
    """A model request's parts besides the session's history: the system blocks, the tools, the batch's text (what
    the session log keeps), its images (labelled image blocks), the turn's context (after them, this request only:
    claude/cache.py) and the tools the turn may not use, with why."""

    system: Sequence[dict[str, Any]]
    tools: Sequence[dict[str, Any]] = ()
    text: str = ""
    images: Sequence[dict[str, Any]] = ()
    context: str = ""
    unavailable: Mapping[str, str] = field(default_factory=dict)


def prepare(turn: Context, request: Request) -> Prepared:
    """The request's messages within the budget for `turn.session_id`, after a rotation if the session no longer
    fits. The images follow the batch text in its user message; their cost is fixed. `turn.owner`: the run's
    execution id and generation, which fence the rotation's write (None: no rotation)."""
    rt, rk, sid = turn.rt, turn.rk, turn.session_id
    system, tools, images, batch_text = request.system, request.tools, request.images, request.text
    b = budget_of(rt)
    fixed = b.request_cost(system, [], tools) + bud.content_tokens(list(images))  # at their ceiling already
    fixed += b.cost(request.context) if request.context else 0  # read fresh for each request: never cut
    fixed += read_reserve(b, fixed, batch_text, tools)  # history gives way to the read's room, never the batch
    loaded = load(rt.state, rt.keys, rk, sid, b, b.input_room(fixed))
    fitted = bud.fit_session(b, fixed, loaded.summary, loaded.turns, batch_text)
    if fitted.dropped or not loaded.complete:
        whole = load(rt.state, rt.keys, rk, sid)  # every turn is compressed, not only those the room read
        new_sid = rotate(turn, whole, b, fixed, b.cost(fitted.batch))
        if new_sid:
            sid, loaded = new_sid, load(rt.state, rt.keys, rk, new_sid, b, b.input_room(fixed))
            fitted = bud.fit_session(b, fixed, loaded.summary, loaded.turns, batch_text)
    messages = session_messages(fitted.summary, fitted.turns, fitted.batch)
    messages[-1] = turn_message(messages[-1]["content"], images, request.context)
    return Prepared(sid, messages, bud.raw_request_tokens(system, messages, tools),
                    b.request_cost(system, messages, tools))


def turn_message(batch: str, images: Sequence[dict[str, Any]], context: str) -> dict[str, Any]:
    """The turn's user message: the batch first (the block the session log keeps: the next turn's request finds the
    same prefix up to it), then the images, then the context read fresh for this request only. Pure."""
    blocks = [{"type": "text", "text": batch}, *images]
    if context:
        blocks.append({"type": "text", "text": context})
    return {"role": "user", "content": blocks}


def read_reserve(b: bud.Budget, fixed: int, batch_text: str, tools: Sequence[dict[str, Any]]) -> int:
    """The tokens a request offering read_thread keeps free of history for the read (READ_ROOM, or what the batch
    leaves of it), so the read shows at least one unseen message whatever the session's length; 0 without it."""
    if not any(t.get("name") == "read_thread" for t in tools):
        return 0
    return min(READ_ROOM, max(0, b.input_room(fixed) - b.cost(batch_text)))


def observe(rt: Runtime, prepared: Prepared, c: Completion) -> None:
    """Calibrate the local estimate with the input tokens the API counted for this request."""
    actual = c.input_tokens + c.cache_read_tokens + c.cache_creation_tokens  # all three are the request's input
    if actual:
        bud.observe(rt.state, rt.keys, prepared.raw_estimate, actual)


def rotate(turn: Context, loaded: Loaded, b: bud.Budget, fixed: int, batch_cost: int) -> str | None:
    """End S1 (`turn.session_id`, `compression`) and start S2 with the summary and the newest turns; S2's id, or
    None when there is nothing to compress or no run identity (`turn.owner`) to fence the write with."""
    rt, rk, sid, owner = turn.rt, turn.rk, turn.session_id, turn.owner
    keep = bud.keep_after_rotation(b, fixed, batch_cost, loaded.turns)
    older = loaded.turns[: len(loaded.turns) - keep]
    if owner is None or not older:
        return None
    half = max(0, b.input_room(fixed) - batch_cost) // 2
    kept_cost = sum(bud.entry_cost(b, t) for t in loaded.turns[len(older):])
    room = max(MIN_SUMMARY_TOKENS, half // 2, half - kept_cost)  # the kept turns give way if need be
    summary = _summary(turn, loaded.summary, older, b, (room, 2 * half))
    exec_id, gen = owner
    # The messages the summary speaks for (the compressed turns and the summary before it): a recall of any of
    # them later withdraws the summary too (memory/withdrawn.py).
    covered = [*loaded.summary_ids,
               *(i for raw in loaded.raw[:len(older)] for i in json.loads(raw).get("message_ids") or [])]
    seed = [entry("user", summary, batch_id=f"compress:{sid}", kind="summary",
                  message_ids=list(dict.fromkeys(covered))[-SUMMARY_IDS_KEPT:])]
    try:
        new_sid = rt.sessions.start(rk, (exec_id, gen), expected=sid, end_reason=END_COMPRESSION,
                                    boundary=END_COMPRESSION, entries=[*seed, *loaded.raw[len(older):]])
    except SessionFenced as exc:
        if not rt.inbox.holds(rk, exec_id):
            raise LeaseLost(rk) from exc
        raise Superseded(rk) from exc
    rt.state.delete(_compress_key(rt, rk, sid, loaded.summary, older))  # done: S2 exists, no retry needs it
    log.info("session rotated", extra={"route_key": rk, "session_id": new_sid, "parent_id": sid,
                                       "compressed": len(older), "kept": keep})
    metrics.count(rt.state, rt.keys, "rotations", "compression")
    return new_sid


def _summary(turn: Context, earlier: str, older: Sequence[Entry], b: bud.Budget, rooms: tuple[int, int]) -> str:
    """The model's summary of `older` (cached per S1 and turns), with every dropped fact restored verbatim,
    as the text of the new session's first entry. `rooms`: (target, cap) in tokens: the model's text gives
    way to the restored facts, which may take the summary past its target, up to the cap (all the room the
    batch leaves; the carried-over turns then give way at assembly)."""
    room, _cap = rooms
    facts = extract_facts([Entry(role="user", text=earlier), *older] if earlier else older)
    model_text = _compress(turn, earlier, older, b, room)
    lost = missing(model_text, facts)
    # The model's text gets at most half the summary's room when facts must be restored next to it.
    body_room = room // 2 if lost else room
    body = b.fit_text(model_text, body_room) if body_room > MIN_SUMMARY_TOKENS else ""
    text = restore_within(body, facts, lambda t: bud_tokens(b, t), room - b.cost(summary_entry_text("")))
    if lost:
        log.info("summary completed", extra={"route_key": turn.rk, "session_id": turn.session_id,
                                             "restored": len(lost)})
    return summary_entry_text(text)


def bud_tokens(b: bud.Budget, text: str) -> int:
    """Calibrated tokens of a piece of text (no per-message overhead): additive over the summary's lines."""
    return b.scaled(estimate_tokens(text))


def _compress_key(rt: Runtime, rk: str, sid: str, earlier: str, older: Sequence[Entry]) -> str:
    digest = hashlib.sha256(json.dumps([earlier, list(older)], ensure_ascii=False).encode()).hexdigest()[:16]
    return rt.keys.answer(rk, f"compress:{sid}:{digest}")


def _compress(turn: Context, earlier: str, older: Sequence[Entry], b: bud.Budget, room: int) -> str:
    rt, rk = turn.rt, turn.rk
    key = _compress_key(rt, rk, turn.session_id, earlier, older)
    cached = rt.state.get(key)
    if cached:
        return str(json.loads(cached)["text"])
    system = [{"type": "text", "text": COMPRESSION_SYSTEM}]
    turns = list(older)
    messages = compression_request(turns, earlier)
    # The call itself keeps to the input budget, like a turn.
    while len(turns) > 1 and b.request_cost(system, messages) > b.total:
        turns.pop(0)  # the oldest go unread by the model; their facts are still restored verbatim
        messages = compression_request(turns, earlier)
    if b.request_cost(system, messages) > b.total:
        room_left = b.input_room(b.request_cost(system, []))
        messages = [{"role": "user", "content": b.fit_text(messages[0]["content"], room_left)}]
    with shutdown.interruptible():  # the summary's room is what it may take, whatever a chat answer's limit
        completion = rt.llm.complete(system, messages, max_tokens=max(rt.settings.max_output_tokens, room))
    c = completion
    metrics.count_tokens(rt.state, rt.keys, "compression", c)
    if actual := c.input_tokens + c.cache_read_tokens + c.cache_creation_tokens:  # all three are the input
        bud.observe(rt.state, rt.keys, bud.raw_request_tokens(system, messages), actual)
    if not turn.fence():
        raise LeaseLost(rk)
    rt.state.set(key, json.dumps(asdict(completion), ensure_ascii=False), nx=True, ex=BATCH_CACHE_TTL_S)
    return str(json.loads(rt.state.get(key) or "{}").get("text", completion.text))
