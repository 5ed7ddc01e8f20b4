"""Tables the features declare (`Feature.panels`, turn/registry.py): a page of each one's own under
`/console/f/<feature>/<name>`, in the menu; those of an item are on the item's page (console/items.py). The console
names no feature: it shows what the App lists, every value as text."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from flask import abort

from console.web import bp, page, rt
from turn.registry import app_of

ROWS_SHOWN = 500


def rows_of(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, str]]:
    """A feature's rows as the page shows them: strings (autoescaped), at most ROWS_SHOWN."""
    return [{str(k): "" if v is None else str(v) for k, v in row.items()} for row in list(rows)[:ROWS_SHOWN]]


def item_panels(item_id: str) -> list[tuple[str, str, list[dict[str, str]]]]:
    """(name, title, rows) of every feature's tables of one item."""
    return [(f"{name}-{p.name}", p.title, rows_of(p.rows(rt(), item_id)))
            for name, p in app_of(rt()).panels(of_item=True)]


@bp.get("/f/<feature>/<name>")
def feature_page(feature: str, name: str) -> str:
    found = next((p for f, p in app_of(rt()).panels(of_item=False) if f == feature and p.name == name), None)
    if found is None:
        abort(404)
    return page("panel.html", name=f"{feature}-{name}", title=found.title, rows=rows_of(found.rows(rt(), "")))
