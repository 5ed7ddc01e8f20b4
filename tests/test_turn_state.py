"""A turn's own state on real Redis and the stand-ins: one answer per batch, and nothing left behind (defects 3, 7)."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable

import pytest

from core.inbound import Inbound
from runs.runtime import Runtime
from tests.harness import deliver, message_id, session_log, settings_from, unique, wait_route_idle
from turn.ask import answer_for
from turn.registry import Context


@pytest.fixture()
def rt(env: dict[str, str]) -> Runtime:
    settings = settings_from(env)
    return Runtime(settings, settings.redis_url or "")


def test_two_runs_of_one_batch_send_the_same_answer(rt: Runtime, claude) -> None:
    """Defect 7: a run whose lease expired while the model was thinking must not overwrite the answer
    a second run of the same batch already stored (the user would get chunks of two answers)."""
    answers = itertools.count(1)
    claude.set_responder(lambda body: f"第{next(answers)}个答案")
    rk, batch = f"feishu:test:p2p:{unique('oc')}", unique("batch")
    first_asked = threading.Event()
    second_done = threading.Event()
    results: dict[str, str] = {}

    def slow_fence() -> bool:  # the first run passes its fence check, then stalls before storing
        first_asked.set()
        second_done.wait(10)
        return True

    asker = (Inbound(event_id="e1", message_id="om_1", chat_id=rk.rsplit(":", 1)[-1], chat_type="p2p",
                     sender_open_id="ou_a", sender_type="user", message_type="text", text="问", content="{}"),)

    def turn(fence: Callable[[], bool]) -> Context:
        return Context(rt, rk, asker, batch, fence, session_id="s_none", text="<message>问</message>")

    def first() -> None:
        results["first"] = answer_for(turn(slow_fence)).text

    thread = threading.Thread(target=first)
    thread.start()
    assert first_asked.wait(10)
    results["second"] = answer_for(turn(lambda: True)).text
    second_done.set()
    thread.join(10)
    assert results["first"] == results["second"] == "第2个答案"


def test_a_committed_route_keeps_no_per_batch_state(service, feishu, claude, r, keys) -> None:
    """Defect 3: answers and delivered-chunk records go when their batch commits."""
    chat = unique("oc_p2p")
    rk = f"feishu:test:p2p:{chat}"
    for i in range(3):
        env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text=f"第{i}个问题")
        feishu.wait_for(lambda e=env: feishu.replies_to(message_id(e)), timeout=30)
    wait_route_idle(r, keys, rk)
    tag = keys.answer(rk, "x").rsplit(":", 1)[0]
    assert list(r.scan_iter(f"{tag}:*")) == []
    assert list(r.scan_iter(f"{keys.sent(rk, 'x').rsplit(':', 1)[0]}:*")) == []
    assert not r.exists(keys.fails(rk))
    assert len(session_log(r, keys, rk)) == 6
