"""Materials' Redis keys: the document revisions a route last used."""

from __future__ import annotations

from core.keys import Keys


def docs_seen(k: Keys, rk: str) -> str:
    """HASH document → the revision this route last used (an update since is said to the model)."""
    return k.tagged("docs_seen", rk)
