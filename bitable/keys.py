"""Items' Redis keys (the index of items, their records and first answers: bitable/index.py) and the items table's
start-up check, over core's key primitive. The strings are those every release wrote: existing data keeps working."""

from __future__ import annotations

from core.keys import Keys


def item(k: Keys, item_id: str) -> str:
    """HASH of one item: record_id, chat_id, thread_id, root_id, reporter, origin, answer_message_id, …"""
    return f"{k.prefix}:item:{{{item_id}}}"


def item_guard(k: Keys, item_id: str) -> str:
    """STRING lock while one run decides the item's record (find, create, link): one item, one record."""
    return f"{k.prefix}:item:{{{item_id}}}:guard"


def item_versions(k: Keys, item_id: str) -> str:
    """LIST of the item's first-answer versions (JSON), oldest first."""
    return f"{k.prefix}:item:{{{item_id}}}:versions"


def item_sessions(k: Keys, item_id: str) -> str:
    """ZSET session id → when a turn of it first worked on the item."""
    return f"{k.prefix}:item:{{{item_id}}}:sessions"


def item_routes(k: Keys, item_id: str) -> str:
    """ZSET route key → when it last worked on the item."""
    return f"{k.prefix}:item:{{{item_id}}}:routes"


def item_runs(k: Keys, item_id: str) -> str:
    """LIST of the item's analysis runs (JSON)."""
    return f"{k.prefix}:item:{{{item_id}}}:runs"


def items_by_thread(k: Keys) -> str:
    return f"{k.prefix}:items:by_thread"


def items_by_record(k: Keys) -> str:
    return f"{k.prefix}:items:by_record"


def items_by_route(k: Keys) -> str:
    """HASH route key → the item its latest turn worked on (topic routes are found by their thread)."""
    return f"{k.prefix}:items:by_route"


def items_order(k: Keys) -> str:
    """ZSET item id → creation time."""
    return f"{k.prefix}:items:order"


def bitable_status(k: Keys) -> str:
    """HASH of the Bitable start-up check (schema, subscription), read by /readyz."""
    return f"{k.prefix}:bitable:status"
