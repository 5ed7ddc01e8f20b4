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


def test_the_per_minute_cap_of_each_message_api_is_paced_too(env, feishu, redis_url) -> None:
    """Issue 14 B3: reply, create, PATCH and reactions allow 1,000 calls a minute each besides 50 a second. The
    outbox paces both windows: at 3 calls per (shortened) 2-second "minute", seven replies in seven chats arrive
    spread out, and the emulator, enforcing the same cap, refuses none."""
    import time

    import redis

    from core.keys import Keys
    from feishu.client import FeishuApi
    from runs.inbox import Inbox
    from runs.outbox import Destination, Limits, Outbox
    from tests.harness import settings_from

    settings = settings_from(env)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("minute"))
    outbox = Outbox(Inbox(r, keys, 30_000), keys, FeishuApi(settings, r, keys),
                    Limits(3500, chat_qps=5, app_qps=50, api_qpm=3, minute_ms=2000))
    feishu.set_api_qpm(3, window_s=2.0)
    started = time.monotonic()
    for n in range(7):
        chat, target = unique("oc_min"), unique("om_min")
        feishu.add_message(target, chat, text="问题", chat_mode="p2p")
        outbox.reply(Destination("feishu:minute:p2p:x", chat, target), unique("b"), f"回答 {n}")
    assert feishu.minute_rejections == {}
    assert time.monotonic() - started >= 4.0  # 3 + 3 + 1: two full windows waited


def test_a_slow_and_jittery_feishu_still_sees_at_most_five_a_second_in_a_chat(env, feishu, redis_url) -> None:
    """Issue 14 C: Feishu counts a send when it arrives, between our grant and its answer. With answers taking
    0–0.8 s at random, a slot scored at its grant lets six arrivals fall into one second; scored at the answer
    (the outbox's rule) none do, so the emulator's 5/s per chat refuses nothing."""
    import random
    import threading
    import time
    from concurrent.futures import ThreadPoolExecutor

    import redis

    from core.keys import Keys
    from feishu.client import FeishuApi
    from runs.inbox import Inbox
    from runs.outbox import Destination, Limits, Outbox
    from tests.harness import settings_from

    settings = settings_from(env)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("jitter"))
    outbox = Outbox(Inbox(r, keys, 30_000), keys, FeishuApi(settings, r, keys), Limits(3500, chat_qps=5, app_qps=50))
    jitter, lock = random.Random(7), threading.Lock()

    def slow(_record: dict) -> None:
        with lock:
            pause = jitter.uniform(0.0, 0.8)
        time.sleep(pause)

    feishu.on("reply", slow, when="before")
    feishu.set_chat_qps(5)
    chat = unique("oc_jitter")
    targets = [unique("om_j") for _ in range(20)]
    for target in targets:
        feishu.add_message(target, chat, text="问题", chat_mode="p2p")
    with ThreadPoolExecutor(10) as pool:
        list(pool.map(lambda t: outbox.reply(Destination("feishu:jitter:p2p:x", chat, t), unique("b"), "收到"),
                      targets))
    assert feishu.stats["chat_limit_rejections"].get(chat, 0) == 0
    assert most_in_a_second(feishu.sends(chat)[chat]) <= 5


def test_a_streaming_cards_updates_take_the_cards_ten_a_second_not_the_apps_tier(env, feishu, redis_url) -> None:
    """Issue 23 B2, the outbox's rule: an update to a card in streaming mode takes a slot of that card's second
    (CardKit allows 10 ops a second per card), not of the API's minute or the app's second, which do not count it
    (the streaming overview). With both tiers cut to 2, thirty quick updates to one card: at least ten go out,
    the rest are skipped (never refused by Feishu), and another card has its own ten."""
    import redis

    from core.keys import Keys
    from feishu.cardkit import CardKit, streaming_card
    from feishu.client import FeishuApi
    from runs.inbox import Inbox
    from runs.outbox import Destination, Limits, Outbox
    from tests.harness import settings_from

    settings = settings_from(env)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    keys = Keys(unique("cardpace"))
    api = FeishuApi(settings, r, keys)
    outbox = Outbox(Inbox(r, keys, 30_000), keys, api, Limits(3500, chat_qps=5, app_qps=2, api_qpm=2))
    feishu.set_api_qpm(2)
    feishu.set_cardkit_limits(app_qps=2)
    kit = CardKit(api)
    cards = [kit.create(streaming_card("开头")), kit.create(streaming_card("另一张"))]
    for card_id in cards:
        pushed = [outbox.try_paced(Destination("", "oc_cardpace"), lambda n=n, c=card_id: kit.stream_text(
            c, "answer", "字" * n, sequence=n, uuid=unique("u")), card=card_id) for n in range(1, 31)]
        assert pushed.count(True) >= 10, pushed  # and no 429 raised: what did not fit was skipped, not refused
    updates = [h for c in cards for h in feishu.card_history(c) if h["op"] == "card_content"]
    assert len(updates) >= 20
