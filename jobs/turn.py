"""One turn for one batch: history + attributed batch → Claude → fenced reply in the right place."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from bot.envelope import Inbound
from bot.llm import Completion
from bot.texts import say
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


def run_turn(rt: Runtime, route_key: str, kind: str, batch: Sequence[Inbound], batch_id: str,
             fence: Callable[[], bool]) -> TurnResult:
    s = rt.settings
    batch_text = format_batch(batch)
    messages = assemble(load_history(rt, route_key), batch_text, s.context_budget_tokens, s.max_output_tokens)
    completion = rt.llm.complete(system_blocks(), messages)
    answer = completion.text or say("empty_answer", batch[-1].text)
    # Reply to the batch's last message: in a topic the reply stays inside that thread.
    ids = rt.outbox.reply(route_key, batch_id, batch[-1].message_id, answer,
                          in_thread=kind == "topic", fence=fence)
    entries = [_entry("user", batch_text, batch_id), _entry("assistant", answer, batch_id)]
    return TurnResult(reply_ids=ids, entries=entries, completion=completion)
