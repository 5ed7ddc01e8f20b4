"""Bounded state (issue 32, defects 4 and 5): what people who merely speak leave in Redis expires, and every key that
has a TTL gets it in the same command or transaction that writes it. Through the real stack (web → Redis → worker)
under a profile of its own, the service clock pinned."""

from __future__ import annotations

import ast
import shutil
import tempfile
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from console import keys as console_keys
from console.signin import Operator, SignIns
from core.keys import Keys
from memory.scopes import keys as scope_keys
from memory.scopes.paths import Scope
from memory.scopes.store import Caps, Memories
from sandbox.feishu.events import mention
from tests.harness import BOT_OPEN_ID, deliver, message_id, route_key, unique, wait_for, wait_routes_idle
from tests.own_stack import OwnStack
from tests.test_layout import PRODUCT, ROOT

MONDAY_9 = datetime(2026, 11, 30, 9, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
PEOPLE = 20
CAPS = Caps(files=20, chars=100_000, file_chars=8000)
# Keys that are permanent by design, one per profile (never one per person or route): the registries of every
# route (`routes`, trimmed by retention), the counters, the console's signing key, the bot's identity, the health
# and start-up checks. A new key without a TTL that is not one of these is state that grows with who speaks.
PERMANENT = {"routes": "every route, newest first; retention trims it",
             "metrics": "the counters every process shares",
             "bot:open_id": "the bot's identity, learnt at start",
             "health": "start-up checks", "preflight": "the sweeper's doctor summary",
             "bitable:status": "the Bitable start-up check",
             "console:secret": "the key signing console cookies, made once per deployment",
             "dirty": "routes with work or a lease (empty when idle)", "running": "runs under way",
             "runinfo": "runs under way", "pools": "live worker pools", "kicks": "kick records",
             "delayed": "retries after a backoff",
             "tokens:calibration": "the profile's calibration of the local token estimate"}


@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Path, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.start(env, workdir, "ttl", clock=MONDAY_9)
    yield s
    s.stop()


def without_ttl(r: redis.Redis, prefix: str) -> set[str]:
    """Every key of the profile with no expiry (TTL -1)."""
    keys = list(r.scan_iter(f"{prefix}:*", count=1000))
    pipe = r.pipeline(transaction=False)
    for key in keys:
        pipe.ttl(key)
    return {str(k) for k, ttl in zip(keys, pipe.execute(), strict=True) if ttl == -1}


def test_one_turn_routes_by_new_people_leave_fewer_than_5_keys_without_an_expiry(stack, feishu, r) -> None:
    """Half of them in private, half in groups of their own (a person's scope and a chat's scope are loaded in
    each turn): none of them holds memory, so no `mem:{…}:routes` set is written for them."""
    prefix = stack.keys.prefix
    before = without_ttl(r, prefix)
    routes, asked, scopes = [], [], []
    for n in range(PEOPLE):
        person, chat = unique("ou_ttl"), unique("oc_ttl")
        scopes += [scope_keys.memory_routes(stack.keys, f"people/{person}"),
                   scope_keys.memory_routes(stack.keys, f"chats/{chat}")]
        if n % 2:
            env = deliver(stack.web, feishu, text="你好（ttl）", sender_open_id=person, chat_id=chat, chat_type="p2p")
            routes.append(route_key("p2p", chat, profile=stack.profile))
        else:
            env = deliver(stack.web, feishu, text="@_user_1 你好（ttl）", mentions=[mention(BOT_OPEN_ID, "助手")],
                          sender_open_id=person, chat_id=chat, chat_type="group")
            routes.append(route_key("group", chat, person, profile=stack.profile))
        asked.append(message_id(env))
    wait_for(lambda: all(feishu.replies_to(mid) for mid in asked), 180, what="every reply")
    wait_routes_idle(r, stack.keys, routes)
    new = sorted(k for k in without_ttl(r, prefix) - before if k[len(prefix) + 1:] not in PERMANENT)
    assert len(new) < 5, f"{len(new)} new keys without a TTL after {PEOPLE} one-turn routes: {new}"
    routes_sets = [k for k in scopes if r.exists(k)]
    assert routes_sets == [], routes_sets  # written only for scopes that hold memory (none of theirs)


def test_a_scope_that_holds_memory_keeps_the_routes_it_was_loaded_in_for_two_days(stack, feishu, r) -> None:
    """What the nightly consolidation reads (the routes of its last day) is still written for a scope with memory,
    and expires two days after its last route."""
    person, chat = unique("ou_ttl_mem"), unique("oc_ttl_mem")
    scope = Scope("people", person)
    Memories(r, stack.keys, CAPS).change(scope, person, "seed", lambda f: {"instructions.md": "回答要简短"})
    mid = message_id(deliver(stack.web, feishu, text="你好（ttl-mem）", sender_open_id=person, chat_id=chat,
                             chat_type="p2p"))
    wait_for(lambda: feishu.replies_to(mid), 120, what="the reply")
    rk = route_key("p2p", chat, profile=stack.profile)
    wait_routes_idle(r, stack.keys, [rk])
    routes = scope_keys.memory_routes(stack.keys, scope.name)
    assert r.zrange(routes, 0, -1) == [rk]
    assert 2 * 86400 - 60 < r.ttl(routes) <= 2 * 86400
    assert not r.exists(scope_keys.memory_routes(stack.keys, f"chats/{chat}"))  # the chat's scope holds none


# -- 5. a key and its TTL are written together ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def quiet_redis() -> Iterator[redis.Redis]:
    """An embedded Redis of its own: MONITOR then sees only what the test sends."""
    from state.embedded import ensure_server, stop_server

    var = Path(tempfile.mkdtemp(prefix="fb-mon-")) / "var"
    yield redis.Redis.from_url(ensure_server(str(var)), decode_responses=True)
    stop_server(str(var))
    shutil.rmtree(var.parent, ignore_errors=True)


def sent_while(r: redis.Redis, action: Callable[[], Any]) -> list[str]:
    """The commands Redis received while `action` ran (MONITOR), in order."""
    seen: list[str] = []
    ready, stop = threading.Event(), f"STOP-{unique('mon')}"

    def watch() -> None:
        with r.monitor() as m:
            ready.set()
            for c in m.listen():
                if stop in c["command"]:
                    return
                seen.append(str(c["command"]))

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    ready.wait(10)
    r.ping()  # the monitor's own connection is in place once a later command shows up
    wait_for(lambda: any(c == "PING" for c in seen), 10, what="MONITOR to start")
    action()
    r.get(stop)
    t.join(10)
    return seen[seen.index("PING") + 1:]


def only_in_one_transaction(sent: list[str], key: str) -> None:
    """Every command naming `key` is inside one MULTI … EXEC, which holds nothing else."""
    touching = [n for n, c in enumerate(sent) if key in c]
    assert touching, sent
    first, last = touching[0], touching[-1]
    assert first > 0 and sent[first - 1] == "MULTI" and last + 1 < len(sent) and sent[last + 1] == "EXEC", sent
    assert touching == list(range(first, last + 1)), sent


def test_a_console_sign_in_is_written_with_its_expiry_in_one_transaction(quiet_redis) -> None:
    """HSET and EXPIRE in one MULTI/EXEC: a crash between two separate commands left a sign-in that never expired."""
    keys = Keys(unique("ttl"))
    signins = SignIns(quiet_redis, keys, ttl_s=3600)
    _ = signins.signer  # the cookie key (made once) is not part of the sign-in's write
    opened: list[Operator] = []
    sent = sent_while(quiet_redis, lambda: opened.append(signins.open("ou_admin", "Admin", "feishu")[0]))
    key = console_keys.console_session(keys, opened[0].sid)
    only_in_one_transaction(sent, key)
    assert 3600 - 5 < quiet_redis.ttl(key) <= 3600


def test_a_feishu_sign_in_under_way_is_written_with_its_expiry_in_one_transaction(quiet_redis) -> None:
    keys = Keys(unique("ttl"))
    states: list[str] = []
    sent = sent_while(quiet_redis, lambda: states.append(SignIns(quiet_redis, keys, 3600).begin_oauth("b", "/x")))
    only_in_one_transaction(sent, console_keys.console_oauth(keys, states[0]))
    assert 0 < quiet_redis.ttl(console_keys.console_oauth(keys, states[0])) <= 600


# The product's rooms (tests/test_layout.py), read as code: an expiry set by a command of its own (the client's, or a
# pipeline's with transaction=False) is a second write a crash can separate from the one that made the key.
EXPIRING = {"expire", "pexpire", "expireat", "pexpireat"}


def separate_expiries(source: str) -> list[int]:
    """Lines of `source` whose expiry is not inside a MULTI/EXEC pipeline of the same function."""
    out = []
    for fn in (n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)):
        transactional = {t.id for n in ast.walk(fn) if isinstance(n, ast.Assign) and _is_transaction(n.value)
                         for t in n.targets if isinstance(t, ast.Name)}
        for call in (n for n in ast.walk(fn) if isinstance(n, ast.Call)):
            if isinstance(call.func, ast.Attribute) and call.func.attr in EXPIRING:
                receiver = call.func.value
                if not (isinstance(receiver, ast.Name) and receiver.id in transactional):
                    out.append(call.lineno)
    return out


def _is_transaction(value: ast.expr) -> bool:
    """`x.pipeline()` or `x.pipeline(transaction=True)`: redis-py wraps it in MULTI/EXEC."""
    if not (isinstance(value, ast.Call) and isinstance(value.func, ast.Attribute) and value.func.attr == "pipeline"):
        return False
    flag = next((k.value for k in value.keywords if k.arg == "transaction"), None)
    return flag is None or (isinstance(flag, ast.Constant) and flag.value is True)


def test_the_static_check_tells_a_separate_expiry_from_a_transactional_one() -> None:
    assert separate_expiries("def f(r):\n    r.hset('k', 'a', 1)\n    r.expire('k', 5)\n") == [3]
    assert separate_expiries("def f(r):\n    p = r.pipeline(transaction=False)\n    p.sadd('k', 1)\n"
                             "    p.expire('k', 5)\n    p.execute()\n") == [4]
    assert separate_expiries("def f(r):\n    p = r.pipeline()\n    p.zadd('k', {1: 1})\n    p.expire('k', 5)\n") == []
    assert separate_expiries("def f(r):\n    p = r.pipeline(transaction=True)\n    p.expire('k', 5)\n") == []


def test_no_product_code_sets_an_expiry_apart_from_the_write_it_belongs_to() -> None:
    found = {f"{path.relative_to(ROOT)}:{line}" for room in PRODUCT for path in sorted((ROOT / room).rglob("*.py"))
             for line in separate_expiries(path.read_text(encoding="utf-8"))}
    assert found == set(), "use a MULTI/EXEC pipeline, SET … EX, or a Lua script"
