"""Items' own Redis keys besides the index: proposed record changes awaiting approval, chat member caches."""

from __future__ import annotations

from core.keys import Keys


def proposal(k: Keys, proposal_id: str) -> str:
    """HASH of one proposed record change awaiting approval (items/approvals.py)."""
    return f"{k.prefix}:proposal:{proposal_id}"


def chat_members(k: Keys, chat_id: str) -> str:
    """SET of a chat's member open_ids, cached briefly for cross-chat item references."""
    return f"{k.prefix}:members:{chat_id}"
