"""A turn's tool rounds as the session's history keeps them: the model's calls and the results it read, so the next
turn's request carries them exactly as this turn's last request did (a byte-stable prefix) and the model remembers
what it looked up. Pure.

Kept within ROUNDS_SHARE of the input budget: past it, the oldest results give way to a short marker (the calls
stay). A result whose content depends on who asks (a document, a person's memory: the part says so, `Part.keeps`)
is never kept: a later turn, perhaps another person's, reads it again with its own rights.
"""

from __future__ import annotations

import json
from collections.abc import Sequence, Set
from typing import Any

from claude import budget as bud

ROUNDS_SHARE = 0.25
NOT_KEPT = ('<result_not_kept reason="room"/> This result was read in that turn and is not kept; call the tool again '
            "if it is needed.")
PRIVATE = ('<result_not_kept reason="per_asker"/> Documents and memory are read again for each asker with their '
           "rights; call the tool again if it is needed.")


def kept_rounds(after: Sequence[dict[str, Any]], private: Set[str], b: bud.Budget) -> list[dict[str, Any]]:
    """The messages after the turn's own (assistant calls, user results, in turn) as its history keeps them."""
    rounds = [_message(m, private) for m in after]
    if len(rounds) % 2 or not rounds:
        return []
    cap = int(b.total * ROUNDS_SHARE)
    for m in rounds:
        if _cost(b, rounds) <= cap:
            break
        if m["role"] == "user":
            m["content"] = [{**x, "content": NOT_KEPT} if x.get("type") == "tool_result" else x
                            for x in m["content"]]
    return rounds if _cost(b, rounds) <= cap else []


def _message(m: dict[str, Any], private: Set[str]) -> dict[str, Any]:
    content = m.get("content")
    blocks = [{"type": "text", "text": content}] if isinstance(content, str) else [dict(x) for x in content or []]
    for x in blocks:
        x.pop("cache_control", None)
        if x.get("type") == "tool_result" and x.get("tool_use_id") in private:
            x["content"] = PRIVATE
    return {"role": m["role"], "content": blocks}


def _cost(b: bud.Budget, rounds: Sequence[dict[str, Any]]) -> int:
    return b.scaled(bud.estimate_tokens(json.dumps(list(rounds), ensure_ascii=False)))
