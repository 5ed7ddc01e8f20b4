"""Timers as a feature (turn/registry.py, `FEATURE`): the schedule_followup tool and the clock line of a turn, what a
`/reset` does to follow-ups, `/followups` and `/cancel`, timer wake-ups, the digest route, follow-up and digest
timer kinds. The turn and the drain learn of timers only through these entries."""

from __future__ import annotations

import html
from collections.abc import Mapping
from datetime import datetime, tzinfo
from typing import Any

from core.clock import iso
from core.inbound import TIMER_TYPE
from items import item_of_turn
from memory.sessions import entry
from routing.keys import DIGEST as DIGEST_ROUTE
from timers import commands, tool
from timers.digest_run import run_digest
from timers.fire import fire, timer_of
from timers.followup import fire_followup
from timers.instant import now_line
from timers.keys import timers_due
from timers.model import DIGEST, FOLLOWUP, Timer
from timers.scheduler import ensure_digests, fire_due
from timers.settings import TimerSettings, timer_settings
from turn.registry import (
    Command,
    Context,
    Event,
    Feature,
    Gauge,
    Part,
    Periodic,
    RouteWork,
    Said,
    TimerKind,
    ToolRefused,
)


class TimersPart(Part):
    """The follow-ups a turn sets: the tool, the clock the model resolves times against, the footer naming them."""

    def __init__(self, turn: Context, item_id: str) -> None:
        self.turn = turn
        self.ctx = tool.FollowupContext(turn.rk, turn.batch_id, list(turn.batch), turn.gen, item_id=item_id)

    def block(self) -> str:
        now = datetime.fromtimestamp(self.turn.rt.clock.now(), self.turn.rt.settings.tz)
        return now_line(now) + "\n"  # the model resolves "3点" against it

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        if name != tool.SCHEDULE_FOLLOWUP["name"]:
            return None
        result = tool.schedule(self.turn.rt, self.ctx, args)
        if result.startswith("not set"):
            raise ToolRefused(result)  # a tool error (is_error): the model must not say it was set
        return result

    def footer(self, text: str) -> str:
        return tool.footer(self.ctx, text)


def start(turn: Context, _parts: Mapping[str, Part]) -> TimersPart:
    return TimersPart(turn, item_of_turn(turn))  # a follow-up in an item's topic remembers the item


def _reset(c: Context) -> Said:
    return commands.on_reset(c.rt, c.rk, c.message, c.batch_id)


def _wake_up(c: Context) -> str:
    """A due timer's run; what it posted unasked enters the route's transcript (its next turn knows it was told)."""
    note = fire(c, c.state)
    t = timer_of(c.rt, c.rk, c.message)
    if t is not None and t.told:
        c.told.extend(told_entries(t, c.batch_id, c.rt.settings.tz))
    return note


def told_entries(t: Timer, batch_id: str, tz: tzinfo) -> list[str]:
    """A user/assistant pair, so the log keeps its pairing: what woke the assistant, and what it said."""
    wake = (f'<wake_up kind="{t.kind}" at="{iso(t.due, tz)}" set_by="{html.escape(t.created_by)}">'
            f"{html.escape(t.what)}</wake_up>")
    return [entry("user", wake, batch_id=batch_id, kind="told"),
            entry("assistant", f"已提醒过：{t.told}" if t.kind == FOLLOWUP else f"已在话题里说过：{t.told}",
                  batch_id=batch_id, kind="told")]


def _followup(c: Context) -> str:
    if c.state is None or c.timer is None:
        return "no route state"
    return fire_followup(c.rt, c.rk, c.timer, c.batch_id, c.fence, c.state)


def _digest(c: Context) -> str:
    return run_digest(c.rt, c.rk, c.timer, c.batch_id, c.fence) if c.timer is not None else "gone"


FEATURE = Feature(
    "timers", order=40, start=start, tools=lambda _kind: [tool.SCHEDULE_FOLLOWUP],
    superseded=lambda t: tool.void_turn(t.rt, t.rk, t.batch_id), reset=_reset,
    commands=(Command("followups", lambda c: Said(commands.list_text(c.rt, c.rk, c.message)),
                      words=("/followups", "/提醒")),
              Command("cancel", lambda c: commands.cancel_text(c.rt, c.rk, c.message), pattern=commands.CANCEL)),
    events=(Event(TIMER_TYPE, _wake_up, tell_sender=False),),  # nobody sent it: the dead letter and the alert say it
    route_work=(RouteWork(DIGEST_ROUTE, lambda c: fire(c, None)),),
    timer_kinds=(TimerKind(FOLLOWUP, _followup), TimerKind(DIGEST, _digest)),
    periodic=(Periodic("digests", ensure_digests),  # a chat's next digest slot, then whatever is due
              Periodic("due timers", fire_due, every=lambda s: timer_settings(s).timer_check_seconds)),
    gauges=(Gauge("timers_pending", "Timers waiting to fall due (follow-ups, digests, triage)", timers_due),),
    settings=TimerSettings,
)
