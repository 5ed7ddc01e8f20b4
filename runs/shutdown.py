"""Graceful stop inside a work-horse: SIGTERM ends a model wait at once, or the run stops after its turn.

The worker forwards its first SIGTERM to the busy horse (jobs/worker.py). The drain job then hands
its route to a fresh run instead of taking another batch, so a deploy never leaves a route waiting
for a lease to expire. While the job waits on the model (an `interruptible()` block) the wait is
abandoned at once: the batch stays in `proc` and the successor asks again; replies already sent
are recorded, so nothing is said twice.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType


class ShutdownRequested(Exception):
    """Raised out of an interruptible wait when the process is asked to stop."""


_requested = False
_interruptible = False


def requested() -> bool:
    return _requested


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
    if _requested:
        raise ShutdownRequested()
    _interruptible = True
    try:
        yield
    finally:
        _interruptible = False
