"""`python -m memory.scopes.migrate [--dry-run]`: move the notes the retired `save_note` tool kept
(memory/notes.py) into memory scopes, once, with nothing lost.

A chat's notes (`MEMORY_SCOPE=chat`) become files of that chat's scope, a person's (`MEMORY_SCOPE=user`) files of
theirs, under `notes/save_note-<n>.md`, oldest first, each line "- <text> (<date>, <who>)". The files are written
whole with deterministic names, so running it again after a crash writes the same files, never doubles a note;
the old notes are deleted only after their scope holds them. Deployment-wide notes (`MEMORY_SCOPE=profile`) have no
scope of their own: they are printed, stay shown read-only, and belong in the TEAM_NOTES_FILE.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Iterable
from datetime import datetime, tzinfo
from typing import Any

import redis

from core.keys import Keys
from core.settings import load_settings
from memory import keys as memory_keys
from memory.scopes.paths import PathError, Scope
from memory.scopes.settings import memory_settings
from memory.scopes.store import Memories, MemoryFull
from state.store import resolve_url, state_client

PREFIX = "notes/save_note-"


def target(old_scope: str, note: dict[str, Any]) -> Scope | None:
    """Where one old note moves: a group's notes to that chat's scope, a private chat's (which has no team memory)
    and a person's to the person's; None for the deployment-wide scope (or an id that names no scope)."""
    kind, _, ident = old_scope.partition(":")
    private = ":p2p:" in str(note.get("route_key", ""))
    name = {"chat": f"people/{note.get('by', '')}" if private else f"chats/{ident}", "user": f"people/{ident}"}
    try:
        return Scope.parse(name[kind]) if kind in name else None
    except PathError:
        return None


def files_of(notes: Iterable[dict[str, Any]], file_chars: int, tz: tzinfo | None) -> dict[str, str]:
    """Notes (oldest first) as files of at most file_chars each. Pure."""
    out: list[list[str]] = [[]]
    for note in notes:
        day = datetime.fromtimestamp(float(note.get("at") or 0), tz).strftime("%Y-%m-%d")
        line = f"- {' '.join(str(note.get('text', '')).split())} ({day}, {note.get('by', '')})"[:file_chars]
        if out[-1] and len("\n".join([*out[-1], line])) > file_chars:
            out.append([])
        out[-1].append(line)
    return {f"{PREFIX}{n}.md": "\n".join(lines) for n, lines in enumerate(out, start=1) if lines}


def migrate(r: redis.Redis, keys: Keys, store: Memories, tz: tzinfo | None, *, dry_run: bool) -> list[str]:
    """Every old notes scope of this profile; returns what happened, one line each."""
    said = []
    prefix = memory_keys.notes(keys, "")
    for key in sorted(str(k) for k in r.scan_iter(match=f"{prefix}*", count=500)):
        old = key[len(prefix):]
        notes = sorted((json.loads(v) for v in r.hvals(key)), key=lambda n: (n.get("at", 0), n.get("id", "")))
        moves: dict[Scope, list[dict[str, Any]]] = {}
        kept: list[dict[str, Any]] = []
        for note in notes:
            scope = target(old, note)
            (kept if scope is None else moves.setdefault(scope, [])).append(note)
        if kept:
            said.append(f"{old}: {len(kept)} note(s) kept read-only (no scope of their own; move them into the "
                        "TEAM_NOTES_FILE):\n" + "\n".join(f"  - {n.get('text', '')}" for n in kept))
        moved = [_move(store, scope, old, group, tz, dry_run) for scope, group in sorted(moves.items())]
        said += [line for line, _ok in moved]
        if moves and not kept and not dry_run and all(ok for _line, ok in moved):
            r.delete(key)  # only now: a crash before it leaves both, and the next run writes the same files again
    return said or ["no save_note notes to move"]


def _move(store: Memories, scope: Scope, old: str, notes: list[dict[str, Any]], tz: tzinfo | None,
          dry_run: bool) -> tuple[str, bool]:
    files = files_of(notes, store.caps.file_chars, tz)
    where = f"{scope.root}/{', '.join(files)}"
    if dry_run:
        return f"{old}: {len(notes)} note(s) → {where} (dry run: nothing written)", True
    try:
        store.change(scope, "migration", f"{len(notes)} save_note note(s) moved in", lambda _f: files,
                     log=f"{store.stamp()} 迁入旧笔记 {len(notes)} 条")
    except MemoryFull as exc:
        return f"{old}: {len(notes)} note(s) not moved to {scope.root}: {exc}", False
    return f"{old}: {len(notes)} note(s) → {where}", True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m memory.scopes.migrate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--dry-run", action="store_true", help="say what would move; write nothing")
    args = parser.parse_args(argv)
    settings = load_settings()
    m = memory_settings(settings)
    r = state_client(resolve_url(settings))
    keys = Keys(settings.bot_profile)
    store = Memories(r, keys, m.caps, tz=settings.tz)
    print("\n".join(migrate(r, keys, store, settings.tz, dry_run=args.dry_run)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
