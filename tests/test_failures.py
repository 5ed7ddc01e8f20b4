"""Model and Open API faults: retried through RQ, or dead-lettered with a short notice; nothing lost."""

from __future__ import annotations

import json
import time

from jobs import deadletter
from tests.harness import deliver, message_id, model_requests_with, reply_text, unique, wait_for


def test_model_overload_is_retried_until_it_answers(service, feishu, claude) -> None:
    claude.fail(529, "overloaded_error", times=2)  # one whole attempt (SDK retry included) fails
    env = deliver(service, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="过载重试测试")
    replies = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    assert len(replies) == 1 and "过载重试测试" in reply_text(replies[0])
    assert len(model_requests_with(claude, "过载重试测试")) == 3


def test_feishu_rate_limit_is_retried_without_asking_the_model_again(service, feishu, claude, r, keys) -> None:
    from tests.harness import wait_route_idle

    feishu.inject("reply", code=99991400, http_status=429, headers={"x-ogw-ratelimit-reset": "1"}, times=2)
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="限流重试测试")
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    wait_route_idle(r, keys, f"feishu:test:p2p:{chat}")  # no redo can follow an idle route
    assert len(feishu.replies_to(message_id(env))) == 1
    assert len(model_requests_with(claude, "限流重试测试")) == 1


def test_permanent_model_error_dead_letters_the_batch_and_tells_the_user(service, feishu, claude, r, keys) -> None:
    claude.fail(400, "invalid_request_error", times=1)
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="永久失败测试")
    notice = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    assert "抱歉" in reply_text(notice[0])
    record = _dead_letter_for(r, keys, message_id(env))
    assert record["route_key"] == f"feishu:test:p2p:{chat}" and "400" in record["reason"]
    # The route keeps working for the next message.
    nxt = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="之后的正常消息")
    feishu.wait_for(lambda: feishu.replies_to(message_id(nxt)), timeout=30)


def test_repeated_failures_end_in_the_dead_letter_list(service, feishu, claude, r, keys) -> None:
    claude.fail(529, "overloaded_error", times=100)
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="a persistent outage test")
    notice = feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=60)
    assert reply_text(notice[0]).startswith("Sorry")  # the user wrote English
    record = _dead_letter_for(r, keys, message_id(env))
    assert record["reason"].startswith("failed 3 times")
    rk = f"feishu:test:p2p:{chat}"
    wait_for(lambda: r.llen(keys.proc(rk)) == 0 and r.zscore(keys.dirty, rk) is None, what="route released")


def _dead_letter_for(r, keys, mid: str) -> dict:
    def find() -> dict | None:
        for raw in r.hvals(keys.dead):
            record = json.loads(raw)
            if mid in record["message_ids"]:
                return record
        return None

    return wait_for(find, timeout=30, what="dead-letter record")


def test_expired_tenant_token_is_refreshed_and_shared(service, feishu, claude) -> None:
    feishu.expire_tokens()
    before = feishu.token_requests
    env = deliver(service, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="令牌过期测试")
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    calls = [q for q in feishu.requests if q["op"] == "reply"]
    reactions = [q for q in feishu.requests if q["op"] == "reaction_add"]
    # the turn's first Open API call (its progress reaction) meets the expired token: rejected once, then sent
    assert len(calls) + len(reactions) == 3 and len({q["json"]["uuid"] for q in calls}) == 1
    assert feishu.token_requests == before + 1  # one fetch, stored in Redis for every work-horse
    env2 = deliver(service, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="令牌复用测试")
    feishu.wait_for(lambda: feishu.replies_to(message_id(env2)), timeout=30)
    assert feishu.token_requests == before + 1


def test_admin_replays_a_dead_letter_once_and_a_replay_can_succeed(service, feishu, claude, r, keys, env,
                                                                    workdir) -> None:
    claude.fail(400, "invalid_request_error", times=1)
    chat = unique("oc_p2p")
    env_msg = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="回放测试")
    feishu.wait_for(lambda: feishu.replies_to(message_id(env_msg)), timeout=30)  # the notice
    record = _dead_letter_for(r, keys, message_id(env_msg))
    out = _cli(env, workdir, "replay", record["id"])
    assert out.returncode == 0, out.stdout + out.stderr
    assert deadletter.replay(_runtime(env), record["id"]) == "already-replayed"  # a second replay changes nothing
    answers = feishu.wait_for(lambda: [m for m in feishu.replies_to(message_id(env_msg))
                                       if "回放测试" in reply_text(m)], timeout=30)
    wait_for(lambda: r.zscore(keys.dirty, f"feishu:test:p2p:{chat}") is None, timeout=30, what="route idle")
    assert len(answers) == 1
    assert len(model_requests_with(claude, "回放测试")) == 2  # the failed call and the replayed one
    assert r.hget(keys.dead, record["id"]) is None


def test_a_replay_that_fails_again_tells_the_user_again(service, feishu, claude, r, keys, env, workdir) -> None:
    """The notice of a second failure must not reuse the first notice's uuid (Feishu would swallow it)."""
    claude.fail(400, "invalid_request_error", times=1)
    env_msg = deliver(service, feishu, chat_id=unique("oc_p2p"), chat_type="p2p", text="再次失败的回放")
    mid = message_id(env_msg)
    feishu.wait_for(lambda: feishu.replies_to(mid), timeout=30)
    first = _dead_letter_for(r, keys, mid)
    claude.fail(400, "invalid_request_error", times=1)
    assert deadletter.replay(_runtime(env), first["id"]) == "replayed"
    feishu.wait_for(lambda: len(feishu.replies_to(mid)) == 2, timeout=30)
    second = wait_for(lambda: next((json.loads(x) for x in r.hvals(keys.dead)
                                    if mid in json.loads(x)["message_ids"] and json.loads(x)["id"] != first["id"]),
                                   None), timeout=30, what="second dead letter")
    assert second["batch_id"] != first["batch_id"]
    assert all("抱歉" in reply_text(m) for m in feishu.replies_to(mid))


def _runtime(env):
    from runs.runtime import Runtime
    from tests.harness import settings_from

    settings = settings_from(env)
    return Runtime(settings, settings.redis_url or "")


def _cli(env, workdir, *args: str):
    import subprocess
    import sys

    from tests.harness import subprocess_env

    return subprocess.run([sys.executable, "-m", "jobs.deadletter", *args], cwd=workdir, env=subprocess_env(env),
                          capture_output=True, text=True, timeout=60)


def test_long_answers_are_chunked_in_order_with_distinct_uuids(service, feishu, claude, r, keys) -> None:
    from tests.harness import wait_route_idle

    paragraphs = [f"第{i}段：" + "内容" * 400 for i in range(6)]  # ~4.8k chars per 3500-char chunk pair
    claude.set_responder(lambda body: "\n".join(paragraphs))
    chat = unique("oc_p2p")
    env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="给我一个很长的回答")
    feishu.wait_for(lambda: (rs := feishu.replies_to(message_id(env))) and len(rs) >= 2 and rs, timeout=30)
    wait_route_idle(r, keys, f"feishu:test:p2p:{chat}")  # every chunk sent, nothing more can follow
    replies = feishu.replies_to(message_id(env))
    texts = [reply_text(m) for m in replies]
    assert all(len(t) <= 3500 for t in texts)
    assert "\n".join(texts) == "\n".join(paragraphs)
    calls = [q for q in feishu.requests if q["op"] == "reply"]
    assert len({q["json"]["uuid"] for q in calls}) == len(replies)


def test_a_poison_message_in_a_shared_topic_batch_buries_only_itself(service, feishu, claude, r, keys) -> None:
    """Defect 2: the others in the batch are answered, only the poison is dead-lettered, its sender told once."""
    from sandbox.feishu.events import mention
    from tests.harness import BOT_OPEN_ID, wait_route_idle

    at_bot = [mention(BOT_OPEN_ID, "助手")]
    chat, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, chat, text="root", thread_id=thread)
    claude.set_delay(1.5)  # Alice's turn holds the route while Bob and Carol write: they form one batch
    claude.fail_when("毒药消息", 400, "invalid_request_error")

    def say(sender: str, text: str) -> str:
        return message_id(deliver(service, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                                  parent_id=root, sender_open_id=sender, text=f"@_user_1 {text}", mentions=at_bot))

    alice = say("ou_alice", "爱丽丝的正常问题")
    wait_for(lambda: model_requests_with(claude, "爱丽丝的正常问题"), timeout=20, what="Alice's turn started")
    bob, carol = say("ou_bob", "毒药消息 请看"), say("ou_carol", "卡罗尔的正常问题")
    rk = f"feishu:test:topic:{chat}:{thread}"
    wait_route_idle(r, keys, rk, timeout=40)
    dave = say("ou_dave", "之后的问题")
    wait_route_idle(r, keys, rk, timeout=40)
    for mid, text in ((alice, "爱丽丝的正常问题"), (carol, "卡罗尔的正常问题"), (dave, "之后的问题")):
        assert [text in reply_text(m) for m in feishu.replies_to(mid)] == [True]
    batched = [q for q in claude.requests if "毒药消息" in json.dumps(q["body"]["messages"][-1], ensure_ascii=False)
               and "卡罗尔的正常问题" in json.dumps(q["body"]["messages"][-1], ensure_ascii=False)]
    assert batched, "Bob and Carol should have reached the model as one batch first"
    notices = feishu.replies_to(bob)
    assert len(notices) == 1 and "抱歉" in reply_text(notices[0])
    dead = [json.loads(x) for x in r.hvals(keys.dead)]
    assert [d["message_ids"] for d in dead if bob in d["message_ids"] or carol in d["message_ids"]] == [[bob]]
    assert r.hget(keys.metrics, "dead_lettered")


def test_a_command_whose_reply_keeps_failing_is_dead_lettered_and_the_route_goes_on(service, feishu, claude, r,
                                                                                   keys) -> None:
    """Issue 14 A1: `/status` on a message recalled before the reply (230011, permanent) must not wedge the
    route: the command gives up like a turn (dead letter), and the next message is answered."""
    chat, mid = unique("oc_p2p"), unique("om_status")
    feishu.add_message(mid, chat, "/status", chat_mode="p2p")
    feishu.recall_message(mid)  # recalled before the service answers it
    status = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="/status", message_id=mid)
    record = _dead_letter_for(r, keys, message_id(status))
    assert "230011" in record["reason"]
    nxt = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="命令失败之后的消息")
    replies = feishu.wait_for(lambda: feishu.replies_to(message_id(nxt)), timeout=30)
    assert "命令失败之后的消息" in reply_text(replies[0])


def test_giving_up_on_a_partly_posted_batch_never_asks_the_model_again(service, feishu, claude, r, keys) -> None:
    """Issue 14 A2: a batch of two whose stored answer's second chunk is refused for good is buried whole: the
    first chunk stays the only answer, the model is asked once, nothing is split and re-asked."""
    from sandbox.claude.wire import default_reply
    from sandbox.feishu.events import mention
    from tests.harness import BOT_OPEN_ID, wait_route_idle

    at_bot = [mention(BOT_OPEN_ID, "助手")]
    chat, thread, root = unique("oc_topic"), unique("omt"), unique("om_root")
    feishu.add_message(root, chat, text="root", thread_id=thread)
    long_answer = "第一段" + "甲" * 3000 + "\n\n第二段" + "乙" * 3000

    def responder(body: dict) -> str:
        last = json.dumps(body["messages"][-1], ensure_ascii=False)
        return long_answer if "分两段回答" in last else default_reply(body)

    def refuse_second_chunk(record: dict) -> None:
        if "第二段" in json.loads((record.get("json") or {}).get("content") or "{}").get("text", ""):
            feishu.inject("reply", code=230001, times=1)  # taken by this very call: a permanent refusal

    claude.set_responder(responder)
    claude.set_delay(1.5)  # Alice's turn holds the route while Bob and Carol write: they form one batch
    feishu.on("reply", refuse_second_chunk, when="before")

    def say(sender: str, text: str) -> str:
        return message_id(deliver(service, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                                  parent_id=root, sender_open_id=sender, text=f"@_user_1 {text}", mentions=at_bot))

    say("ou_alice", "爱丽丝先问")
    wait_for(lambda: model_requests_with(claude, "爱丽丝先问"), timeout=20, what="Alice's turn started")
    bob, carol = say("ou_bob", "鲍勃：请分两段回答"), say("ou_carol", "卡罗尔补充一句")
    rk = f"feishu:test:topic:{chat}:{thread}"
    wait_route_idle(r, keys, rk, timeout=60)
    assert len(model_requests_with(claude, "鲍勃：请分两段回答")) == 1
    answers = [m for m in feishu.bot_messages(chat) if "第一段" in reply_text(m)]
    assert len(answers) == 1
    dead = [json.loads(x) for x in r.hvals(keys.dead)]
    assert [sorted(d["message_ids"]) for d in dead if bob in d["message_ids"] or carol in d["message_ids"]] == \
        [sorted([bob, carol])]


def test_the_same_words_sent_twice_are_two_messages_both_answered(service, feishu, claude, r, keys) -> None:
    """Issue 14 C: the content dedupe key holds the message's create_time, so a person's identical second
    message (a new message_id, a later create_time) is not taken for a redelivery of the first."""
    chat, now = unique("oc_p2p"), int(time.time() * 1000)
    first = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="好的收到", create_time_ms=now - 60_000)
    feishu.wait_for(lambda: feishu.replies_to(message_id(first)), timeout=30)
    second = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="好的收到", create_time_ms=now)
    feishu.wait_for(lambda: feishu.replies_to(message_id(second)), timeout=30)
    assert len(model_requests_with(claude, "好的收到")) >= 2


def test_a_run_that_lost_its_lease_posts_nothing(service, feishu, claude, r, keys) -> None:
    """Issue 14 C: the lease fence before every side effect. While another owner holds the route, the run
    whose lease was taken finishes its model call but never posts; the route's next owner answers once."""
    from tests.harness import wait_route_idle

    chat = unique("oc_p2p")
    rk = f"feishu:test:p2p:{chat}"
    claude.set_delay(2.0)
    try:
        env = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="租约被夺走的一轮")
        wait_for(lambda: model_requests_with(claude, "租约被夺走的一轮"), 20, what="the model call")
        r.set(keys.lease(rk), "another-owner", px=30_000)
        time.sleep(3.0)  # the model answered after 2 s: the fenced run has had its chance to post
        assert feishu.replies_to(message_id(env)) == []
    finally:
        claude.set_delay(0)
        r.delete(keys.lease(rk))  # the other owner is gone; the sweep gives the route to a new run
    feishu.wait_for(lambda: feishu.replies_to(message_id(env)), timeout=30)
    wait_route_idle(r, keys, rk)
    assert len(feishu.replies_to(message_id(env))) == 1
