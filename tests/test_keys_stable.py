"""Issue 31: moving each feature's keys into its own room moved no data. Every key builder, in core and in the rooms,
writes the very string the release before wrote (tests/data/keys_before_31.py, that release's core/keys.py), so a
running deployment's Redis keeps working after the upgrade with no migration."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from bitable import keys as item_keys
from console import keys as console_keys
from core.keys import Keys
from documents import keys as doc_keys
from items import keys as items_keys
from materials import keys as materials_keys
from memory import keys as memory_keys
from memory.scopes import keys as scope_keys
from tests.data import keys_before_31 as before
from timers import keys as timer_keys
from triage import keys as triage_keys

ROOMS = (item_keys, items_keys, doc_keys, materials_keys, memory_keys, scope_keys, timer_keys, triage_keys,
         console_keys)
RENAMED = {"route_timers": "timers_of"}  # timers' store accessor took the name `timers_of`
ARGS = {"rk": "feishu:p:topic:oc_1:omt_1", "kind": "docx", "revision": 3, "part": "Sheet1!A1:B2", "slot": 1796000000}


def _args(fn: Callable[..., str]) -> list[Any]:
    names = [p for p in inspect.signature(fn).parameters if p not in ("self", "k")]
    return [ARGS.get(n, f"{n}_x") for n in names]


def _now(name: str, args: list[Any] | None, keys: Keys) -> str:
    """The key as the code builds it today: a room's function of the keys, or core's own builder."""
    now_name = next((n for n, was in RENAMED.items() if was == name), name)
    room = next((m for m in ROOMS if hasattr(m, now_name)), None)
    if room is not None:
        return str(getattr(room, now_name)(keys, *(args or [])))
    built = getattr(keys, name)
    return str(built if args is None else built(*args))


def _then(name: str, args: list[Any] | None, keys: Any) -> str:
    built = getattr(keys, name)
    return str(built if args is None else built(*args))


def builders() -> list[tuple[str, list[Any] | None]]:
    """(name, its arguments, None for a property) of every key builder of the old layout."""
    return [(name, None if isinstance(member, property) else _args(member))
            for name, member in vars(before.Keys).items()
            if not name.startswith("_") and name not in ("prefix", "feature", "feature_of_route")]


@pytest.mark.parametrize(("name", "args"), builders(), ids=[b[0] for b in builders()])
def test_every_key_is_the_string_the_release_before_wrote(name: str, args: list[Any] | None) -> None:
    assert _now(name, args, Keys("prof")) == _then(name, args, before.Keys("prof"))


def test_every_old_builder_is_found_somewhere() -> None:
    """None of the old layout's keys was dropped on the way (each is in core or in exactly one room)."""
    for name in vars(before.Keys):
        if name.startswith("_") or name == "prefix":
            continue
        now_name = next((n for n, was in RENAMED.items() if was == name), name)
        homes = [m.__name__ for m in ROOMS if hasattr(m, now_name)] + (["core"] if hasattr(Keys, name) else [])
        assert len(homes) == 1, (name, homes)
