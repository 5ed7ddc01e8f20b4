"""Business items through the real stack (issue 7): a topic's report becomes one record and a first answer
placeholder → summary → full on one card; follow-ups read the record fresh and name the version; items
survive rotation; records that name a topic link once; cross-chat references check membership; approvals
write once; concurrency against a strict table; a wrong field name is named.

A bot profile of its own with Bitable configured, its own worker and sweeper, against the shared emulators.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
import requests

from bitable.index import Items
from core.keys import Keys
from core.settings import ChatOverride
from feishu.cards import buttons_of, footer_of
from items import keys as items_keys
from sandbox.feishu.events import bitable_record_changed_event, card_action_event, mention
from tests.harness import (
    APP_ID,
    BOT_OPEN_ID,
    VERIFICATION_TOKEN,
    Proc,
    WebServer,
    deliver,
    message_id,
    model_requests_with,
    reply_text,
    settings_from,
    stop_all,
    unique,
    wait_for,
    wait_route_idle,
    wait_serving,
)
from tests.test_rotation import filler

TOKEN = "items-admin-token"
APP, TABLE = "bascnItemsApp01", "tblItems01"
AT_BOT = [mention(BOT_OPEN_ID, "助手")]
REPORT = "@_user_1 报表导出 rpt-7781 一直是空的\n从昨天 18:00 开始，三个客户都受影响。"  # as Feishu sends it
BUDGET, RESERVE = 6600, 256  # 2,600 before issue 34 grew the system prompt and tools by ~3,100
SHARED = "oc_items_shared_refs"  # a group whose members share one route (ROUTING_CHAT_OVERRIDES)


@pytest.fixture(scope="module")
def rig(env: dict[str, str], workdir: Path, r: redis.Redis,
        feishu: Any) -> Iterator[tuple[WebServer, Keys, dict[str, str]]]:
    feishu.add_table(APP, TABLE)  # before the sweeper's start-up table check, or it pauses item work
    profile = unique("items")
    own = {**env, "BOT_PROFILE": profile, "WORKER_CONCURRENCY": "3", "ADMIN_TOKEN": TOKEN,
           "BITABLE_APP_TOKEN": APP, "BITABLE_TABLE_ID": TABLE, "ITEM_ADMINS": "ou_admin",
           "ITEM_MEMBER_CACHE_SECONDS": "60", "CONTEXT_BUDGET_TOKENS": str(BUDGET),
           "MAX_OUTPUT_TOKENS": str(RESERVE), "ROUTING_CHAT_OVERRIDES": json.dumps({SHARED: {"group_scope": "shared"}})}
    settings = settings_from({k: v for k, v in own.items() if k != "ROUTING_CHAT_OVERRIDES"}).model_copy(
        update={"routing_chat_overrides": {SHARED: ChatOverride(group_scope="shared")}})  # as the env parses it
    web, keys = WebServer(settings), Keys(profile)
    procs = [Proc(["-m", "jobs.sweeper"], own, str(workdir), workdir / f"{profile}-sweeper.log"),
             Proc(["-m", "jobs.worker", "--name", profile], own, str(workdir), workdir / f"{profile}-worker.log")]
    wait_for(lambda: r.get(keys.bot_open_id), 60, what="the items rig's sweeper")
    wait_serving(r, procs, profile)
    yield web, keys, own
    web.stop()
    stop_all(procs)


@pytest.fixture(autouse=True)
def _table(feishu: Any) -> None:
    feishu.add_table(APP, TABLE)


def admin(web: WebServer, path: str) -> dict[str, Any]:
    resp = requests.get(f"{web.url}/admin/api/{path}", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert resp.status_code == 200, resp.text
    return dict(resp.json())


def topic_rk(keys: Keys, chat: str, thread: str) -> str:
    return f"feishu:{keys.profile}:topic:{chat}:{thread}"


def records_of(feishu: Any, item_id: str) -> list[dict[str, Any]]:
    return [rec for rec in feishu.records(APP, TABLE) if _text(rec["fields"].get("事项ID")) == item_id]


def _text(cell: Any) -> str:
    if isinstance(cell, list):
        return "".join(str(seg.get("text", "")) for seg in cell if isinstance(seg, dict))
    return "" if cell is None else str(cell)


def open_topic(web: WebServer, feishu: Any, r: redis.Redis, keys: Keys, *, text: str = REPORT,
               reporter: str = "ou_reporter", wait_done: bool = True,
               chat: str | None = None) -> tuple[str, str, str, Any]:
    """@bot opens a topic with a report (in `chat`, default a new one); returns (chat, thread, root id, item)."""
    chat, thread = chat or unique("oc_items"), unique("omt")
    env = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, text=text, mentions=AT_BOT,
                  sender_open_id=reporter)
    items = Items(r, keys)
    item = wait_for(lambda: items.by_thread(thread), 60, what="the topic's item")
    if wait_done:
        wait_for(lambda: (items.get(item.item_id) or item).analysis == "done", 60, what="the first answer")
    return chat, thread, message_id(env), items.get(item.item_id)


def follow_up(web: WebServer, feishu: Any, chat: str, thread: str, root: str, text: str,
              sender: str = "ou_other") -> tuple[dict[str, Any], dict[str, Any]]:
    env = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=root, text=text,
                  mentions=AT_BOT, sender_open_id=sender)
    reply = wait_for(lambda: feishu.replies_to(message_id(env)), 60, what="the follow-up's reply")[0]
    return env, reply


# -- 1. a topic's report → one record, one card: placeholder → summary → full --------------------------------

def test_a_topic_report_becomes_one_record_and_a_first_answer_in_three_versions(rig, feishu, claude, r) -> None:
    web, keys, _ = rig
    cursor = len(claude.requests)
    chat, thread, _root, item = open_topic(web, feishu, r, keys)
    # Issue 34: the summary and the full analysis share system and materials (cached) before their tasks; the full
    # one sees the summary already shown; each may answer at its length whatever MAX_OUTPUT_TOKENS (256 here) is.
    calls = [c for c in claude.requests_since(cursor) if "<materials>" in json.dumps(c["body"]["messages"])]
    summary, full = (next(c for c in calls if task in json.dumps(c["body"]["messages"])) for task in
                     ("SHORT SUMMARY", "FULL ANALYSIS"))
    assert summary["body"]["system"] == full["body"]["system"]
    assert summary["body"]["messages"][0]["content"][0] == full["body"]["messages"][0]["content"][0]  # materials
    assert "<summary_shown" in full["body"]["messages"][0]["content"][1]["text"] and "摘要：" in \
        full["body"]["messages"][0]["content"][1]["text"]
    assert summary["body"]["max_tokens"] >= 512 and full["body"]["max_tokens"] >= 2048 > RESERVE
    assert full["usage"]["cache_read_input_tokens"] > 0  # the shared prefix, read from the cache
    records = records_of(feishu, item.item_id)
    assert len(records) == 1 and item.record_id == records[0]["record_id"]
    fields = records[0]["fields"]
    assert _text(fields["标题"]) == "报表导出 rpt-7781 一直是空的" and "三个客户" in _text(fields["描述"])
    assert "@_user_1" not in json.dumps(fields, ensure_ascii=False)
    assert [u["id"] for u in fields["提出人"]] == ["ou_reporter"] and thread in json.dumps(fields["话题链接"])
    assert fields["首答版本"] == 3 and fields["首答状态"] == "完整分析" and fields["首答链接"]
    cards = [m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"]
    assert len(cards) == 1 and cards[0]["thread_id"] == thread and cards[0]["message_id"] == item.answer_message_id
    assert not [m for m in feishu.bot_messages(chat) if m["msg_type"] == "text"]  # the card is the reply
    footers = [footer_of(c) for c in feishu.card_versions(item.answer_message_id)]
    assert footers == [f"事项 {item.item_id} · 第 1 版 · 分析中", f"事项 {item.item_id} · 第 2 版 · 摘要",
                       f"事项 {item.item_id} · 第 3 版 · 完整分析"]
    view = admin(web, f"items/{item.item_id}")
    assert view["record_id"] == item.record_id and view["chat_id"] == chat and view["thread_id"] == thread
    assert view["first_answer"]["message_id"] == item.answer_message_id
    assert [(v["version"], v["status"]) for v in view["first_answer"]["versions"]] == \
        [(1, "placeholder"), (2, "summary"), (3, "full")]
    assert all(v["created_at"] for v in view["first_answer"]["versions"])
    mirrored = [w["fields"].get("首答版本") for w in feishu.bitable_writes(APP, TABLE) if "首答版本" in w["fields"]]
    assert mirrored == [1, 2, 3]
    assert admin(web, f"routes/{topic_rk(keys, chat, thread)}")["item_id"] == item.item_id
    status = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=_root, text="/status",
                     mentions=AT_BOT, sender_open_id="ou_other")
    shown = reply_text(wait_for(lambda: feishu.replies_to(message_id(status)), 30)[0])
    assert item.item_id in shown and f"record={item.record_id}" in shown and "第 3 版 · 完整分析" in shown


def test_a_redelivered_report_makes_no_second_item_record_or_card(rig, feishu, r) -> None:
    web, keys, _ = rig
    chat, thread = unique("oc_items"), unique("omt")
    env = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, text=REPORT, mentions=AT_BOT)
    assert web.post(env).status_code == 200  # Feishu delivers again
    again = json.loads(json.dumps(env))
    again["header"]["event_id"] = unique("ev")  # and once more as a new event
    assert web.post(again).status_code == 200
    items = Items(r, keys)
    item = wait_for(lambda: items.by_thread(thread), 30)
    wait_for(lambda: (items.get(item.item_id) or item).analysis == "done", 60)
    wait_route_idle(r, keys, topic_rk(keys, chat, thread))
    assert len(records_of(feishu, item.item_id)) == 1 and len(feishu.records(APP, TABLE)) == 1
    assert len([m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"]) == 1
    # `/登记` in a topic that already is an item: told so, nothing new
    cmd = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=message_id(env),
                  text="/登记", mentions=AT_BOT, sender_open_id="ou_other")
    reply = wait_for(lambda: feishu.replies_to(message_id(cmd)), 30)[0]
    assert item.item_id in reply_text(reply) and "不用重复登记" in reply_text(reply)
    wait_route_idle(r, keys, topic_rk(keys, chat, thread))
    assert items.by_thread(thread).item_id == item.item_id and len(feishu.records(APP, TABLE)) == 1


# -- 2. follow-ups read the record fresh and name the version; a placeholder is never findings ------------

def test_a_follow_up_carries_the_edited_title_and_the_full_answer_and_names_the_version(rig, feishu, claude,
                                                                                         r) -> None:
    web, keys, _ = rig
    chat, thread, root, item = open_topic(web, feishu, r, keys)
    feishu.edit_record(APP, TABLE, item.record_id, {"标题": "报表导出为空（已确认影响 3 个客户）"})
    cursor = len(feishu.requests)
    _, reply = follow_up(web, feishu, chat, thread, root, "现在该怎么处理？")
    request = json.dumps(model_requests_with(claude, "现在该怎么处理")[-1]["body"], ensure_ascii=False)
    assert "报表导出为空（已确认影响 3 个客户）" in request and "完整分析：" in request
    assert 'version=\\"3\\" status=\\"full\\"' in request
    assert "第 3 版" in reply_text(reply) and reply["thread_id"] == thread
    # one read: the record (the field list is shared in Redis; the sweeper's own table check may list the
    # fields at any time, so `bench.items`, with no background work, is what counts those)
    reads = [q["op"] for q in feishu.requests[cursor:]
             if q["op"].startswith("bitable_") and q["op"] != "bitable_fields"]
    assert reads == ["bitable_batch_get"], reads


def test_while_only_the_placeholder_exists_a_follow_up_says_analysis_in_progress(rig, feishu, claude, r) -> None:
    web, keys, _ = rig
    release = threading.Event()

    def hold_analysis(body: dict[str, Any]) -> None:  # the task follows the materials since issue 34 (a shared prefix)
        if "SHORT SUMMARY" in json.dumps(body.get("messages"), ensure_ascii=False):
            release.wait(60)

    claude.on_request(hold_analysis)
    try:
        chat, thread, root, item = open_topic(web, feishu, r, keys, wait_done=False)
        items = Items(r, keys)
        wait_for(lambda: items.versions(item.item_id), 30, what="the placeholder")
        _, reply = follow_up(web, feishu, chat, thread, root, "现在该怎么处理？")
        assert "首答分析仍在进行中" in reply_text(reply)
        request = json.dumps(model_requests_with(claude, "现在该怎么处理")[-1]["body"], ensure_ascii=False)
        assert "still in progress" in request and "摘要：" not in request and "完整分析：" not in request
        assert [v.status for v in items.versions(item.item_id)] == ["placeholder"]  # answered before it finished
    finally:
        release.set()
    wait_for(lambda: (Items(r, keys).get(item.item_id) or item).analysis == "done", 60)


# -- 3. rotation keeps the item ---------------------------------------------------------------------------

def test_the_item_survives_the_topic_session_rotating(rig, feishu, claude, r) -> None:
    web, keys, _ = rig
    chat, thread, root, item = open_topic(web, feishu, r, keys)
    rk = topic_rk(keys, chat, thread)
    first_sid = None
    for i in range(30):  # the budget's room for history is larger since issue 34 (more turns before a rotation)
        follow_up(web, feishu, chat, thread, root, filler(i), sender="ou_dev")
        wait_route_idle(r, keys, rk)
        view = admin(web, f"routes/{rk}")
        first_sid = first_sid or view["session_id"]
        if any(s["end_reason"] == "compression" for s in view["sessions"]):
            break
    view = admin(web, f"routes/{rk}")
    assert view["session_id"] != first_sid and view["item_id"] == item.item_id
    _, reply = follow_up(web, feishu, chat, thread, root, "轮换之后还记得这个事项吗？")
    request = json.dumps(model_requests_with(claude, "轮换之后还记得")[-1]["body"], ensure_ascii=False)
    assert item.item_id in request and item.record_id in request and "完整分析：" in request
    after = admin(web, f"items/{item.item_id}")
    assert after["record_id"] == item.record_id and after["first_answer"]["message_id"] == item.answer_message_id
    assert {first_sid, view["session_id"]} <= set(after["session_ids"])
    assert "第 3 版" in reply_text(reply)


# -- 4. a record that names a topic links once; /item link does the same -----------------------------------

def test_a_record_naming_a_topic_is_linked_and_analysed_once(rig, feishu, r) -> None:
    web, keys, _ = rig
    chat, thread = unique("oc_items"), unique("omt")
    root = feishu.add_message(unique("om"), chat, sender_open_id="ou_tester", thread_id=thread,
                              content=json.dumps({"text": "登录页偶发 502"}))["message_id"]
    rec = feishu.add_record(APP, TABLE, {"标题": "登录页偶发 502", "提出人": [{"id": "ou_tester"}],
                                         "话题链接": {"text": "话题", "link": f"https://x.feishu.cn/t?thread_id={thread}"}})
    event = bitable_record_changed_event(APP, TABLE, rec["record_id"], "record_added", "ou_tester",
                                         after=feishu.record_change_values(APP, TABLE, rec["record_id"]),
                                         token=VERIFICATION_TOKEN, app_id=APP_ID)
    for _ in range(2):
        assert web.post(event).status_code == 200
    again = json.loads(json.dumps(event))
    again["header"]["event_id"] = unique("ev")
    assert web.post(again).status_code == 200
    items = Items(r, keys)
    item = wait_for(lambda: items.by_thread(thread), 30)
    wait_for(lambda: (items.get(item.item_id) or item).analysis == "done", 60)
    wait_route_idle(r, keys, f"feishu:{keys.profile}:item:{rec['record_id']}")
    item = items.get(item.item_id)
    assert item.record_id == rec["record_id"] and item.root_id == root and item.chat_id == chat
    assert len(feishu.records(APP, TABLE)) == 1 and len(items.runs(item.item_id)) == 1
    assert len([m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"]) == 1
    assert _text(feishu.records(APP, TABLE)[0]["fields"]["事项ID"]) == item.item_id


def test_item_link_links_an_existing_record_to_the_topic(rig, feishu, r) -> None:
    web, keys, _ = rig
    rec = feishu.add_record(APP, TABLE, {"标题": "导出超时", "提出人": [{"id": "ou_pm"}]})
    chat, thread = unique("oc_items"), unique("omt")
    env = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, text="导出一直超时，先登记一下",
                  sender_open_id="ou_pm")  # not addressed to the bot: no item yet
    link = f"https://x.feishu.cn/base/{APP}?table={TABLE}&record={rec['record_id']}"
    cmd = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=message_id(env),
                  text=f"/item link {link}", mentions=AT_BOT, sender_open_id="ou_pm")
    reply = wait_for(lambda: feishu.replies_to(message_id(cmd)), 30)[0]
    items = Items(r, keys)
    item = items.by_thread(thread)
    assert item is not None and item.record_id == rec["record_id"] and item.item_id in reply_text(reply)
    wait_for(lambda: (items.get(item.item_id) or item).analysis == "done", 60)
    assert deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, root_id=message_id(env),
                   text=f"/item link {link}", mentions=AT_BOT, sender_open_id="ou_pm")
    wait_route_idle(r, keys, topic_rk(keys, chat, thread))
    assert len(items.runs(item.item_id)) == 1 and len(feishu.records(APP, TABLE)) == 1
    assert _text(feishu.records(APP, TABLE)[0]["fields"]["事项ID"]) == item.item_id


# -- 5. references from another chat: members get the item, others a refusal and nothing of it ------------

def test_a_reference_from_another_chat_needs_membership_of_the_origin_chat(rig, feishu, claude, r) -> None:
    web, keys, _ = rig
    chat, _thread, _root, item = open_topic(web, feishu, r, keys, text="支付回调丢单 PAY-553 机密细节：商户号 889900")
    feishu.set_members(chat, ["ou_reporter", "ou_member"])
    elsewhere = unique("oc_other")
    link = f"https://x.feishu.cn/base/{APP}?table={TABLE}&record={item.record_id}"
    member = deliver(web, feishu, chat_id=elsewhere, chat_type="group", text=f"这个事项现在什么进展？{link}",
                     mentions=AT_BOT, sender_open_id="ou_member")
    wait_for(lambda: feishu.replies_to(message_id(member)), 30)
    asked = json.dumps(model_requests_with(claude, "现在什么进展")[-1]["body"], ensure_ascii=False)
    assert item.item_id in asked and "商户号 889900" in asked
    stranger = deliver(web, feishu, chat_id=elsewhere, chat_type="group", text=f"这个事项谁在跟？{item.item_id}",
                       mentions=AT_BOT, sender_open_id="ou_stranger")
    reply = wait_for(lambda: feishu.replies_to(message_id(stranger)), 30)[0]
    assert "你不在" in reply_text(reply)
    # The messages: the system prompt's glossary names the elements (<item_facts>, <item_not_visible>) since issue 34.
    refused = json.dumps(model_requests_with(claude, "这个事项谁在跟")[-1]["body"]["messages"], ensure_ascii=False)
    assert "<item_not_visible>" in refused  # the model is told, so it neither guesses nor stays silent about it
    assert "889900" not in refused and "PAY-553" not in refused and "<item_facts" not in refused


def test_a_batch_naming_an_item_is_refused_when_any_of_its_senders_is_not_a_member(rig, feishu, claude, r) -> None:
    """Two people in one shared group route, one of them outside the origin chat: the reply answers both."""
    web, keys, _ = rig
    chat, _thread, _root, item = open_topic(web, feishu, r, keys, text="退款接口超时 REF-118 内部代号 kestrel")
    feishu.set_members(chat, ["ou_reporter", "ou_member"])
    release, held = threading.Event(), threading.Event()

    def hold(body: dict[str, Any]) -> None:
        if "先占住共享路由" in json.dumps(body.get("messages"), ensure_ascii=False):
            held.set()
            release.wait(30)

    claude.on_request(hold)
    try:
        deliver(web, feishu, chat_id=SHARED, chat_type="group", text="先占住共享路由", mentions=AT_BOT,
                sender_open_id="ou_member")
        assert held.wait(30)
        deliver(web, feishu, chat_id=SHARED, chat_type="group", text=f"{item.item_id} 进展如何？", mentions=AT_BOT,
                sender_open_id="ou_member")
        last = deliver(web, feishu, chat_id=SHARED, chat_type="group", text=f"我也想知道 {item.item_id}",
                       mentions=AT_BOT, sender_open_id="ou_stranger")
    finally:
        release.set()
    reply = wait_for(lambda: feishu.replies_to(message_id(last)), 30)[0]
    assert "你不在" in reply_text(reply)
    asked = json.dumps(model_requests_with(claude, "我也想知道")[-1]["body"]["messages"], ensure_ascii=False)
    assert "kestrel" not in asked and "REF-118" not in asked and "<item_facts" not in asked


# -- 6. approvals: strangers write nothing, a doubled approval writes once, rejection nothing ---------------

def _proposal_card(feishu: Any, chat: str) -> dict[str, Any] | None:
    """The newest approval card in the chat (it is posted right after the reply: poll for it)."""
    cards = [m for m in feishu.bot_messages(chat) if m["msg_type"] == "interactive"
             and "待审批" in json.dumps(feishu.card_versions(m["message_id"])[0], ensure_ascii=False)]
    return cards[-1] if cards else None


def _buttons(feishu: Any, card_message_id: str) -> dict[str, dict[str, str]]:
    card = feishu.card_versions(card_message_id)[-1]
    return {str(value["action"]).partition(":")[2]: value for _label, value in buttons_of(card)}


def _click(web: WebServer, who: str, value: dict[str, str], card_mid: str, chat: str,
           event_id: str | None = None) -> dict[str, Any]:
    event = card_action_event(who, value, message_id=card_mid, chat_id=chat, event_id=event_id,
                              token=VERIFICATION_TOKEN, app_id=APP_ID)
    resp = web.post(event)
    assert resp.status_code == 200 and resp.json()["toast"]["type"] == "info", resp.text
    return event


def _status_writes(feishu: Any, record_id: str) -> list[Any]:
    return [w["fields"]["状态"] for w in feishu.bitable_writes(APP, TABLE)
            if w["record_id"] == record_id and "状态" in w["fields"]]


def test_an_approval_writes_once_strangers_and_rejections_write_nothing(rig, feishu, claude, r) -> None:
    web, keys, _ = rig
    chat, thread, root, item = open_topic(web, feishu, r, keys)
    rk = topic_rk(keys, chat, thread)
    follow_up(web, feishu, chat, thread, root, "确认修好了，把状态改成已解决", sender="ou_dev")
    # Issue 34: the tool lists the status options the table offers (its field's options), so a model picks one.
    asked = model_requests_with(claude, "把状态改成已解决")[0]["body"]
    propose = next(t for t in asked["tools"] if t["name"] == "propose_record_change")
    assert propose["input_schema"]["properties"]["value"]["description"].endswith(
        "Status options: 待处理, 处理中, 待确认, 已解决, 已关闭")
    card = wait_for(lambda: _proposal_card(feishu, chat), 30, what="the approval card")
    buttons = _buttons(feishu, card["message_id"])
    _click(web, "ou_stranger", buttons["approve"], card["message_id"], chat)
    wait_for(lambda: feishu.replies_to(card["message_id"]), 30, what="the polite refusal")
    wait_route_idle(r, keys, rk)
    assert _status_writes(feishu, item.record_id) == []
    assert "抱歉" in reply_text(feishu.replies_to(card["message_id"])[0])
    first = _click(web, "ou_reporter", buttons["approve"], card["message_id"], chat)
    assert web.post(first).status_code == 200  # the same callback delivered again
    _click(web, "ou_reporter", buttons["approve"], card["message_id"], chat)  # and a double click
    wait_for(lambda: len(feishu.card_versions(card["message_id"])) >= 2, 30, what="the decided card")
    wait_route_idle(r, keys, rk)
    assert _status_writes(feishu, item.record_id) == ["已解决"]
    assert "已批准" in json.dumps(feishu.card_versions(card["message_id"])[-1], ensure_ascii=False)

    follow_up(web, feishu, chat, thread, root, "又复现了，把状态改成处理中", sender="ou_dev")
    second = wait_for(lambda: (c := _proposal_card(feishu, chat)) and c["message_id"] != card["message_id"] and c,
                      30, what="a second approval card")
    _click(web, "ou_reporter", _buttons(feishu, second["message_id"])["reject"], second["message_id"], chat)
    wait_for(lambda: len(feishu.card_versions(second["message_id"])) >= 2, 30)
    wait_route_idle(r, keys, rk)
    assert _status_writes(feishu, item.record_id) == ["已解决"]
    assert "已拒绝" in json.dumps(feishu.card_versions(second["message_id"])[-1], ensure_ascii=False)

    follow_up(web, feishu, chat, thread, root, "先别急，把状态改成已关闭", sender="ou_dev")
    third = wait_for(lambda: (c := _proposal_card(feishu, chat)) and c["message_id"] not in
                     (card["message_id"], second["message_id"]) and c, 30, what="a third approval card")
    value = _buttons(feishu, third["message_id"])["approve"]
    r.hset(items_keys.proposal(keys, value["p"]), "expires_at", "0")  # 24 hours have passed
    _click(web, "ou_reporter", value, third["message_id"], chat)
    wait_for(lambda: len(feishu.card_versions(third["message_id"])) >= 2, 30)
    wait_route_idle(r, keys, rk)
    assert _status_writes(feishu, item.record_id) == ["已解决"]
    assert "已过期" in json.dumps(feishu.card_versions(third["message_id"])[-1], ensure_ascii=False)


# -- 7. five items at once against rate limits and write conflicts ----------------------------------------

def test_five_items_at_once_under_rate_limits_and_write_conflicts(rig, feishu, r) -> None:
    web, keys, _ = rig
    feishu.set_bitable_write_time(0.2)  # a write keeps the table busy: concurrent writers collide
    feishu.set_profile(["bitable_create", "bitable_update", "bitable_search", "bitable_batch_get"], 0.3,
                       {"bitable_rate_limit": 1.0}, seed=7)
    chats = [(unique("oc_items"), unique("omt")) for _ in range(5)]
    for chat, thread in chats:
        deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, text=f"{REPORT}（{chat}）",
                mentions=AT_BOT)
    items = Items(r, keys)
    found = [wait_for(lambda t=thread: items.by_thread(t), 30) for _, thread in chats]
    for item in found:
        wait_for(lambda i=item: (items.get(i.item_id) or i).analysis == "done", 120)
    ids = {i.item_id for i in found}
    records = feishu.records(APP, TABLE)
    assert len(ids) == 5 and len(records) == 5
    assert {_text(rec["fields"]["事项ID"]) for rec in records} == ids
    assert all(rec["fields"]["首答版本"] == 3 for rec in records)


# -- 8. a wrong field name is named -----------------------------------------------------------------------

def test_a_wrong_field_name_is_named_in_readyz_and_pauses_item_work(rig, feishu, r) -> None:
    """The sweeper's table check (items/table_check.py) on a profile of its own, read back through /readyz."""
    from items import table_check
    from runs.runtime import Runtime

    _, _, own = rig
    wrong = {**{k: v for k, v in own.items() if k != "ROUTING_CHAT_OVERRIDES"}, "BOT_PROFILE": unique("wrongfield"),
             "BITABLE_FIELD_OWNER": "责任人"}
    rt = Runtime(settings_from(wrong), own["REDIS_URL"])
    assert table_check.run(rt) is False
    web = WebServer(settings_from(wrong))
    try:
        ready = requests.get(f"{web.url}/readyz", timeout=10).json()
    finally:
        web.stop()
    assert ready["status"] == "degraded"
    assert 'BITABLE_FIELD_OWNER="责任人" is not a field of table ' + TABLE in ready["bitable"]["schema"]
    assert "责任人" in ready["paused"]["bitable"]["reason"]
    assert ready["bitable"]["subscription"] == "ok" and {"file_token": APP, "file_type": "bitable"} in \
        feishu.subscriptions()
    ok = Runtime(settings_from({**wrong, "BITABLE_FIELD_OWNER": "负责人"}), own["REDIS_URL"])
    table_check.probe(ok)  # the sweeper's probe passes once the config is fixed


# -- an analysis that keeps failing: the card and the record say so; follow-ups never show findings ----------

def test_an_analysis_that_gives_up_marks_the_card_and_record_failed(rig, feishu, claude, r) -> None:
    web, keys, _ = rig
    claude.fail_when("DOOMED-7731", 500, "api_error")
    try:
        chat, thread, root, item = open_topic(web, feishu, r, keys, text="DOOMED-7731 上传图片报错", wait_done=False)
        items = Items(r, keys)
        wait_for(lambda: (items.get(item.item_id) or item).analysis == "failed", 60, what="the analysis giving up")
    finally:
        claude.clear_fail_when("DOOMED-7731")
    item = items.get(item.item_id)
    assert [v.status for v in items.versions(item.item_id)] == ["placeholder", "failed"]
    assert "分析失败" in footer_of(feishu.card_versions(item.answer_message_id)[-1])
    record = records_of(feishu, item.item_id)[0]["fields"]
    assert record["首答状态"] == "分析失败" and record["首答版本"] == 2
    _, reply = follow_up(web, feishu, chat, thread, root, "那现在怎么办？")
    assert "首答分析失败" in reply_text(reply)


def test_a_card_patch_that_failed_is_redone_when_the_analysis_resumes(rig, feishu, r) -> None:
    """Found by the fault suite: the full version stored, its patch failed, the rerun must still show it."""
    web, keys, _ = rig
    failed: list[str] = []

    def fail_first_full_patch(record: dict[str, Any]) -> None:
        if "第 3 版" in json.dumps(record["json"], ensure_ascii=False) and not failed:
            failed.append(record["path"])
            feishu.inject_fault("message_patch", "gateway", times=3)  # past the outbox's own tries

    feishu.on("message_patch", fail_first_full_patch, when="before")
    _chat, _thread, _root, item = open_topic(web, feishu, r, keys)
    wait_route_idle(r, keys, f"feishu:{keys.profile}:item:{item.item_id}")
    assert failed  # the fault did hit the full version's patch
    footers = [footer_of(c) for c in feishu.card_versions(item.answer_message_id)]
    assert footers[-1] == f"事项 {item.item_id} · 第 3 版 · 完整分析"
    assert [v.status for v in Items(r, keys).versions(item.item_id)] == ["placeholder", "summary", "full"]
