"""`/followups`, `/cancel <id>` and what `/reset` does to follow-ups: answered by the service, not the model.

Who may cancel is decided in timers/authority.py, with the item's owner and reporter read from the
record now. A reply that cancels somebody else's follow-up mentions them: its creator is always told.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Collection
from datetime import datetime

from core import metrics
from core.inbound import Inbound
from runs.runtime import Runtime
from timers import authority
from timers.model import CANCELLED, FOLLOWUP, Timer
from timers.store import timers_of
from timers.texts import say
from turn.registry import Said

log = logging.getLogger(__name__)
WHAT_CHARS = 60


CANCEL = re.compile(r"^/cancel(?:\s+(\S+))?$", re.IGNORECASE)  # `/cancel <id>`, the whole text
_TRAILING = re.compile(r"[\s。.!！~～]+$")


def cancel_argument(text: str) -> str:
    """The timer id of `/cancel <id>` ("" when none was given). Pure."""
    match = CANCEL.match(_TRAILING.sub("", text.strip()))
    return (match.group(1) or "") if match else ""


def when_text(rt: Runtime, t: Timer) -> str:
    return t.understood or datetime.fromtimestamp(t.due, rt.settings.tz).strftime("%m月%d日 %H:%M")


def list_text(rt: Runtime, rk: str, message: Inbound) -> str:
    pending = sorted(timers_of(rt).pending_of(rk), key=lambda t: t.due)
    if not pending:
        return say("followups_none", message.text)
    lines = [say("followup_line", message.text, id=t.id, when=when_text(rt, t), what=t.what[:WHAT_CHARS],
                 who=_who(t, message))
             for t in pending]
    return say("followups_list", message.text, n=len(pending), lines="\n".join(lines))


def _who(t: Timer, message: Inbound) -> str:
    """Who set it, without pinging anyone (a list is not a reason to notify people)."""
    english = say("followups_none", message.text).startswith("No")
    if t.created_by == message.sender_id:
        return "you" if english else "你"
    return "a colleague" if english else "同事"


def cancel_text(rt: Runtime, rk: str, message: Inbound) -> Said:
    timer_id = cancel_argument(message.text)
    if not timer_id:
        return Said(say("cancel_usage", message.text))
    t = timers_of(rt).get(timer_id)
    if t is None or t.route_key != rk or t.kind != FOLLOWUP:  # another route's timer is not named here
        return Said(say("cancel_unknown", message.text, id=timer_id))
    done = {"id": t.id, "when": when_text(rt, t), "what": t.what[:WHAT_CHARS]}
    by = message.sender_id
    if t.state == CANCELLED and t.end_reason == f"cancel:{by}":
        return _cancelled(message, t, done)  # a rerun of this very command
    if t.state != "pending":
        return Said(say("cancel_unknown", message.text, id=timer_id))
    if not may_cancel(rt, t, by):
        log.info("follow-up cancel refused", extra={"route_key": rk, "reason": t.id, "message_id": message.message_id})
        return Said(say("cancel_refused", message.text, id=timer_id))
    if timers_of(rt).end(t, CANCELLED, f"cancel:{by}", rt.clock.now()):
        metrics.count(rt.state, rt.keys, "timers_cancelled", "command")
    return _cancelled(message, t, done)


def _cancelled(message: Inbound, t: Timer, done: dict[str, str]) -> Said:
    if t.created_by and t.created_by != message.sender_id:  # somebody else's: its creator is told
        return Said(say("cancel_done_other", message.text, who=f"@{t.created_by}", **done), {t.created_by: ""})
    return Said(say("cancel_done", message.text, **done))


def item_people(rt: Runtime, item_id: str) -> list[str]:
    """The owner and reporter of an item, read from its record now ([] when there is none or it is unreadable)."""
    item = rt.items.get(item_id) if item_id else None
    if item is None or not item.record_id or rt.bitable is None:
        return []
    record = rt.bitable.batch_get([item.record_id]).get(item.record_id)
    if record is None:
        return []
    name = rt.bitable.schema().name
    return record.users(name("owner")) + record.users(name("reporter"))


def may_cancel(rt: Runtime, t: Timer, who: str) -> bool:
    """Whoever set it, an admin (ITEM_ADMINS), or the item's owner or reporter read from the record now."""
    admins: Collection[str] = rt.settings.item_admins
    if who == t.created_by or who in admins:
        return authority.may_cancel(t.created_by, who, admins, ())
    return authority.may_cancel(t.created_by, who, admins, item_people(rt, t.item_id))


def on_reset(rt: Runtime, rk: str, message: Inbound, batch_id: str) -> Said:
    """What `/reset` does to the route's follow-ups, once per reset batch (a rerun says the same): cancels those
    the resetter may cancel, keeps the others (they belong to their creators), tells creators of what it cancelled."""
    who = message.sender_id
    plan = authority.on_reset(timers_of(rt).pending_of(rk), who, rt.settings.item_admins,
                              lambda item_id: item_people(rt, item_id))
    ids = timers_of(rt).cancel_many(rk, [t.id for t in plan.cancel], rt.keys.sent(rk, batch_id), "followups_cancelled",
                                f"reset:{who}", rt.clock.now())
    if ids:
        metrics.count(rt.state, rt.keys, "timers_cancelled", "reset", n=len(ids))
    cancelled = timers_of(rt).many(ids)
    kept = [t for t in timers_of(rt).pending_of(rk) if t.id not in ids]
    lines, people = [], {}
    if cancelled:
        lines.append(say("reset_followups", message.text, n=len(cancelled)))
    for creator, theirs in authority.to_tell(cancelled, who).items():
        lines.append(say("reset_followups_told", message.text, who=f"@{creator}",
                         what="、".join(t.what[:WHAT_CHARS] for t in theirs)))
        people[creator] = ""
    if kept:
        lines.append(say("reset_followups_kept", message.text, n=len(kept)))
    return Said("\n".join(lines), people)
