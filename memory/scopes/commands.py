"""`/memory`, `/forget <n>`, `/forget all`, `/memory undo`: what the assistant remembers for the asker here, answered by
the service. Numbers are the list's order (the asker's own, the chat's, the item's; files by path), so `/forget 2`
deletes what `/memory` showed as 2. Deleting and undoing follow the grant: the asker's own scope; the chat's for its
owner and MEMORY_ADMINS; the item's for MEMORY_ADMINS.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from items import own_item
from memory.scopes import keys as scope_keys
from memory.scopes.part import grant_of, store_of
from memory.scopes.paths import Grant, Scope
from memory.scopes.settings import memory_settings
from memory.scopes.store import File
from memory.scopes.texts import say
from routing.keys import kind_of
from turn.registry import Context, Said

FORGET = re.compile(r"^/(?:forget|忘记|忘掉)\s+(\S+)$", re.IGNORECASE)
_TRAILING = re.compile(r"[\s。.!！~～]+$")
FIRST_CHARS = 40


@dataclass(frozen=True)
class Entry:
    scope: Scope
    file: File


def _grant(c: Context) -> Grant:
    m = c.message
    item = own_item(c.rt, kind_of(c.rk), [m]) if kind_of(c.rk) == "topic" else None
    return grant_of(c.rt, [m.sender_id], m.chat_id, m.chat_type, item.item_id if item else "")


def entries(c: Context, g: Grant) -> list[Entry]:
    store = store_of(c.rt)
    order = {"people": 0, "chats": 1, "items": 2}
    out = []
    for scope in sorted(g.read, key=lambda s: (order[s.kind], s.id)):
        out += [Entry(scope, f) for _, f in sorted(store.files(scope).items())]
    return out


def whose(scope: Scope, asker: str, sample: str) -> str:
    english = say("memory_none", sample).startswith("I ")
    if scope.kind == "people":
        return ("yours" if english else "你的") if scope.id == asker else scope.id
    return ("the team's" if english else "团队的") if scope.kind == "chats" else ("the item's" if english else "事项的")


def list_memory(c: Context) -> Said:
    g = _grant(c)
    found = entries(c, g)
    m = c.message
    if not found:
        return Said(say("memory_none", m.text))
    lines = [say("memory_line", m.text, n=n, whose=whose(e.scope, m.sender_id, m.text), path=e.file.path,
                 first=e.file.first_line[:FIRST_CHARS], updated=store_of(c.rt).stamp(e.file.at, "%m-%d"))
             for n, e in enumerate(found, start=1)]
    logs = [line for s in sorted(g.read) for line in store_of(c.rt).log(s)[:2]]
    text = say("memory_list", m.text, n=len(found), lines="\n".join(lines))
    return Said(text + ("\n" + "\n".join(logs) if logs else ""))


def forget(c: Context) -> Said:
    m = c.message
    match = FORGET.match(_TRAILING.sub("", m.text.strip()))
    arg = match.group(1).lower() if match else ""
    g = _grant(c)
    store = store_of(c.rt)
    if arg in ("all", "全部"):
        own = Scope("people", m.sender_id)
        gone = store.change(own, m.sender_id, "forget all", lambda files: dict.fromkeys(files))
        if gone:
            store.mark_cleared(own, "/forget all: every file of this person's memory was deleted")
        return Said(say("memory_forgot_all", m.text, n=len(gone)))
    found = entries(c, g)
    if not arg.isdigit() or not 1 <= int(arg) <= len(found):
        return Said(say("memory_forget_usage", m.text))
    e = found[int(arg) - 1]
    if e.scope not in g.write or (e.scope.kind == "items" and m.sender_id not in _admins(c)):
        return Said(say("memory_forget_refused", m.text))
    store.change(e.scope, m.sender_id, f"{e.file.path} forgotten", lambda files: {e.file.path: None})
    store.mark_cleared(e.scope, f"/forget: {e.file.path} was deleted")
    return Said(say("memory_forgot", m.text, whose=whose(e.scope, m.sender_id, m.text), path=e.file.path))


def undo(c: Context) -> Said:
    """The newest change among the scopes the asker may write (their own; the chat's for its owner and admins)."""
    m = c.message
    g = _grant(c)
    store = store_of(c.rt)
    mine = [s for s in g.write if s.kind != "items" or m.sender_id in _admins(c)]
    newest = max(mine, key=lambda s: _last_change(c, s), default=None)
    what = store.undo(newest, m.sender_id) if newest is not None and store.undoable(newest) else None
    if what is None or newest is None:
        return Said(say("memory_nothing_to_undo", m.text))
    store.mark_cleared(newest, f"/memory undo: the change \"{what}\" was undone")
    return Said(say("memory_undone", m.text, what=what))


def _last_change(c: Context, scope: Scope) -> float:
    raw = c.rt.state.lindex(scope_keys.memory_undo(c.rt.keys, scope.name), 0)
    return float(json.loads(raw).get("at") or 0) if raw else -1.0


def on_reset(c: Context) -> Said:
    """A reset starts the conversation over; memory is not the conversation: it stays, and the reply says so."""
    return Said(say("memory_kept_on_reset", c.message.text))


def _admins(c: Context) -> tuple[str, ...]:
    """MEMORY_ADMINS: who may change any chat's or item's shared memory."""
    return memory_settings(c.rt.settings).memory_admins
