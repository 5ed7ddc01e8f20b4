"""Quiet triage in the registry (turn/registry.py): what a due triage timer does. The web hands unaddressed topic
messages to triage/buffer.py directly (the edge sits above every feature)."""

from __future__ import annotations

from memory.timer import TRIAGE
from triage.run import run_triage
from turn import registry
from turn.registry import TimerKind

registry.timer_kind(TimerKind(TRIAGE, lambda rt, rk, t, b, fence, state:
                              run_triage(rt, rk, t, b, fence) if state is not None else "no route state"))
