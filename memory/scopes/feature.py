"""Memory as a feature (`FEATURE`): its part of every turn (the memory tool, loaded memory, the footer),
`/memory`, `/forget`, `/memory undo`, and what a reset says about it. The turn learns of memory only through these."""

from __future__ import annotations

from memory.scopes import commands, dream, part
from memory.scopes.settings import MemorySettings
from memory.scopes.tool import MEMORY_TOOL
from routing.keys import MEMORY
from turn.registry import Command, Feature, Periodic, RouteWork

FEATURE = Feature(
    "memories", order=25, start=part.start, tools=lambda _kind: [MEMORY_TOOL], reset=commands.on_reset,
    commands=(Command("memory", commands.list_memory, words=("/memory", "/记忆")),
              Command("memory_undo", commands.undo, words=("/memory undo", "/记忆 撤销", "/撤销记忆")),
              Command("forget", commands.forget, pattern=commands.FORGET)),
    route_work=(RouteWork(MEMORY, dream.run),),
    periodic=(Periodic("memory consolidation", dream.ensure_dreams),),
    settings=MemorySettings,
)
