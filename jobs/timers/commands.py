"""`/followups`, `/cancel <id>` and what `/reset` does to follow-ups: answered by the service, not the model."""

from __future__ import annotations

import logging
from datetime import datetime

from bot import metrics
from bot.edge.commands import cancel_argument
from bot.edge.envelope import Inbound
from bot.texts import say
from jobs.runtime import Runtime
from jobs.timers.model import CANCELLED, Timer

log = logging.getLogger(__name__)
WHAT_CHARS = 60


def when_text(rt: Runtime, t: Timer) -> str:
    return t.understood or datetime.fromtimestamp(t.due, rt.settings.tz).strftime("%m月%d日 %H:%M")


def list_text(rt: Runtime, rk: str, message: Inbound) -> str:
    pending = sorted(rt.timers.pending_of(rk), key=lambda t: t.due)
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


def cancel_text(rt: Runtime, rk: str, message: Inbound) -> str:
    timer_id = cancel_argument(message.text)
    if not timer_id:
        return say("cancel_usage", message.text)
    t = rt.timers.get(timer_id)
    if t is None or t.route_key != rk or t.kind != "followup":  # another route's timer is not named here
        return say("cancel_unknown", message.text, id=timer_id)
    done = {"id": t.id, "when": when_text(rt, t), "what": t.what[:WHAT_CHARS]}
    if t.state == CANCELLED and t.end_reason == f"cancel:{message.sender_id}":
        return say("cancel_done", message.text, **done)  # a rerun of this very command
    if t.state != "pending":
        return say("cancel_unknown", message.text, id=timer_id)
    if not may_cancel(rt, t, message.sender_id):
        log.info("follow-up cancel refused", extra={"route_key": rk, "reason": t.id, "message_id": message.message_id})
        return say("cancel_refused", message.text, id=timer_id)
    if rt.timers.end(t, CANCELLED, f"cancel:{message.sender_id}", rt.clock.now()):
        metrics.count(rt.state, rt.keys, "timers_cancelled", "command")
    return say("cancel_done", message.text, **done)


def may_cancel(rt: Runtime, t: Timer, who: str) -> bool:
    """Whoever set it, an admin (ITEM_ADMINS), or the item's owner or reporter read from the record now."""
    if not who:
        return False
    if who == t.created_by or who in rt.settings.item_admins:
        return True
    item = rt.items.get(t.item_id) if t.item_id else None
    if item is None or not item.record_id or rt.bitable is None:
        return False
    record = rt.bitable.batch_get([item.record_id]).get(item.record_id)
    if record is None:
        return False
    name = rt.bitable.schema().name
    return who in record.users(name("owner")) + record.users(name("reporter"))


def cancel_on_reset(rt: Runtime, rk: str, batch_id: str) -> int:
    """The route's pending follow-ups, cancelled once per reset batch (a rerun reports the same count)."""
    n = rt.timers.cancel_route(rk, rt.keys.sent(rk, batch_id), "followups_cancelled", "reset", rt.clock.now())
    if n:
        metrics.count(rt.state, rt.keys, "timers_cancelled", "reset", n=n)
    return n
