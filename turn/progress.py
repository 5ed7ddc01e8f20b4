"""Visible progress: a reaction on the message being answered while its turn runs, a distinct one if it fails for good.

Best effort throughout: a reaction never fails a turn and never holds it up for long (the add runs in a thread
the turn waits for only briefly). Idempotent across retries and crashes: the reaction ids live in the batch's
sent-ledger hash (`sent:{rk}:<batch>`), so a rerun of the batch neither adds a second reaction nor loses the
one to take back; the ledger goes when the batch commits.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from core.inbound import Inbound
from runs.outbox import Destination
from runs.runtime import Runtime

log = logging.getLogger(__name__)

WORKING = "OnIt"  # feishu emoji_type: "on it"
FAILED = "CrossMark"  # distinct: the turn gave up (its message is dead-lettered)
HEAD_START_S = 0.5  # the model call waits at most this long for the reaction to land first
FINISH_WAIT_S = 2.0  # after the reply, how long to wait for a still-running add before taking it back
PROGRESS, PROGRESS_OFF, PROGRESS_FAILED = "progress", "progress:off", "progress:failed"  # ledger fields


@dataclass
class Progress:
    """The working reaction of one batch's run."""

    rt: Runtime
    rk: str
    batch_id: str
    message: Inbound
    fence: Callable[[], bool]
    finished: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def head_start(self) -> None:
        """Let the reaction land before the model is asked (bounded; never an error)."""
        if self.thread is not None:
            self.thread.join(HEAD_START_S)

    def done(self) -> None:
        """The reply is posted: take the working reaction back."""
        self.finished.set()
        if self.thread is not None:
            self.thread.join(FINISH_WAIT_S)
        _best_effort("remove progress reaction", lambda: _remove(self.rt, self.rk, self.batch_id, self.fence))

    def _add(self) -> None:
        _best_effort("add progress reaction", self._add_once)

    def _add_once(self) -> None:
        ledger = self.rt.keys.sent(self.rk, self.batch_id)
        if self.rt.state.hget(ledger, PROGRESS):
            return  # an earlier run of this batch added it (it stays until the batch is answered or buried)
        m = self.message
        reaction_id = self.rt.outbox.react(Destination(self.rk, m.chat_id, fence=self.fence), m.message_id, WORKING)
        record = json.dumps({"message_id": m.message_id, "chat_id": m.chat_id, "reaction_id": reaction_id})
        self.rt.outbox.record(ledger, PROGRESS, record)
        if self.finished.is_set():  # the turn finished while we were adding: done() may have missed it
            _remove(self.rt, self.rk, self.batch_id, self.fence)


def start(rt: Runtime, rk: str, batch_id: str, message: Inbound, fence: Callable[[], bool]) -> Progress:
    """Begin showing progress on `message` (the one the reply will answer)."""
    p = Progress(rt, rk, batch_id, message, fence)
    p.thread = threading.Thread(target=p._add, name="progress-reaction", daemon=True)
    p.thread.start()
    return p


def gave_up(rt: Runtime, rk: str, batch_id: str, batch: Sequence[Inbound], fence: Callable[[], bool], *,
            buried: bool) -> None:
    """The batch gives up: the working reaction goes; if it is buried (not split), the failure one is added."""
    _best_effort("remove progress reaction", lambda: _remove(rt, rk, batch_id, fence))
    if buried and batch:
        _best_effort("add failure reaction", lambda: _mark_failed(rt, rk, batch_id, batch[-1], fence))


def _remove(rt: Runtime, rk: str, batch_id: str, fence: Callable[[], bool]) -> None:
    ledger = rt.keys.sent(rk, batch_id)
    raw, off = rt.state.hmget(ledger, [PROGRESS, PROGRESS_OFF])
    if not raw or off:
        return
    record: Mapping[str, str] = json.loads(raw)
    rt.outbox.unreact(Destination(rk, record["chat_id"], fence=fence), record["message_id"], record["reaction_id"])
    rt.outbox.record(ledger, PROGRESS_OFF, "1")


def _mark_failed(rt: Runtime, rk: str, batch_id: str, message: Inbound, fence: Callable[[], bool]) -> None:
    ledger = rt.keys.sent(rk, batch_id)
    if rt.state.hget(ledger, PROGRESS_FAILED):
        return
    reaction_id = rt.outbox.react(Destination(rk, message.chat_id, fence=fence), message.message_id, FAILED)
    rt.outbox.record(ledger, PROGRESS_FAILED, reaction_id)


def _best_effort(what: str, call: Callable[[], None]) -> None:
    try:
        call()
    except Exception as exc:  # a reaction is decoration: log it, never fail or retry the turn for it
        log.warning("%s failed", what, extra={"error": f"{exc.__class__.__name__}: {exc}"})
