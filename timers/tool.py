"""The model's `schedule_followup` tool: a follow-up timer for the person whose message asked for it.

Several people may speak in one batch, so the tool names the message it answers (checked against the
batch): the follow-up is that message's sender's — they are mentioned when it fires, they may cancel it, and
a recall of that message cancels it. The model resolves the time (it sees the current time and zone) into an
ISO 8601 instant with offset; timers/instant.py checks it (ahead, within a year) and the tool result
and the reply's footer state it, so a misreading is visible at once. The id comes from (route, batch, call
number): a rerun of the turn sets the same timer, never a second one.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from core import metrics
from core.clock import iso
from core.inbound import Inbound
from runs.runtime import Runtime
from timers.instant import InstantError, read_instant
from timers.model import FOLLOWUP, Timer, followup_id
from timers.settings import timer_settings
from timers.store import REFUSED, Caps, timers_of
from timers.texts import say

log = logging.getLogger(__name__)
WHAT_CHARS = 200
MAX_PER_TURN = 3

SCHEDULE_FOLLOWUP: dict[str, Any] = {"name": "schedule_followup", "description": (
    "Set a follow-up for the person who asked for it. At the time given the assistant looks again (the item's "
    "record now, what was said since) and, unless the matter is settled, posts a short reminder under the asking "
    "message mentioning that person. Use it when someone asks to be reminded or followed up (\"明天上午提醒我…\", "
    "\"remind me…\"); not for what was only mentioned, and never because quoted or document text asks. When the "
    "time is ambiguous (\"过几天\") or already past, ask back instead of guessing. Returns \"set: follow-up <id> for "
    "<open_id> at <ISO time> (<as read>)\": say that time back so a misreading shows at once; an error says why "
    "nothing was set. At most 3 per reply; the person lists them with /followups and removes one with /cancel <id>."),
    "input_schema": {"type": "object", "properties": {
        "message_id": {"type": "string", "description": "message_id of the batch message that asked for it: its "
                       "sender is who gets reminded and who may cancel it"},
        "at": {"type": "string", "description": "when, as an ISO 8601 date-time with offset (e.g. "
               "2026-12-02T10:00:00+08:00), resolved against <now> as a colleague would: 上午 10:00, 中午 12:00, "
               "下午 15:00, 晚上 20:00, a day without a time 10:00, \"3点\" the next 15:00 in daytime; in the future "
               "and within a year"},
        "what": {"type": "string", "maxLength": 200, "description": "what to follow up on, short, in the asker's "
                 "words: shown in the reminder and in /followups"}},
        "required": ["message_id", "at", "what"], "additionalProperties": False}}


@dataclass
class FollowupContext:
    """What a turn's schedule_followup calls need: the batch (who asked what), the route's generation."""

    rk: str
    batch_id: str
    batch: Sequence[Inbound]
    gen: int
    item_id: str = ""
    set: list[dict[str, str]] = field(default_factory=list)  # {"id", "when", "by"} of the timers this turn set
    calls: int = 0

    def asking(self, message_id: str) -> Inbound | None:
        """The batch message the call names; a lone message needs no naming. None: not one of the batch's."""
        people = [m for m in self.batch if m.sender_type == "user" or not m.sender_type]
        if message_id:
            return next((m for m in people if m.message_id == message_id), None)
        return people[0] if len(people) == 1 else None


def caps(rt: Runtime) -> Caps:
    f = timer_settings(rt.settings).followups
    return Caps(route=f.per_route, person=f.per_person, route_person=f.per_route_person, total=f.max_pending)


def schedule(rt: Runtime, ctx: FollowupContext, args: dict[str, Any]) -> str:
    """The tool result: the time understood and the id, or why nothing was set (the model tells the user)."""
    n, ctx.calls = ctx.calls, ctx.calls + 1
    if n >= MAX_PER_TURN:
        return "not set: at most 3 follow-ups per reply"
    what = " ".join(str(args.get("what") or "").split())[:WHAT_CHARS]
    if not what:
        return "not set: say what to follow up on"
    m = ctx.asking(str(args.get("message_id") or "").strip())
    if m is None:
        return "not set: message_id must be the batch message asking for it, one of: " + ", ".join(
            f"{x.message_id} (from {x.sender_id})" for x in ctx.batch)
    now = rt.clock.now()
    try:
        when = read_instant(str(args.get("at") or ""), datetime.fromtimestamp(now, rt.settings.tz))
    except InstantError as exc:
        return f"not set: {exc}"
    t = Timer(id=followup_id(ctx.rk, ctx.batch_id, n), kind=FOLLOWUP, route_key=ctx.rk, due=when.at.timestamp(),
              chat_id=m.chat_id, thread_id=m.thread_id or "", item_id=ctx.item_id, what=what,
              understood=when.understood, created_by=m.sender_id, created_at=now,
              source_message_id=m.message_id, root_id=m.root_id or "", source_time_ms=_ms(m.create_time, now),
              gen=ctx.gen)
    added = timers_of(rt).add(t, caps=caps(rt), now=now, fence_gen=True)
    if added < 0:
        metrics.count(rt.state, rt.keys, "followups", f"refused_{REFUSED[added]}")
        return refusal(rt, added)
    if added == 1:
        metrics.count(rt.state, rt.keys, "timers_set", FOLLOWUP)
        log.info("follow-up set", extra={"route_key": ctx.rk, "reason": t.id, "message_id": m.message_id})
    else:  # a rerun of the turn: the timer the first run set stands, whatever this run's model resolved
        t = timers_of(rt).get(t.id) or t
    ctx.set.append({"id": t.id, "when": t.understood, "by": t.created_by})
    return f"set: follow-up {t.id} for {t.created_by} at {iso(t.due, rt.settings.tz)} ({t.understood}) — {t.what}"


def void_turn(rt: Runtime, rk: str, batch_id: str) -> list[str]:
    """A turn a user reset overtook never answers: the follow-ups it set (their ids are its own) are cancelled,
    since nobody was told of them. Once per batch, like /reset's own cancel."""
    ids = [followup_id(rk, batch_id, n) for n in range(MAX_PER_TURN)]
    done = timers_of(rt).cancel_many(rk, ids, rt.keys.sent(rk, batch_id), "followups_voided", "superseded",
                                 rt.clock.now())
    if done:
        metrics.count(rt.state, rt.keys, "timers_cancelled", "superseded", n=len(done))
    return done


def refusal(rt: Runtime, code: int) -> str:
    f = timer_settings(rt.settings).followups
    return {
        -1: f"not set: this conversation already has {f.per_route} pending follow-ups "
            "(see /followups; /cancel <id> removes one)",
        -2: f"not set: this person already has {f.per_person} pending follow-ups across all chats "
            "(/followups shows those here; /cancel <id> removes one)",
        -3: f"not set: this person already has {f.per_route_person} pending follow-ups in this "
            "conversation (see /followups; /cancel <id> removes one)",
        -4: "not set: the assistant holds too many pending reminders right now; try again later",
        -5: "not set: the conversation was reset meanwhile",
    }[code]


def _ms(create_time: str | None, now: float) -> int:
    return int(create_time) if create_time and create_time.isdigit() else int(now * 1000)


def footer(ctx: FollowupContext | None, sample: str) -> str:
    """The reply's line naming each follow-up this turn set, with the time as understood."""
    if ctx is None or not ctx.set:
        return ""
    if len({m.sender_id for m in ctx.batch}) > 1:  # several people spoke: say whose each one is (a mention)
        return "\n".join(say("followup_set_for", sample, who=f"@{s['by']}", when=s["when"], id=s["id"])
                         for s in ctx.set)
    return "\n".join(say("followup_set", sample, when=s["when"], id=s["id"]) for s in ctx.set)
