"""Every feature, registered: importing its registration module puts its entries in turn/registry.py. A new feature
is one new room plus one line here. Each process entry point (web, worker, sweeper, long connection) calls `load()`
once; importing is idempotent."""

from __future__ import annotations

# The order here is not the order of parts in a turn (each Feature carries its own `order`).
from items import feature as items_feature
from materials import feature as materials_feature
from memories import feature as memories_feature
from notes import feature as notes_feature
from timers import feature as timers_feature
from triage import feature as triage_feature
from turn import registry
from turn import session as turn_session

LOADED = (turn_session, items_feature, materials_feature, memories_feature, notes_feature, timers_feature,
          triage_feature)


def load() -> None:
    """Make sure every feature is registered (they are, once this module is imported)."""
    assert all(LOADED) and registry.FEATURES
