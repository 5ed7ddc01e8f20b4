"""Features as plugins on an App (issue 31): nothing registers on import, declarations never collide, card buttons
are dispatched by their action's namespace, and a feature that is not in the product (tests/throwaway.py) runs
through the real stack — web → Redis → worker → emulator — next to items' buttons, with no product file touched."""

from __future__ import annotations

import importlib
import json
import logging
import sys
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

import app as product
from sandbox.feishu.events import card_action_event, mention
from tests import throwaway
from tests.harness import APP_ID, BOT_OPEN_ID, VERIFICATION_TOKEN, deliver, message_id, reply_text, wait_for
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack
from tests.test_items import _buttons, _click, _proposal_card, _status_writes, follow_up, open_topic, topic_rk
from turn.registry import Action, App, Collision, Command, Feature, TimerKind

TZ = ZoneInfo("Asia/Shanghai")
MONDAY_9 = datetime(2026, 11, 30, 9, 0, tzinfo=TZ)
AT_BOT = [mention(BOT_OPEN_ID, "助手")]


def _noop(_c: Any) -> None:
    return None


# -- the App: pure ------------------------------------------------------------------------------------------------

def test_importing_a_feature_registers_nothing() -> None:
    before = product.build_app()
    importlib.reload(sys.modules["tests.throwaway"])  # a feature module imported (again): no App changes
    after = product.build_app()
    assert before.names == after.names and "stamp" not in after.names
    assert App().names == () and App().commands == [] and App().actions == {}
    assert "stamp" in throwaway.build_app().names and before is not after  # a new instance each time


@pytest.mark.parametrize("second", [
    Feature("b", commands=(Command("reset", _noop, words=("/again",)),)),  # a command name taken
    Feature("b", timer_kinds=(TimerKind("followup", _noop),)),  # a timer kind taken
    Feature("items"),  # a feature name taken
    Feature("b", route_work=product.items.FEATURE.route_work),  # a route kind taken
])
def test_a_second_declaration_of_the_same_thing_is_refused_at_build(second: Feature) -> None:
    with pytest.raises(Collision):
        App((*product.FEATURES, second))


def test_two_features_buttons_of_the_same_name_never_collide() -> None:
    app = App((*product.FEATURES, Feature("votes", actions=(Action("approve", _noop),))))
    assert {"items:approve", "votes:approve"} <= set(app.actions)
    assert app.actions["items:approve"] is not app.actions["votes:approve"]
    assert app.action_for({"action": "votes:approve"}) == "votes:approve"
    assert app.action_for({"action": "items:approve", "p": "prop_0"}) == "items:approve"
    # a card posted before namespacing is still items'; an unknown action is nobody's
    assert app.action_for({"a": "approve", "p": "prop_0123456789abcdef"}) == "items:approve"
    assert app.action_for({"action": "ghost:press"}) is None and app.action_for({"a": "vote"}) is None


def test_the_webhook_s_reset_check_agrees_with_the_first_command_that_matches() -> None:
    import re

    ahead = Feature("ahead", commands=(Command("ahead:any", _noop, pattern=re.compile(r"/(reset|again).*")),))
    app = App((ahead, *product.FEATURES))  # its command is tried before /reset, and takes it
    later = App((Feature("later", commands=(Command("later:again", _noop, pattern=re.compile(r"/again.*"),
                                                    resets=True),)),))
    texts = ["/reset", "/reset。", "  /RESET ", "/new", "/status", "请 /reset", "hello", "/again now", ""]
    for a in (app, later, App(product.FEATURES)):
        for text in texts:
            first = a.command_of("text", text)
            assert a.resets("text", text) == (first is not None and first.resets), (text, first)
    assert app.command_of("text", "/reset") is not None and not app.resets("text", "/reset")
    plain = App(product.FEATURES)
    assert plain.resets("text", "/reset") and not plain.resets("image", "/reset")
    assert not plain.resets("text", "请 /reset")
    assert later.resets("text", "/again now")


def test_route_kinds_and_timer_kinds_come_from_the_features() -> None:
    app = throwaway.build_app()
    assert set(app.route_kinds) == {"p2p", "group", "topic", "item", "digest", "memory", "hook"}
    assert set(app.timer_kinds) == {"followup", "digest", "triage", "poll", "codehost_card", "stamp"}
    assert [t["name"] for t in app.tools_for([])][-1] == "stamp_count"


# -- through the real stack -----------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Path, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.with_items(env, workdir, feishu, "plug", clock=MONDAY_9, WORKER_CONCURRENCY="3",
                            TIMER_CHECK_SECONDS="0.2", APP_FACTORY="tests.throwaway:build_app", STAMP_WORD="打卡",
                            POLL_MAX_VOTERS="2")
    yield s
    s.stop()


@pytest.fixture(autouse=True)
def _ready(request: pytest.FixtureRequest, feishu: Any, claude: Any, r: redis.Redis) -> Iterator[None]:
    if "stack" not in request.fixturenames:
        yield
        return
    s = request.getfixturevalue("stack")
    s.ready_for_test(feishu)
    s.set_clock(r, MONDAY_9)
    claude.add_responder(throwaway.standin)  # as `sandbox serve` adds every feature's stand-in behaviour
    yield
    claude.remove_responder(throwaway.standin)


def _stamp_card(feishu: Any, chat: str) -> dict[str, Any] | None:
    cards = [m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"
             and "stamp:press" in json.dumps(feishu.card_versions(m["message_id"])[-1])]
    return cards[-1] if cards else None


def test_a_feature_outside_the_product_runs_next_to_items_buttons(stack: OwnStack, feishu: Any, claude: Any,
                                                                  r: redis.Redis) -> None:
    web, keys = stack.web, stack.keys
    chat, thread, root, item = open_topic(web, feishu, r, keys)
    rk = topic_rk(keys, chat, thread)
    follow_up(web, feishu, chat, thread, root, "确认修好了，把状态改成已解决", sender="ou_dev")
    approval = wait_for(lambda: _proposal_card(feishu, chat), 30, what="items' approval card")

    # its command posts its card (its setting names the button), its timer closes it later
    env = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root, text="@_user_1 /stamp",
                  mentions=AT_BOT, sender_open_id="ou_dev")
    stamp = wait_for(lambda: _stamp_card(feishu, chat), 30, what="the stamp card")
    assert "打卡" in json.dumps(feishu.card_versions(stamp["message_id"])[-1], ensure_ascii=False)
    press = _buttons(feishu, stamp["message_id"])["press"]
    assert press["action"] == "stamp:press"

    # its button and items' button, on one route: each reaches its own feature
    _click(web, "ou_a", press, stamp["message_id"], chat)
    _click(web, "ou_reporter", _buttons(feishu, approval["message_id"])["approve"], approval["message_id"], chat)
    _click(web, "ou_b", press, stamp["message_id"], chat)
    _click(web, "ou_a", press, stamp["message_id"], chat)  # once per person
    wait_for(lambda: len(feishu.replies_to(stamp["message_id"])) >= 3, 40, what="the stamp counts")
    wait_for(lambda: len(feishu.card_versions(approval["message_id"])) >= 2, 40, what="the decided approval")
    idle(r, keys, rk)
    assert [reply_text(m) for m in feishu.replies_to(stamp["message_id"])] == ["打卡：1", "打卡：2", "打卡：2"]
    assert _status_writes(feishu, item.record_id) == ["已解决"]

    # its key, under its namespace, expires
    key = keys.feature_of_route("stamp", rk, "pressed")
    assert key.startswith(f"fb:{stack.profile}:f:stamp:") and r.smembers(key) == {"ou_a", "ou_b"}
    assert 0 < r.ttl(key) <= throwaway.TTL_S

    # its tool, called as a model would, answers from its key
    asked = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                    text="@_user_1 现在多少人盖章了？", mentions=AT_BOT, sender_open_id="ou_dev")
    answer = wait_for(lambda: feishu.replies_to(message_id(asked)), 40, what="the tool's answer")[0]
    assert "目前 2 人盖了章" in reply_text(answer)

    # its timer kind: the card closes a minute later (the service clock moved, not the wall clock)
    stack.set_clock(r, MONDAY_9 + timedelta(minutes=5))
    closed = wait_for(lambda: [m for m in feishu.replies_to(message_id(env)) if "结束" in reply_text(m)], 40,
                      what="the stamp's timer")
    assert reply_text(closed[0]) == "打卡结束：2 人"


def test_a_button_no_feature_claims_gets_a_polite_toast_and_a_log_line(stack: OwnStack, feishu: Any,
                                                                         r: redis.Redis, caplog: Any) -> None:
    rk = topic_rk(stack.keys, "oc_nobody", "omt_nobody")
    event = card_action_event("ou_a", {"action": "ghost:press", "rk": rk}, message_id="om_ghost", chat_id="oc_nobody",
                              token=VERIFICATION_TOKEN, app_id=APP_ID)
    with caplog.at_level(logging.WARNING):
        resp = stack.web.post(event)
    assert resp.status_code == 200 and resp.json()["toast"]["type"] == "warning"
    assert "失效" in resp.json()["toast"]["content"]
    assert r.llen(stack.keys.inbox(rk)) == 0
    assert any("no feature claims" in rec.getMessage() and getattr(rec, "event_id", "") == event["header"]["event_id"]
               for rec in caplog.records)

