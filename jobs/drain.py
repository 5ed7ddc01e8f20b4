"""The drain job: own the route's lease, run one turn per batch, commit, release without lost wake-ups."""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from typing import Any

from pydantic import BaseModel, ValidationError

from bot.envelope import Inbound
from bot.errors import Permanent
from bot.texts import say
from jobs.inbox import KICK_TTL_MS, new_token
from jobs.outbox import LeaseLost
from jobs.runtime import Runtime, current
from jobs.turn import run_turn
from routing.keys import kind_of

log = logging.getLogger(__name__)
MAX_BATCHES_PER_RUN = 5  # then hand the route over, so one chatty route cannot hog a worker


class DrainPayload(BaseModel):
    route_key: str
    kick_token: str


class LeaseKeeper(threading.Thread):
    """Renews the lease every third of its TTL while the run works."""

    def __init__(self, rt: Runtime, route_key: str, exec_id: str) -> None:
        super().__init__(daemon=True)
        self.rt, self.rk, self.exec_id = rt, route_key, exec_id
        self.stopped = threading.Event()

    def run(self) -> None:
        interval = self.rt.settings.run_lease_seconds / 3
        while not self.stopped.wait(interval):
            try:
                if not self.rt.inbox.renew(self.rk, self.exec_id):
                    return
            except Exception:  # a Redis blip: the next tick tries again; fencing covers the rest
                log.warning("lease renew failed", extra={"route_key": self.rk, "exec_id": self.exec_id})


def drain(payload: dict[str, Any]) -> str:
    job = DrainPayload.model_validate(payload)
    return Drain(current(), job.route_key).run(job.kick_token)


def batch_id_of(raw: list[str]) -> str:
    return hashlib.sha256("\x1f".join(raw).encode("utf-8")).hexdigest()[:24]


class Drain:
    def __init__(self, rt: Runtime, route_key: str) -> None:
        self.rt, self.rk = rt, route_key
        self.exec_id = uuid.uuid4().hex  # per execution: RQ may re-run a job while an orphan still runs
        self.kind = kind_of(route_key)

    def fence(self) -> bool:
        return self.rt.inbox.holds(self.rk, self.exec_id)

    def run(self, kick_token: str) -> str:
        if not self.rt.inbox.acquire(self.rk, kick_token, self.exec_id):
            return "not-owner"
        keeper = LeaseKeeper(self.rt, self.rk, self.exec_id)
        keeper.start()
        try:
            return self._loop(kick_token)
        except LeaseLost:
            return "lost-lease"
        except Exception:
            self._handover_for_retry(kick_token)
            raise
        finally:
            keeper.stopped.set()

    def _loop(self, kick_token: str) -> str:
        inbox = self.rt.inbox
        for _ in range(MAX_BATCHES_PER_RUN):
            raw = inbox.take(self.rk, self.exec_id)
            if raw is None:
                return "lost-lease"
            if not raw:
                state = inbox.finish(self.rk, self.exec_id)
                if state == 1:
                    return "done"
                if state == -1:
                    return "lost-lease"
                continue
            self._process(raw)
        token = new_token()
        if inbox.handover(self.rk, self.exec_id, token, KICK_TTL_MS):
            self.rt.start_run(self.rk, token)
        return "handed-over"

    def _process(self, raw: list[str]) -> None:
        batch_id = batch_id_of(raw)
        attempt = self.rt.inbox.bump_attempts(self.rk, batch_id)
        extra = {"route_key": self.rk, "exec_id": self.exec_id, "batch": batch_id, "attempt": attempt}
        if attempt > self.rt.settings.dead_letter_after:
            self._bury(raw, batch_id, "too many attempts", attempt)
            return
        try:
            batch = [Inbound.model_validate_json(item) for item in raw]
        except ValidationError:
            self._bury(raw, batch_id, "unreadable inbox entry", attempt)
            return
        started = time.monotonic()
        try:
            result = run_turn(self.rt, self.rk, self.kind, batch, batch_id, self.fence)
        except Permanent as exc:
            log.error("turn failed permanently", extra={**extra, "error": str(exc)})
            self._bury(raw, batch_id, str(exc), attempt, notify=batch[-1])
            return
        except LeaseLost:
            raise
        except Exception as exc:
            log.warning("turn failed", extra={**extra, "error": f"{exc.__class__.__name__}: {exc}"})
            if attempt >= self.rt.settings.dead_letter_after:
                self._bury(raw, batch_id, f"{exc.__class__.__name__}: {exc}", attempt, notify=batch[-1])
                return
            raise
        keep = self.rt.settings.transcript_turns * 2
        if not self.rt.inbox.commit(self.rk, self.exec_id, len(raw), batch_id, result.entries, keep):
            raise LeaseLost(self.rk)
        c = result.completion
        log.info("turn done", extra={**extra, "duration_ms": int((time.monotonic() - started) * 1000),
                                     "usage": {"in": c.input_tokens, "out": c.output_tokens,
                                               "cache_read": c.cache_read_tokens}})

    def _bury(self, raw: list[str], batch_id: str, reason: str, attempt: int, notify: Inbound | None = None) -> None:
        """Move the batch to the dead-letter list (for admin replay) and tell the user once."""
        if notify is None:
            notify = _last_readable(raw)
        if notify is not None and self.fence():
            try:
                self.rt.outbox.reply(self.rk, f"dead-{batch_id}", notify.message_id,
                                     say("dead_letter", notify.text), in_thread=self.kind == "topic",
                                     fence=self.fence)
            except Exception as exc:  # the notice is best effort; the batch is kept either way
                log.warning("dead-letter notice failed", extra={"route_key": self.rk, "error": str(exc)})
        record = {"route_key": self.rk, "batch_id": batch_id, "events": raw, "reason": reason,
                  "attempts": attempt, "at": round(time.time(), 3)}
        if not self.rt.inbox.dead_letter(self.rk, self.exec_id, batch_id, record):
            raise LeaseLost(self.rk)
        log.error("batch dead-lettered", extra={"route_key": self.rk, "batch": batch_id, "reason": reason})

    def _handover_for_retry(self, kick_token: str) -> None:
        """Give the lease back to this job's kick token so RQ's Retry of this job can take it again."""
        ttl_ms = int((max(self.rt.settings.retry_delays) + 60) * 1000)
        try:
            self.rt.inbox.handover(self.rk, self.exec_id, kick_token, ttl_ms)
        except Exception:
            log.exception("handover failed; the sweeper will recover the route", extra={"route_key": self.rk})



def _last_readable(raw: list[str]) -> Inbound | None:
    for item in reversed(raw):
        try:
            return Inbound.model_validate_json(item)
        except ValidationError:
            continue
    return None
