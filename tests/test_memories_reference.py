"""The memory tool against Anthropic's reference (issue 32): the same calls on the same files, run on the SDK's own
`BetaLocalFilesystemMemoryTool` in a temp dir and on ours over the real Redis, answer the same text (each scope is a
folder in the reference's tree), apart from the deliberate differences listed below with their reasons."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import redis
from anthropic.lib.tools import ToolError
from anthropic.lib.tools._tool_dispatch import tool_error_content, tool_result_content
from anthropic.tools.memory import BetaLocalFilesystemMemoryTool

from core.keys import Keys
from memory.scopes.paths import Scope, grant
from memory.scopes.store import Caps, Memories
from memory.scopes.tool import ScopedMemory
from tests.harness import unique

A = "/memories/people/ou_alice"
ALICE = Scope("people", "ou_alice")
NESTED = {"a.md": "x", "notes/b.md": "yy", "notes/deep/c.md": "z", "notes/deep/deeper/d.md": "w",
          "notes/deep/deeper/deepest/e.md": "v", "zz.md": "last"}
TEN = "\n".join(f"line {n}" for n in range(1, 11))


def view(path: str = A, **more: Any) -> dict[str, Any]:
    return {"command": "view", "path": path, **more}


# (name, the scope's files before, the calls): every call's (text, is_error) must equal the reference's
SAME: list[tuple[str, dict[str, str], list[dict[str, Any]]]] = [
    ("view a file", {"a.md": "one\ntwo\nthree"}, [view(f"{A}/a.md")]),
    ("view a range", {"a.md": "one\ntwo\nthree"}, [view(f"{A}/a.md", view_range=[2, 3])]),
    ("view a range to the end", {"a.md": "one\ntwo\nthree\n"}, [view(f"{A}/a.md", view_range=[2, -1])]),
    ("view a scope: folders listed, two levels deep", NESTED, [view()]),
    ("view a folder: two levels below it", NESTED, [view(f"{A}/notes")]),
    ("view with a trailing slash", NESTED, [view(f"{A}/")]),
    ("view sizes: 10B, 1K, 1.5K", {"s.md": "x" * 10, "k.md": "x" * 1024, "h.md": "x" * 1536}, [view()]),
    ("view an empty scope", {}, [view()]),
    ("view hidden files left out", {".hidden.md": "x", "a.md": "y"}, [view()]),
    ("view a missing path", {"a.md": "x"}, [view(f"{A}/nope.md"), view(f"{A}/a.md/x")]),
    ("view /memories and a kind", {"a.md": "x"}, [view("/memories"), view("/memories/people")]),
    ("create a file", {}, [{"command": "create", "path": f"{A}/new.md", "file_text": "hello"}, view(f"{A}/new.md")]),
    ("create in new folders", {"a.md": "x"},
     [{"command": "create", "path": f"{A}/notes/deep/x.md", "file_text": "x"}, view()]),
    ("create over a file", {"a.md": "x"}, [{"command": "create", "path": f"{A}/a.md", "file_text": "other"}]),
    ("create at a scope's root", {"a.md": "x"}, [{"command": "create", "path": A, "file_text": "x"}, view()]),
    ("create where a folder is", {"notes/b.md": "x"},
     [{"command": "create", "path": f"{A}/notes", "file_text": "x"}, view()]),
    ("str_replace one match", {"a.md": TEN},
     [{"command": "str_replace", "path": f"{A}/a.md", "old_str": "line 6", "new_str": "six"}, view(f"{A}/a.md")]),
    ("str_replace at the top", {"a.md": TEN},
     [{"command": "str_replace", "path": f"{A}/a.md", "old_str": "line 1\n", "new_str": ""}]),
    ("str_replace no match", {"a.md": "abc"},
     [{"command": "str_replace", "path": f"{A}/a.md", "old_str": "zzz", "new_str": "y"}]),
    ("str_replace several matches", {"a.md": "a\nb\na\nxaa"},
     [{"command": "str_replace", "path": f"{A}/a.md", "old_str": "a", "new_str": "y"}]),
    ("str_replace on a folder", {"notes/b.md": "x"},
     [{"command": "str_replace", "path": f"{A}/notes", "old_str": "x", "new_str": "y"},
      {"command": "str_replace", "path": A, "old_str": "x", "new_str": "y"}]),
    ("str_replace a missing file", {},
     [{"command": "str_replace", "path": f"{A}/a.md", "old_str": "x", "new_str": "y"}]),
    ("insert at 0", {"a.md": "l1\nl2"},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": 0, "insert_text": "l0"}, view(f"{A}/a.md")]),
    ("insert at N ends the file with a newline", {"a.md": "l1\nl2"},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": 2, "insert_text": "l3"}, view(f"{A}/a.md")]),
    ("insert at N+1", {"a.md": "l1\nl2"},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": 3, "insert_text": "l4"}]),
    ("insert at N+1 of a file ending with a newline", {"a.md": "l1\nl2\n"},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": 3, "insert_text": "l4"},
      {"command": "insert", "path": f"{A}/a.md", "insert_line": 2, "insert_text": "l3\n"}, view(f"{A}/a.md")]),
    ("insert at -1", {"a.md": "l1"},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": -1, "insert_text": "x"}]),
    ("insert several lines", {"a.md": "l1\nl2"},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": 1, "insert_text": "x\ny\n"}, view(f"{A}/a.md")]),
    ("insert into an empty file", {"a.md": ""},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": 0, "insert_text": "x"}, view(f"{A}/a.md")]),
    ("insert on a folder", {"notes/b.md": "x"},
     [{"command": "insert", "path": f"{A}/notes", "insert_line": 0, "insert_text": "x"}]),
    ("insert into a missing file", {},
     [{"command": "insert", "path": f"{A}/a.md", "insert_line": 0, "insert_text": "x"}]),
    ("delete a file", {"a.md": "x", "b.md": "y"}, [{"command": "delete", "path": f"{A}/a.md"}, view()]),
    ("delete a folder", NESTED, [{"command": "delete", "path": f"{A}/notes/deep"}, view()]),
    ("delete a missing path", {"a.md": "x"}, [{"command": "delete", "path": f"{A}/b.md"}]),
    ("rename a file", {"a.md": "x"},
     [{"command": "rename", "old_path": f"{A}/a.md", "new_path": f"{A}/b.md"}, view()]),
    ("rename a file into new folders", {"a.md": "x"},
     [{"command": "rename", "old_path": f"{A}/a.md", "new_path": f"{A}/sub/dir/a.md"}, view()]),
    ("rename a folder", NESTED,
     [{"command": "rename", "old_path": f"{A}/notes", "new_path": f"{A}/kept"}, view()]),
    ("rename onto an existing file or folder", {"a.md": "x", "b.md": "y", "notes/c.md": "z"},
     [{"command": "rename", "old_path": f"{A}/a.md", "new_path": f"{A}/b.md"},
      {"command": "rename", "old_path": f"{A}/a.md", "new_path": f"{A}/notes"}]),
    ("rename a missing path", {}, [{"command": "rename", "old_path": f"{A}/a.md", "new_path": f"{A}/b.md"}]),
    ("an unknown command", {"a.md": "x"}, [{"command": "vieww", "path": A}, {"command": "undo", "path": A}]),
    ("no command at all", {"a.md": "x"}, [{"path": A}]),
]


# (name, files before, call, what ours answers (a part of it), is_error, files after ('same': unchanged), why)
DELIBERATE: list[tuple[str, dict[str, str], dict[str, Any], str, bool, Any, str]] = [
    ("create without file_text", {}, {"command": "create", "path": f"{A}/a.md"}, "needs `file_text`", True, {},
     "the reference answers AttributeError and leaves an empty file; ours names the field and stores nothing"),
    ("str_replace without new_str", {"a.md": "x"}, {"command": "str_replace", "path": f"{A}/a.md", "old_str": "x"},
     "needs `new_str`", True, "same", "the reference answers TypeError; ours names the field"),
    ("insert_line not a number", {"a.md": "x"},
     {"command": "insert", "path": f"{A}/a.md", "insert_line": "two", "insert_text": "y"}, "needs `insert_line`",
     True, "same", "the reference answers a Python exception; ours names the field"),
    ("another person's scope", {}, view("/memories/people/ou_bob"), "Access denied", True, "same",
     "a conversation reads only its own scopes, and learns nothing of the others"),
    ("a path with ..", {"a.md": "x"}, view(f"{A}/../ou_bob/a.md"), "would escape", True, "same",
     "no traversal at all, not even one that would land inside /memories"),
    ("re-creating what is there", {"a.md": "x"}, {"command": "create", "path": f"{A}/a.md", "file_text": "x"},
     "File created successfully", False, "same", "a retried turn creates again: it must not fail or double"),
    ("inserting lines already there", {"a.md": "x\ny\n"},
     {"command": "insert", "path": f"{A}/a.md", "insert_line": 2, "insert_text": "y"}, "has been edited", False,
     "same", "a retried turn inserts again: a line is remembered once"),
    ("writing a kind's folder", {}, {"command": "create", "path": "/memories/people/x.md", "file_text": "x"},
     "not a memory scope", True, "same", "only files inside a scope are memory"),
    ("renaming a scope's root", {"a.md": "x"}, {"command": "rename", "old_path": A, "new_path": f"{A}/b"},
     "within one memory scope", True, "same", "a scope is its person's, chat's or item's: it does not move"),
    ("a file used as a folder", {"a.md": "x"}, {"command": "create", "path": f"{A}/a.md/b.md", "file_text": "y"},
     "is a file, not a folder", True, "same", "the reference answers NotADirectoryError with its disk path"),
    ("a folder into itself", {"n/a.md": "x"}, {"command": "rename", "old_path": f"{A}/n", "new_path": f"{A}/n/m"},
     "into itself", True, "same", "the reference answers OSError with its disk paths"),
]


def reference_run(tool: BetaLocalFilesystemMemoryTool, args: dict[str, Any]) -> tuple[str, bool]:
    """As the SDK's tool runner renders a call (lib/tools/_beta_runner.py `_run_tool`)."""
    try:
        return str(tool_result_content(tool.call(args))), False
    except ToolError as exc:
        return str(tool_error_content(exc)), True
    except Exception as exc:  # the runner's own catch-all
        return str(tool_error_content(exc)), True


def folder_sizes_hidden(text: str) -> str:
    """A folder's size is a deliberate difference (the reference prints the directory entry's st_size)."""
    if not text.startswith("Here're the files"):
        return text
    head, *lines = text.split("\n")
    out = [head]
    for n, line in enumerate(lines):
        _size, _, path = line.partition("\t")
        out.append(f"<folder>\t{path}" if n == 0 or path.endswith("/") else line)
    return "\n".join(out)


def on_disk(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): p.read_text() for p in root.rglob("*") if p.is_file()}


def both(r: redis.Redis, tmp_path: Path, files: dict[str, str]) -> tuple[Any, ScopedMemory, Memories, Path]:
    reference = BetaLocalFilesystemMemoryTool(str(tmp_path))
    root = tmp_path / "memories" / "people" / "ou_alice"
    root.mkdir(parents=True)
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    store = Memories(r, Keys(unique("memref")), Caps(files=50, chars=100_000, file_chars=8000))
    if files:
        store.change(ALICE, "ou_alice", "setup", lambda f: dict(files))
    ours = ScopedMemory(store, grant(["ou_alice"], "oc_dm", "p2p", "", chat_writers=set()), "ou_alice")
    return reference, ours, store, root


@pytest.mark.parametrize(("name", "files", "calls"), SAME, ids=[c[0] for c in SAME])
def test_every_call_answers_as_the_reference_does(r: redis.Redis, tmp_path: Path, name: str, files: dict[str, str],
                                                  calls: list[dict[str, Any]]) -> None:
    reference, ours, store, root = both(r, tmp_path, files)
    for args in calls:
        want, got = reference_run(reference, dict(args)), ours.run(dict(args))
        assert (folder_sizes_hidden(got[0]), got[1]) == (folder_sizes_hidden(want[0]), want[1]), args
    assert {p: f.text for p, f in store.files(ALICE).items()} == on_disk(root)


@pytest.mark.parametrize(("name", "files", "call", "says", "error", "after", "why"), DELIBERATE,
                         ids=[c[0] for c in DELIBERATE])
def test_the_deliberate_differences_answer_as_documented(r: redis.Redis, tmp_path: Path, name: str,
                                                         files: dict[str, str], call: dict[str, Any], says: str,
                                                         error: bool, after: Any, why: str) -> None:
    _reference, ours, store, _root = both(r, tmp_path, files)
    text, is_error = ours.run(dict(call))
    assert says in text and is_error is error, (text, why)
    assert {p: f.text for p, f in store.files(ALICE).items()} == (files if after == "same" else after)
    assert not ours.changed  # none of them changes anything


def test_the_tools_docstring_names_every_deliberate_difference() -> None:
    import memory.scopes.tool

    doc = memory.scopes.tool.__doc__ or ""
    for words in ("other scopes are refused", "no `..`", "re-creating a file", "folder's size", "missing or mistyped",
                  "a file used as a folder", "scope's root is never renamed", "Unknown command"):
        assert words in doc, words
