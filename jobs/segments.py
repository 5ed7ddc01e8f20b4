"""How a run walks its batch: messages sent before a user reset, entries the service answers, and turns. Pure over
the App (turn/registry.py).

A batch (the route's `proc` list) is consumed front to back in segments, each committed on its own:
- `stale`: messages stored under an older generation than the route's — a user reset came after them;
  they are consumed unanswered (the reset's confirmation says how many);
- `command`: one registered chat command (`/reset`, `/status`, `/登记`, `/followups` …), one registered event (a
  card click — never stale: a decision outlives a reset —, a timer's wake-up, stale like a message), or one
  message a registered opener claims (a topic's opening report, when items are on); answered by the service, not
  the model;
- `turn`: the longest run of other messages (unreadable entries included: they are dead-lettered with
  the turn's commit) — one model turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from core.inbound import Inbound
from turn.registry import App

STALE, COMMAND, TURN = "stale", "command", "turn"


@dataclass(frozen=True)
class Segment:
    kind: str
    n: int  # entries of the batch, from its front
    command: str | None = None  # the command's, event's (its message type) or opener's name


def _kind(item: Inbound | None, gen: int, app: App, route_kind: str, settings: Any) -> tuple[str, str | None]:
    if item is None:
        return TURN, None
    event = app.events.get(item.message_type)
    if event is not None and not event.stale_after_reset:
        return COMMAND, item.message_type
    if item.gen is not None and item.gen < gen:
        return STALE, None
    if event is not None:
        return COMMAND, item.message_type
    command = app.command_of(item.message_type, item.text)
    if command is not None:
        return COMMAND, command.name
    for o in app.openers:
        if settings is not None and o.applies(item, route_kind, settings):
            return COMMAND, o.name
    return TURN, None


def next_segment(items: Sequence[Inbound | None], gen: int, app: App, route_kind: str = "",
                 settings: Any = None) -> Segment:
    """The segment at the front of `items` (None = an unreadable entry), for a route of `route_kind` at generation
    `gen`, by the App's commands, events and openers. `settings` decide whether an opener applies (e.g.
    ITEM_CREATE_POLICY=topic_root); None: none does."""
    first, command = _kind(items[0], gen, app, route_kind, settings)
    if first == COMMAND:
        return Segment(COMMAND, 1, command)
    n = 1
    while n < len(items) and _kind(items[n], gen, app, route_kind, settings)[0] == first:
        n += 1
    return Segment(first, n)
