"""Issue 16 acceptance 2: every worker process of a host SIGKILLed mid-run; the route is taken over within
10 s of the kill (plus one turn) at the production timers, and answered exactly once."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

from tests.harness import (
    deliver,
    message_id,
    model_requests_with,
    route_key,
    unique,
    wait_route_idle,
)
from tests.own_stack import OwnStack

TAKEOVER_S = 10.0


def test_every_worker_killed_mid_turn_is_taken_over_within_ten_seconds(env, workdir: Path, feishu, claude,
                                                                      r) -> None:
    # Production timers: the lease and the sweep as shipped; only the suite's short overrides are dropped.
    stack = OwnStack.start(env, workdir, "fast", WORKER_CONCURRENCY="2", RUN_LEASE_SECONDS="6",
                           SWEEP_INTERVAL_SECONDS="15", RECOVERY_CHECK_SECONDS="1")
    try:
        arrived = threading.Event()
        claude.on_request(lambda body: arrived.set() if "整机被杀" in json.dumps(body, ensure_ascii=False) else None)
        claude.set_delay(4.0)
        chat = unique("oc_p2p")
        msg = deliver(stack.web, feishu, chat_id=chat, chat_type="p2p", text="整机被杀测试")
        rk = route_key("p2p", chat, profile=stack.profile)
        assert arrived.wait(60), "the turn never reached the model"
        time.sleep(0.5)  # mid-turn: the model is thinking
        killed = stack.kill_workers()
        killed_at = time.monotonic()
        assert killed, "no worker process to kill"
        claude.set_delay(1.0)  # the successor's turn: one second
        feishu.wait_for(lambda: feishu.replies_to(message_id(msg)), timeout=60)
        took = time.monotonic() - killed_at
        assert took <= TAKEOVER_S + 1.0 + 1.5, f"answered {took:.1f} s after the kill (target ≤ 10 s + one turn)"
        wait_route_idle(r, stack.keys, rk, timeout=40)
        assert len(feishu.replies_to(message_id(msg))) == 1
        assert len(model_requests_with(claude, "整机被杀测试")) == 2  # the killed call and the successor's
        assert stack.supervisor.alive()
    finally:
        stack.stop()
