"""Structural checks on the requests the product sends. Pure: each takes recorded request bodies and says what is wrong.

- breakpoints: at most four, the system's first block marked; a turn's batch block marked;
- prefix: the next turn's request of a route starts with this one's history and batch, byte for byte;
- tools: one list for every turn request of the deployment; every property of a custom tool described;
- duplicates: no message shown twice (its id as a whole message), no long text block twice;
- placeholders: no raw `[interactive]`; times are ISO 8601 with offset (no epoch numbers in time attributes).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from claude.cache import marks

_WHOLE = re.compile(r'<(?:message|thread_message|quoted) [^>]*?message_id="([^"]+)"')
_EPOCH_TIME = re.compile(r'\b(?:time|at|set_at|due|updated)="\d{9,}(?:\.\d+)?"')
LONG_BLOCK = 200  # characters: a text block this long appearing twice is a duplicate


def _blocks(content: Any) -> list[dict[str, Any]]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else [b for b in content or []
                                                                                 if isinstance(b, dict)]


def _texts(body: Mapping[str, Any]) -> list[str]:
    out = []
    for m in body.get("messages") or []:
        for b in _blocks(m.get("content")):
            if b.get("type") == "text":
                out.append(str(b.get("text", "")))
            elif b.get("type") == "tool_result":
                inner = b.get("content")
                out.append(inner if isinstance(inner, str) else "".join(str(x.get("text", ""))
                                                                         for x in _blocks(inner)))
    return out


def turn_index(body: Mapping[str, Any]) -> int | None:
    """The index of the message that opens with the turn's batch (its first block holds `<message` elements)."""
    messages = list(body.get("messages") or [])
    for i in range(len(messages) - 1, -1, -1):
        m = messages[i]
        first = _blocks(m.get("content"))[:1]
        if m.get("role") == "user" and first and first[0].get("type") == "text" and \
                "<message " in str(first[0].get("text")) and len(_blocks(m.get("content"))) > 1:
            return i
    return None


def breakpoints(body: Mapping[str, Any], turn: bool = True) -> list[str]:
    system = body.get("system") or []
    system = [{"type": "text", "text": system}] if isinstance(system, str) else system
    problems = []
    count = marks(system, body.get("messages") or [])
    if count > 4:
        problems.append(f"{count} cache breakpoints (at most 4)")
    if not system or not system[0].get("cache_control"):
        problems.append("the system's first block is not a breakpoint")
    at = turn_index(body) if turn else None
    if turn and at is None:
        problems.append("no turn message (batch block first, then the turn's context)")
    elif turn and at is not None:
        first = _blocks(body["messages"][at]["content"])[0]
        if not first.get("cache_control"):
            problems.append("the batch block is not a breakpoint")
    return problems


def described(body: Mapping[str, Any]) -> list[str]:
    """Every custom tool has a description, and so does every property of its input schema."""
    problems = []
    for tool in body.get("tools") or []:
        if "input_schema" not in tool:
            continue  # an Anthropic-defined tool (memory): its schema is the API's
        if len(str(tool.get("description") or "")) < 80:
            problems.append(f"{tool.get('name')}: description too short to say what it does and returns")
        for name, prop in (tool["input_schema"].get("properties") or {}).items():
            if not str(prop.get("description") or "").strip():
                problems.append(f"{tool.get('name')}.{name}: no description")
    return problems


def duplicates(body: Mapping[str, Any]) -> list[str]:
    problems = []
    texts = _texts(body)
    seen: dict[str, int] = {}
    for t in texts:
        for mid in _WHOLE.findall(t):
            seen[mid] = seen.get(mid, 0) + 1
    problems += [f"message {mid} shown whole {n} times" for mid, n in seen.items() if n > 1]
    long = [t for t in texts if len(t) >= LONG_BLOCK]
    problems += [f"a {len(t)}-character block appears twice" for t in set(long) if long.count(t) > 1]
    return problems


def placeholders(body: Mapping[str, Any]) -> list[str]:
    problems = []
    sent = "\n".join(_texts(body))
    if "[interactive]" in sent:
        problems.append("a card shown as [interactive]")
    if found := _EPOCH_TIME.search(sent):
        problems.append(f"a time not in ISO 8601: {found.group(0)}")
    return problems


def _bare(value: Any) -> Any:
    """`value` without cache_control markers and with string contents as text blocks (the same prompt)."""
    if isinstance(value, list):
        return [_bare(v) for v in value]
    if isinstance(value, dict):
        out = {k: _bare(v) for k, v in value.items() if k != "cache_control"}
        if "role" in out and isinstance(out.get("content"), str):
            out["content"] = [{"type": "text", "text": out["content"]}]
        return out
    return value


def prefix_kept(earlier: Mapping[str, Any], later: Mapping[str, Any]) -> list[str]:
    """`later` (the route's next turn request) starts with `earlier`'s history and batch block, byte for byte."""
    at = turn_index(earlier)
    if at is None:
        return ["the earlier request has no turn message"]
    head = _bare(list(earlier["messages"][:at]))
    batch = _bare(_blocks(earlier["messages"][at]["content"])[0])
    msgs = _bare(list(later.get("messages") or []))
    if msgs[:at] != head:
        diverged = next((i for i, (a, b) in enumerate(zip(msgs, head, strict=False)) if a != b), min(len(msgs), at))
        return [f"history rewritten from message {diverged} on"]
    if len(msgs) <= at or not msgs[at]["content"] or msgs[at]["content"][0] != batch:
        return [f"the batch block of message {at} is not kept as sent"]
    return []


def one_tool_list(bodies: Sequence[Mapping[str, Any]]) -> list[str]:
    lists = {json.dumps(b.get("tools"), sort_keys=True, ensure_ascii=False) for b in bodies}
    return [] if len(lists) <= 1 else [f"{len(lists)} different tool lists across turn requests"]


def request_problems(body: Mapping[str, Any], turn: bool = True) -> list[str]:
    """Every per-request check."""
    return [*breakpoints(body, turn), *described(body), *duplicates(body), *placeholders(body)]
