"""One turn for one batch: history + attributed batch → Claude → fenced reply in the right place."""

from __future__ import annotations

import html
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from datetime import datetime
from typing import Any

from claude.client import Completion
from core import metrics
from core.inbound import Inbound
from core.texts import say
from documents.context import Materials
from items import approvals
from items import context as item_context
from materials import evidence
from memory import budget as bud
from memory import notes, related, withdrawn
from memory.prompt import Entry, estimate_tokens, format_batch, system_blocks
from memory.sessions import entry
from runs import shutdown
from runs.outbox import BATCH_CACHE_TTL_S, LeaseLost
from runs.runtime import Runtime
from timers import tool
from timers.instant import now_line
from timers.tool import FollowupContext
from turn import progress, recall, rotation
from turn.batch_content import batch_content
from turn.session import Superseded
from turn.stream import Stream


@dataclass(frozen=True)
class TurnResult:
    reply_ids: list[str]
    entries: list[str]  # transcript entries, committed atomically with the batch
    completion: Completion


def load_history(rt: Runtime, route_key: str, session_id: str) -> list[Entry]:
    """The session's transcript: what this route said and was told since the session began."""
    return [Entry(role=e["role"], text=e["text"]) for e in rt.sessions.log(route_key, session_id)]


def _answer_for(rt: Runtime, route_key: str, kind: str, batch_id: str, batch_text: str,
                fence: Callable[[], bool], session_id: str, images: Sequence[dict[str, Any]] = (),
                batch: Sequence[Inbound] = (), owner: tuple[str, int] | None = None,
                on_text: Callable[[str], None] | None = None) -> Completion:
    """The model's answer for this batch. The first answer stored wins: a run that lost its lease while
    the model was thinking, and any later run of the batch, send that same text, never a second one."""
    key = rt.keys.answer(route_key, batch_id)
    cached = rt.state.get(key)
    if cached:
        return Completion(**json.loads(cached))
    items = item_context.build(rt, kind, batch)  # read fresh: never part of the session log
    previous = recall.last_record(rt, route_key, session_id) or {}  # where the last turn's reading stopped
    materials = evidence.materials_for(rt, route_key, session_id, batch, batch_text, items,
                                       previous.get("documents") or [])  # request-only too
    tools = recall.tools_for(route_key) + ([approvals.PROPOSE] if items.item and items.item.record_id else [])
    scope = _note_scope(rt, batch)
    system = _system(rt, scope)
    prepared = rotation.prepare(rt, route_key, session_id, items.block + materials.block + batch_text, fence, system,
                                tools, images, owner)  # may rotate
    followups = FollowupContext(route_key, batch_id, list(batch), owner[1] if owner else 0,
                                item_id=items.item.item_id if items.item else "") if batch else None
    with shutdown.interruptible():  # the model may call read-only recall tools (turn/recall.py)
        talk = recall.converse(rt, route_key, prepared.session_id, system, prepared.messages, tools,
                               notes_to=scope, materials=materials, previous=previous, on_text=on_text,
                               followups=followups)
    completion = _with_notes(talk.completion, items, materials, tool.footer(followups, talk.completion.text))
    for item in items.used:
        rt.items.touch(item.item_id, route_key, prepared.session_id)
    rotation.observe(rt, prepared, talk.first)
    _count_usage(rt, kind, completion)
    if not fence():
        raise LeaseLost(route_key)
    rt.state.set(key, json.dumps(asdict(completion), ensure_ascii=False), nx=True, ex=BATCH_CACHE_TTL_S)
    evidence.remember(rt, route_key, materials)  # after the answer is kept: a rerun before it still says "updated"
    return Completion(**json.loads(rt.state.get(key) or "{}"))


def _with_notes(c: Completion, items: item_context.ItemContext, materials: Materials,
                set_line: str = "") -> Completion:
    """The reply names its evidence — the documents (with revisions) and the first-answer version it relied on,
    or that the analysis is still running, and the follow-ups it set — and starts with a refusal when the batch
    referenced an item or a document its sender may not see, or a how-to when a document is not shared with the
    app."""
    docs = materials.evidence()
    footer = items.footer
    if docs:
        parts = [*docs, *([items.evidence] if items.evidence else [])]
        footer = say("evidence", c.text, parts="；".join(parts))
        if items.footer and not items.evidence:  # the analysis is pending or failed: said as well
            footer += "\n" + items.footer
    footer = "\n".join(p for p in (footer, set_line) if p)  # the follow-ups this reply set, with their times
    prefix = "\n".join(p for p in (items.prefix, *materials.notes) if p)
    if not (footer or prefix) or not c.text:
        return c
    text = "\n\n".join(p for p in (prefix, c.text, footer) if p)
    return replace(c, text=text)


def _system(rt: Runtime, scope: tuple[str, str] | None) -> list[dict[str, Any]]:
    """Rules, persona and team notes (cached prefix), then the shared notes of the batch's memory scope."""
    saved = notes.notes_block(notes.Notes(rt.state, rt.keys).newest(scope[0]), estimate_tokens) if scope else ""
    return system_blocks(rt.persona, rt.team_notes, saved)


def _note_scope(rt: Runtime, batch: Sequence[Inbound]) -> tuple[str, str] | None:
    """(memory scope id, the sender saving) for this batch: MEMORY_SCOPE decides who shares notes."""
    if not batch:
        return None
    last = batch[-1]
    return notes.scope_id(rt.settings.memory_scope, chat_id=last.chat_id, sender_id=last.sender_id), last.sender_id


def _count_usage(rt: Runtime, kind: str, c: Completion) -> None:
    for kind_of_token, n in (("input", c.input_tokens), ("output", c.output_tokens),
                             ("cache_read", c.cache_read_tokens)):
        if n:
            metrics.count(rt.state, rt.keys, "tokens", kind, kind_of_token, n=n)


def _related(rt: Runtime, kind: str, batch: Sequence[Inbound]) -> str:
    """Recent unaddressed messages of a normal group (memory/related.py), up to the batch's last message."""
    if kind != "group":
        return ""
    last = batch[-1]
    before = int(last.create_time) / 1000 if last.create_time and last.create_time.isdigit() else None
    items = withdrawn.apply_to_related(rt.state, rt.keys, last.chat_id,
                                       related.recent(rt.state, rt.keys, last.chat_id, before=before))
    return related.block(items, estimate_tokens)


def _people(rt: Runtime, batch: Sequence[Inbound]) -> dict[str, str]:
    """Who an @mention in the answer may reach: the batch's senders and the people they mentioned (not the bot)."""
    people = {m.sender_open_id: "" for m in batch if m.sender_open_id}
    people.update({x.open_id: x.name or "" for m in batch for x in m.mentions if x.open_id})
    people.pop(str(rt.state.get(rt.keys.bot_open_id) or ""), None)
    return people


BATCH_SHARE = 0.6  # of the input room a batch may take; the rest holds the summary, history and tool results


def batch_room(rt: Runtime, route_key: str) -> tuple[bud.Budget, int]:
    """The budget at factor 1 (so every rerun of a batch sizes it alike) and the tokens a batch may take."""
    b = bud.Budget(rt.settings.context_budget_tokens, rt.settings.max_output_tokens)
    fixed = b.request_cost(system_blocks(rt.persona, rt.team_notes), [], recall.tools_for(route_key))
    return b, int(b.input_room(fixed) * BATCH_SHARE)


def batch_size(rt: Runtime, route_key: str, segment: Sequence[Inbound | None]) -> int:
    """How many of a turn segment's messages this turn answers: the leading ones that fit; the rest stay
    pending in the route's batch for the next turn, never cut off unseen (issue 14 A11)."""
    b, room = batch_room(rt, route_key)
    return b.leading_that_fit([format_batch([m]) if m else "" for m in segment], room)


def _spilled(rt: Runtime, route_key: str, batch: Sequence[Inbound], bodies: list[str | None]) -> list[str | None]:
    """A lone message too long for the request: its head, and a handle read_message reads the rest with."""
    if len(batch) != 1 or bodies[:1] != [None]:
        return bodies
    b, room = batch_room(rt, route_key)
    m = batch[0]
    if b.cost(format_batch([m])) <= room:
        return bodies

    def note(cut: int) -> str:
        return (f'\n<spilled_rest of="{html.escape(m.message_id)}" offset="{cut}" chars="{len(m.text) - cut}"/> '
                f'Only the beginning of this message is shown: read the rest with read_message '
                f'(message_id="{html.escape(m.message_id)}", offset={cut}).')

    def tail(cut: int) -> str:  # the note, plus what escaping the head adds to it
        return note(cut) + "x" * (len(html.escape(m.text[:cut], quote=False)) - cut)

    cut = b.prefix_that_fits(m.text, room - 60, tail)
    return [html.escape(m.text[:cut], quote=False) + note(cut)]


def run_turn(rt: Runtime, route_key: str, kind: str, batch: Sequence[Inbound], batch_id: str,
             fence: Callable[[], bool], session_id: str, owner: tuple[str, int] | None = None) -> TurnResult:
    """`owner`: the run's execution id and generation (they fence a rotation's write)."""
    batch = withdrawn.apply_to_batch(rt.state, rt.keys, batch)  # recalled before we got to them: not answered
    if not batch:
        return TurnResult(reply_ids=[], entries=[], completion=Completion(text="", input_tokens=0, output_tokens=0,
                                                                          cache_read_tokens=0, stop_reason=None))
    # Reply to the batch's last message: in a topic the reply stays inside that thread.
    last = batch[-1]
    shown = progress.start(rt, route_key, batch_id, last, fence)  # a reaction while we work (best effort)
    content = batch_content(rt, batch)  # forwarded bundles, images, files: fetched by the worker
    batch_text = format_batch(batch, _spilled(rt, route_key, batch, content.bodies))
    # Related discussion goes into this request only; the session log keeps just the batch.
    now = datetime.fromtimestamp(rt.clock.now(), rt.settings.tz)  # the model resolves "3点" against it
    request_text = _related(rt, kind, batch) + batch_text + "\n" + now_line(now)
    shown.head_start()
    people = _people(rt, batch)
    card = Stream(rt, route_key, batch_id, last.message_id, chat_id=last.chat_id, in_thread=kind == "topic",
                  fence=fence, people=people)
    try:
        completion = _answer_for(rt, route_key, kind, batch_id, request_text, fence, session_id, content.images,
                                 batch, owner, on_text=card.feed if card.on else None)
    except Superseded:  # a user reset overtook the turn: its answer never comes; the lease is still this run's
        card.abandon(say("stream_abandoned", last.text), fence=lambda: True)
        tool.void_turn(rt, route_key, batch_id)  # nobody was told of its follow-ups: they do not stand
        raise
    answer = completion.text or say("empty_answer", batch[-1].text)
    # The log keeps `answer` (the Markdown source); only the posted messages are rendered.
    try:
        reply_ids = card.finish(answer) or rt.outbox.reply(
            route_key, batch_id, last.message_id, answer, chat_id=last.chat_id, in_thread=kind == "topic",
            fence=fence, people=people, uuid_key=card.reply_key)
    except Superseded:
        tool.void_turn(rt, route_key, batch_id)
        raise
    shown.done()
    proposals = (completion.recall or {}).get("proposals") or []
    item = item_context.own_item(rt, kind, batch) if proposals else None
    if item and item.record_id:
        approvals.post(rt, route_key, item, proposals, batch_id, last, fence)
    ids, senders = [m.message_id for m in batch], sorted({m.sender_id for m in batch})
    entries = [entry("user", batch_text, batch_id=batch_id, message_ids=ids, senders=senders,
                     tokens=estimate_tokens(batch_text)),
               recall.with_record(entry("assistant", answer, batch_id=batch_id, message_ids=reply_ids,
                                        tokens=estimate_tokens(answer)), completion.recall)]
    return TurnResult(reply_ids=reply_ids, entries=entries, completion=completion)
