"""Context assembly for one turn: fixed system prefix, bounded route history, the attributed batch.

Pure functions. The full session engine (rotation, compression, recall) replaces the history part
later; the turn only asks this module for `system` and `messages`.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from datetime import tzinfo
from typing import Any, TypedDict

from claude.guide import guide
from core.clock import iso_ms
from core.inbound import Inbound

SYSTEM_PROMPT = guide()  # the rules and the element glossary (claude/guide.py), the same for every route


class _Entry(TypedDict):
    role: str
    text: str


class Entry(_Entry, total=False):
    """One entry of a session's history: a user batch or an answer; an answer may carry the tool rounds of its turn
    (assistant tool calls and user tool results, as the requests carried them: claude/rounds.py)."""

    rounds: list[dict[str, Any]]


def system_blocks(persona: str = "", team_notes: str = "", notes: str = "", bot_name: str = "") -> list[dict[str, Any]]:
    """The stable, cache-friendly prefix: the rules and the element glossary, the operator's persona and standing team
    notes (one cached block, the same for every route of the deployment); then the shared notes of the memory scope,
    which change rarely. Nothing per-turn or time-dependent goes here."""
    text = guide(bot_name) if bot_name else SYSTEM_PROMPT
    if persona:
        text += f"\n\nWho you are (set by the operator):\n{persona}"
    if team_notes:
        text += f"\n\nStanding team notes (set by the operator):\n{team_notes}"
    blocks: list[dict[str, Any]] = [{"type": "text", "text": text, "cache_control": {"type": "ephemeral"}}]
    if notes:
        blocks.append({"type": "text", "text": notes})
    return blocks


def estimate_tokens(text: str) -> int:
    """A conservative estimate without a network call (CJK ~1 token/char, Latin ~4 chars/token)."""
    return math.ceil(len(text.encode("utf-8")) / 3)


def format_batch(batch: Sequence[Inbound], bodies: Sequence[str | None] = (), *, names: Mapping[str, str] | None = None,
                 quotes: Sequence[str | None] = (), tz: tzinfo | None = None) -> str:
    """Each message in a `<message sender=… message_id=… name=… time=…>` element. Text is escaped like the attributes,
    so no user can close the element and open one attributed to somebody else. `bodies[i]`, when given, replaces
    message i's text: already escaped content built from it (turn/batch_content.py); `quotes[i]`: the `<quoted>`
    element of the message it replies to, inlined before its text; `names`: open_id → display name; `tz`: the zone of
    the `time` attribute (ISO 8601 with offset)."""
    parts = []
    for i, m in enumerate(batch):
        body = bodies[i] if i < len(bodies) and bodies[i] is not None else html.escape(m.text, quote=False)
        quote = quotes[i] if i < len(quotes) and quotes[i] else ""
        parts.append(f"<message {message_attrs(m, names, tz)}>\n{quote + chr(10) if quote else ''}{body}\n</message>")
    return "\n".join(parts)


def message_attrs(m: Inbound, names: Mapping[str, str] | None = None, tz: tzinfo | None = None) -> str:
    """sender and message_id first (what parsers of a logged batch rely on), then name, time and what it quotes."""
    attrs = f'sender="{html.escape(m.sender_id)}" message_id="{html.escape(m.message_id)}"'
    name = (names or {}).get(m.sender_id)
    if name:
        attrs += f' name="{html.escape(name)}"'
    if tz is not None and m.create_time and m.create_time.isdigit():
        attrs += f' time="{iso_ms(int(m.create_time), tz)}"'
    if m.parent_id and not m.thread_id:  # in a topic every message's parent is its root: structure, not a quote
        attrs += f' quotes="{html.escape(m.parent_id)}"'
    return attrs


def fit_history(history: Sequence[Entry], available: int) -> list[Entry]:
    """Newest turns that fit `available` tokens, starting with a user turn and alternating roles."""
    kept: list[Entry] = []
    used = 0
    for entry in reversed(history):
        cost = estimate_tokens(entry["text"])
        if used + cost > available:
            break
        kept.append(entry)
        used += cost
    kept.reverse()
    while kept and kept[0]["role"] != "user":
        kept.pop(0)
    return _alternating(kept)


def _alternating(entries: list[Entry]) -> list[Entry]:
    out: list[Entry] = []
    for e in entries:
        if out and out[-1]["role"] == e["role"]:
            out[-1] = Entry(role=e["role"], text=out[-1]["text"] + "\n" + e["text"])
        else:
            out.append(e)
    while out and out[-1]["role"] == "user":  # the batch is the final user turn
        out.pop()
    return out


def assemble(history: Sequence[Entry], batch_text: str, budget: int) -> list[dict[str, Any]]:
    """Messages for one request, within `budget` input tokens (system + history + batch)."""
    fixed = estimate_tokens(SYSTEM_PROMPT) + estimate_tokens(batch_text)
    available = max(0, budget - fixed)
    turns = fit_history(history, available)
    messages = [{"role": e["role"], "content": e["text"]} for e in turns]
    messages.append({"role": "user", "content": batch_text})
    return messages


def session_messages(summary: str, turns: Sequence[Entry], batch_text: str) -> list[dict[str, Any]]:
    """A session's request: its summary (if it began with one) first, then its turns, then the batch.

    Consecutive requests of a session share everything but the batch as a byte-identical prefix (only a
    rotation rewrites it), which is what the prompt cache needs. Same-role neighbours are joined; a
    trailing user turn (the summary alone, or a turn left unanswered) is joined with the batch. An answer's tool
    rounds come back as they were sent, between its batch and its text.
    """
    entries = ([Entry(role="user", text=summary)] if summary else []) + list(turns)
    while entries and entries[0]["role"] != "user":
        entries.pop(0)
    out: list[dict[str, Any]] = []
    for e in [*entries, Entry(role="user", text=batch_text)]:
        rounds = e.get("rounds") or []
        if rounds and out and out[-1]["role"] == "user" and _alternate(rounds):
            out += [{"role": r["role"], "content": r["content"]} for r in rounds]
        if out and out[-1]["role"] == e["role"] and isinstance(out[-1]["content"], str):
            out[-1] = {"role": e["role"], "content": out[-1]["content"] + "\n" + e["text"]}
        else:
            out.append({"role": e["role"], "content": e["text"]})
    return out


def _alternate(rounds: Sequence[dict[str, Any]]) -> bool:
    """Tool rounds as stored: assistant tool calls and user tool results, in turn, ending with the results."""
    return len(rounds) % 2 == 0 and all(r.get("role") == ("assistant", "user")[i % 2] and isinstance(r.get("content"),
                                                                                                      list)
                                        for i, r in enumerate(rounds))
