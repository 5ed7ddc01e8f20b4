"""The drain job: own the route's lease, run one turn per batch, commit, release without lost wake-ups.

Failure handling, per batch:
- a retryable failure (model overload, Open API 5xx, …) is counted and the route is handed to a
  successor after a backoff (`RUN_RETRY_DELAYS`); after `DEAD_LETTER_AFTER` failures the batch gives up;
- a permanent failure gives up at once;
- giving up on a batch of several messages splits it: each message is tried on its own, so one poison
  message is dead-lettered (its sender told once) and the others are answered;
- a credential or permission failure (`Paused`) is the service's fault: the batch is kept, the route
  released, work paused until the sweeper's probe sees the credential work again;
- a run that dies (SIGKILL, OOM) counts as a start, not a failure; only a batch that kills its runs
  `CRASH_LIMIT` times gives up. A batch whose answer is already stored is never given up.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel
from rq import get_current_job
from rq.queue import Queue

from core import metrics
from core.inbound import Inbound
from jobs.batches import Parsed, batch_id_of, ids, index_ids, parse, parse_one
from jobs.giveup import GiveUp, Outcome
from jobs.segments import COMMAND, STALE, next_segment
from memory.sessions import RouteState
from routing.keys import kind_of
from runs import shutdown
from runs.inbox import Commit
from runs.outbox import LeaseLost, Superseded
from runs.queues import rq_queue_name
from runs.runtime import Runtime, current
from turn.answer import TurnResult, run_turn
from turn.registry import Context, app_of
from turn.request import batch_size
from turn.session import answer_command, ensure_session

log = logging.getLogger(__name__)
MAX_BATCHES_PER_RUN = 5  # then hand the route over, so one chatty route cannot hog a worker
MAX_ROUTES_PER_JOB, CHAIN_SECONDS = 8, 30.0  # routes one RQ job may run back to back (see `chain`)


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
    shutdown.install()
    rq_job = get_current_job()
    rt, job_id = current(), rq_job.id if rq_job else ""
    outcome = Drain(rt, job.route_key, job_id).run(job.kick_token)
    return ",".join([outcome, *chain(rt, job_id, rq_job.origin if rq_job else "")])


def chain(rt: Runtime, job_id: str, origin: str) -> list[str]:
    """Under load, take the next waiting kick of this queue in the same work-horse.

    RQ costs ~40 ms of CPU per job (fork, bookkeeping), more than a turn itself; a busy worker pays it
    once for several routes. Kicks for other queues are handed to RQ, so queues stay apart.
    """
    outcomes: list[str] = []
    deadline = time.monotonic() + CHAIN_SECONDS
    waiting_jobs = Queue.redis_queue_namespace_prefix + origin
    while len(outcomes) < MAX_ROUTES_PER_JOB - 1 and time.monotonic() < deadline and not shutdown.requested():
        if rt.state.exists(rt.keys.paused):
            break
        if origin and rt.rq.llen(waiting_jobs):  # jobs wait in RQ (a recovered route, or more jobs than live
            break  # workers after a host died): serve them in turn instead of chaining past them
        kick = rt.inbox.pop_kick()
        if kick is None:
            break
        if rq_queue_name(rt.settings.bot_profile, kick.queue) != origin:
            rt.start_run(kick.route_key, kick.token, kick.queue)
            continue
        outcomes.append(Drain(rt, kick.route_key, job_id).run(kick.token))
    return outcomes


class Drain:
    def __init__(self, rt: Runtime, route_key: str, job_id: str = "") -> None:
        self.rt, self.rk, self.job_id = rt, route_key, job_id
        self.exec_id = uuid_hex()  # per execution: RQ may re-run a job while an orphan still runs
        self.kind = kind_of(route_key)
        self.queue = rt.queue_of(route_key)
        self.log = {"route_key": route_key, "exec_id": self.exec_id, "job_id": job_id}
        self.gen: int | None = None  # the generation of the segment being worked on (see `fence`)
        self.dropped = 0  # messages consumed unanswered because a user reset came after them
        self.failures = GiveUp(self)

    def fence(self) -> bool:
        """Before every side effect: False when the lease is gone; `Superseded` when a user reset moved the
        route past the generation this turn runs under (its reply must not be posted)."""
        pipe = self.rt.state.pipeline(transaction=False)
        pipe.get(self.rt.keys.lease(self.rk))
        pipe.hget(self.rt.keys.route_state(self.rk), "gen")
        lease, gen = pipe.execute()
        if lease != self.exec_id:
            return False
        if self.gen is not None and int(gen or 0) != self.gen:
            raise Superseded(self.rk)
        return True

    def run(self, kick_token: str) -> str:
        if not self.rt.inbox.acquire(self.rk, kick_token, self.exec_id):
            return "not-owner"
        if self.rt.state.exists(self.rt.keys.paused):  # released, not left to a kick lease that outlives the pause
            return "paused" if self.rt.inbox.release(self.rk, self.exec_id) else "lost-lease"
        keeper = LeaseKeeper(self.rt, self.rk, self.exec_id)
        keeper.start()
        try:
            return self._loop()
        except LeaseLost:
            return "lost-lease"
        except shutdown.ShutdownRequested:
            return self.hand_over("stopped")
        finally:
            keeper.stopped.set()

    def _loop(self) -> str:
        inbox = self.rt.inbox
        for _ in range(MAX_BATCHES_PER_RUN):
            if shutdown.requested():
                return self.hand_over("stopped")
            raw = self.take()
            if raw is None:
                return "lost-lease"
            if not raw:
                state = inbox.finish(self.rk, self.exec_id)
                if state == 1:
                    return "done"
                if state == -1:
                    return "lost-lease"
                continue
            outcome = self.process(raw)
            if outcome:
                return outcome
        return self.hand_over("handed-over")

    def take(self) -> list[str] | None:
        return self.rt.inbox.take(self.rk, self.exec_id, budget_s=self.rt.settings.run_budget_seconds,
                                  job_id=self.job_id)

    def hand_over(self, outcome: str, delay_s: float = 0.0) -> str:
        return outcome if self.rt.inbox.handover(self.rk, self.exec_id, self.queue, delay_s=delay_s) else "lost-lease"

    def consumed_unanswered(self, n: int) -> None:
        self.dropped += n

    # -- one batch ---------------------------------------------------------------------------------------

    def process(self, raw: list[str]) -> str | None:
        """Consume the segment at the front of the batch (jobs/segments.py); None when the run goes on."""
        work = app_of(self.rt).route_work.get(self.kind)
        if work is not None:  # an internal route (an item's analysis, a chat's digest): one entry at a time, no session
            self.rt.inbox.index(self.rk)  # in the list of every route; it has no chat, person or topic of its own
            return self._guarded(raw[:1], work.run)
        items = [parse_one(item) for item in raw]
        self.rt.inbox.index(self.rk, index_ids(items))  # the console's lookups, written here, not by the webhook
        state = self.rt.sessions.state(self.rk)
        seg = next_segment(items, state.generation, app_of(self.rt), self.kind, self.rt.settings)
        self.gen = state.generation
        if seg.kind == STALE:
            self._drop_stale(raw[:seg.n])
            return None
        if seg.kind == COMMAND:
            return self._service(raw[0], seg.command or "", state)
        n = batch_size(self.rt, self.rk, items[:seg.n])
        if n < seg.n:
            log.info("batch larger than the budget: the rest waits for the next turn",
                     extra={**self.log, "message_id": ids(raw[n:seg.n])})
        return self._turn(raw[:n], state)

    def _call(self, message: Inbound, batch_id: str, state: RouteState | None = None, dropped: int = 0) -> Context:
        return Context(self.rt, self.rk, (message,), batch_id, self.fence, state=state, dropped=dropped)

    def _guarded(self, raw: list[str], work: Callable[[Context], object],
                 state: RouteState | None = None) -> str | None:
        """One entry answered by the service (a command, a click, a wake-up, an internal route's work) with the same
        failure handling as a turn: retried with backoff, paused on credentials, dead-lettered at last. What it posted
        unasked (`Call.told`) enters the route's session log with its commit, under the route's generation."""
        started = self._start(raw)
        if isinstance(started, Outcome):
            return started.value
        batch_id, extra, parsed = started
        call = self._call(parsed.readable[0], batch_id, state, self.dropped)
        done = self.failures.attempt(raw, batch_id, extra, lambda: work(call))
        if isinstance(done, Outcome):
            return done.value
        told = call.told if state is not None and state.session_id else []
        self.commit(Commit(n=len(raw), batch_id=batch_id, entries=told, gen=state.generation if told and state
                           else None))
        return None

    def _start(self, raw: list[str]) -> Outcome | tuple[str, dict[str, Any], Parsed]:
        """Count the start of a batch's attempt; an Outcome when it ends here (unreadable, worn out)."""
        batch_id = batch_id_of(raw)
        extra = {**self.log, "batch": batch_id, "message_id": ids(raw)}
        parsed = parse(raw)
        if not parsed.readable:
            self.commit(Commit(n=len(raw), batch_id=batch_id, dead=self.failures.dead(parsed, batch_id)))
            return Outcome(None)
        starts = self.rt.inbox.bump(self.rk, batch_id, "s")
        worn_out = self.failures.worn_out(batch_id, starts)
        if worn_out:
            log.error("batch gives up before its turn", extra={**extra, "attempt": starts, "reason": worn_out})
            return Outcome(self.failures.give_up(raw, batch_id, worn_out))
        return batch_id, extra, parsed

    def buried(self, message: Inbound, batch_id: str, reason: str) -> bool:
        """An internal route's work does its own thing when given up (a failed first answer shows `failed`); a
        wake-up nobody sent is only logged (the dead letter and the admin alert say it)."""
        work = app_of(self.rt).route_work.get(self.kind)
        if work is not None:
            if work.gave_up is not None:
                work.gave_up(self._call(message, batch_id), reason)
            return True
        event = app_of(self.rt).events.get(message.message_type)
        if event is not None and not event.tell_sender:
            log.error("wake-up dead-lettered", extra={**self.log, "batch": batch_id, "message_id": message.message_id,
                                                      "reason": reason})
            return True
        return False

    def _drop_stale(self, raw: list[str]) -> None:
        batch_id = batch_id_of(raw)
        log.info("messages sent before a user reset: not answered",
                 extra={**self.log, "batch": batch_id, "message_id": ids(raw)})
        self.commit(Commit(n=len(raw), batch_id=batch_id))
        self.dropped += len(raw)

    def _service(self, raw: str, name: str, state: RouteState) -> str | None:
        """A command, an event or an opener, answered by the service with a turn's failure handling: a reply that
        keeps failing is retried, then dead-lettered, never left to wedge the route."""
        outcome = self._guarded([raw], lambda c: answer_command(c, name), state)
        if app_of(self.rt).command_named(name) is not None:
            self.dropped = 0  # said in this command's reply (`/reset`), or moot
        return outcome

    def _turn(self, raw: list[str], state: RouteState) -> str | None:
        """Answer, retry later, pause, split or bury one turn's messages."""
        started = self._start(raw)
        if isinstance(started, Outcome):
            return started.value
        batch_id, extra, parsed = started

        def work() -> TurnResult:
            sid = ensure_session(self.rt, self.rk, self.exec_id, state)
            return run_turn(Context(self.rt, self.rk, tuple(parsed.readable), batch_id, self.fence, state=state,
                                    session_id=sid, owner=(self.exec_id, state.generation)))

        result = self.failures.attempt(raw, batch_id, extra, work)
        if isinstance(result, Outcome):
            return result.value
        c = result.completion
        log.info("turn done", extra={**extra, "usage": {"in": c.input_tokens, "out": c.output_tokens,
                                                        "cache_read": c.cache_read_tokens}})
        metrics.count(self.rt.state, self.rt.keys, "turns", self.kind)
        dead = self.failures.dead(parsed, batch_id)
        tokens = (c.input_tokens, c.output_tokens, c.cache_read_tokens)
        self.commit(Commit(n=len(raw), batch_id=batch_id, entries=result.entries, dead=dead, gen=state.generation,
                           tokens=tokens))
        return None

    def commit(self, c: Commit) -> None:
        if not self.rt.inbox.commit(self.rk, self.exec_id, c):
            raise LeaseLost(self.rk)


def uuid_hex() -> str:
    return os.urandom(16).hex()
