"""Keys of what the assistant remembers about messages: recalled and edited ones, the retired notes, the group
discussion that did not address it."""

from __future__ import annotations

from core.keys import Keys


def withdrawn(k: Keys, chat_id: str) -> str:
    """HASH message id → JSON {recalled | edited text}: recalled and edited messages of a chat."""
    return f"{k.prefix}:withdrawn:{chat_id}"


def withdrawn_order(k: Keys, chat_id: str) -> str:
    """ZSET message id → time noted: which notes of the chat are oldest (the chat keeps the newest)."""
    return f"{k.prefix}:withdrawn:{chat_id}:order"


def notes(k: Keys, scope: str) -> str:
    """HASH note id → JSON: shared notes of one memory scope (memory/notes.py)."""
    return f"{k.prefix}:notes:{scope}"


def related(k: Keys, chat_id: str) -> str:
    """ZSET of a normal group's recent messages that did not address the bot (memory/related.py)."""
    return f"{k.prefix}:related:{chat_id}"
