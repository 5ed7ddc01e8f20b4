"""How a run walks its batch: messages sent before a user reset, commands, and turns. Pure.

A batch (the route's `proc` list) is consumed front to back in segments, each committed on its own:
- `stale`: messages stored under an older generation than the route's — a user reset came after them;
  they are consumed unanswered (the reset's confirmation says how many);
- `command`: one `/reset`, `/status` or item command (edge/commands.py), one card button click, one timer
  event (a follow-up or triage wake-up, timers/; stale like a message when a reset came after it), or — with
  items on — the @bot message that opens a topic (it becomes an item; its first answer is the reply);
  answered by the service, not the model. A click is never stale: a decision outlives a reset;
- `turn`: the longest run of other messages (unreadable entries included: they are dead-lettered with
  the turn's commit) — one model turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from core.inbound import Inbound
from edge.commands import command_of
from edge.side_events import CARD_ACTION_TYPE
from memory.timer import TIMER_TYPE

STALE, COMMAND, TURN = "stale", "command", "turn"
CARD, ITEM_OPEN, TIMER = "card_action", "item_open", "timer"


@dataclass(frozen=True)
class Segment:
    kind: str
    n: int  # entries of the batch, from its front
    command: str | None = None


def opens_topic(item: Inbound) -> bool:
    """The first message of a real topic: it carries the thread id and is (or has no) root."""
    return bool(item.thread_id) and item.root_id in (None, "", item.message_id)


def _kind(item: Inbound | None, gen: int, items_on: bool) -> tuple[str, str | None]:
    if item is None:
        return TURN, None
    if item.message_type == CARD_ACTION_TYPE:
        return COMMAND, CARD
    if item.gen is not None and item.gen < gen:
        return STALE, None
    if item.message_type == TIMER_TYPE:  # a follow-up or triage wake-up (timers/): the service decides
        return COMMAND, TIMER
    command = command_of(item.message_type, item.text)
    if command:
        return COMMAND, command
    if items_on and opens_topic(item):
        return COMMAND, ITEM_OPEN
    return TURN, None


def next_segment(items: Sequence[Inbound | None], gen: int, items_on: bool = False) -> Segment:
    """The segment at the front of `items` (None = an unreadable entry), for a route at generation `gen`.
    `items_on`: an @bot message opening a topic becomes an item (ITEM_CREATE_POLICY=topic_root)."""
    first, command = _kind(items[0], gen, items_on)
    if first == COMMAND:
        return Segment(COMMAND, 1, command)
    n = 1
    while n < len(items) and _kind(items[n], gen, items_on)[0] == first:
        n += 1
    return Segment(first, n)
