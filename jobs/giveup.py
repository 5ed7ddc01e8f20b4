"""Giving up on a batch: split it so only a bad message is dead-lettered, bury it, tell each sender once.

A mixin of jobs/drain.py's Drain, which provides the run's identity, its fence and the batch loop.
"""

from __future__ import annotations

import json
import logging
import os
import time
from typing import Any

from bot.envelope import Inbound
from bot.texts import say
from jobs.alerts import alert
from jobs.batches import Parsed, ids, last_per_sender, parse
from jobs.inbox import Commit
from jobs.outbox import LeaseLost
from jobs.runtime import Runtime

log = logging.getLogger("jobs.drain")


class GiveUp:
    rt: Runtime
    rk: str
    kind: str
    log: dict[str, Any]

    def fence(self) -> bool:
        raise NotImplementedError

    def _take(self) -> list[str] | None:
        raise NotImplementedError

    def _process(self, raw: list[str]) -> str | None:
        raise NotImplementedError

    def _commit(self, c: Commit) -> None:
        raise NotImplementedError

    def _give_up(self, raw: list[str], batch_id: str, reason: str) -> str | None:
        if len(raw) > 1:
            return self._split(raw, batch_id)
        self._bury(raw, batch_id, reason)
        return None

    def _split(self, raw: list[str], batch_id: str) -> str | None:
        """Try each message of the batch on its own, in order: only a bad one gets dead-lettered."""
        log.warning("splitting a failed batch", extra={**self.log, "batch": batch_id, "message_id": ids(raw)})
        self.rt.inbox.forget(self.rk, batch_id)
        for _ in raw:
            remaining = self._take()  # re-registers the deadline; proc shrinks by one per commit
            if remaining is None:
                return "lost-lease"
            if not remaining:
                return None
            outcome = self._process(remaining[:1])
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
                  "event_ids": [m.event_id for m in parsed.readable], "at": round(time.time(), 3)}
        dead_id = f"{batch_id}-{os.urandom(3).hex()}"
        self._commit(Commit(n=len(raw), batch_id=batch_id, dead=[(dead_id, json.dumps({"id": dead_id, **record},
                                                                                      ensure_ascii=False))]))
        log.error("batch dead-lettered", extra={**self.log, "batch": batch_id, "reason": reason,
                                                "message_id": record["message_ids"],
                                                "event_id": record["event_ids"]})
        alert(self.rt, f"⚠️ 有消息处理失败，已进入死信（{dead_id}）：{reason[:200]}")

    def _on_bury(self, message: Inbound, batch_id: str, reason: str) -> None:
        self._notify(message, batch_id)

    def _notify(self, message: Inbound, batch_id: str) -> None:
        try:
            self.rt.outbox.reply(self.rk, batch_id, message.message_id, say("dead_letter", message.text),
                                 chat_id=message.chat_id, in_thread=self.kind == "topic", fence=self.fence,
                                 uuid_key=f"dead-{batch_id}-{message.message_id}")
        except LeaseLost:
            raise
        except Exception as exc:  # the notice is best effort; the batch is kept either way
            log.warning("dead-letter notice failed", extra={**self.log, "message_id": message.message_id,
                                                            "error": f"{exc.__class__.__name__}: {exc}"})

    def _dead(self, parsed: Parsed, batch_id: str) -> list[tuple[str, str]]:
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
