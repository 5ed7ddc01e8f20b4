"""Materials as a feature (`FEATURE`): the documents a turn shows, the read_document tool, the evidence
line of the reply (naming the first-answer version the items part relied on, too), and the revisions a route used.
The turn learns of documents only through this entry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from documents.selection import READ_DOCUMENT
from materials import evidence
from materials.settings import MaterialsSettings
from turn.registry import Context, Feature, Part, ToolRefused


class MaterialsPart(Part):
    def __init__(self, turn: Context, listed: list[Any]) -> None:
        self.turn = turn
        previous = turn.previous.get("documents") or []  # where the session's last turn's reading stopped
        self.materials = evidence.materials_for(turn, listed, previous)

    def block(self) -> str:
        return self.materials.block

    def prefix(self) -> str:
        return "\n".join(self.materials.notes)

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        if name != READ_DOCUMENT["name"]:
            return None
        cursor = args.get("cursor")
        text = self.materials.read_on(str(args.get("document") or ""), cursor if isinstance(cursor, int) else 0, room)
        if text.startswith(("No such document", "<document_unavailable")):
            raise ToolRefused(text)  # a tool error (is_error): nothing of it was read
        return text

    def keeps(self, name: str) -> bool:
        return name != READ_DOCUMENT["name"]  # who may view a document is decided per asker, every turn

    def sent(self, request_text: str) -> None:
        self.materials.sent(request_text)

    def record(self) -> dict[str, Any]:
        return {"documents": self.materials.ledger()} if self.materials.uses else {}

    def evidence(self) -> list[str]:
        return list(self.materials.evidence())

    def kept(self) -> None:
        evidence.remember(self.turn.rt, self.turn.rk, self.materials)  # a rerun before it still says "updated"


def start(turn: Context, parts: Mapping[str, Part]) -> MaterialsPart:
    """Its part: the documents the batch links, and those the parts started before it name (an item's record)."""
    return MaterialsPart(turn, [link for p in parts.values() for link in p.links()])


FEATURE = Feature("materials", order=20, start=start, tools=lambda _kind: [READ_DOCUMENT],
                  settings=MaterialsSettings)
