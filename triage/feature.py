"""Quiet triage as a feature (`FEATURE`): what the web does with an unaddressed topic message (`overheard`: buffer it
and make sure a triage timer is pending) and what a due triage timer does."""

from __future__ import annotations

from timers import TRIAGE
from triage.buffer import keep
from triage.run import run_triage
from triage.settings import TriageSettings
from turn.registry import Context, Feature, TimerKind


def _run(c: Context) -> str:
    if c.state is None or c.timer is None:
        return "no route state"
    return run_triage(c, c.timer)


FEATURE = Feature("triage", order=60, timer_kinds=(TimerKind(TRIAGE, _run),), overheard=keep,
                  settings=TriageSettings)
