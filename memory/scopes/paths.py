"""Memory paths and who may touch them. Pure: the batch decides, never the model's words.

The model sees one tree, `/memories/…`: `people/<open_id>/…` (follows a person across every chat and topic),
`chats/<chat_id>/…` (the team's agreements for that group), `items/<item_id>/…` (the item's progress). A path
names a scope (its first two parts) and a file in it. A turn may read and write the scopes of the people who sent
its batch; read its chat's scope, and write it only when a sender is the chat's owner or in MEMORY_ADMINS; read and
write its item's scope. Anything else is refused with the same words whether or not it exists.
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass
from urllib.parse import unquote

ROOT = "/memories"
KINDS = ("people", "chats", "items")
_ID = {"people": re.compile(r"^o[un]_[A-Za-z0-9_-]{1,64}$|^[A-Za-z0-9]{4,64}$"),
       "chats": re.compile(r"^oc_[A-Za-z0-9_-]{1,64}$"), "items": re.compile(r"^itm_[A-Za-z0-9_-]{1,64}$")}
_SEGMENT = re.compile(r"^[\w\u3400-\u9fff .()-]{1,80}$")  # a file or folder name: letters, digits, CJK, . _ - ( )
MAX_DEPTH = 4  # folders below a scope
# in every request, whole: each scope's instructions.md, and an item's progress.md
LOADED = {"people": ("instructions.md",), "chats": ("instructions.md",), "items": ("instructions.md", "progress.md")}
LOADED_CHARS = 2000  # so a file loaded in every request holds at most this much


class PathError(ValueError):
    """A path the tool refuses; str(err) is the whole tool error, safe to show the model."""


@dataclass(frozen=True, order=True)
class Scope:
    kind: str  # people, chats, items
    id: str

    @property
    def name(self) -> str:
        return f"{self.kind}/{self.id}"

    @property
    def root(self) -> str:
        return f"{ROOT}/{self.name}"

    @classmethod
    def parse(cls, name: str) -> Scope:
        kind, _, ident = name.partition("/")
        if kind not in KINDS or not _ID[kind].match(ident):
            raise PathError(f"not a memory scope: {name}")
        return cls(kind, ident)


@dataclass(frozen=True)
class Where:
    """A parsed path: its scope (None for /memories itself or a kind folder) and the file path inside it."""

    scope: Scope | None
    file: str  # "" for the scope's root folder
    kind: str = ""  # for /memories/<kind> alone

    @property
    def path(self) -> str:
        if self.scope is None:
            return f"{ROOT}/{self.kind}" if self.kind else ROOT
        return f"{self.scope.root}/{self.file}" if self.file else self.scope.root


def parse(path: object) -> Where:
    """`/memories/<kind>/<id>/<file…>` checked: no traversal (`..`, `.`, empty parts, encoded or full-width forms,
    backslashes), nothing outside /memories, names of plain characters only."""
    if not isinstance(path, str) or not path.strip():
        raise PathError("Path must start with /memories")
    raw = path.strip()
    folded = unicodedata.normalize("NFKC", unquote(unquote(raw)))  # %2e%2e, %252e, full-width ．．
    if folded != raw or "\\" in raw or "\x00" in raw:
        raise PathError(f"Path {raw[:120]} is not a plain memory path")
    if raw != ROOT and not raw.startswith(ROOT + "/"):
        raise PathError(f"Path must start with /memories, got: {raw[:120]}")
    parts = [p for p in raw[len(ROOT):].split("/")]
    if raw.endswith("/") and raw != ROOT + "/":
        parts = parts[:-1]
    parts = parts[1:] if parts and parts[0] == "" else parts
    if any(p in ("", ".", "..") for p in parts):
        raise PathError(f"Path {raw[:120]} would escape /memories directory")
    if not parts:
        return Where(None, "")
    if parts[0] not in KINDS:
        raise PathError(f"The path {raw[:120]} does not exist. Memory holds people/, chats/ and items/.")
    if len(parts) == 1:
        return Where(None, "", kind=parts[0])
    scope = Scope.parse(f"{parts[0]}/{parts[1]}")
    rest = parts[2:]
    if len(rest) > MAX_DEPTH + 1 or not all(_SEGMENT.match(p) for p in rest):
        raise PathError(f"Path {raw[:120]}: use plain file names (letters, digits, - _ .), at most {MAX_DEPTH} "
                        "folders deep")
    return Where(scope, "/".join(rest))


@dataclass(frozen=True)
class Grant:
    """What one turn may do: scopes it reads, and those it writes (a subset)."""

    read: frozenset[Scope]
    write: frozenset[Scope]
    why_not: dict[Scope, str]  # a scope it reads but may not write: who may (for the reply)

    def check(self, where: Where, *, writing: bool) -> Scope:
        """The scope of `where` when this turn may read (and, `writing`, write) it; PathError otherwise, saying no
        more about a scope it may not read than about one that does not exist."""
        scope = where.scope
        if scope is None:
            if writing:
                raise PathError(f"Cannot write {where.path}: write a file inside one of your scopes")
            return Scope("", "")
        if scope not in self.read:
            raise PathError(f"Access denied: {scope.root} is not one of the memory scopes of this conversation")
        if writing and scope not in self.write:
            raise PathError(f"Access denied: {scope.root} is read-only here. {self.why_not.get(scope, '')}".strip())
        return scope


OWNER_UNKNOWN = ("The chat's owner could not be looked up (the app lacks the group-info scope, or Feishu did not "
                 "answer), so only a memory admin (MEMORY_ADMINS) may change the team's memory right now.")


def grant(senders: list[str], chat_id: str, chat_type: str, item_id: str, *, chat_writers: set[str],
          owner_known: bool = True) -> Grant:
    """The scopes of one batch: `chat_writers` are the senders who may write the chat's memory (its owner, admins);
    owner_known False: the owner could not be looked up (the refusal says so)."""
    people = {Scope("people", s) for s in senders if s and _ID["people"].match(s)}
    read, write = set(people), set(people)
    why: dict[Scope, str] = {}
    if chat_id and chat_type != "p2p" and _ID["chats"].match(chat_id):
        chat = Scope("chats", chat_id)
        read.add(chat)
        if chat_writers:
            write.add(chat)
        else:
            why[chat] = ("Only the chat's owner or a memory admin (MEMORY_ADMINS) may change the team's memory."
                         if owner_known else OWNER_UNKNOWN)
    if item_id and _ID["items"].match(item_id):
        item = Scope("items", item_id)
        read.add(item)
        write.add(item)
    return Grant(frozenset(read), frozenset(write), why)
