"""Scenario 12: a tenant that granted only the scope needed to reply (issue 14 B2).

Every optional scope is denied (reactions, message resources and reads, topic history, chat members): the
capabilities that need them turn off loudly, every message is still answered once and in order, nothing is
dead-lettered, and work never pauses (the old behaviour: the first 99991672 paused all work, the pause probe
passed, work resumed, and the next message paused it again).
"""

from __future__ import annotations

import requests

from chaos.load import p2p_targets
from chaos.report import Result
from chaos.scenarios.base import Context, scenario
from feishu.capabilities import CAPABILITIES
from sandbox.feishu.rules import OPTIONAL_SCOPES


@scenario(12, "a tenant missing every optional scope")
def missing_scopes(ctx: Context, result: Result) -> None:
    stack = ctx.stack
    n, routes = ctx.size(20, 120), ctx.size(5, 20)
    result.size = f"{n} msgs / {routes} p2p routes + 3 topics, only im:message:send_as_bot granted"
    stack.feishu.deny_scopes(OPTIONAL_SCOPES | {"im:message"})
    run = ctx.run(result)
    paused_seen: list[dict[str, str]] = []
    try:
        tag = run.sender.tag
        topics = [run.sender.add_topic(f"oc_s12_{tag}_{i}", f"omt_s12_{tag}_{i}", "ou_s12") for i in range(3)]
        for target in topics:
            run.sender.send(run.sender.event(target, "话题里的问题"))
        run.sender.open_loop(p2p_targets(routes, f"s12{tag}"), rate=ctx.size(10, 20), count=n)
        run.phase("sending")
        while not run.sender.wait(timeout=0.5):
            if stack.r.hgetall(stack.keys.paused):
                paused_seen.append(stack.r.hgetall(stack.keys.paused))
        run.settle(idle_timeout=90)
        run.finish()
        ready = requests.get(f"{stack.url}/readyz", timeout=5).json()
        off = set(ready.get("capabilities_off") or {})
        result.check("work never paused", not paused_seen and not ready.get("paused"),
                     f"paused seen {len(paused_seen)} times: {paused_seen[:1]}; now {ready.get('paused')}")
        result.check("capabilities reported off in /readyz", {"reactions", "thread_history"} <= off
                     and ready["status"] == "degraded", f"status {ready['status']}, off {sorted(off)}")
    finally:
        stack.feishu.deny_scopes(())
        stack.r.delete(*[stack.keys.capability_off(name) for name in CAPABILITIES])
        run.close()
