"""The fault scenarios, one module per family; `load_all` imports them so they register in `base.REGISTRY`."""

from __future__ import annotations

from chaos.scenarios.base import REGISTRY, Scenario


def load_all() -> dict[int, Scenario]:
    from chaos.scenarios import (  # noqa: F401  (they register)
        crashes,
        edges,
        faults,
        hooks,
        hosts,
        items,
        memory,
        outages,
        scopes,
        sentinel,
        soak,
        streaming,
        wakeups,
    )

    return dict(sorted(REGISTRY.items()))
