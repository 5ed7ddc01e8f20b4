"""Nothing crosses routes: 200 routes of every kind, interleaved canaries, 4 RQ workers per queue (issue 6)."""

from __future__ import annotations

import json
import re

from sandbox.feishu.events import mention
from tests.harness import BOT_OPEN_ID, deliver, unique, wait_routes_idle

AT_BOT = [mention(BOT_OPEN_ID, "助手")]
CANARY = re.compile(r"cnry-[0-9a-f]{6}-\d{3}-\d")


def _routes(tag: str) -> list[tuple[str, dict]]:
    """(route key, delivery kwargs) for 50 private chats, 100 group senders in 20 chats, 50 topics in 10 chats."""
    out = []
    for i in range(50):
        chat = f"oc_{tag}_p{i}"
        out.append((f"feishu:test:p2p:{chat}", {"chat_id": chat, "chat_type": "p2p"}))
    for i in range(100):
        chat, sender = f"oc_{tag}_g{i // 5}", f"ou_{tag}_{i % 5}"
        out.append((f"feishu:test:group:{chat}:{sender}",
                    {"chat_id": chat, "chat_type": "group", "sender_open_id": sender, "mentions": AT_BOT}))
    for i in range(50):
        chat, thread = f"oc_{tag}_t{i // 5}", f"omt_{tag}_{i}"
        out.append((f"feishu:test:topic:{chat}:{thread}", {"chat_id": chat, "chat_type": "group", "thread_id": thread,
                                                           "sender_open_id": f"ou_{tag}_{i % 3}", "mentions": AT_BOT}))
    return out


def test_no_canary_reaches_another_routes_model_requests(service, feishu, claude, r, keys) -> None:
    tag = unique("x")[-6:].replace("_", "0")
    tag = "".join(c if c in "0123456789abcdef" else "0" for c in tag)
    routes = _routes(tag)
    owner: dict[str, str] = {}
    for round_ in range(2):  # interleaved: every route's first message, then every route's second
        for i, (rk, kw) in enumerate(routes):
            canary = f"cnry-{tag}-{i:03d}-{round_}"
            owner[canary] = rk
            deliver(service, feishu, text=f"@_user_1 问题 {canary}" if kw.get("mentions") else f"问题 {canary}", **kw)
    wait_routes_idle(r, keys, [rk for rk, _ in routes])
    seen: dict[str, set[str]] = {}
    for req in claude.requests:
        body = json.dumps(req["body"], ensure_ascii=False)
        found = {c for c in CANARY.findall(body) if c.startswith(f"cnry-{tag}-")}
        if found:
            route_set = {owner[c] for c in found}
            assert len(route_set) == 1, f"one request carried canaries of {sorted(route_set)}"
            seen.setdefault(route_set.pop(), set()).update(found)
    assert len(seen) == len(routes)  # every route asked the model, each only with its own canaries
    for rk, canaries in seen.items():
        assert {owner[c] for c in canaries} == {rk}
