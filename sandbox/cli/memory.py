"""`python -m sandbox memory [<kind>/<id>]`: what the assistant remembers, as the store holds it (any deployment's
Redis: it only reads). Without a scope it lists every scope, newest change first."""

from __future__ import annotations

import argparse

from core.keys import Keys
from core.settings import load_settings
from memory.scopes.paths import PathError, Scope
from memory.scopes.settings import memory_settings
from memory.scopes.store import Memories
from state.store import resolve_url, state_client


def memory(args: argparse.Namespace) -> int:
    settings = load_settings()
    m = memory_settings(settings)
    store = Memories(state_client(resolve_url(settings)), Keys(settings.bot_profile),
                     m.caps, tz=settings.tz)
    if not args.scope:
        return _list(store, args.limit)
    try:
        scope = Scope.parse(args.scope.strip().removeprefix("/memories/").strip("/"))
    except PathError as exc:
        print(f"{exc}: name a scope as people/<open_id>, chats/<chat_id> or items/<item_id>")
        return 2
    print("\n".join(show(store, scope)))
    return 0


def show(store: Memories, scope: Scope) -> list[str]:
    """A scope as lines: its header, each file with who wrote it when, then its changelog."""
    files = store.files(scope)
    version = store.version(scope)
    if not version:
        return [f"{scope.name}: nothing remembered"]
    lines = [f"{scope.name} · version {version} · {len(files)} file(s) · {store.undoable(scope)} undo step(s)"]
    for path, f in sorted(files.items()):
        lines += [f"── {path}  ({f.author}, {store.stamp(f.at, '%Y-%m-%d %H:%M')}, v{f.version})", f.text]
    changelog = store.log(scope)
    if changelog:
        lines += ["changelog:", *(f"  {line}" for line in changelog)]
    return lines


def _list(store: Memories, limit: int) -> int:
    scopes = store.scopes(0, limit)
    if not scopes:
        print("nothing remembered yet")
    for name, at in scopes:
        print(f"{name}  (changed {store.stamp(at, '%Y-%m-%d %H:%M')})")
    return 0


def add_commands(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = sub.add_parser("memory", help="print a memory scope (people/<open_id>, chats/<chat_id>, items/<item_id>)")
    p.add_argument("scope", nargs="?", default="", help="the scope; without it, every scope")
    p.add_argument("--limit", type=int, default=50, help="how many scopes to list")
    p.set_defaults(func=memory)
