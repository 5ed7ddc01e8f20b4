"""Long-term memory's Redis keys: each scope's files, meta, undo stack, changelog and routes; the changed and known
scopes; consolidation slots; chat owners."""

from __future__ import annotations

from core.keys import Keys


def memory_files(k: Keys, scope: str) -> str:
    """HASH path → JSON {text, author, at, version, chars}: one scope's files (memory/scopes/store.py)."""
    return f"{k.prefix}:mem:{{{scope}}}:files"


def memory_meta(k: Keys, scope: str) -> str:
    """HASH version, chars, updated_at, updated_by, dreamed_at of one scope."""
    return f"{k.prefix}:mem:{{{scope}}}:meta"


def memory_undo(k: Keys, scope: str) -> str:
    """LIST of the scope's last changes (the files' previous states), newest first, for /memory undo."""
    return f"{k.prefix}:mem:{{{scope}}}:undo"


def memory_log(k: Keys, scope: str) -> str:
    """LIST of the scope's changelog lines (consolidations, undos), newest first."""
    return f"{k.prefix}:mem:{{{scope}}}:log"


def memory_changed(k: Keys) -> str:
    """ZSET scope → time of its last change (what a consolidation slot looks at)."""
    return f"{k.prefix}:mem:changed"


def memory_scopes(k: Keys) -> str:
    """ZSET scope → time of its last change, never trimmed: every scope that holds memory (admin, console)."""
    return f"{k.prefix}:mem:scopes"


def memory_dream_slot(k: Keys, slot: int) -> str:
    """STRING set once a consolidation slot's events were pushed (every sweeper checks it; 7 days)."""
    return f"{k.prefix}:mem:dreamed:{slot}"


def memory_routes(k: Keys, scope: str) -> str:
    """ZSET route key → last turn: the routes a scope's memory was loaded in (consolidation reads their day); only
    for scopes that hold memory, the newest 50, expiring 2 days after the last (memory/scopes/part.py)."""
    return f"{k.prefix}:mem:{{{scope}}}:routes"


def chat_owner(k: Keys, chat_id: str) -> str:
    """STRING the chat's owner open_id (GET chat), cached briefly; "" = none known."""
    return f"{k.prefix}:chat:owner:{chat_id}"
