"""Scenarios through the real endpoint, real Redis, real RQ workers and the real SDKs (acceptance 3–7)."""

from __future__ import annotations

import json
import threading
import time

from sandbox.feishu.events import mention, mention_all, post_content
from tests.harness import (
    BOT_OPEN_ID,
    deliver,
    message_id,
    model_requests_with,
    reply_text,
    route_key,
    session_log,
    unique,
    wait_for,
    wait_route_idle,
)

AT_BOT = [mention(BOT_OPEN_ID, "助手")]


def new_batches(claude) -> list[str]:
    """The new-batch part (the final user turn) of every model request; history comes before it."""
    return [json.dumps(req["body"]["messages"][-1]["content"], ensure_ascii=False) for req in claude.requests]


def test_p2p_message_gets_one_model_call_and_one_reply(service, feishu, claude, r, keys) -> None:
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="登录页报错 500 怎么办")
    mid = message_id(env)
    replies = feishu.wait_for(lambda: feishu.replies_to(mid))
    wait_route_idle(r, keys, route_key("p2p", chat))
    assert len(feishu.replies_to(mid)) == 1
    assert len(model_requests_with(claude, "登录页报错 500 怎么办")) == 1
    reply_calls = [r for r in feishu.requests if r["op"] == "reply"]
    # A retried call (e.g. a token another test made the emulator reject) reuses the uuid; one succeeds.
    assert {r["path"] for r in reply_calls} == {f"/open-apis/im/v1/messages/{mid}/reply"}
    assert len({r["json"]["uuid"] for r in reply_calls}) == 1 and len(reply_calls) <= 2
    assert not [r for r in feishu.requests if r["op"] == "create"]
    assert "登录页报错 500 怎么办" in reply_text(replies[0])  # the stand-in echoes what it was asked


def _assert_ignored_before(service, feishu, claude, r, keys, ignored: dict, chat: str) -> None:
    """Barrier for "nothing happened": a later message of the same sender and chat (so the same route,
    behind the ignored one) is answered and the route goes idle; only then is the ignored one checked."""
    later = deliver(service, feishu, chat_id=chat, chat_type="group", text="@_user_1 随后的正常提问",
                    mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(later)))
    wait_route_idle(r, keys, route_key("group", chat, "ou_user"))
    assert len(model_requests_with(claude, "随后的正常提问")) == 1
    ignored_text = json.loads(ignored["event"]["message"]["content"])["text"].removeprefix("@_all ")
    # Not answered, not a turn of its own: it reaches the model only as related discussion (marked data)
    # in the later turn, never in a message element or the session history.
    for request in model_requests_with(claude, ignored_text):
        text = json.dumps(request["body"]["messages"], ensure_ascii=False)
        outside = text.split("<related_discussion")[0] + text.split("</related_discussion>")[-1]
        assert ignored_text not in outside
    assert ignored_text not in json.dumps(session_log(r, keys, route_key("group", chat, "ou_user")), ensure_ascii=False)
    assert feishu.replies_to(message_id(ignored)) == []
    assert len(feishu.bot_messages(chat_id=chat)) == 1


def test_group_without_mention_is_ignored(service, feishu, claude, r, keys) -> None:
    chat = unique("oc_grp")
    env = deliver(service, feishu, chat_id=chat, chat_type="group", text="没有艾特机器人")
    _assert_ignored_before(service, feishu, claude, r, keys, env, chat)


def test_group_mention_gets_a_reply(service, feishu, claude, r, keys) -> None:
    chat = unique("oc_grp")
    env = deliver(service, feishu, chat_id=chat, chat_type="group", text="@_user_1 看下这个", mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    wait_route_idle(r, keys, route_key("group", chat, "ou_user"))
    assert len(model_requests_with(claude, "看下这个")) == 1
    assert len(feishu.replies_to(message_id(env))) == 1


def test_mention_all_alone_is_ignored(service, feishu, claude, r, keys) -> None:
    chat = unique("oc_grp")
    env = deliver(service, feishu, chat_id=chat, chat_type="group", text="@_all 开会了", mentions=[mention_all()])
    _assert_ignored_before(service, feishu, claude, r, keys, env, chat)


def test_post_message_with_mention_works(service, feishu, claude, r, keys) -> None:
    content = post_content("报错截图", [[{"tag": "at", "user_id": "@_user_1", "user_name": "助手"},
                                         {"tag": "text", "text": " 富文本里的问题"}]])
    chat = unique("oc_grp")
    env = deliver(service, feishu, chat_id=chat, chat_type="group", message_type="post", content=content,
                  mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    wait_route_idle(r, keys, route_key("group", chat, "ou_user"))
    assert len(model_requests_with(claude, "富文本里的问题")) == 1


def test_topic_reply_stays_in_thread_and_topic_is_shared(service, feishu, claude, r, keys) -> None:
    chat, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, chat, text="root", thread_id=thread)
    first = deliver(service, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                    parent_id=root, sender_open_id="ou_alice", text="@_user_1 Alice 的线索：缓存失效",
                    mentions=AT_BOT)
    reply = feishu.wait_for(lambda: feishu.replies_to(message_id(first)))[0]
    assert reply["thread_id"] == thread
    second = deliver(service, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                     parent_id=root, sender_open_id="ou_bob", text="@_user_1 Bob 补充：只在夜里出现",
                     mentions=AT_BOT)
    reply2 = feishu.wait_for(lambda: feishu.replies_to(message_id(second)))[0]
    assert reply2["thread_id"] == thread
    wait_route_idle(r, keys, route_key("topic", chat, thread))
    bob_calls = model_requests_with(claude, "只在夜里出现")
    assert len(bob_calls) == 1
    seen = json.dumps(bob_calls[0]["body"]["messages"], ensure_ascii=False)
    assert "缓存失效" in seen and 'sender=\\"ou_alice\\"' in seen and 'sender=\\"ou_bob\\"' in seen
    reply_calls = [r for r in feishu.requests if r["op"] == "reply"]
    assert all(r["json"]["reply_in_thread"] is True for r in reply_calls)


def test_quoted_reply_stays_in_senders_group_route(service, feishu, claude, r, keys) -> None:
    chat = unique("oc_grp")
    alice = deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id="ou_alice",
                    text="@_user_1 Alice 的私事：预算表", mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(alice)))
    bob = deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id="ou_bob",
                  root_id=message_id(alice), parent_id=message_id(alice),
                  text="@_user_1 Bob 引用了一条消息", mentions=AT_BOT)
    reply = feishu.wait_for(lambda: feishu.replies_to(message_id(bob)))[0]
    assert not reply.get("thread_id")
    wait_route_idle(r, keys, route_key("group", chat, "ou_bob"))
    bob_call = model_requests_with(claude, "Bob 引用了一条消息")
    assert len(bob_call) == 1
    assert "预算表" not in json.dumps(bob_call[0]["body"], ensure_ascii=False)


def test_redeliveries_are_deduplicated(service, feishu, claude, r, keys) -> None:
    """Feishu redelivers after we answered (it missed our 200): the same event, the same message under a
    new event_id, and the same message under a new message_id too. Each must be dropped, not answered."""
    chat, text = unique("oc_p2p"), unique("重复投递测试")
    rk = route_key("p2p", chat)
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text=text)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    wait_route_idle(r, keys, rk)
    new_event = json.loads(json.dumps(env))
    new_event["header"]["event_id"] = unique("ev")
    renumbered = json.loads(json.dumps(env))  # Feishu has been seen to re-push with a new message_id
    renumbered["header"]["event_id"] = unique("ev")
    renumbered["event"]["message"]["message_id"] = unique("om")
    feishu.add_message(message_id(renumbered), chat, sender_open_id="ou_user", chat_mode="p2p",
                       content=env["event"]["message"]["content"])  # so a wrong reply to it would succeed
    for again in (env, new_event, renumbered):
        assert service.post(again).status_code == 200
        wait_route_idle(r, keys, rk)  # one at a time: each one alone would be a new batch, a new turn
    assert sum(batch.count(text) for batch in new_batches(claude)) == 1
    transcript = session_log(r, keys, rk)
    assert sum(e["text"].count(text) for e in transcript if e["role"] == "user") == 1
    assert len(feishu.bot_messages(chat_id=chat)) == 1
    assert len(feishu.replies_to(message_id(env))) == 1


def test_two_groups_at_once_never_see_each_other(service, feishu, claude, r, keys) -> None:
    claude.set_delay(0.3)
    g1, g2 = unique("oc_g1"), unique("oc_g2")
    envs: dict[str, dict] = {}

    def talk(chat: str, secret: str) -> None:
        envs[chat] = deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id="ou_same",
                             text=f"@_user_1 {secret}", mentions=AT_BOT)

    threads = [threading.Thread(target=talk, args=a) for a in ((g1, "甲组机密"), (g2, "乙组机密"))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for chat in (g1, g2):
        feishu.wait_for(lambda c=chat: feishu.replies_to(message_id(envs[c])))
        wait_route_idle(r, keys, route_key("group", chat, "ou_same"))
    a, b = model_requests_with(claude, "甲组机密"), model_requests_with(claude, "乙组机密")
    assert len(a) == 1 and len(b) == 1
    assert "乙组机密" not in json.dumps(a[0]["body"], ensure_ascii=False)
    assert "甲组机密" not in json.dumps(b[0]["body"], ensure_ascii=False)
    assert "乙组机密" not in reply_text(feishu.replies_to(message_id(envs[g1]))[0])


def test_burst_is_batched_and_every_message_answered_once(service, feishu, claude, r, keys) -> None:
    claude.set_delay(2.0)
    chat = unique("oc_p2p")
    texts = [f"连发第{i}条" for i in range(5)]
    envs = []
    for text in texts:
        envs.append(deliver(service, feishu, chat_id=chat, chat_type="p2p", text=text))
        time.sleep(0.15)
    wait_for(lambda: _all_covered(claude, texts), timeout=30, what="every message reaches the model")
    wait_route_idle(r, keys, route_key("p2p", chat))
    calls = [r for r in claude.requests if any(t in json.dumps(r["body"]["messages"][-1], ensure_ascii=False)
                                               for t in texts)]
    assert len(calls) <= 3
    latest = [json.dumps(c["body"]["messages"][-1], ensure_ascii=False) for c in calls]
    for text in texts:  # each message is in exactly one request's new batch
        assert sum(text in m for m in latest) == 1
    replies = feishu.wait_for(lambda: len(feishu.bot_messages(chat_id=chat)) >= len(calls) and
                              feishu.bot_messages(chat_id=chat))
    assert len(replies) == len(calls)
    order = [texts.index(next(t for t in texts if t in m)) for m in latest]
    assert order == sorted(order)
    assert [r["parent_id"] for r in replies] == [message_id(envs[_last_in(m, texts)]) for m in latest]


def _all_covered(claude, texts: list[str]) -> bool:
    blob = json.dumps([r["body"]["messages"][-1] for r in claude.requests], ensure_ascii=False)
    return all(t in blob for t in texts)


def _last_in(message: str, texts: list[str]) -> int:
    return max(i for i, t in enumerate(texts) if t in message)


def test_the_run_that_takes_a_message_indexes_its_route_by_chat_person_and_topic(service, feishu, r, keys) -> None:
    """Issue 32: the console finds a route by its chat, its people and its topic; the webhook stores the event only,
    and the run that takes it writes those indexes, each going with its routes after their retention."""
    chat, thread, sender = unique("oc_idx"), unique("omt_idx"), unique("ou_idx")
    env = deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id=sender, thread_id=thread,
                  text="@_user_1 话题里的问题", mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    rk = route_key("topic", chat, thread)
    wait_route_idle(r, keys, rk)
    for index in (keys.routes, keys.routes_of(chat), keys.routes_of(sender), keys.routes_of(thread)):
        assert r.zscore(index, rk) is not None, index
        assert r.ttl(index) > 0, index
