"""One turn for one batch: history + attributed batch → Claude → fenced reply in the right place."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

from bot import metrics
from bot.envelope import Inbound
from bot.llm import Completion
from bot.texts import say
from jobs import shutdown
from jobs.outbox import BATCH_CACHE_TTL_S, LeaseLost
from jobs.runtime import Runtime
from memory.context import Entry, assemble, format_batch, system_blocks


@dataclass(frozen=True)
class TurnResult:
    reply_ids: list[str]
    entries: list[str]  # transcript entries, committed atomically with the batch
    completion: Completion


def load_history(rt: Runtime, route_key: str) -> list[Entry]:
    raw = rt.state.lrange(rt.keys.transcript(route_key), 0, -1)
    return [Entry(role=e["role"], text=e["text"]) for e in map(json.loads, raw)]


def _entry(role: str, text: str, batch_id: str) -> str:
    return json.dumps({"role": role, "text": text, "batch_id": batch_id, "at": round(time.time(), 3)},
                      ensure_ascii=False)


def _answer_for(rt: Runtime, route_key: str, kind: str, batch_id: str, batch_text: str,
                fence: Callable[[], bool]) -> Completion:
    """The model's answer for this batch. The first answer stored wins: a run that lost its lease while
    the model was thinking, and any later run of the batch, send that same text, never a second one."""
    key = rt.keys.answer(route_key, batch_id)
    cached = rt.state.get(key)
    if cached:
        return Completion(**json.loads(cached))
    s = rt.settings
    messages = assemble(load_history(rt, route_key), batch_text, s.context_budget_tokens, s.max_output_tokens)
    with shutdown.interruptible():
        completion = rt.llm.complete(system_blocks(), messages)
    _count_usage(rt, kind, completion)
    if not fence():
        raise LeaseLost(route_key)
    rt.state.set(key, json.dumps(asdict(completion), ensure_ascii=False), nx=True, ex=BATCH_CACHE_TTL_S)
    return Completion(**json.loads(rt.state.get(key) or "{}"))


def _count_usage(rt: Runtime, kind: str, c: Completion) -> None:
    for kind_of_token, n in (("input", c.input_tokens), ("output", c.output_tokens),
                             ("cache_read", c.cache_read_tokens)):
        if n:
            metrics.count(rt.state, rt.keys, "tokens", kind, kind_of_token, n=n)


def run_turn(rt: Runtime, route_key: str, kind: str, batch: Sequence[Inbound], batch_id: str,
             fence: Callable[[], bool]) -> TurnResult:
    batch_text = format_batch(batch)
    completion = _answer_for(rt, route_key, kind, batch_id, batch_text, fence)
    answer = completion.text or say("empty_answer", batch[-1].text)
    # Reply to the batch's last message: in a topic the reply stays inside that thread.
    last = batch[-1]
    ids = rt.outbox.reply(route_key, batch_id, last.message_id, answer, chat_id=last.chat_id,
                          in_thread=kind == "topic", fence=fence)
    entries = [_entry("user", batch_text, batch_id), _entry("assistant", answer, batch_id)]
    return TurnResult(reply_ids=ids, entries=entries, completion=completion)
