"""Where a request's prompt-cache breakpoints go. Pure.

The API caches the prefix tools → system → messages up to each block marked `cache_control` (at most four), and a
later request reads the longest prefix it finds within 20 blocks before each of its own marks (Anthropic's prompt
caching guide, "How automatic prefix checking works"). A turn's request is laid out for it (turn/rotation.py):

    tools (one list for every route) · system[0] (rules, glossary, persona) ① · system[1] (rarely: old notes)
    history as every earlier request carried it … ② · the batch ③ · images · the turn's context · tool rounds … ④

① the deployment's shared prefix (any route's first request reads it); ② the end of the history; ③ the batch: the
session log keeps exactly this block, so the next turn's request finds it again (its context block, read fresh for
each request, comes after it and is never part of a later prefix); ④ the end, so the next round of the tool loop
reads everything before it. A request without a turn (a compression, an analysis, a check) gets ① and ④ and keeps
what its builder marked itself (a first answer's materials), dropping the oldest of those beyond four.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

MARK = {"type": "ephemeral"}
MAX_MARKS = 4


def with_breakpoints(system: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]],
                     turn: int | None = None) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Copies of `system` and `messages` with their breakpoints; `turn`: the index of the message holding the turn's
    batch as its first block (None: a request without a session turn)."""
    sys_blocks = [dict(b) for b in system]
    for b in sys_blocks[1:]:
        b.pop("cache_control", None)
    if sys_blocks:
        sys_blocks[0]["cache_control"] = dict(MARK)
    msgs = [dict(m) for m in messages]
    wanted: list[tuple[int, int]] = []  # (message, block) to mark, earliest first
    if turn is not None and 0 <= turn < len(msgs):
        if turn > 0:
            wanted.append((turn - 1, _count(msgs[turn - 1]) - 1))
        wanted.append((turn, 0))
    else:
        wanted += [(i, j) for i, m in enumerate(msgs) if isinstance(m.get("content"), list)
                   for j, b in enumerate(m["content"]) if isinstance(b, dict) and b.get("cache_control")]
    if msgs:
        wanted.append((len(msgs) - 1, _count(msgs[-1]) - 1))
    chosen = list(dict.fromkeys(w for w in wanted if w[1] >= 0))[-(MAX_MARKS - (1 if sys_blocks else 0)):]
    for i, m in enumerate(msgs):
        if isinstance(m.get("content"), list) or i in {c[0] for c in chosen}:
            msgs[i] = _plain(m)
            for b in msgs[i]["content"]:
                b.pop("cache_control", None)
    for i, j in chosen:
        msgs[i]["content"][j]["cache_control"] = dict(MARK)
    return sys_blocks, msgs


def _count(message: dict[str, Any]) -> int:
    content = message.get("content")
    return 1 if isinstance(content, str) else len(content or [])


def _plain(message: dict[str, Any]) -> dict[str, Any]:
    """A message with its content as a list of blocks (a string becomes one text block: the same prompt to the API)."""
    content = message.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else copy.deepcopy(list(content or []))
    return {**message, "content": blocks}


def marks(system: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]]) -> int:
    """How many breakpoints a request carries (tests and the evals check there are at most four). Pure."""
    found = sum(1 for b in system if isinstance(b, dict) and b.get("cache_control"))
    for m in messages:
        content = m.get("content")
        if isinstance(content, list):
            found += sum(1 for b in content if isinstance(b, dict) and b.get("cache_control"))
    return found
