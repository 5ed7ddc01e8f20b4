"""Notes as a feature (`FEATURE`): the notes the old `save_note` tool kept (MEMORY_SCOPE) are still shown
after the cached system prefix until `python -m memories.migrate` moves them into memory scopes (memories/); nothing
writes new ones (the memory tool does). The turn learns of notes only through this entry."""

from __future__ import annotations

from collections.abc import Mapping

from memory import notes
from memory.prompt import estimate_tokens
from turn.registry import Feature, Part, Turn


class NotesPart(Part):
    """The notes of this batch's old memory scope (MEMORY_SCOPE decided who shared them)."""

    def __init__(self, turn: Turn) -> None:
        self.turn = turn
        last = turn.last
        self.scope = notes.scope_id(turn.rt.settings.memory.scope, chat_id=last.chat_id, sender_id=last.sender_id)

    def system(self) -> str:
        store = notes.Notes(self.turn.rt.state, self.turn.rt.keys)
        return notes.notes_block(store.newest(self.scope), estimate_tokens)


def start(turn: Turn, _parts: Mapping[str, Part]) -> NotesPart:
    return NotesPart(turn)


FEATURE = Feature("notes", order=30, start=start)
