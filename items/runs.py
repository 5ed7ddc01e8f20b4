"""What an item route's run does: an item's analysis or a record change, one entry at a time (registered by
items/feature.py; the drain runs it inside its failure handling)."""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from core.errors import Permanent
from core.inbound import RECORD_CHANGED_TYPE, Inbound
from items.claim import ANALYSIS, record_changed
from items.first_answer import FirstAnswer
from runs.runtime import Runtime

log = logging.getLogger(__name__)


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
