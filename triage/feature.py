"""Quiet triage as a feature (`FEATURE`): what a due triage timer does. The web hands unaddressed topic
messages to triage/buffer.py directly (the edge sits above every feature)."""

from __future__ import annotations

from timers import TRIAGE
from triage.run import run_triage
from turn.registry import Context, Feature, TimerKind


def _run(c: Context) -> str:
    if c.state is None or c.timer is None:
        return "no route state"
    return run_triage(c, c.timer)


FEATURE = Feature("triage", order=60, timer_kinds=(TimerKind(TRIAGE, _run),))
