"""How a run walks its batch: messages sent before a user reset, commands, and turns. Pure.

A batch (the route's `proc` list) is consumed front to back in segments, each committed on its own:
- `stale`: messages stored under an older generation than the route's — a user reset came after them;
  they are consumed unanswered (the reset's confirmation says how many);
- `command`: one `/reset` or `/status` (bot/commands.py) — answered by the service, not the model;
- `turn`: the longest run of other messages (unreadable entries included: they are dead-lettered with
  the turn's commit) — one model turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from bot.commands import command_of
from bot.envelope import Inbound

STALE, COMMAND, TURN = "stale", "command", "turn"


@dataclass(frozen=True)
class Segment:
    kind: str
    n: int  # entries of the batch, from its front
    command: str | None = None


def _kind(item: Inbound | None, gen: int) -> tuple[str, str | None]:
    if item is None:
        return TURN, None
    if item.gen is not None and item.gen < gen:
        return STALE, None
    command = command_of(item.message_type, item.text)
    return (COMMAND, command) if command else (TURN, None)


def next_segment(items: Sequence[Inbound | None], gen: int) -> Segment:
    """The segment at the front of `items` (None = an unreadable entry), for a route at generation `gen`."""
    first, command = _kind(items[0], gen)
    if first == COMMAND:
        return Segment(COMMAND, 1, command)
    n = 1
    while n < len(items) and _kind(items[n], gen)[0] == first:
        n += 1
    return Segment(first, n)
