"""Memory in the registry (turn/registry.py): its part of every turn (the memory tool, loaded memory, the footer),
`/memory`, `/forget`, `/memory undo`, and what a reset says about it. The turn learns of memory only through these."""

from __future__ import annotations

from memories import commands, dream, part
from memories.tool import MEMORY_TOOL
from routing.keys import MEMORY
from turn import registry
from turn.registry import Command, Feature, Periodic, RouteWork

registry.feature(Feature("memories", order=25, start=part.start, tools=lambda _kind: [MEMORY_TOOL],
                         reset=commands.on_reset))
registry.command(Command("memory", commands.list_memory, words=("/memory", "/记忆")))
registry.command(Command("memory_undo", commands.undo, words=("/memory undo", "/记忆 撤销", "/撤销记忆")))
registry.command(Command("forget", commands.forget, pattern=commands.FORGET))
registry.route_work(RouteWork(MEMORY, dream.run))
registry.periodic(Periodic("memory consolidation", dream.ensure_dreams))
