"""Anthropic's memory tool (`memory_20250818`) backed by the scopes in Redis, as the SDK's abstract backend asks.

Every command passes through the turn's Grant (memory/scopes/paths.py) before the store sees it; refusals and failures
are `ToolError`s the model reads as tool errors. What the turn changed is kept (`changed`) for the reply's footer.

Results and error texts are the SDK's own `BetaLocalFilesystemMemoryTool`'s (anthropic.tools.memory) for the same
calls on the same files, with each scope a folder that always exists (tests/test_memories_reference.py runs both and
compares). The deliberate differences:
- other scopes are refused (`Access denied: …`, the same words whether or not they hold anything) and a view of
  /memories or /memories/<kind> lists only this conversation's scopes;
- no `..`, `.`, empty, encoded or full-width parts, plain names only, at most 4 folders deep (`PathError`s);
- /memories and /memories/<kind> are never written, a scope's root is never renamed, a rename stays in one scope;
- re-creating a file with the text it holds succeeds and changes nothing, and inserting lines the file already
  holds changes nothing (a retried turn doubles nothing);
- a folder's size in a view is the bytes of the files below it (the reference prints the directory entry's size);
- a missing or mistyped field is `Invalid memory command: …` naming it, and nothing is written (the reference
  answers with a Python exception, and its `create` without `file_text` leaves an empty file behind);
- a file used as a folder (`a.md/b.md` where a.md is a file) is refused by name (the reference answers with an
  OS error), as is moving a folder into itself.
An unknown command is the reference's `NotImplementedError('Unknown command: …')` as its tool runner renders it.
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

from memory.scopes.paths import LOADED, LOADED_CHARS, ROOT, Grant, PathError, Scope, Where, parse
from memory.scopes.store import Conflict, File, MemoryFull

WIDTH = 6  # line numbers, as the SDK's file-system backend prints them
MEMORY_TOOL = {"type": "memory_20250818", "name": "memory"}
FIELDS: dict[str, dict[str, type]] = {  # each command's required fields and their types
    "view": {"path": str}, "create": {"path": str, "file_text": str},
    "str_replace": {"path": str, "old_str": str, "new_str": str},
    "insert": {"path": str, "insert_line": int, "insert_text": str},
    "delete": {"path": str}, "rename": {"old_path": str, "new_path": str},
}


class ScopeStore(Protocol):
    """What the tool writes through: the scopes in Redis (memory/scopes/store.py), or a staged copy
    (memory/scopes/dream.py)."""

    def files(self, scope: Scope) -> dict[str, File]: ...

    def change(self, scope: Scope, by: str, what: str,
               edit: Callable[[Mapping[str, File]], Mapping[str, str | None]], *, log: str = "") -> Any: ...


def malformed(args: Mapping[str, Any]) -> str:
    """The tool error for a call without a known command or a required field ('' when the call is well formed)."""
    command = args.get("command")
    if command not in FIELDS:
        return repr(NotImplementedError(f"Unknown command: {command}"))  # the reference's, as its runner renders it
    for field, kind in FIELDS[str(command)].items():
        value = args.get(field)
        if not isinstance(value, kind) or isinstance(value, bool):
            return f"Invalid memory command: `{command}` needs `{field}` ({kind.__name__})"
    view_range = args.get("view_range")
    if view_range is not None and not (isinstance(view_range, list) and all(
            isinstance(n, int) and not isinstance(n, bool) for n in view_range)):
        return "Invalid memory command: `view_range` is a list of two line numbers"
    return ""


class ScopedMemory(BetaAbstractMemoryTool):
    def __init__(self, store: ScopeStore, grant: Grant, by: str) -> None:
        super().__init__()
        self.store, self.grant, self.by = store, grant, by
        self.changed: list[tuple[str, str, str]] = []  # (scope name, file, what happened)
        self.refused: list[str] = []  # scopes a write was refused in, read-only here (the reply says who may)

    def run(self, args: Mapping[str, Any]) -> tuple[str, bool]:
        """(result, is_error) for one tool call: whatever the model sent, an answer it reads, never an exception."""
        bad = malformed(args)
        if bad:
            return bad, True
        try:
            return str(self.call(dict(args))), False
        except ToolError as exc:
            return str(exc.content if isinstance(exc.content, str) else exc), True
        except (PathError, MemoryFull, Conflict) as exc:
            return str(exc), True
        except (KeyError, TypeError, ValueError, AttributeError) as exc:  # a field of a shape nobody foresaw
            return f"Invalid memory command: {exc.__class__.__name__}", True

    # -- reading --------------------------------------------------------------------------------------------

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        where = parse(command.path)
        scope = self.grant.check(where, writing=False)
        if where.scope is None:
            scopes = sorted(s for s in self.grant.read if not where.kind or s.kind == where.kind)
            files = {f"{s.kind}/{s.id}/{p}": f for s in scopes for p, f in self.store.files(s).items()}
            folders = {f"{s.kind}/{s.id}" for s in scopes} | {s.kind for s in scopes}
            base = where.kind
        else:
            files, folders, base = self.store.files(scope), set(), where.file
            if base and base in files:
                return _numbered(command.path, files[base].text, command.view_range)
            if base and not _is_folder(files, base):
                raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
        return _listing(command.path, _below(files, base), {d[len(base) + 1:] if base else d for d in folders
                                                           if d.startswith(base + "/") or not base})

    # -- writing --------------------------------------------------------------------------------------------

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        scope, where = self._writable(command.path)

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            if where.file in files and files[where.file].text == command.file_text:
                return {}  # a retried turn creating what it already created: nothing to do, nothing doubles
            if not where.file or where.file in files or _is_folder(files, where.file):
                raise ToolError(f"File {command.path} already exists")  # a scope's root is a folder, always there
            _no_file_above(files, scope, where.file)
            return {where.file: command.file_text}

        self._change(scope, where.file, "created", edit)
        return f"File created successfully at: {command.path}"

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        scope, where = self._writable(command.path)
        snippet: list[str] = []

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            text = self._text(files, where, command.path)
            count = text.count(command.old_str)
            if count == 0:
                raise ToolError(f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim in "
                                f"{command.path}.")
            if count > 1:
                raise ToolError(f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}` "
                                f"in lines: {', '.join(map(str, _lines_of(text, command.old_str)))}. "
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
            if lines[-1] == "":
                lines.pop()  # a file ending with a newline has no empty last line (the reference counts so)
            if not 0 <= command.insert_line <= len(lines):
                raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. "
                                f"It should be within the range [0, {len(lines)}].")
            new = command.insert_text.rstrip("\n")
            if _holds(lines, new.split("\n")):
                return {}  # already there (a retried turn inserting again): a line is remembered once
            lines.insert(command.insert_line, new)
            return {where.file: "\n".join(lines).removesuffix("\n") + "\n"}

        self._change(scope, where.file, "edited", edit)
        return f"The file {command.path} has been edited."

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        scope, where = self._writable(command.path)

        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            gone: dict[str, str | None] = {p: None for p in files
                                           if not where.file or p == where.file or p.startswith(where.file + "/")}
            if not gone and where.file:
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
            if new.file in files or _is_folder(files, new.file):
                raise ToolError(f"The destination {command.new_path} already exists")
            moved = {p: p.replace(old.file, new.file, 1) for p in files
                     if p == old.file or p.startswith(old.file + "/")}
            if not moved:
                raise ToolError(f"The path {command.old_path} does not exist")
            if new.file.startswith(old.file + "/"):
                raise ToolError(f"Cannot move {command.old_path} into itself")
            _no_file_above(files, scope, new.file)
            return {**dict.fromkeys(moved), **{to: files[p].text for p, to in moved.items()}}

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
        found = files.get(where.file) if where.file else None
        if found is None:
            if not where.file or _is_folder(files, where.file):
                raise ToolError(f"The path {path} is not a file.")
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


def _is_folder(files: Mapping[str, Any], path: str) -> bool:
    return any(p.startswith(path + "/") for p in files)


def _no_file_above(files: Mapping[str, File], scope: Scope, path: str) -> None:
    """A file's folders are folders: a path below a file is refused (the reference meets an OS error there)."""
    parts = path.split("/")
    for n in range(1, len(parts)):
        if "/".join(parts[:n]) in files:
            raise ToolError(f"{scope.root}/{'/'.join(parts[:n])} is a file, not a folder")


def _below(files: Mapping[str, File], base: str) -> dict[str, int]:
    """Bytes of each file below the folder `base` ('' for all), by its path inside that folder."""
    cut = len(base) + 1 if base else 0
    return {p[cut:]: len(f.text.encode()) for p, f in files.items() if not base or p.startswith(base + "/")}


def _listing(path: str, files: Mapping[str, int], folders: set[str]) -> str:
    """The reference's folder view: two levels, names sorted within each folder, folders with a '/', hidden skipped."""
    lines = [f"{_size(sum(files.values()))}\t{path}"]

    def level(prefix: str, depth: int) -> None:
        names = {p[len(prefix):].split("/")[0] for p in [*files, *folders] if p.startswith(prefix)} - {""}
        for name in sorted(names):
            rel = prefix + name
            if name.startswith("."):
                continue
            if rel in files:
                lines.append(f"{_size(files[rel])}\t{path}/{rel}")
                continue
            lines.append(f"{_size(sum(n for p, n in files.items() if p.startswith(rel + '/')))}\t{path}/{rel}/")
            if depth < 2:
                level(rel + "/", depth + 1)

    level("", 1)
    return (f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n"
            + "\n".join(lines))


def _lines_of(text: str, old: str) -> list[int]:
    """The line of each occurrence of `old`, overlapping ones too (as the reference counts them)."""
    found, start = [], 0
    while (pos := text.find(old, start)) != -1:
        found.append(text[:pos].count("\n") + 1)
        start = pos + 1
    return found


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
    """The reference's: 0B, 512B, 1K, 1.5K, 2M."""
    if n == 0:
        return "0B"
    i = min((n.bit_length() - 1) // 10, 3)
    size = n / 1024 ** i
    return f"{int(size) if size == int(size) else f'{size:.1f}'}{'BKMG'[i]}"
