"""Anthropic's memory tool (`memory_20250818`) backed by the scopes in Redis, as the SDK's abstract backend asks.

Every command passes through the turn's Grant (memories/paths.py) before the store sees it; refusals and failures
are `ToolError`s the model reads as tool errors. What the turn changed is kept (`changed`) for the reply's footer.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

from anthropic.lib.tools import BetaAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from memories.paths import LOADED, LOADED_CHARS, ROOT, Grant, PathError, Scope, Where, parse
from memories.store import Conflict, File, MemoryFull

WIDTH = 6  # line numbers, as the SDK's file-system backend prints them
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}


class ScopeStore(Protocol):
    """What the tool writes through: the scopes in Redis (memories/store.py), or a staged copy (memories/dream.py)."""

    def files(self, scope: Scope) -> dict[str, File]: ...

    def change(self, scope: Scope, by: str, what: str,
               edit: Callable[[Mapping[str, File]], Mapping[str, str | None]], *, log: str = "") -> Any: ...


class ScopedMemory(BetaAbstractMemoryTool):
    def __init__(self, store: ScopeStore, grant: Grant, by: str) -> None:
        super().__init__()
        self.store, self.grant, self.by = store, grant, by
        self.changed: list[tuple[str, str, str]] = []  # (scope name, file, what happened)
        self.refused: list[str] = []  # scopes a write was refused in, read-only here (the reply says who may)

    def run(self, args: Mapping[str, Any]) -> tuple[str, bool]:
        """(result, is_error) for one tool call."""
        try:
            return str(self.call(dict(args))), False
        except ToolError as exc:
            return str(exc.content if isinstance(exc.content, str) else exc), True
        except (PathError, MemoryFull, Conflict) as exc:
            return str(exc), True
        except (KeyError, TypeError, ValueError) as exc:  # a command without its fields
            return f"Invalid memory command: {exc.__class__.__name__}", True

    # -- reading --------------------------------------------------------------------------------------------

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        where = parse(command.path)
        scope = self.grant.check(where, writing=False)
        if where.scope is None:
            return self._listing(where, sorted(s for s in self.grant.read if not where.kind or s.kind == where.kind))
        files = self.store.files(scope)
        if where.file in files:
            return _numbered(command.path, files[where.file].text, command.view_range)
        inside = {p: f for p, f in files.items() if not where.file or p.startswith(where.file + "/")}
        if where.file and not inside:
            raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
        lines = [f"{_size(sum(len(f.text.encode()) for f in inside.values()))}\t{where.path}"]
        lines += [f"{_size(len(f.text.encode()))}\t{scope.root}/{p}" for p, f in sorted(inside.items())]
        return (f"Here're the files and directories up to 2 levels deep in {command.path}, excluding hidden items:\n"
                + "\n".join(lines))

    def _listing(self, where: Where, scopes: list[Scope]) -> str:
        lines = [f"{_size(0)}\t{where.path}"]
        for scope in scopes:
            files = self.store.files(scope)
            lines.append(f"{_size(sum(len(f.text.encode()) for f in files.values()))}\t{scope.root}/")
            lines += [f"{_size(len(f.text.encode()))}\t{scope.root}/{p}" for p in sorted(files) for f in [files[p]]]
        return (f"Here're the files and directories up to 2 levels deep in {where.path}, excluding hidden items:\n"
                + "\n".join(lines))

    # -- writing --------------------------------------------------------------------------------------------

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        scope, where = self._writable(command.path)

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            if where.file in files and files[where.file].text == command.file_text:
                return {}  # a retried turn creating what it already created: nothing to do, nothing doubles
            if where.file in files:
                raise ToolError(f"File {command.path} already exists")
            return {where.file: command.file_text}

        self._change(scope, where.file, "created", edit)
        return f"File created successfully at: {command.path}"

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        scope, where = self._writable(command.path)
        snippet: list[str] = []

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            text = self._text(files, where, command.path)
            count = text.count(command.old_str)
            if count != 1:
                raise ToolError(f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim in "
                                f"{command.path}." if count == 0 else
                                f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}`. "
                                "Please ensure it is unique")
            new = text.replace(command.old_str, command.new_str)
            at = text[:text.find(command.old_str)].count("\n")
            snippet[:] = [f"{str(n + 1).rjust(WIDTH)}\t{line}" for n, line in enumerate(new.split("\n"))
                          if at - 2 <= n <= at + 2]
            return {where.file: new}

        self._change(scope, where.file, "edited", edit)
        return ("The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                + "\n".join(snippet))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        scope, where = self._writable(command.path)

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            lines = self._text(files, where, command.path).split("\n")
            if not 0 <= command.insert_line <= len(lines):
                raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. It should be within the "
                                f"range of lines of the file: [0, {len(lines)}]")
            new = command.insert_text.rstrip("\n").split("\n")
            if _holds(lines, new):
                return {}  # already there (a retried turn inserting again): a line is remembered once
            lines[command.insert_line:command.insert_line] = new
            return {where.file: "\n".join(lines)}

        self._change(scope, where.file, "edited", edit)
        return f"The file {command.path} has been edited."

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        scope, where = self._writable(command.path)

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            gone: dict[str, str | None] = {p: None for p in files
                                           if not where.file or p == where.file or p.startswith(where.file + "/")}
            if not gone:
                raise ToolError(f"The path {command.path} does not exist")
            return gone

        self._change(scope, where.file or "*", "deleted", edit)
        return f"Successfully deleted {command.path}"

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        scope, old = self._writable(command.old_path)
        target, new = self._writable(command.new_path)
        if target != scope or not old.file or not new.file:
            raise ToolError("Rename within one memory scope only (e.g. /memories/people/<you>/a.md → …/b.md)")

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            if new.file in files:
                raise ToolError(f"The destination {command.new_path} already exists")
            if old.file not in files:
                raise ToolError(f"The path {command.old_path} does not exist")
            return {old.file: None, new.file: files[old.file].text}

        self._change(scope, new.file, f"renamed from {old.file}", edit)
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    # -- helpers --------------------------------------------------------------------------------------------

    def _writable(self, path: str) -> tuple[Scope, Where]:
        where = parse(path)
        if where.scope is not None and where.scope in self.grant.read and where.scope not in self.grant.write:
            self.refused.append(where.scope.name)
        scope = self.grant.check(where, writing=True)
        if path.rstrip("/") == ROOT:
            raise ToolError("Cannot change the /memories directory itself")
        return scope, where

    def _text(self, files: Mapping[str, File], where: Where, path: str) -> str:
        found = files.get(where.file)
        if found is None:
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        return found.text

    def _change(self, scope: Scope, file: str, what: str, edit: Any) -> None:
        def checked(files: Mapping[str, File]) -> Mapping[str, str | None]:
            changes = edit(files)
            for name in LOADED[scope.kind]:
                loaded = changes.get(name)
                if loaded is not None and len(loaded) > LOADED_CHARS:
                    raise ToolError(f"{scope.root}/{name} is loaded in every request: keep it under "
                                    f"{LOADED_CHARS} characters (it would hold {len(loaded)}); put the rest elsewhere")
            return changes

        if self.store.change(scope, self.by, f"{file} {what}", checked):
            self.changed.append((scope.name, file, what))


def _holds(lines: list[str], new: list[str]) -> bool:
    """`new` (non-blank) already stands in `lines` as consecutive lines."""
    if not any(x.strip() for x in new):
        return False
    return any(lines[i:i + len(new)] == new for i in range(len(lines) - len(new) + 1))


def _numbered(path: str, text: str, view_range: list[int] | None) -> str:
    lines = text.split("\n")
    start, end = 0, len(lines)
    if view_range and len(view_range) == 2:
        start = max(1, view_range[0]) - 1
        end = len(lines) if view_range[1] == -1 else view_range[1]
    shown = [f"{str(n + start + 1).rjust(WIDTH)}\t{line}" for n, line in enumerate(lines[start:end])]
    return f"Here's the content of {path} with line numbers:\n" + "\n".join(shown)


def _size(n: int) -> str:
    return f"{n}B" if n < 1024 else f"{n / 1024:.1f}K"
