"""One turn for one batch: the attributed batch and the session → the model's answer (turn/ask.py) → one fenced
reply in the right place, with progress shown and the answer growing in a card while it is written."""

from __future__ import annotations

from dataclasses import dataclass, replace

from claude.client import Completion
from claude.prompt import format_batch
from core.texts import say
from memory import withdrawn
from runs.outbox import Superseded
from turn import ask, progress, request
from turn.batch_content import batch_content
from turn.quotes import in_history, quote_elements, quoted
from turn.registry import Context, app_of
from turn.stream import Recalled, Stream

NOTHING = Completion(text="", input_tokens=0, output_tokens=0, cache_read_tokens=0, stop_reason=None)


@dataclass(frozen=True)
class TurnResult:
    reply_ids: list[str]
    entries: list[str]  # transcript entries, committed atomically with the batch
    completion: Completion


def run_turn(ctx: Context) -> TurnResult:
    """One turn for `ctx.batch` in `ctx.session_id` (`ctx.owner`: the run's execution id and generation, which fence
    a rotation's write)."""
    rt = ctx.rt
    batch = withdrawn.apply_to_batch(rt.state, rt.keys, ctx.batch)  # recalled before we got to them: not answered
    if not batch:
        return TurnResult(reply_ids=[], entries=[], completion=NOTHING)
    # Reply to the batch's last message: in a topic the reply stays inside that thread.
    last = batch[-1]
    shown = progress.start(rt, ctx.rk, ctx.batch_id, last, ctx.fence)  # a reaction while we work (best effort)
    content = batch_content(rt, batch)  # forwarded bundles, images, files: fetched by the worker
    people = request.people(rt, batch)  # who an @mention may reach, with their display names
    found = quoted(rt, ctx.rk, batch)
    names = {**request.names_of(rt, [q["sender"] for q in found.values()]), **{k: v for k, v in people.items() if v}}
    batch_text = format_batch(batch, request.spilled(rt, ctx.rk, batch, content.bodies), names=names,
                              quotes=quote_elements(batch, found, names, rt.settings.tz,
                                                    in_history(rt, ctx.rk, ctx.session_id) if found else set()),
                              tz=rt.settings.tz)
    # Related discussion goes into this request's context only; the session log keeps just the batch.
    turn = replace(ctx, batch=tuple(batch), batch_text=batch_text,
                   text=request.related_discussion(rt, ctx.kind, batch) + batch_text)
    shown.head_start()
    card = Stream(rt, turn.destination, turn.batch_id, people)
    ids = [m.message_id for m in batch]
    card.recalled = lambda: withdrawn.all_recalled(rt.state, rt.keys, last.chat_id, ids)
    try:
        completion = ask.answer_for(turn, content.images, on_text=card.feed if card.on else None)
    except Recalled:
        return recalled(turn, card, shown)
    except Superseded:  # a user reset overtook the turn: its answer never comes; the lease is still this run's
        card.abandon(say("stream_abandoned", last.text), fence=lambda: True)
        superseded(turn)
        raise
    answer = completion.text or say("empty_answer", last.text)
    # The log keeps `answer` (the Markdown source); only the posted messages are rendered.
    try:
        reply_ids = card.finish(answer) or rt.outbox.reply(turn.destination, turn.batch_id, answer, people=people,
                                                           uuid_key=card.reply_key)
    except Recalled:
        return recalled(turn, card, shown)
    except Superseded:
        superseded(turn)
        raise
    shown.done()
    for f in app_of(rt).features:
        if f.replied is not None:
            f.replied(turn, completion)
    return TurnResult(reply_ids, ask.log_entries(turn, batch_text, answer, reply_ids, completion), completion)


def recalled(turn: Context, card: Stream, shown: progress.Progress) -> TurnResult:
    """The question was recalled while its answer streamed: close the card as a reset does, answer nothing."""
    card.abandon(say("stream_abandoned", turn.batch[-1].text))
    superseded(turn)
    shown.done()
    return TurnResult(reply_ids=[], entries=[], completion=NOTHING)


def superseded(turn: Context) -> None:
    """A reset overtook the turn: it never answers, so what its features set on its behalf does not stand."""
    for f in app_of(turn.rt).features:
        if f.superseded is not None:
            f.superseded(turn)
