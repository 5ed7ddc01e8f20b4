"""A batch's failures: retry later, pause on credentials, or give up — split the batch so only a bad message is
dead-lettered, bury it, tell each sender once.

A collaborator of jobs/drain.py's Drain: the drain hands it the run (`Run`: its identity, its fence and the batch
loop's steps) and asks it to attempt a batch's work, to count a start, or to give a batch up.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from core import metrics
from core.errors import AdapterError, Paused, Permanent, Retryable
from core.inbound import Inbound
from core.texts import say
from jobs.batches import Parsed, ids, last_per_sender, parse
from runs import shutdown
from runs.alerts import alert
from runs.inbox import Commit
from runs.outbox import Destination, LeaseLost, Superseded
from runs.runtime import Runtime
from turn import progress
from turn.registry import app_of
from turn.stream import Stream

log = logging.getLogger("jobs.drain")
CRASH_LIMIT = 10  # runs of one batch that died without an outcome before the batch gives up


T = TypeVar("T")


@dataclass(frozen=True)
class Outcome:
    """How a run ends (or goes on, None) when a batch's attempt did not produce its result."""

    value: str | None


class Run(Protocol):
    """What the drain's run offers its failure handling."""

    rt: Runtime
    rk: str
    kind: str
    exec_id: str
    log: dict[str, Any]

    def fence(self) -> bool: ...

    def take(self) -> list[str] | None: ...

    def process(self, raw: list[str]) -> str | None: ...

    def commit(self, c: Commit) -> None: ...

    def hand_over(self, outcome: str, delay_s: float = 0.0) -> str: ...

    def consumed_unanswered(self, n: int) -> None: ...

    def buried(self, message: Inbound, batch_id: str, reason: str) -> bool:
        """Something of its own to do for a buried message (True: done, no dead-letter notice to its sender)."""
        ...


class GiveUp:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.rt, self.rk, self.kind, self.exec_id, self.log = run.rt, run.rk, run.kind, run.exec_id, run.log

    def fence(self) -> bool:
        return self.run.fence()

    def attempt(self, raw: list[str], batch_id: str, extra: dict[str, Any], work: Callable[[], T]) -> T | Outcome:
        """`work`'s result, or the Outcome of its failure: a user reset overtook it (consumed unanswered), the
        lease was lost (re-raised), credentials failed (pause), permanent (give up), else retry later."""
        try:
            return work()
        except Superseded:  # nothing posted from here on, nothing written
            self.rt.inbox.bump(self.rk, batch_id, "s", -1)
            log.info("overtaken by a user reset", extra=extra)
            self.run.commit(Commit(n=len(raw), batch_id=batch_id))
            self.run.consumed_unanswered(len(raw))
            return Outcome(None)
        except (LeaseLost, shutdown.ShutdownRequested):
            self.rt.inbox.bump(self.rk, batch_id, "s", -1)
            raise
        except Paused as exc:
            self.rt.inbox.bump(self.rk, batch_id, "s", -1)
            return Outcome(self._pause(exc, extra))
        except Permanent as exc:
            count_error(self.rt, exc)
            log.error("failed permanently", extra={**extra, "error": str(exc)})
            return Outcome(self.give_up(raw, batch_id, str(exc)))
        except Exception as exc:  # Retryable, and anything unexpected: both deserve another try
            return Outcome(self._failed(raw, batch_id, exc, extra))

    def give_up(self, raw: list[str], batch_id: str, reason: str) -> str | None:
        """Split a batch of several messages (so only a bad one is buried), or bury it. A batch whose answer is
        stored is never split: its answer may be partly in the chat, and asking again would say it twice."""
        split = len(raw) > 1 and not self._answer_stored(batch_id)
        people = [m for m in parse(raw).readable if _from_a_person(self.rt, m)]  # a wake-up has none
        if self.kind not in app_of(self.rt).route_work and people:  # the reaction goes; a buried one: CrossMark
            progress.gave_up(self.rt, self.rk, batch_id, people, self.fence, buried=not split)
            self._close_card(raw, batch_id)
        if split:
            return self._split(raw, batch_id)
        self._bury(raw, batch_id, reason)
        return None

    def _answer_stored(self, batch_id: str) -> bool:
        return bool(self.rt.state.exists(self.rt.keys.answer(self.rk, batch_id)))

    def _split(self, raw: list[str], batch_id: str) -> str | None:
        """Try each message of the batch on its own, in order: only a bad one gets dead-lettered."""
        log.warning("splitting a failed batch", extra={**self.log, "batch": batch_id, "message_id": ids(raw)})
        self.rt.inbox.forget(self.rk, batch_id)
        for _ in raw:
            remaining = self.run.take()  # re-registers the deadline; proc shrinks by one per commit
            if remaining is None:
                return "lost-lease"
            if not remaining:
                return None
            outcome = self.run.process(remaining[:1])
            if outcome:
                return outcome
        return None

    def _bury(self, raw: list[str], batch_id: str, reason: str) -> None:
        """Dead-letter the batch (for admin replay) and tell its senders once."""
        parsed = parse(raw)
        for message in last_per_sender(parsed.readable):
            self._on_bury(message, batch_id, reason)
        record = {"route_key": self.rk, "batch_id": batch_id, "events": raw, "reason": reason,
                  "message_ids": [m.message_id for m in parsed.readable],
                  "event_ids": [m.event_id for m in parsed.readable], "at": round(time.time(), 3),
                  "attempts": max(1, int(self.rt.state.hget(self.rt.keys.fails(self.rk), f"f:{batch_id}") or 0))}
        dead_id = f"{batch_id}-{os.urandom(3).hex()}"
        self.run.commit(Commit(n=len(raw), batch_id=batch_id, dead=[(dead_id, json.dumps({"id": dead_id, **record},
                                                                                      ensure_ascii=False))]))
        log.error("batch dead-lettered", extra={**self.log, "batch": batch_id, "reason": reason,
                                                "message_id": record["message_ids"],
                                                "event_id": record["event_ids"]})
        alert(self.rt, f"⚠️ 有消息处理失败，已进入死信（{dead_id}）：{reason[:200]}")

    def _on_bury(self, message: Inbound, batch_id: str, reason: str) -> None:
        if not self.run.buried(message, batch_id, reason):
            self._notify(message, batch_id)

    def _close_card(self, raw: list[str], batch_id: str) -> None:
        """A streaming card the batch's runs left half written says it will not be finished."""
        readable = parse(raw).readable
        if not readable:
            return
        last = readable[-1]
        card = Stream(self.rt, self._to(last), batch_id, people={})
        card.abandon(say("stream_abandoned", last.text))

    def _to(self, message: Inbound) -> Destination:
        """A reply under `message`, in its thread on a topic route, fenced by the run."""
        return Destination(self.rk, message.chat_id, message.message_id, in_thread=self.kind == "topic",
                           fence=self.fence)

    def _notify(self, message: Inbound, batch_id: str) -> None:
        try:
            self.rt.outbox.reply(self._to(message), batch_id, say("dead_letter", message.text),
                                 uuid_key=f"dead-{batch_id}-{message.message_id}")
        except LeaseLost:
            raise
        except Exception as exc:  # the notice is best effort; the batch is kept either way
            log.warning("dead-letter notice failed", extra={**self.log, "message_id": message.message_id,
                                                            "error": f"{exc.__class__.__name__}: {exc}"})

    def dead(self, parsed: Parsed, batch_id: str) -> list[tuple[str, str]]:
        """Dead-letter records for entries that are not readable events (kept verbatim for inspection)."""
        out = []
        for item in parsed.unreadable:
            dead_id = f"{batch_id}-{os.urandom(3).hex()}"
            record = {"id": dead_id, "route_key": self.rk, "batch_id": batch_id, "events": [item],
                      "reason": "unreadable inbox entry", "message_ids": [], "event_ids": [],
                      "at": round(time.time(), 3)}
            out.append((dead_id, json.dumps(record, ensure_ascii=False)))
            log.error("unreadable inbox entry dead-lettered", extra={**self.log, "batch": batch_id})
        return out

    def worn_out(self, batch_id: str, starts: int) -> str | None:
        """Why the batch gives up without a turn: its runs keep dying, or the watchdog broke them too often.
        Never when its answer is stored: then the turn only sends what is missing and commits."""
        if self._answer_stored(batch_id):
            return None
        fails = int(self.rt.state.hget(self.rt.keys.fails(self.rk), f"f:{batch_id}") or 0)
        if fails >= self.rt.settings.dead_letter_after:
            return f"failed {fails} times (runs broken by the watchdog)"
        if starts > CRASH_LIMIT:
            return f"its runs died {starts - 1} times"
        return None

    def _failed(self, raw: list[str], batch_id: str, exc: Exception, extra: dict[str, Any]) -> str | None:
        count_error(self.rt, exc)
        fails = self.rt.inbox.bump(self.rk, batch_id, "f")
        self.rt.inbox.bump(self.rk, batch_id, "s", -1)
        error = f"{exc.__class__.__name__}: {exc}"
        if fails >= self.rt.settings.dead_letter_after:
            log.error("turn failed, giving up", extra={**extra, "attempt": fails, "error": error})
            return self.give_up(raw, batch_id, f"failed {fails} times; last: {error}")
        delays = self.rt.settings.retry_delays
        delay = float(delays[min(fails, len(delays)) - 1])
        if isinstance(exc, Retryable) and exc.retry_after:
            delay = max(delay, exc.retry_after)
        log.warning("turn failed, will retry", extra={**extra, "attempt": fails, "error": error,
                                                      "duration_ms": int(delay * 1000)})
        source, code = (exc.source, exc.code) if isinstance(exc, AdapterError) else ("internal", "error")
        metrics.count(self.rt.state, self.rt.keys, "retries", source or "internal", code or "error")
        return self.run.hand_over("retry-later", delay_s=delay)

    def _pause(self, exc: Paused, extra: dict[str, Any]) -> str:
        component = exc.source or "model"
        reason = json.dumps({"reason": str(exc), "code": exc.code, "since": round(time.time(), 3)})
        if self.rt.state.hsetnx(self.rt.keys.paused, component, reason):
            log.error("work paused: an operator must fix a credential or permission",
                      extra={**extra, "reason": component, "error": str(exc)})
            metrics.count(self.rt.state, self.rt.keys, "pauses", component)
            alert(self.rt, f"⚠️ 暂停处理：{component} 凭证或权限错误（{exc}）。消息已保留，修复后会自动继续。")
        return "paused" if self.rt.inbox.release(self.rk, self.exec_id) else "lost-lease"


def _from_a_person(rt: Runtime, m: Inbound) -> bool:
    event = app_of(rt).events.get(m.message_type)
    return event is None or event.tell_sender


def count_error(rt: Runtime, exc: Exception) -> None:
    if isinstance(exc, AdapterError):
        metrics.count(rt.state, rt.keys, "errors", exc.source or "internal", exc.code or "error")
