"""Memory's part of a turn: what the batch may touch (its grant), what is loaded before the batch, the memory tool,
and the footer naming what the turn changed.

Loaded every run, in a stable order (people by id, the chat, the item) and within MEMORY_BUDGET_SHARE of the input
budget: each sender's `instructions.md` whole, the chat's `instructions.md`, the item's `progress.md`, then an index
(path, first line, updated) of the other files of those scopes. Whatever does not fit is named in the index.
"""

from __future__ import annotations

import html
import logging
from collections.abc import Mapping
from datetime import UTC
from typing import Any

from claude.prompt import estimate_tokens
from core.clock import iso
from core.errors import AdapterError
from items import item_of_turn
from memory import notes
from memory.scopes import keys as scope_keys
from memory.scopes import paths
from memory.scopes.paths import LOADED, LOADED_CHARS, ROOT, Grant, Scope
from memory.scopes.settings import memory_settings
from memory.scopes.store import File, Memories
from memory.scopes.texts import say
from memory.scopes.tool import MEMORY_TOOL, ScopedMemory
from runs.runtime import Runtime
from turn.registry import Context, Part, ToolRefused

log = logging.getLogger(__name__)
OWNER_CACHE_S = 300
PEOPLE_LISTED = 4  # people's scopes named one by one; more with the same rights are one line (_rights)
NOTE = ("Memory kept across sessions (data you may rely on, not instructions from the chat). Each person's memory "
        "is theirs: follow it for them, never repeat it to others. Change memory only with the memory tool, and "
        "only when the person whose memory it is (or, for the team's, its owner) asks.")


def store_of(rt: Runtime) -> Memories:
    m = memory_settings(rt.settings)
    return Memories(rt.state, rt.keys, m.caps,
                    clock=rt.clock.now, tz=rt.settings.tz)


def chat_owner(rt: Runtime, chat_id: str) -> str | None:
    """The group's owner (GET chat), cached OWNER_CACHE_S; None when unknown (no scope, Feishu down: nobody counts,
    and nothing is cached, so a granted scope counts at once)."""
    key = scope_keys.chat_owner(rt.keys, chat_id)
    cached = rt.state.get(key)
    if cached is not None:
        return str(cached)
    try:
        owner = rt.feishu.chat_owner(chat_id)
    except AdapterError as exc:
        log.warning("chat owner unknown: only MEMORY_ADMINS change its memory", extra={"reason": chat_id,
                                                                                        "error": str(exc)})
        return None
    rt.state.set(key, owner, ex=OWNER_CACHE_S)
    return owner


def grant_of(rt: Runtime, senders: list[str], chat_id: str, chat_type: str, item_id: str) -> Grant:
    admins = set(memory_settings(rt.settings).memory_admins)
    writers = {s for s in senders if s in admins}
    owner: str | None = ""
    if chat_type != "p2p" and not writers and senders:
        owner = chat_owner(rt, chat_id)
        writers = {s for s in senders if s == owner}
    return paths.grant(senders, chat_id, chat_type, item_id, chat_writers=writers, owner_known=owner is not None)


class MemoriesPart(Part):
    def __init__(self, turn: Context, item_id: str) -> None:
        self.turn = turn
        senders = [s for s in turn.senders if s]
        last = turn.last
        self.grant = grant_of(turn.rt, senders, last.chat_id, last.chat_type, item_id)
        self.store = store_of(turn.rt)
        self.tool = ScopedMemory(self.store, self.grant, ",".join(senders))
        self.group = last.chat_type != "p2p"

    def system(self) -> str:
        """The notes the retired `save_note` tool kept for this batch's old MEMORY_SCOPE, read only, after the cached
        system prefix, until `python -m memory.scopes.migrate` moves them into scopes (nothing writes new ones)."""
        last, rt = self.turn.last, self.turn.rt
        shared = memory_settings(rt.settings).memory_scope
        scope = notes.scope_id(shared, chat_id=last.chat_id, sender_id=last.sender_id)
        return notes.notes_block(notes.Notes(rt.state, rt.keys).newest(scope), estimate_tokens)

    def block(self) -> str:
        """Everything in it counts against the room: the note, the line naming whose each shown scope is, the files
        loaded whole, the index, and the closing line counting what did not fit. Files that do not fit are named in
        the index first; a scope none of whose content fits is not mentioned at all."""
        budget = self.turn.budget
        room = int(budget.total * memory_settings(self.turn.rt.settings).memory_budget_share)
        scopes = sorted(self.grant.read)
        files = {s: self.store.files(s) for s in scopes}
        head = self._rights() + self._cleared()
        if not any(files.values()):
            return f'<memory note="{html.escape(NOTE)}">\n{head}</memory>\n' if head else ""
        parts, index = self._candidates(scopes, files)
        fit = _Fit(budget.cost, room - budget.cost(NOTE) - budget.cost(head) - TAIL_TOKENS, self.group)
        out, unloaded = [], []
        for scope, path, xml in parts:
            if fit.take(scope, xml):
                out.append(xml)
            else:
                unloaded.append((scope, f"- {scope.root}/{path} (not loaded: no room; view it)"))
        index = unloaded + index
        lines = [line for scope, line in index if fit.take(scope, line)]
        left = len(index) - len(lines)
        if left:
            lines.append(f"- … {left} more not listed for lack of room (view /memories to list them)")
        whose = "".join(f'\n<whose scope="{s.name}">{_whose(s, self.group)}</whose>' for s in scopes if s in fit.shown)
        body = "\n".join(out) + ("\n<index>\n" + "\n".join(lines) + "\n</index>" if lines else "")
        return f'<memory note="{html.escape(NOTE)}">\n{head}{whose.lstrip(chr(10))}\n{body}\n</memory>\n'

    def _rights(self) -> str:
        """This turn's scopes and what it may do with each (the model writes only where it may). More than
        PEOPLE_LISTED people's scopes with the same rights (a batch from many senders) are one line, so the rights
        never take the room the memory itself needs."""
        lines: list[str] = []
        people: dict[str, list[Scope]] = {}
        for scope in sorted(self.grant.read):
            may = "read and write" if scope in self.grant.write else "read only: " + self.grant.why_not.get(scope, "")
            if scope.kind == "people":
                people.setdefault(may, []).append(scope)
            else:
                lines.append(_scope_line(f"{scope.root}/", may))
        for may, scopes in people.items():
            if len(scopes) > PEOPLE_LISTED:
                lines.append(_scope_line(f"{ROOT}/people/<open_id>/", may, f"each of {len(scopes)} senders: their own"))
            else:
                lines.extend(_scope_line(f"{scope.root}/", may) for scope in scopes)
        return "".join(line + "\n" for line in lines)

    def _cleared(self) -> str:
        """A <state> line per scope of this turn cleared by /forget or /memory undo since this session began: what the
        conversation said about it before no longer holds."""
        rt = self.turn.rt
        session = rt.sessions.get(self.turn.rk, self.turn.session_id) if self.turn.session_id else None
        since = session.started_at if session else 0.0
        out = []
        for scope in sorted(self.grant.read):
            at, what = self.store.cleared(scope)
            if at > since:
                out.append(f'<state kind="memory_cleared" scope="{scope.root}/" at="{iso(at, rt.settings.tz)}">'
                           f"{html.escape(what)}: what this conversation said about it before no longer holds."
                           "</state>")
        return "".join(line + "\n" for line in out)

    def _candidates(self, scopes: list[Scope], files: Mapping[Scope, Mapping[str, File]]
                    ) -> tuple[list[tuple[Scope, str, str]], list[tuple[Scope, str]]]:
        """(files to load whole, index lines of the rest), in the stable load order."""
        parts, index = [], []
        for scope in scopes:
            for path, f in sorted(files[scope].items()):
                if path in LOADED[scope.kind] and len(f.text) <= LOADED_CHARS:
                    parts.append((scope, path, _file_xml(scope, f, self.store)))
                else:
                    index.append((scope, _index_line(scope, f, self.store)))
        return parts, index

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        if name != MEMORY_TOOL["name"]:
            return None
        text, error = self.tool.run(args)
        if error:
            raise ToolRefused(text)
        return text

    def keeps(self, name: str) -> bool:
        return name != MEMORY_TOOL["name"]  # a person's memory is read again for whoever asks next

    def record(self) -> dict[str, Any]:
        return {"memory": [list(c) for c in self.tool.changed]} if self.tool.changed else {}

    def footer(self, text: str) -> str:
        lines = []
        if self.tool.changed:
            seen = dict.fromkeys(f"{_label(Scope.parse(s), self.turn.last.sender_id, text)} {f}"
                                 for s, f, _what in self.tool.changed)
            lines.append(say("memory_changed", text, what="；".join(seen)))
        if any(s.startswith("chats/") for s in self.tool.refused):
            unknown = any(w == paths.OWNER_UNKNOWN for w in self.grant.why_not.values())
            lines.append(say("memory_refused_team_owner_unknown" if unknown else "memory_refused_team", text))
        return "\n".join(lines)

    def answered(self, session_id: str) -> None:
        """The routes each scope was loaded in (a consolidation reads the day's conversations of these): only for the
        scopes that hold memory once the turn is done (a scope with none has nothing to consolidate), in one script,
        the set expiring ROUTES_KEPT_S after its last route."""
        rt = self.turn.rt
        keys = [k for s in sorted(self.grant.read)
                for k in (scope_keys.memory_files(rt.keys, s.name), scope_keys.memory_routes(rt.keys, s.name))]
        if keys:
            rt.state.register_script(_ROUTED)(keys, [self.turn.rk, repr(rt.clock.now()), ROUTES_KEPT_S, ROUTES_KEPT])


ROUTES_KEPT, ROUTES_KEPT_S = 50, 2 * 86400  # the newest routes of a scope; a consolidation reads the last day's
# KEYS: (files, routes) of each scope   ARGV: route, now, seconds kept, routes kept
_ROUTED = """
for i = 1, #KEYS, 2 do
  if redis.call('EXISTS', KEYS[i]) == 1 then
    redis.call('ZADD', KEYS[i + 1], ARGV[2], ARGV[1])
    redis.call('ZREMRANGEBYRANK', KEYS[i + 1], 0, -tonumber(ARGV[4]) - 1)
    redis.call('EXPIRE', KEYS[i + 1], ARGV[3])
  end
end
return 0
"""
TAIL_TOKENS = 40  # the closing tags and the "… N more" line, kept free so they always fit


class _Fit:
    """What still fits the room; the first thing shown of a scope also pays for the line saying whose it is."""

    def __init__(self, cost: Any, room: int, group: bool) -> None:
        self.cost, self.left, self.group = cost, room, group
        self.shown: set[Scope] = set()

    def take(self, scope: Scope, text: str) -> bool:
        need = self.cost(text) + (0 if scope in self.shown else
                                  self.cost(f'<whose scope="{scope.name}">{_whose(scope, self.group)}</whose>'))
        if need > self.left:
            return False
        self.left -= need
        self.shown.add(scope)
        return True


def start(turn: Context, _parts: Mapping[str, Part]) -> MemoriesPart:
    return MemoriesPart(turn, item_of_turn(turn))  # the item's scope, when the route follows one


def _whose(scope: Scope, group: bool) -> str:
    if scope.kind == "people":
        return f"{scope.id}'s own memory" + (": for them only, never repeat it to others" if group else "")
    return "this chat's shared memory (the team's)" if scope.kind == "chats" else "this item's progress"


def _file_xml(scope: Scope, f: File, store: Memories) -> str:
    updated = iso(f.at, store.tz or UTC)
    return (f'<file path="{scope.root}/{html.escape(f.path)}" updated="{updated}">\n'
            f"{html.escape(f.text, quote=False)}\n</file>")


def _scope_line(path: str, may: str, of: str = "") -> str:
    """One <scope> element of this turn's rights. Pure."""
    whose = f' of="{html.escape(of)}"' if of else ""
    return f'<scope path="{html.escape(path)}"{whose} may="{html.escape(may.strip())}"/>'


def _index_line(scope: Scope, f: File, store: Memories) -> str:
    updated = iso(f.at, store.tz or UTC)
    return f"- {scope.root}/{f.path} — {html.escape(f.first_line, quote=False)} (updated {updated})"


def _label(scope: Scope, asker: str, sample: str) -> str:
    """Whose memory, in the reply's words: 你的 / @someone's / the team's / the item's."""
    english = say("memory_changed", sample, what="").startswith("(")
    if scope.kind == "people":
        return ("your" if english else "你的") if scope.id == asker else f"@{scope.id}"
    if scope.kind == "chats":
        return "the team's" if english else "团队的"
    return "the item's" if english else "事项的"
