"""An inbox batch as the drain sees it: entries parsed into messages, its id, who sent what. Pure."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from pydantic import ValidationError

from core.inbound import CARD_ACTION_TYPE, RECORD_CHANGED_TYPE, TIMER_TYPE, Inbound


def batch_id_of(raw: list[str]) -> str:
    return hashlib.sha256("\x1f".join(raw).encode("utf-8")).hexdigest()[:24]


@dataclass(frozen=True)
class Parsed:
    readable: list[Inbound]
    unreadable: list[str]


def parse_one(item: str) -> Inbound | None:
    try:
        return Inbound.model_validate_json(item)
    except (ValidationError, ValueError):
        return None


def parse(raw: list[str]) -> Parsed:
    readable, unreadable = [], []
    for item in raw:
        inbound = parse_one(item)
        if inbound is None:
            unreadable.append(item)
        else:
            readable.append(inbound)
    return Parsed(readable, unreadable)


def index_ids(batch: list[Inbound | None]) -> list[str]:
    """The chat, person and topic ids a batch's people's messages are looked up by (the route indexes); the service's
    own entries (card clicks, record changes, timers) name none."""
    found: list[str] = []
    for m in batch:
        if m is not None and m.message_type not in (CARD_ACTION_TYPE, RECORD_CHANGED_TYPE, TIMER_TYPE):
            found += [m.chat_id, m.sender_id, m.thread_id or ""]
    return found


def ids(raw: list[str]) -> list[str]:
    return [m.message_id for m in parse(raw).readable]


def last_per_sender(batch: list[Inbound]) -> list[Inbound]:
    """Each sender's last message of the batch, in batch order (one notice per person)."""
    last: dict[str, Inbound] = {}
    for m in batch:
        last[m.sender_id] = m
    return sorted(last.values(), key=batch.index)
