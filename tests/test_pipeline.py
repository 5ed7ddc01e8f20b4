"""Scenarios through the real endpoint, real Redis, real RQ workers and the real SDKs (acceptance 3–7)."""

from __future__ import annotations

import json
import threading
import time

from sandbox.events import mention, mention_all, post_content
from tests.harness import (
    BOT_OPEN_ID,
    deliver,
    message_id,
    model_requests_with,
    reply_text,
    unique,
    wait_for,
)

AT_BOT = [mention(BOT_OPEN_ID, "助手")]
SETTLE = 1.0  # time for a wrong extra call or reply to show up before asserting "exactly one"


def test_p2p_message_gets_one_model_call_and_one_reply(service, feishu, claude) -> None:
    env = deliver(service, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="登录页报错 500 怎么办")
    mid = message_id(env)
    replies = feishu.wait_for(lambda: feishu.replies_to(mid))
    time.sleep(SETTLE)
    assert len(feishu.replies_to(mid)) == 1
    assert len(model_requests_with(claude, "登录页报错 500 怎么办")) == 1
    reply_calls = [r for r in feishu.requests if r["op"] == "reply"]
    assert [r["path"] for r in reply_calls] == [f"/open-apis/im/v1/messages/{mid}/reply"]
    assert not [r for r in feishu.requests if r["op"] == "create"]
    assert "登录页报错 500 怎么办" in reply_text(replies[0])  # the stand-in echoes what it was asked


def test_group_without_mention_is_ignored(service, feishu, claude) -> None:
    env = deliver(service, feishu, chat_id=unique("oc_grp"), chat_type="group", text="没有艾特机器人")
    time.sleep(SETTLE)
    assert model_requests_with(claude, "没有艾特机器人") == []
    assert feishu.replies_to(message_id(env)) == []


def test_group_mention_gets_a_reply(service, feishu, claude) -> None:
    env = deliver(service, feishu, chat_id=unique("oc_grp"), chat_type="group", text="@_user_1 看下这个",
                  mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    assert len(model_requests_with(claude, "看下这个")) == 1


def test_mention_all_alone_is_ignored(service, feishu, claude) -> None:
    env = deliver(service, feishu, chat_id=unique("oc_grp"), chat_type="group", text="@_all 开会了",
                  mentions=[mention_all()])
    time.sleep(SETTLE)
    assert model_requests_with(claude, "开会了") == []
    assert feishu.replies_to(message_id(env)) == []


def test_post_message_with_mention_works(service, feishu, claude) -> None:
    content = post_content("报错截图", [[{"tag": "at", "user_id": "@_user_1", "user_name": "助手"},
                                         {"tag": "text", "text": " 富文本里的问题"}]])
    env = deliver(service, feishu, chat_id=unique("oc_grp"), chat_type="group", message_type="post",
                  content=content, mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    assert len(model_requests_with(claude, "富文本里的问题")) == 1


def test_topic_reply_stays_in_thread_and_topic_is_shared(service, feishu, claude) -> None:
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
    bob_calls = model_requests_with(claude, "只在夜里出现")
    assert len(bob_calls) == 1
    seen = json.dumps(bob_calls[0]["body"]["messages"], ensure_ascii=False)
    assert "缓存失效" in seen and 'sender=\\"ou_alice\\"' in seen and 'sender=\\"ou_bob\\"' in seen
    reply_calls = [r for r in feishu.requests if r["op"] == "reply"]
    assert all(r["json"]["reply_in_thread"] is True for r in reply_calls)


def test_quoted_reply_stays_in_senders_group_route(service, feishu, claude) -> None:
    chat = unique("oc_grp")
    alice = deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id="ou_alice",
                    text="@_user_1 Alice 的私事：预算表", mentions=AT_BOT)
    feishu.wait_for(lambda: feishu.replies_to(message_id(alice)))
    bob = deliver(service, feishu, chat_id=chat, chat_type="group", sender_open_id="ou_bob",
                  root_id=message_id(alice), parent_id=message_id(alice),
                  text="@_user_1 Bob 引用了一条消息", mentions=AT_BOT)
    reply = feishu.wait_for(lambda: feishu.replies_to(message_id(bob)))[0]
    assert not reply.get("thread_id")
    bob_call = model_requests_with(claude, "Bob 引用了一条消息")
    assert len(bob_call) == 1
    assert "预算表" not in json.dumps(bob_call[0]["body"], ensure_ascii=False)


def test_redeliveries_are_deduplicated(service, feishu, claude) -> None:
    env = deliver(service, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="重复投递测试")
    again_same_event = service.post(env)
    new_event = json.loads(json.dumps(env))
    new_event["header"]["event_id"] = unique("ev")
    again_new_event = service.post(new_event)
    renumbered = json.loads(json.dumps(env))  # Feishu has been seen to re-push with a new message_id
    renumbered["header"]["event_id"] = unique("ev")
    renumbered["event"]["message"]["message_id"] = unique("om")
    again_new_message_id = service.post(renumbered)
    assert [again_same_event.status_code, again_new_event.status_code, again_new_message_id.status_code] == [200] * 3
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)))
    time.sleep(SETTLE)
    assert len(model_requests_with(claude, "重复投递测试")) == 1
    assert len(feishu.replies_to(message_id(env))) == 1


def test_two_groups_at_once_never_see_each_other(service, feishu, claude) -> None:
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
    a, b = model_requests_with(claude, "甲组机密"), model_requests_with(claude, "乙组机密")
    assert len(a) == 1 and len(b) == 1
    assert "乙组机密" not in json.dumps(a[0]["body"], ensure_ascii=False)
    assert "甲组机密" not in json.dumps(b[0]["body"], ensure_ascii=False)
    assert "乙组机密" not in reply_text(feishu.replies_to(message_id(envs[g1]))[0])


def test_burst_is_batched_and_every_message_answered_once(service, feishu, claude) -> None:
    claude.set_delay(2.0)
    chat = unique("oc_p2p")
    texts = [f"连发第{i}条" for i in range(5)]
    envs = []
    for text in texts:
        envs.append(deliver(service, feishu, chat_id=chat, chat_type="p2p", text=text))
        time.sleep(0.15)
    wait_for(lambda: _all_covered(claude, texts), timeout=30, what="every message reaches the model")
    time.sleep(SETTLE)
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
