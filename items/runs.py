"""What a run does with item work: an item route's analysis or record change, an item command, a topic's
opening report, a click on an approval card. Called by jobs/drain.py inside its failure handling."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from core.errors import Permanent
from core.inbound import Inbound
from edge.side_events import RECORD_CHANGED_TYPE
from items import approvals
from items.claim import ANALYSIS, item_command, open_from_topic, record_changed
from items.first_answer import FirstAnswer
from jobs.segments import CARD, ITEM_OPEN
from routing.keys import kind_of
from runs.runtime import Runtime

log = logging.getLogger(__name__)
ITEM_COMMANDS = ("item_new", "item_link", ITEM_OPEN, CARD)


def item_entry(rt: Runtime, rk: str, message: Inbound, fence: Callable[[], bool]) -> str:
    """One entry of an item route (`feishu:<profile>:item:…`)."""
    content = json.loads(message.content)
    if message.message_type == ANALYSIS:
        if rt.bitable is None:
            return "items-off"
        outcome = FirstAnswer(rt, rk, str(content["item_id"]), fence).run()
    elif message.message_type == RECORD_CHANGED_TYPE:
        outcome = record_changed(rt, rk, str(content["record_id"]), fence)
    else:
        raise Permanent(f"unknown item work {message.message_type}", source="items", code="unknown")
    log.info("item work done", extra={"route_key": rk, "reason": f"{message.message_type}:{outcome}"})
    return outcome


def item_gave_up(rt: Runtime, rk: str, message: Inbound, reason: str, fence: Callable[[], bool]) -> None:
    """An analysis that gave up shows `failed` on its card and in its record (best effort)."""
    if message.message_type != ANALYSIS:
        return
    try:
        FirstAnswer(rt, rk, str(json.loads(message.content)["item_id"]), fence).fail(reason)
    except Exception as exc:  # the dead letter is kept either way; an admin can replay it
        log.warning("could not mark the first answer failed", extra={"route_key": rk, "error": str(exc)})


def item_segment(rt: Runtime, rk: str, message: Inbound, command: str, batch_id: str,
                 fence: Callable[[], bool]) -> None:
    """An item command, a topic's opening report or an approval click, on a chat route."""
    if command == ITEM_OPEN:
        if rt.bitable is not None:
            open_from_topic(rt, message, "topic_root")  # its first-answer card is the reply
        return
    if command == CARD:
        approvals.decide(rt, rk, message, batch_id, fence)
        return
    text = item_command(rt, rk, message, command, fence)
    rt.outbox.reply(rk, batch_id, message.message_id, text, chat_id=message.chat_id,
                    in_thread=kind_of(rk) == "topic", fence=fence)
