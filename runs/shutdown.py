"""Graceful stop inside a work-horse: SIGTERM ends a model wait at once, or the run stops after its turn.

The worker forwards its first SIGTERM to the busy horse (jobs/worker.py). The drain job then hands
its route to a fresh run instead of taking another batch, so a deploy never leaves a route waiting
for a lease to expire. While the job waits on the model (an `interruptible()` block) the wait is
abandoned at once: the batch stays in `proc` and the successor asks again; replies already sent
are recorded, so nothing is said twice.

`ShutdownRequested` is a BaseException, as KeyboardInterrupt is: raised inside the model SDK's request, an
`except Exception` there (the anthropic client's retry loop) would take it for a connection error and send the
request again, and the horse would wait on the model for the whole turn after all.

A horse whose RQ worker died (jobs/worker.py watches for it) is `orphaned()`: it finishes the step it is in,
then hands its route over and takes no further work, as after a SIGTERM between model waits. A stop that reaches the
worker while it forks the horse (`before_start`) makes the job hand its route over before its first step.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class ShutdownRequested(BaseException):
    """Raised out of an interruptible wait when the process is asked to stop."""


_requested = False
_interruptible = False
_sticky = False  # not reset by install(): the stop may come before the job starts


def requested() -> bool:
    return _requested or _sticky


def orphaned() -> None:
    """The horse's worker is gone: stop after the current step (never interrupts it: see the module's doc)."""
    before_start()


def before_start(signum: int = 0, frame: FrameType | None = None) -> None:
    """A stop asked of the horse before its job began (while its worker forked it): the job hands its route over
    instead of starting a turn. Also the horse's SIGTERM handler until the job installs its own."""
    global _sticky
    _sticky = True


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _requested
    _requested = True
    if _interruptible:
        raise ShutdownRequested()


def install() -> None:
    """Called at the start of a job, in the horse's main thread."""
    global _requested, _interruptible
    _requested = _interruptible = False
    signal.signal(signal.SIGTERM, _on_sigterm)


@contextmanager
def interruptible() -> Iterator[None]:
    global _interruptible
    if requested():
        raise ShutdownRequested()
    _interruptible = True
    try:
        yield
    finally:
        _interruptible = False
