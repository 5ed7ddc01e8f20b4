"""Pacing through the real stack: a burst of replies in one chat stays within Feishu's 5/s, and a 429 is waited out
for exactly its `x-ogw-ratelimit-reset` (issue 8, acceptance 4)."""

from __future__ import annotations

from sandbox.feishu.events import mention
from tests.harness import (
    BOT_OPEN_ID,
    deliver,
    message_id,
    route_key,
    unique,
    wait_for,
    wait_route_idle,
    wait_routes_idle,
)

AT_BOT = [mention(BOT_OPEN_ID, "助手")]


def most_in_a_second(times: list[float]) -> int:
    times = sorted(times)
    return max((sum(1 for u in times[i:] if u - t < 1.0) for i, t in enumerate(times)), default=0)


def test_thirty_replies_due_at_once_in_one_chat_are_paced(service, feishu, claude, r, keys) -> None:
    # Two chunks per reply, so the chat's runs (4 at a time here) have far more than 5 sends ready per second.
    claude.set_responder(lambda body: "分段回复。" * 1000)  # 5,000 chars, plain text: two text chunks
    chat = unique("oc_busy")
    senders = [f"ou_p{i:02d}" for i in range(30)]
    sent = [deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id=s, text=f"@_user_1 问题 {s}",
                    mentions=AT_BOT) for s in senders]
    wait_for(lambda: all(len(feishu.replies_to(message_id(e))) == 2 for e in sent), timeout=150,
             what="every reply delivered")
    wait_routes_idle(r, keys, [route_key("group", chat, s) for s in senders])
    assert [len(feishu.replies_to(message_id(e))) for e in sent] == [2] * 30  # each delivered once
    times = feishu.sends(chat)[chat]
    assert len(times) == 60
    assert most_in_a_second(times) <= 5, " ".join(f"{t - min(times):.3f}" for t in sorted(times))
    assert feishu.peak_sends()[chat] <= 5


def test_a_429_is_waited_out_for_exactly_its_reset(service, feishu, claude, r, keys) -> None:
    feishu.inject_fault("reply", "rate_limit", reset_seconds=2)
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="限流测试")
    mid = message_id(env)
    feishu.wait_for(lambda: feishu.replies_to(mid), timeout=30)
    wait_route_idle(r, keys, route_key("p2p", chat))
    calls = [q for q in feishu.requests if q["op"] == "reply" and q["params"]["message_id"] == mid]
    assert len(calls) == 2 and calls[0]["json"]["uuid"] == calls[1]["json"]["uuid"]
    assert calls[1]["time"] - calls[0]["time"] >= 2.0  # never before Feishu said the limit resets
    assert len(feishu.replies_to(mid)) == 1
