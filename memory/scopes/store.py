"""Memory scopes in Redis, as files: path → text, with author, time and version; bounded, versioned, undoable.

One hash of files per scope, its version and counts beside it, the last UNDO_KEPT changes (each the previous state of
the files it touched) for `/memory undo`, and a short changelog. Every change is one script that checks the scope's
version first (compare-and-set): two routes writing one chat's memory at once never lose a write or tear one — the
loser reads again and retries. Nothing expires: memory is meant to last; deletion is explicit.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime, tzinfo
from typing import Any

import redis

from core import metrics
from core.keys import Keys
from memory.scopes import keys as scope_keys
from memory.scopes.paths import Scope

UNDO_KEPT = 5
LOG_KEPT = 20
RETRIES = 40  # compare-and-set rounds under contention, each after a short random pause


class MemoryFull(ValueError):
    """A scope's cap (files or characters) would be passed; str(err) is the tool error."""


class Conflict(RuntimeError):
    """The scope changed under a writer RETRIES times in a row (never expected in practice)."""


@dataclass(frozen=True)
class File:
    path: str  # inside the scope, e.g. "instructions.md" or "notes/roles.md"
    text: str
    author: str
    at: float
    version: int

    @property
    def first_line(self) -> str:
        return next((line.strip() for line in self.text.splitlines() if line.strip()), "")[:120]


@dataclass(frozen=True)
class Caps:
    files: int
    chars: int  # all files of a scope together
    file_chars: int  # one file


# KEYS: files, meta, undo, changed, log, scopes   ARGV: expected version, now, by, what, max files, max chars,
#       undo kept ('0' = an undo: pop instead of push), scope name, log line, n, consolidated ('1': the scope leaves
#       the changed set instead of entering it), then n × (path, json or '', chars)
# → new version; -1 the version moved (read again); -2 too many files; -3 too many characters
_APPLY = """
local version = tonumber(redis.call('HGET', KEYS[2], 'version') or '0')
if version ~= tonumber(ARGV[1]) then return -1 end
local files = redis.call('HLEN', KEYS[1])
local chars = tonumber(redis.call('HGET', KEYS[2], 'chars') or '0')
local n = tonumber(ARGV[10])
local before = {}
for i = 0, n - 1 do
  local path, new, len = ARGV[12 + 3 * i], ARGV[13 + 3 * i], tonumber(ARGV[14 + 3 * i])
  local old = redis.call('HGET', KEYS[1], path)
  if old then
    chars = chars - tonumber(cjson.decode(old).chars or 0)
    if new == '' then files = files - 1 end
  elseif new ~= '' then
    files = files + 1
  end
  if new ~= '' then chars = chars + len end
  table.insert(before, {path, old or false})
end
if files > tonumber(ARGV[5]) then return -2 end
if chars > tonumber(ARGV[6]) then return -3 end
for i = 0, n - 1 do
  local path, new = ARGV[12 + 3 * i], ARGV[13 + 3 * i]
  if new == '' then redis.call('HDEL', KEYS[1], path) else redis.call('HSET', KEYS[1], path, new) end
end
if tonumber(ARGV[7]) > 0 then
  redis.call('LPUSH', KEYS[3], cjson.encode({version = version, at = ARGV[2], by = ARGV[3], what = ARGV[4],
                                             changes = before}))
  redis.call('LTRIM', KEYS[3], 0, tonumber(ARGV[7]) - 1)
else
  redis.call('LPOP', KEYS[3])
end
version = version + 1
redis.call('HSET', KEYS[2], 'version', version, 'chars', chars, 'updated_at', ARGV[2], 'updated_by', ARGV[3])
if ARGV[11] == '1' then
  redis.call('ZREM', KEYS[4], ARGV[8])  -- what it read was the scope's latest version: nothing is left to tidy
else
  redis.call('ZADD', KEYS[4], ARGV[2], ARGV[8])
end
redis.call('ZADD', KEYS[6], ARGV[2], ARGV[8])
if ARGV[9] ~= '' then
  redis.call('LPUSH', KEYS[5], ARGV[9])
  redis.call('LTRIM', KEYS[5], 0, 19)
end
return version
"""


class Memories:
    def __init__(self, r: redis.Redis, keys: Keys, caps: Caps, clock: Callable[[], float] = time.time,
                 tz: tzinfo | None = None) -> None:
        """clock and tz: the service's (a pinned clock stamps files, the changelog and consolidation slots alike)."""
        self.r, self.k, self.caps, self.clock, self.tz = r, keys, caps, clock, tz
        self._apply = r.register_script(_APPLY)

    def stamp(self, at: float | None = None, fmt: str = "%m-%d %H:%M") -> str:
        """A time as people here read it (now by default)."""
        return datetime.fromtimestamp(self.clock() if at is None else at, self.tz).strftime(fmt)

    # -- reading ----------------------------------------------------------------------------------------------

    def files(self, scope: Scope) -> dict[str, File]:
        raw = self.r.hgetall(scope_keys.memory_files(self.k, scope.name))
        return {str(p): _file(str(p), v) for p, v in raw.items()}

    def file(self, scope: Scope, path: str) -> File | None:
        raw = self.r.hget(scope_keys.memory_files(self.k, scope.name), path)
        return _file(path, raw) if raw else None

    def version(self, scope: Scope) -> int:
        return int(self.r.hget(scope_keys.memory_meta(self.k, scope.name), "version") or 0)

    def cleared(self, scope: Scope) -> tuple[float, str]:
        """When a person last cleared part of this scope (/forget, /memory undo) and what: (0, "") when never."""
        at, what = self.r.hmget(scope_keys.memory_meta(self.k, scope.name), "cleared_at", "cleared")
        return float(at or 0), str(what or "")

    def mark_cleared(self, scope: Scope, what: str) -> None:
        """Note a clearing, so the next turns of every conversation of this scope are told (memory/scopes/part.py).
        Wall time, as sessions are stamped."""
        self.r.hset(scope_keys.memory_meta(self.k, scope.name), mapping={"cleared_at": repr(time.time()),
                                                                          "cleared": what[:200]})

    def log(self, scope: Scope) -> list[str]:
        return [str(x) for x in self.r.lrange(scope_keys.memory_log(self.k, scope.name), 0, LOG_KEPT - 1)]

    def undoable(self, scope: Scope) -> int:
        return int(self.r.llen(scope_keys.memory_undo(self.k, scope.name)))

    def scopes(self, start: int = 0, count: int = 50) -> list[tuple[str, float]]:
        """Every scope that was ever written, newest change first (the admin API and the console page through it)."""
        raw: list[Any] = self.r.zrevrange(scope_keys.memory_scopes(self.k), start, start + count - 1, withscores=True)
        return [(str(name), float(at)) for name, at in raw]

    def changed_since(self, since: float) -> list[str]:
        """Scopes changed after `since` (what a consolidation slot looks at)."""
        return [str(x) for x in self.r.zrangebyscore(scope_keys.memory_changed(self.k), f"({since}", "+inf")]

    # -- writing ----------------------------------------------------------------------------------------------

    def change(self, scope: Scope, by: str, what: str, edit: Callable[[Mapping[str, File]], Mapping[str, str | None]],
               *, log: str = "", consolidated: bool = False) -> dict[str, str | None]:
        """Apply `edit` (current files → {path: new text, or None to delete}) atomically against the version it read;
        read again and retry when another writer got there first. Raises MemoryFull or whatever `edit` raises.
        consolidated: the change is a consolidation's, so the scope needs none until someone changes it again."""
        for _ in range(RETRIES):
            version = self.version(scope)
            current = self.files(scope)
            changes = dict(edit(current))
            for path, text in changes.items():
                if text is not None and len(text) > self.caps.file_chars:
                    raise MemoryFull(f"{scope.root}/{path} would hold {len(text)} characters; a memory file holds at "
                                     f"most {self.caps.file_chars}. Keep it shorter or split it.")
            if not changes:
                return changes
            result = self._write(scope, version, _Change(by, what, changes, log, undo=True, consolidated=consolidated))
            if result >= 0:
                metrics.count(self.r, self.k, "memory_writes", scope.kind)
                return changes
            if result == -1:
                _pause()
                continue
            raise MemoryFull(self._full(scope, result))
        raise Conflict(f"{scope.root} kept changing; try again")

    def delete(self, scope: Scope, by: str, path: str = "") -> list[str]:
        """An operator's delete (admin API, console): the file `path` names, or every file; undoable like any change.
        The paths deleted, [] when there was nothing."""
        def edit(files: Mapping[str, File]) -> dict[str, str | None]:
            return {path: None} if path and path in files else ({} if path else dict.fromkeys(files))

        gone = self.change(scope, by, f"{path or 'all files'} deleted by an admin", edit,
                           log=f"{self.stamp()} 管理员删除了：{path or '全部文件'}")
        return sorted(gone)

    def undo(self, scope: Scope, by: str) -> str | None:
        """Restore the files the newest change touched; None when there is nothing to undo. Not itself undoable."""
        for _ in range(RETRIES):
            version = self.version(scope)
            raw = self.r.lindex(scope_keys.memory_undo(self.k, scope.name), 0)
            if not raw:
                return None
            record = json.loads(raw)
            changes: dict[str, str | None] = {}
            for path, old in record["changes"]:
                changes[str(path)] = json.loads(old)["text"] if old else None
            what = str(record.get("what", ""))
            result = self._write(scope, version, _Change(by, f"undo: {what}", changes, f"{self.stamp()} 撤销了：{what}",
                                                         undo=False))
            if result >= 0:
                return str(record.get("what") or "")
            if result != -1:
                raise MemoryFull(self._full(scope, result))
            _pause()
        raise Conflict(f"{scope.root} kept changing; try again")

    def _write(self, scope: Scope, version: int, change: _Change) -> int:
        now = self.clock()
        by, what, log, undo, consolidated = change.by, change.what, change.log, change.undo, change.consolidated
        changes = change.files
        args: list[Any] = []
        for path, text in changes.items():
            if text is None:
                args += [path, "", 0]
            else:
                body = {"text": text, "author": by, "at": round(now, 3), "version": version + 1, "chars": len(text)}
                args += [path, json.dumps(body, ensure_ascii=False), len(text)]
        k = self.k
        name = scope.name
        keys = [scope_keys.memory_files(k, name), scope_keys.memory_meta(k, name), scope_keys.memory_undo(k, name),
                scope_keys.memory_changed(k), scope_keys.memory_log(k, name), scope_keys.memory_scopes(k)]
        return int(self._apply(keys, [version, repr(now), by, what[:200], self.caps.files, self.caps.chars,
                                      UNDO_KEPT if undo else 0, scope.name, log, len(changes),
                                      "1" if consolidated else "0", *args]))

    def _full(self, scope: Scope, code: int) -> str:
        if code == -2:
            return (f"{scope.root} already holds {self.caps.files} files, the most a memory scope holds. Merge or "
                    "delete some first.")
        return (f"{scope.root} would hold more than {self.caps.chars} characters, the most a memory scope holds. "
                "Shorten or delete some files first.")


@dataclass(frozen=True)
class _Change:
    """One write of a scope: who, what (for the undo stack), the files' new texts (None: deleted), the changelog
    line, whether it can be undone, whether it is a consolidation's."""

    by: str
    what: str
    files: Mapping[str, str | None]
    log: str
    undo: bool
    consolidated: bool = False


def _file(path: str, raw: Any) -> File:
    data = json.loads(raw)
    return File(path, str(data.get("text", "")), str(data.get("author", "")), float(data.get("at", 0)),
                int(data.get("version", 0)))


def _pause() -> None:
    time.sleep(random.uniform(0.001, 0.02))

