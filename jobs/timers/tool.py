"""The model's `schedule_followup(when, what)` tool: a follow-up timer on the route that asked for it.

The time is read by jobs/timers/when.py in BOT_TIMEZONE against the service clock; the tool result and
the reply's footer state the time as understood, so a misread is visible at once. The id comes from
(route, batch, call number): a rerun of the turn sets the same timer, never a second one.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from bot import metrics
from bot.edge.envelope import Inbound
from bot.texts import say
from jobs.runtime import Runtime
from jobs.timers.model import FOLLOWUP, Timer, followup_id
from jobs.timers.when import WhenError, parse_when

log = logging.getLogger(__name__)
WHAT_CHARS = 200
MAX_PER_TURN = 3

SCHEDULE_FOLLOWUP = {"name": "schedule_followup", "description": (
    "Remind: at `when` (as the user said it) you check this conversation again and post a short reminder, "
    "or nothing if no longer needed. Tell the user the time the result states."),
    "input_schema": {"type": "object", "properties": {"when": {"type": "string"}, "what": {"type": "string"}},
                     "required": ["when", "what"]}}


@dataclass
class FollowupContext:
    """What a turn's schedule_followup calls need: the asking message, the batch, the route's generation."""

    rk: str
    batch_id: str
    asker: Inbound
    gen: int
    item_id: str = ""
    set: list[dict[str, str]] = field(default_factory=list)  # {"id", "when"} of the timers this turn set
    calls: int = 0


def schedule(rt: Runtime, ctx: FollowupContext, args: dict[str, Any]) -> str:
    """The tool result: the time understood and the id, or why nothing was set (the model tells the user)."""
    n, ctx.calls = ctx.calls, ctx.calls + 1
    if n >= MAX_PER_TURN:
        return "not set: at most 3 follow-ups per reply"
    what = " ".join(str(args.get("what") or "").split())[:WHAT_CHARS]
    if not what:
        return "not set: say what to follow up on"
    now = rt.clock.now()
    try:
        when = parse_when(str(args.get("when") or ""), datetime.fromtimestamp(now, rt.settings.tz))
    except WhenError as exc:
        return f"not set: {exc}"
    m = ctx.asker
    t = Timer(id=followup_id(ctx.rk, ctx.batch_id, n), kind=FOLLOWUP, route_key=ctx.rk, due=when.at.timestamp(),
              chat_id=m.chat_id, thread_id=m.thread_id or "", item_id=ctx.item_id, what=what,
              understood=when.understood, created_by=m.sender_id, created_at=now, source_message_id=m.message_id,
              source_time_ms=_ms(m.create_time, now), gen=ctx.gen)
    added = rt.timers.add(t, cap=rt.settings.followups_per_route, now=now)
    if added == -1:
        return f"not set: this conversation already has {rt.settings.followups_per_route} pending follow-ups " \
               "(see /followups; /cancel <id> removes one)"
    if added == 1:
        metrics.count(rt.state, rt.keys, "timers_set", FOLLOWUP)
        log.info("follow-up set", extra={"route_key": ctx.rk, "reason": t.id, "message_id": m.message_id})
    else:  # a rerun of the turn: the timer the first run set stands, whatever this run's model read
        t = rt.timers.get(t.id) or t
    ctx.set.append({"id": t.id, "when": t.understood})
    return f"set: follow-up {t.id} at {t.understood} ({rt.settings.bot_timezone}) — {t.what}"


def _ms(create_time: str | None, now: float) -> int:
    return int(create_time) if create_time and create_time.isdigit() else int(now * 1000)


def footer(ctx: FollowupContext | None, sample: str) -> str:
    """The reply's line naming each follow-up this turn set, with the time as understood."""
    if ctx is None or not ctx.set:
        return ""
    return "\n".join(say("followup_set", sample, when=s["when"], id=s["id"]) for s in ctx.set)
