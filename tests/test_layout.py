"""The layout keeps its shape: no import cycles between our modules, and every room says what enters and leaves it.

Every import counts, also those inside functions and under `TYPE_CHECKING`: a pair that imports each other is one
concept split badly or a missing third module (style.md §14), whether or not Python happens to load it.
"""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import pytest

import app as product

ROOT = Path(__file__).resolve().parent.parent


def feature_rooms() -> tuple[str, ...]:
    """The rooms of the App's features, found from the App (the room whose module declares each `FEATURE`), never
    from a list kept here: a new feature's folder is in every check below as soon as app.py lists it."""
    rooms: list[str] = []
    for f in product.build_app().features:
        module = next(m for m in list(sys.modules.values()) if getattr(m, "FEATURE", None) is f)
        room = module.__name__.rpartition(".")[0] or module.__name__  # its package: `items`, `memory.scopes`
        if room != "turn" and room not in rooms:  # the session's own feature lives in the turn
            rooms.append(room)
    return tuple(rooms)


# The product's rooms in data-flow order: each may import only rooms before it (test_rooms_follow_the_data_flow).
# The features share one rank between the turn and the top rooms; among them, test_features_meet_through_exports.
GROUND = ("core", "state", "routing", "feishu", "claude", "bitable", "documents", "memory", "runs", "turn")
TOP = ("jobs", "console", "bot")
FEATURES = feature_rooms()
PRODUCT = (*GROUND, *FEATURES, *TOP)
PACKAGES = (*PRODUCT, "sandbox", "bench", "chaos", "evals", "tests")


def module_files() -> dict[str, Path]:
    files = {"app": ROOT / "app.py"}
    for pkg in PACKAGES:
        for path in (ROOT / pkg).rglob("*.py"):
            parts = path.relative_to(ROOT).with_suffix("").parts
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            files[name] = path
    return files


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The project modules `name` imports anywhere in its file."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: climb from this module's package
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*parts, base] if base else parts)
            found.update(f"{base}.{alias.name}" if f"{base}.{alias.name}" in known else base for alias in node.names)
    return {module for module in found if module in known and module != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def import_graph() -> dict[str, set[str]]:
    files = module_files()
    return {name: imports_of(name, path, set(files)) for name, path in files.items()}


def test_no_import_cycles() -> None:
    assert cycles(import_graph()) == []


def room_of(module: str) -> str:
    """The room a module is in: its top folder, or the sub-room a feature lives in (`memory.scopes` inside `memory`)."""
    if module == "app":
        return "app"
    return next((f for f in FEATURES if module == f or module.startswith(f + ".")), module.split(".")[0])


def test_rooms_follow_the_data_flow() -> None:
    """Each product room imports only rooms before it in PRODUCT: the ground (core) imports nothing of ours, the
    adapters sit below the runs that use them, the edge sits on top and only pushes into the inbox. So no two rooms
    import each other, directly or in a circle."""
    rank = {room: n for n, room in enumerate(PRODUCT)} | {room: len(GROUND) for room in FEATURES}
    wrong = sorted(f"{module} -> {dep}" for module, deps in import_graph().items() for dep in deps
                   if room_of(module) in rank and room_of(dep) in rank and room_of(dep) != room_of(module)
                   and rank[room_of(dep)] > rank[room_of(module)])
    assert wrong == []


def test_features_meet_through_exports() -> None:
    """A feature uses another only through what that feature's package exports (`from items import own_item`,
    re-exported in items/__init__.py), never its inner modules; and no two features use each other."""
    graph = import_graph()
    inner = sorted(f"{m} -> {d}" for m, deps in graph.items() for d in deps
                   if room_of(m) in FEATURES and room_of(d) in FEATURES and room_of(d) != room_of(m)
                   and d != room_of(d))
    assert inner == []
    rooms = {(room_of(m), room_of(d)) for m, deps in graph.items() for d in deps
             if room_of(m) in FEATURES and room_of(d) in FEATURES and room_of(d) != room_of(m)}
    assert sorted(f"{a} <-> {b}" for a, b in rooms if (b, a) in rooms) == []


def test_mypy_checks_every_features_room() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    excluded = [x.strip("^/").replace("\\", "") for x in config.get("exclude", [])]
    assert config["files"] == ["."] and not [room for room in PRODUCT if room in excluded]


def test_the_turn_imports_no_feature_and_little_else() -> None:
    """The turn knows the registry (turn/registry.py), never a feature by name; no turn module is a hub."""
    graph = import_graph()
    turn = {m: deps for m, deps in graph.items() if room_of(m) == "turn"}
    assert sorted(f"{m} -> {d}" for m, deps in turn.items() for d in deps
                  if room_of(d) in (*FEATURES, "documents")) == []  # documents: materials' library
    product = {m: [d for d in deps if room_of(d) in PRODUCT] for m, deps in turn.items()}
    assert {m: len(deps) for m, deps in product.items() if len(deps) > 14} == {}


@pytest.mark.parametrize("graph, expected", [
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set()}, []),
])
def test_cycle_finder(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected


def test_type_checking_and_lazy_imports_count(tmp_path: Path) -> None:
    source = tmp_path / "m.py"
    source.write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runs.runtime import Runtime\n"
                      "def f():\n    from runs import inbox\n", encoding="utf-8")
    assert imports_of("x", source, {"runs.runtime", "runs.inbox", "jobs"}) == {"runs.runtime", "runs.inbox"}


ROOMS = [*PRODUCT, "sandbox", "sandbox/feishu", "sandbox/claude", "sandbox/cli", "sandbox/bitable", "sandbox/documents",
         "evals"]


@pytest.mark.parametrize("room", ROOMS)
def test_every_room_says_what_it_is(room: str) -> None:
    init = ROOT / room.replace(".", "/") / "__init__.py"
    tree = ast.parse(init.read_text(encoding="utf-8"))
    assert ast.get_docstring(tree), f"{room}/__init__.py has no docstring"
    modules = [p for p in (ROOT / room.replace(".", "/")).glob("*.py") if p.name != "__init__.py"]
    assert len(modules) <= 16, f"{room} holds {len(modules)} modules: split it into rooms"


MAX_PARAMS = 6  # issue 31: values (Context, Destination, Pushed, How …) instead of long argument lists


def wide_functions(source: str) -> list[tuple[int, str, int]]:
    """(line, name, count) of each function taking more than MAX_PARAMS parameters, `self`/`cls` not counted. Pure."""
    out = []
    for n in ast.walk(ast.parse(source)):
        if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef):
            names = [a.arg for a in (*n.args.posonlyargs, *n.args.args, *n.args.kwonlyargs)]
            count = len(names) - (1 if names[:1] in (["self"], ["cls"]) else 0)
            if count > MAX_PARAMS:
                out.append((n.lineno, n.name, count))
    return out


def test_the_width_check_counts_what_a_caller_passes() -> None:
    assert wide_functions("def f(a, b, c, d, e, f): pass\nclass C:\n    def m(self, a, b, c, d, e, f): pass\n") == []
    assert wide_functions("def g(a, b, c, d, e, f, *, g=1): pass\n") == [(1, "g", 7)]


def test_no_product_function_takes_more_than_six_parameters() -> None:
    found = [f"{path.relative_to(ROOT)}:{line} {name} ({count})" for room in (*PRODUCT, "app.py")
             for path in ([ROOT / room] if room.endswith(".py") else sorted((ROOT / room).rglob("*.py")))
             for line, name, count in wide_functions(path.read_text(encoding="utf-8"))]
    assert found == []
