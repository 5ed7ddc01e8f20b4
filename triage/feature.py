"""Quiet triage as a feature (`FEATURE`): what a due triage timer does. The web hands unaddressed topic
messages to triage/buffer.py directly (the edge sits above every feature)."""

from __future__ import annotations

from timers import TRIAGE
from triage.run import run_triage
from turn.registry import Call, Feature, TimerKind


def _run(c: Call) -> str:
    if c.state is None or c.timer is None:
        return "no route state"
    return run_triage(c.rt, c.rk, c.timer, c.batch_id, c.fence)


FEATURE = Feature("triage", order=60, timer_kinds=(TimerKind(TRIAGE, _run),))
