"""Materials as a feature (`FEATURE`): the documents a turn shows, the read_document tool, the evidence
line of the reply (naming the first-answer version the items part relied on, too), and the revisions a route used.
The turn learns of documents only through this entry."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from core.texts import say
from documents.selection import READ_DOCUMENT
from materials import evidence
from turn.registry import Feature, Part, Turn


class MaterialsPart(Part):
    def __init__(self, turn: Turn, items: Part | None) -> None:
        self.turn, self.items = turn, items
        previous = turn.previous.get("documents") or []  # where the session's last turn's reading stopped
        listed = list(getattr(items, "materials", []) or [])
        self.materials = evidence.materials_for(turn.rt, turn.rk, turn.session_id, turn.batch, turn.text, listed,
                                                previous)
        if items is not None and self.materials.evidence():
            items.footer_merged = True  # one evidence line names the documents and the first-answer version

    def block(self) -> str:
        return self.materials.block

    def prefix(self) -> str:
        return "\n".join(self.materials.notes)

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        if name != READ_DOCUMENT["name"]:
            return None
        cursor = args.get("cursor")
        return self.materials.read_on(str(args.get("document") or ""), cursor if isinstance(cursor, int) else 0, room)

    def sent(self, request_text: str) -> None:
        self.materials.sent(request_text)

    def record(self) -> dict[str, Any]:
        return {"documents": self.materials.ledger()} if self.materials.uses else {}

    def footer(self, text: str) -> str:
        docs = self.materials.evidence()
        if not docs:
            return ""
        item_evidence = str(getattr(self.items, "evidence", "") or "")
        line = say("evidence", text, parts="；".join([*docs, *([item_evidence] if item_evidence else [])]))
        pending = str(getattr(self.items, "own_footer", "") or "")
        if pending and not item_evidence:  # the analysis is pending or failed: said as well
            line += "\n" + pending
        return line

    def kept(self) -> None:
        evidence.remember(self.turn.rt, self.turn.rk, self.materials)  # a rerun before it still says "updated"


def start(turn: Turn, parts: Mapping[str, Part]) -> MaterialsPart:
    return MaterialsPart(turn, parts.get("items"))


FEATURE = Feature("materials", order=20, start=start, tools=lambda _kind: [READ_DOCUMENT])
