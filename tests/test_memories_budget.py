"""Memory within its budget (issue 25, found by bench.memory): the loaded block of a batch from many people stays
inside MEMORY_BUDGET_SHARE (the lines saying whose each scope is count too), a consolidation's request stays inside
CONTEXT_BUDGET_TOKENS however full the scope, and a scope changed again after the slot is still consolidated that
night. The real memories code on the real Redis, with a real Runtime; nothing faked."""

from __future__ import annotations

import json
from datetime import datetime
from zoneinfo import ZoneInfo

import pytest
import redis
from pydantic import SecretStr

from core.inbound import Inbound
from core.settings import Settings
from memory.scopes import dream
from memory.scopes import keys as scope_keys
from memory.scopes.part import MemoriesPart, store_of
from memory.scopes.paths import Scope
from memory.scopes.settings import memory_settings
from runs.runtime import Runtime
from tests.harness import unique
from turn import rotation
from turn.registry import Context

TZ = ZoneInfo("Asia/Shanghai")
CHAT, THREAD = "oc_budget_team", "omt_budget"


@pytest.fixture()
def rt(redis_url: str) -> Runtime:
    settings = Settings(_env_file=None, bot_profile=unique("membud"), redis_url=redis_url,  # type: ignore[call-arg]
                        anthropic_api_key=SecretStr("sk-test"), context_budget_tokens=6000)
    return Runtime(settings, redis_url)


def turn_of(rt: Runtime, senders: list[str]) -> Context:
    batch = tuple(Inbound(event_id=f"ev{i}", message_id=f"om{i}", chat_id=CHAT, chat_type="group", sender_open_id=s,
                          sender_type="user", message_type="text", text="现在什么状态", content="{}",
                          thread_id=THREAD) for i, s in enumerate(senders))
    return Context(rt, f"feishu:{rt.settings.bot_profile}:topic:{CHAT}:{THREAD}", batch, "b1", lambda: True,
                   session_id="s1")


def test_a_batch_from_thirty_people_loads_what_fits_and_stays_within_the_memory_budget(rt: Runtime) -> None:
    store = store_of(rt)
    people = [f"ou_budget_{n:02d}" for n in range(30)]
    for who in people:
        store.change(Scope("people", who), who, "seed",
                     lambda _f, who=who: {"instructions.md": f"以后回答{who}用英文，简短点，结论先行，附上链接"})
    turn = turn_of(rt, people)
    block = MemoriesPart(turn, "").block()
    room = int(turn.budget.total * memory_settings(rt.settings).memory_budget_share)
    assert turn.budget.cost(block) <= room, (turn.budget.cost(block), room)
    loaded = block.count("<file ")
    assert 0 < loaded < 30 and "more not listed for lack of room" in block
    assert block.count("<whose ") >= loaded  # a loaded file's scope is always named


def test_a_consolidation_of_a_full_scope_asks_within_the_budget_and_names_what_it_could_not_show(
        rt: Runtime) -> None:
    store = store_of(rt)
    scope = Scope("chats", unique("oc_full"))
    for n in range(20):
        text = f"第 {n} 条：" + "值班安排" * 150
        store.change(scope, "ou_owner", "seed", lambda _f, p=f"notes/n{n:02d}.md", t=text: {p: t})
    files = store.files(scope)
    request = dream._request(rt, scope, files)
    budget = rotation.budget_of(rt)
    assert budget.cost(request) <= budget.total * dream.REQUEST_SHARE
    shown = request.count("<file ")
    assert 0 < shown < 20 and request.count("view it with the memory tool") == 20 - shown


def test_a_scope_changed_again_after_the_slot_is_still_consolidated_that_night(rt: Runtime, r: redis.Redis) -> None:
    store = store_of(rt)
    slot = datetime(2026, 12, 2, 3, 30, tzinfo=TZ).timestamp()
    early, late = Scope("people", unique("ou_early")), Scope("people", unique("ou_late"))
    # the sweeper looks at +1 s
    r.zadd(scope_keys.memory_changed(rt.keys), {early.name: slot - 3600, late.name: slot + 0.4})
    store.change(early, "x", "seed", lambda _f: {"instructions.md": "以后简短点"})
    r.zadd(scope_keys.memory_changed(rt.keys), {early.name: slot - 3600})
    assert dream.ensure_dreams(rt, now=slot + 1.0) == 2
    pushed = {json.loads(json.loads(raw)["content"])["scope"]
              for s in (early, late) for raw in r.lrange(rt.keys.inbox(
                  f"feishu:{rt.settings.bot_profile}:memory:{s.kind}:{s.id}"), 0, -1)}
    assert pushed == {early.name, late.name}
