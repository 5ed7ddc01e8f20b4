"""Delivery to another chat (issue 33 part 4, share/): the command and the tool read (pure), the rate limit's script,
the card, the stand-in's tool call — and through the real stack (web → Redis → worker → emulator): a member asking
in chat A gets the result posted in chat B with the back link and A gets the link; a non-member of B, a chat without
the bot, a person who left A, a missing scope, the hour's limit, a reset and a redelivery each answered as they must.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from bitable.refs import topic_link
from core.inbound import Inbound
from core.keys import Keys
from feishu.render import ZWSP
from jobs.doctor import needs
from sandbox.feishu.events import mention
from share import keys as share_keys
from share import standin
from share.card import share_card
from share.limit import WINDOW_S, Slots
from share.part import TOOL, asking_message
from share.spec import ANSWER, FIRST_ANSWER, SpecError, Target, inert, read_command, read_target
from tests.harness import BOT_OPEN_ID, deliver, message_id, reply_text, settings_from, unique, wait_for
from tests.harness import wait_route_idle as idle
from tests.own_stack import OwnStack
from tests.test_items import follow_up, open_topic, topic_rk
from turn.registry import command_in

TZ = ZoneInfo("Asia/Shanghai")
MONDAY_9 = datetime(2026, 11, 30, 9, 0, tzinfo=TZ)
AT_BOT = [mention(BOT_OPEN_ID, "助手")]
LIMIT = 3
CHAT_LINK = "https://applink.feishu.cn/client/chat/open?openChatId=oc_ops123"
TOPIC_LINK = "https://applink.feishu.cn/client/thread/open?open_chat_id=oc_dev123&open_thread_id=omt_x1"


# -- what was asked (pure) --------------------------------------------------------------------------------------------

@pytest.mark.parametrize("text, what, target", [
    ("/share 运维群", ANSWER, Target(name="运维群")),
    ("/share  「运维 群」", ANSWER, Target(name="运维 群")),
    ("/share 首答 运维群", FIRST_ANSWER, Target(name="运维群")),
    ("/SHARE first ops", FIRST_ANSWER, Target(name="ops")),
    ("同步到 运维群", ANSWER, Target(name="运维群")),
    ("同步首答到运维群", FIRST_ANSWER, Target(name="运维群")),
    ("/share oc_ops123", ANSWER, Target(chat_id="oc_ops123")),
    (f"/share {CHAT_LINK}", ANSWER, Target(chat_id="oc_ops123")),
    (f"/share {TOPIC_LINK}", ANSWER, Target(chat_id="oc_dev123")),
])
def test_a_command_names_what_and_where(text: str, what: str, target: Target) -> None:
    asked = read_command(text)
    assert (asked.what, asked.target) == (what, target)


@pytest.mark.parametrize("text, says", [
    ("/share", "用法"), ("/share 首答", "用法"), ("/share 「」", "用法"),
    ("/share https://evil.example/client/chat/open?openChatId=oc_ops123", "看不出"),
    ("/share https://applink.feishu.cn/client/docs/open?openChatId=oc_ops123", "看不出"),
    ("/share " + "长" * 61, "最多 60"),
])
def test_a_command_that_names_no_chat_says_how(text: str, says: str) -> None:
    with pytest.raises(SpecError, match=says):
        read_command(text)


@pytest.mark.parametrize("text, command", [
    ("/share 运维群", "share"), ("同步到 运维群", "share_words"), ("同步首答到运维群。", "share_words"),
    ("把结论同步到运维群", None),  # words for the model (its tool), not a command
    ("同步到运维群，顺便说明一下原因", None), ("同步到\n运维群", None), ("/shared 运维群", None),
])
def test_only_the_whole_message_is_the_command(text: str, command: str | None) -> None:
    from app import build_app

    found = command_in(build_app().commands, "text", text)
    assert (found.name if found else None) == command


def test_a_chat_name_cannot_become_a_link_a_mention_or_emphasis() -> None:
    shown = inert("[点我](https://evil.example) <at id=all></at> **粗** `x`")
    assert not set(shown) & set("[]()<>*`") and inert("ops_team") == "ops_team"
    assert read_target("  ops   team ").name == "ops team"


# -- the hour's limit (the script, on the session's Redis) ----------------------------------------------------------

def test_a_person_gets_n_deliveries_an_hour_and_a_rerun_holds_its_own_slot(r: redis.Redis) -> None:
    keys, person, now = Keys(unique("slots")), "ou_" + unique("p"), 1_000_000.0
    slots = Slots(r, keys)
    assert [slots.take(person, f"d{n}", LIMIT, now + n).taken for n in range(LIMIT)] == [True] * LIMIT
    assert slots.take(person, "d0", LIMIT, now + 10).taken  # the same delivery again: its slot, no second one
    refused = slots.take(person, "d9", LIMIT, now + 60)
    assert not refused.taken and refused.free_in_s == pytest.approx(WINDOW_S - 60)
    key = share_keys.slots(keys, person)
    assert r.zcard(key) == LIMIT and 0 < r.ttl(key) <= WINDOW_S and key.startswith(f"fb:{keys.profile}:f:share:")
    assert slots.take(person, "d9", LIMIT, now + WINDOW_S + 1).taken  # the first one's hour is over
    slots.release(person, "d9")
    assert r.zcard(key) == LIMIT - 1


# -- the card (pure) --------------------------------------------------------------------------------------------------

def test_the_card_names_the_asker_links_back_and_defuses_the_result() -> None:
    body = "结论：重启网关。<at id=all></at> 提醒 @ou_boss\n\n" + "\n\n".join(
        "| a | b |\n|---|---|\n| 1 | 2 |" for _ in range(6))
    card = share_card(body=body, asker="ou_asker", origin="「研发群」的话题", link=TOPIC_LINK, max_chars=3000,
                      sample="/share 运维群")
    shown = json.dumps(card, ensure_ascii=False)
    assert card["schema"] == "2.0" and card["header"]["title"]["content"] == "同步自「研发群」的话题"
    assert f"<{ZWSP}at id=all>" in shown and "<at id=all>" not in shown and "<at id=ou_boss>" not in shown
    assert "由 <at id=ou_asker></at> 从「研发群」的话题同步" in shown and f"[查看原话题]({TOPIC_LINK})" in shown
    assert shown.count("|---|---|") == 4  # a markdown element holds four tables
    unsafe = share_card(body="x", asker="all", origin="「a」", link="javascript:alert(1)", max_chars=300, sample="")
    assert "<at" not in json.dumps(unsafe) and "javascript" not in json.dumps(unsafe)


# -- several people, and the stand-in model (pure) ---------------------------------------------------------------

def _msg(mid: str, sender: str, text: str = "x") -> Inbound:
    return Inbound(event_id=mid, message_id=mid, chat_id="oc_a", chat_type="group", sender_open_id=sender,
                   sender_type="user", message_type="text", text=text, content="{}")


def test_the_tool_is_the_named_messages_sender_s_and_a_mixed_batch_must_name_it() -> None:
    one, two = _msg("om_1", "ou_a"), _msg("om_2", "ou_b")
    assert asking_message([one, two], "om_2") is two and asking_message([one, two], "") is None
    assert asking_message([one, _msg("om_3", "ou_a")], "") is not None and asking_message([one], "om_x") is None


def test_the_tool_is_in_the_deployment_s_one_tool_list_and_offered_where_people_ask() -> None:
    """Issue 34: one stable tool list for every route (the cached prefix); an internal route is not offered it, and its
    turn reads why in <tools_unavailable> instead of the tool vanishing."""
    from app import build_app

    app = build_app()
    assert TOOL["name"] in [t["name"] for t in app.tools_for(())]
    for kind in ("p2p", "group", "topic"):
        assert TOOL["name"] in app.offered_on(kind)
    assert TOOL["name"] not in app.offered_on("item")


def _body(history: list[dict[str, Any]], batch: str) -> dict[str, Any]:
    return {"tools": [TOOL], "messages": [*history, {"role": "user", "content": batch}]}


def test_the_stand_in_calls_the_tool_for_each_message_asking_with_the_last_answer() -> None:
    history = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "结论：重启网关即可。"}]
    batch = ('<message sender="ou_a" message_id="om_1">\n把结论同步到运维群\n</message>\n'
             '<message sender="ou_b" message_id="om_2">\nshare this to the ops chat\n</message>\n'
             '<message sender="ou_c" message_id="om_3">\n把报告发给我\n</message>')
    calls = [b for b in standin.reply(_body(history, batch)) if b["type"] == "tool_use"]
    assert [c["input"] for c in calls] == [
        {"message_id": "om_1", "chat": "运维群", "text": "结论：重启网关即可。"},
        {"message_id": "om_2", "chat": "ops", "text": "结论：重启网关即可。"}]
    then = {"tools": [TOOL], "messages": [
        *history, {"role": "user", "content": batch}, {"role": "assistant", "content": calls},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "t", "content": "granted: 「运维群」 …"},
            {"type": "tool_result", "tool_use_id": "u", "content": "not shared: 你不在「ops」里"}]}]}
    assert standin.reply(then) == "好的，这就同步到「运维群」。\n没能同步：你不在「ops」里"
    assert standin.reply({"tools": [], "messages": [{"role": "user", "content": batch}]}) is None


def test_the_doctor_lists_what_delivery_needs(env: dict[str, str]) -> None:
    rows = {n.feature: n for n in needs(settings_from(env))}
    search = next(n for f, n in rows.items() if f.startswith("naming a chat by its name"))
    assert "im:chat:readonly" in search.names and not search.required
    assert any("delivery to another chat" in f and "im:chat.members:read" in n.names for f, n in rows.items())


# -- through the real stack --------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def stack(env: dict[str, str], workdir: Any, feishu: Any) -> Iterator[OwnStack]:
    s = OwnStack.with_items(env, workdir, feishu, "share", clock=MONDAY_9, SHARE_PER_PERSON_HOUR=str(LIMIT))
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
    claude.add_responder(standin.reply)  # as `sandbox serve` adds every feature's stand-in behaviour
    yield
    claude.remove_responder(standin.reply)


def _chats(feishu: Any, asker: str, *, in_b: bool = True, bot_in_b: bool = True,
           name: str = "运维群") -> tuple[str, str]:
    """Chat A (研发群: the asker and a colleague) and chat B (运维群: the asker when `in_b`, and the on-call)."""
    a, b = unique("oc_dev"), unique("oc_ops")
    feishu.add_chat(a, name="研发群", members=[asker, "ou_peer"])
    feishu.add_chat(b, name=name, members=[asker, "ou_oncall"] if in_b else ["ou_oncall"], bot_in=bot_in_b)
    return a, b


def _say(stack: OwnStack, feishu: Any, chat: str, asker: str, text: str, n: int = 1) -> tuple[str, list[str]]:
    env = deliver(stack.web, feishu, chat_id=chat, chat_type="group", text=f"@_user_1 {text}", mentions=AT_BOT,
                  sender_open_id=asker)
    replies = wait_for(lambda: feishu.replies_to(message_id(env)) if len(feishu.replies_to(message_id(env))) >= n
                       else None, 40, what=f"the reply to {text!r}")
    return message_id(env), [reply_text(m) for m in replies]


def _cards(feishu: Any, chat: str) -> list[dict[str, Any]]:
    return [m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"]


def _shown(feishu: Any, card: dict[str, Any]) -> str:
    return json.dumps(feishu.card_versions(card["message_id"])[-1], ensure_ascii=False)


def _group_rk(stack: OwnStack, chat: str, sender: str) -> str:
    return f"feishu:{stack.profile}:group:{chat}:{sender}"


def test_a_member_asking_in_a_gets_the_answer_posted_in_b_with_the_back_link(stack: OwnStack, feishu: Any,
                                                                              r: redis.Redis) -> None:
    asker = "ou_" + unique("asker")
    a, b = _chats(feishu, asker)
    feishu.add_chat(unique("oc_old"), name="运维群-归档", members=[asker])  # a near name: never taken for 运维群
    _say(stack, feishu, a, asker, "网关 502 怎么处理？")
    feishu.inject_fault("create", "gateway_after")  # the card is stored, the answer lost: the retry must not repost
    _mid, said = _say(stack, feishu, a, asker, "/share 运维群")
    idle(r, stack.keys, _group_rk(stack, a, asker))
    cards = _cards(feishu, b)
    assert len(cards) == 1 and feishu.stats["dedupe_hits"] >= 1, cards  # the retry met Feishu's uuid window
    shown = _shown(feishu, cards[0])
    assert "网关 502 怎么处理" in shown and f"由 <at id={asker}></at> 从「研发群」同步" in shown
    assert f"openChatId={a}" in shown  # the link back to A (its chat AppLink: the question was no topic)
    assert said == [f"已同步到「运维群」：{feishu.app_link(cards[0]['message_id'])}"]
    assert feishu.app_link(cards[0]["message_id"]).startswith(f"https://applink.feishu.cn/client/chat/open?openChatId={b}")
    assert r.zcard(share_keys.slots(stack.keys, asker)) == 1

    p2p = unique("oc_p2p")  # from a private chat with the bot: no link back (nobody else could open it)
    question = deliver(stack.web, feishu, chat_id=p2p, chat_type="p2p", text="怎么扩容？", sender_open_id=asker)
    wait_for(lambda: feishu.replies_to(message_id(question)), 40, what="the private answer")
    share = deliver(stack.web, feishu, chat_id=p2p, chat_type="p2p", text="同步到 运维群", sender_open_id=asker)
    said = reply_text(wait_for(lambda: feishu.replies_to(message_id(share)), 40, what="the private delivery")[0])
    assert said.startswith("已同步到「运维群」：") and len(_cards(feishu, b)) == 2
    private = _shown(feishu, _cards(feishu, b)[-1])
    assert "从与助手的私聊同步" in private and "怎么扩容" in private and "查看原话题" not in private


def test_a_non_member_of_b_a_chat_without_the_bot_and_one_who_left_a_are_refused(stack: OwnStack, feishu: Any) -> None:
    stranger = "ou_" + unique("stranger")
    a, b = _chats(feishu, stranger, in_b=False)
    _say(stack, feishu, a, stranger, "怎么回滚？")
    assert _say(stack, feishu, a, stranger, "/share 运维群")[1] == ["你不在「运维群」里，不能往那里同步。"]
    assert _say(stack, feishu, a, stranger, f"/share {b}")[1] == [f"你不在「{b}」里，不能往那里同步。"]

    member = "ou_" + unique("member")
    a2, b2 = _chats(feishu, member, bot_in_b=False, name="值班群")
    _say(stack, feishu, a2, member, "怎么回滚？")
    by_name = _say(stack, feishu, a2, member, "同步到 值班群")[1][0]
    assert "没有找到叫「值班群」的群" in by_name  # a chat of that name, but not one the bot is in
    assert _say(stack, feishu, a2, member, f"/share {b2}")[1] == ["我不在「" + b2 + "」里，先把我拉进那个群再同步。"]
    feishu.set_bot_in(b2, True)
    feishu.set_members(a2, ["ou_peer"])  # the asker left A meanwhile: what A said is no longer theirs to pass on
    assert _say(stack, feishu, a2, member, f"/share {b2}")[1] == ["你已不在这个群里，不能把这里的内容同步出去。"]
    assert _cards(feishu, b) == [] and _cards(feishu, b2) == []


def test_asked_in_words_in_an_item_topic_the_model_s_tool_posts_the_conclusion(stack: OwnStack, feishu: Any,
                                                                             r: redis.Redis) -> None:
    asker = "ou_" + unique("dev")
    a, b = _chats(feishu, asker)
    feishu.set_members(a, [asker, "ou_reporter"])
    chat, thread, root, _item = open_topic(stack.web, feishu, r, stack.keys, chat=a)
    follow_up(stack.web, feishu, chat, thread, root, "根因找到了吗？", sender=asker)
    env = deliver(stack.web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                  text="@_user_1 把结论同步到运维群", mentions=AT_BOT, sender_open_id=asker)
    replies = wait_for(lambda: r2 if len(r2 := feishu.replies_to(message_id(env))) >= 2 else None, 40,
                       what="the answer and the link")
    idle(r, stack.keys, topic_rk(stack.keys, chat, thread))
    card = _cards(feishu, b)
    assert len(card) == 1 and "根因找到了吗" in _shown(feishu, card[0])  # the last answer, as the model passed it
    assert topic_link("https://feishu.cn", chat, thread) in _shown(feishu, card[0])  # back to the topic itself
    assert "从「研发群」的话题同步" in _shown(feishu, card[0])
    texts = [reply_text(m) for m in feishu.replies_to(message_id(env))]
    assert texts[0].startswith("好的，这就同步到「运维群」") and texts[-1] == (
        f"已同步到「运维群」：{feishu.app_link(card[0]['message_id'])}")
    assert len(replies) == 2 and all(m.get("thread_id") == thread for m in feishu.replies_to(message_id(env)))

    first = deliver(stack.web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root,
                    text="@_user_1 /share 首答 运维群", mentions=AT_BOT, sender_open_id=asker)
    wait_for(lambda: feishu.replies_to(message_id(first)), 40, what="the first answer's delivery")
    assert len(_cards(feishu, b)) == 2 and "完整分析" in _shown(feishu, _cards(feishu, b)[-1])


def test_the_hour_s_limit_a_reset_and_a_missing_scope(stack: OwnStack, feishu: Any, r: redis.Redis) -> None:
    asker = "ou_" + unique("busy")
    a, b = _chats(feishu, asker)
    _say(stack, feishu, a, asker, "灰度怎么开？")
    slots = Slots(r, stack.keys)
    now = MONDAY_9.timestamp()
    for n in range(LIMIT):  # the hour's deliveries, asked elsewhere
        slots.take(asker, f"earlier{n}", LIMIT, now - 600 + n)
    assert _say(stack, feishu, a, asker, "/share 运维群")[1] == ["你这一小时已经同步了 3 次，请约 50 分钟后再试。"]
    stack.set_clock(r, MONDAY_9 + timedelta(minutes=51))
    feishu.deny_scopes({"im:chat.members:read", "im:chat:readonly", "im:chat"})  # the members listing's scopes
    try:
        said = _say(stack, feishu, a, asker, "/share 运维群")[1]
    finally:
        feishu.deny_scopes(())
    assert said == ["暂时不能同步：应用缺少权限 im:chat.members:read（管理员在开发者后台开通并发布后即可）。"]
    assert r.zcard(share_keys.slots(stack.keys, asker)) == 0  # not the asker's fault: no slot spent
    feishu.deny_scopes({"im:chat", "im:chat:readonly", "im:chat:read", "im:chat.group_info:readonly"})  # search
    try:
        by_name = _say(stack, feishu, a, asker, "/share 运维群")[1]
        by_id = _say(stack, feishu, a, asker, f"/share {b}")[1]
    finally:
        feishu.deny_scopes(())
    assert "按群名找不到群" in by_name[0] and by_id[0].startswith(f"已同步到「{b}」：")
    assert len(_cards(feishu, b)) == 1

    _say(stack, feishu, a, asker, "/reset")
    assert _say(stack, feishu, a, asker, "/share 运维群")[1] == ["这里还没有可以同步的回答（重置之后的新回答才算）。"]
    assert len(_cards(feishu, b)) == 1
