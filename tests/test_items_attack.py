"""Items attacked where two features meet (issue 14): an analysis racing a person's new row, a replayed failed
analysis, `/item link` by a stranger, a crash between an approval's decision and its card, mentions in records.

Runs on the items rig of tests/test_items.py (its own bot profile, worker and sweeper, Bitable configured).
"""

from __future__ import annotations

import json
from typing import Any

from bitable.index import Items
from bitable.refs import topic_link
from jobs import deadletter
from runs.runtime import Runtime
from sandbox.feishu.events import bitable_record_changed_event
from tests.harness import (
    APP_ID,
    VERIFICATION_TOKEN,
    deliver,
    message_id,
    reply_text,
    settings_from,
    unique,
    wait_for,
    wait_route_idle,
)
from tests.test_items import (  # noqa: F401  (_table and rig: the items rig and its table, as fixtures)
    APP,
    AT_BOT,
    TABLE,
    _buttons,
    _click,
    _proposal_card,
    _status_writes,
    _table,
    _text,
    follow_up,
    open_topic,
    records_of,
    rig,
    topic_rk,
)


def _runtime(own: dict[str, str]) -> Runtime:
    settings = settings_from({k: v for k, v in own.items() if k != "ROUTING_CHAT_OVERRIDES"})
    return Runtime(settings, settings.redis_url or "")


def test_an_analysis_racing_a_persons_new_row_gives_the_item_one_record(rig, feishu, r) -> None:  # noqa: F811
    """A3: the analysis is creating its row when a person's row naming the topic arrives. Whichever wins, the
    index's record is the one the first answer is mirrored into, and no row is half-linked."""
    web, keys, _ = rig
    items = Items(r, keys)
    creates = len([q for q in feishu.requests if q["op"] == "bitable_create"])
    feishu.set_delay("bitable_create", 3.0)
    try:
        _chat, thread, _root, item = open_topic(web, feishu, r, keys, wait_done=False)
        wait_for(lambda: len([q for q in feishu.requests if q["op"] == "bitable_create"]) > creates, 30,
                 what="the analysis creating its row")
        rec = feishu.add_record(APP, TABLE, {"标题": "同一个话题的人工登记", "提出人": [{"id": "ou_pm"}],
                                             "话题链接": {"text": "话题", "link": f"https://x.feishu.cn/t?thread_id={thread}"}})
        event = bitable_record_changed_event(APP, TABLE, rec["record_id"], "record_added", "ou_pm",
                                             after=feishu.record_change_values(APP, TABLE, rec["record_id"]),
                                             token=VERIFICATION_TOKEN, app_id=APP_ID)
        assert web.post(event).status_code == 200
        wait_for(lambda: (items.get(item.item_id) or item).analysis == "done", 60, what="the first answer")
        wait_route_idle(r, keys, f"feishu:{keys.profile}:item:{rec['record_id']}")
    finally:
        feishu.set_delay("bitable_create", 0.0)
    item = items.get(item.item_id)
    linked = [x for x in feishu.records(APP, TABLE) if _text(x["fields"].get("事项ID")) == item.item_id]
    assert [x["record_id"] for x in linked] == [item.record_id]  # one row carries the item
    assert linked[0]["fields"].get("首答版本") == 3  # and it is the row the first answer went to
    assert all(x["fields"].get("首答版本") in (None, "") for x in feishu.records(APP, TABLE)
               if x["record_id"] != item.record_id and _text(x["fields"].get("事项ID")) in ("", item.item_id)
               and thread in json.dumps(x["fields"], ensure_ascii=False))


def test_a_replayed_failed_analysis_writes_the_summary_and_the_full_answer(rig, feishu, claude, r) -> None:  # noqa: F811
    """A8: after `failed`, a replay asks for what is missing by status (not by count) and ends at `full`."""
    web, keys, own = rig
    claude.fail_when("REPLAY-5521", 500, "api_error")
    items = Items(r, keys)
    try:
        _chat, _thread, _root, item = open_topic(web, feishu, r, keys, text="REPLAY-5521 导入任务卡住",
                                                 wait_done=False)
        wait_for(lambda: (items.get(item.item_id) or item).analysis == "failed", 60, what="the analysis giving up")
    finally:
        claude.clear_fail_when("REPLAY-5521")
    rk = f"feishu:{keys.profile}:item:{item.item_id}"
    dead = wait_for(lambda: [json.loads(x) for x in r.hvals(keys.dead) if json.loads(x)["route_key"] == rk], 30,
                    what="the analysis's dead letter")
    assert deadletter.replay(_runtime(own), dead[0]["id"]) == "replayed"
    wait_for(lambda: (items.get(item.item_id) or item).analysis == "done", 60, what="the replayed analysis")
    assert [v.status for v in items.versions(item.item_id)] == ["placeholder", "failed", "summary", "full"]
    assert records_of(feishu, item.item_id)[0]["fields"]["首答版本"] == 4


def test_an_approval_whose_card_patch_failed_is_shown_decided_on_the_rerun(rig, feishu, r) -> None:  # noqa: F811
    """A7: the approval is written and the state is final, but the card's patch fails past the outbox's tries (as
    a crash between the two would leave it): the rerun patches the card instead of saying "already approved"."""
    web, keys, _ = rig
    chat, thread, root, item = open_topic(web, feishu, r, keys)
    follow_up(web, feishu, chat, thread, root, "确认修好了，把状态改成已解决", sender="ou_dev")
    card = wait_for(lambda: _proposal_card(feishu, chat), 30, what="the approval card")
    failed: list[str] = []

    def fail_the_decided_patch(record: dict[str, Any]) -> None:
        if card["message_id"] in record["path"] and not failed:
            failed.append(record["path"])
            feishu.inject_fault("message_patch", "gateway", times=3)  # past the outbox's own tries

    feishu.on("message_patch", fail_the_decided_patch, when="before")
    _click(web, "ou_reporter", _buttons(feishu, card["message_id"])["approve"], card["message_id"], chat)
    wait_for(lambda: len(feishu.card_versions(card["message_id"])) >= 2, 40, what="the decided card")
    wait_route_idle(r, keys, topic_rk(keys, chat, thread))
    assert failed
    assert _status_writes(feishu, item.record_id) == ["已解决"]
    assert "已批准" in json.dumps(feishu.card_versions(card["message_id"])[-1], ensure_ascii=False)


def test_item_link_needs_the_records_owner_reporter_admin_or_a_member_of_its_chat(rig, feishu, r) -> None:  # noqa: F811
    """A5: a stranger's `/item link` writes nothing and gets a short refusal; a member of the record's 来源群 may."""
    web, keys, _ = rig
    home = unique("oc_items_home")
    feishu.add_chat(home, members=["ou_teammate"])
    rec = feishu.add_record(APP, TABLE, {"标题": "私有群里的问题", "提出人": [{"id": "ou_pm"}],
                                         "来源群": [{"id": home}]})
    link = f"https://x.feishu.cn/base/{APP}?table={TABLE}&record={rec['record_id']}"
    items = Items(r, keys)
    writes = len(feishu.bitable_writes(APP, TABLE))

    def link_from(sender: str) -> tuple[str, str]:
        chat, thread = unique("oc_items"), unique("omt")
        env = deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread,
                      text=f"@_user_1 /item link {link}", mentions=AT_BOT, sender_open_id=sender)
        return thread, reply_text(wait_for(lambda: feishu.replies_to(message_id(env)), 30, what="the reply")[0])

    thread, said = link_from("ou_stranger")
    assert "没有关联" in said and "负责人" in said
    assert items.by_record(rec["record_id"]) is None and items.by_thread(thread) is None
    assert len(feishu.bitable_writes(APP, TABLE)) == writes
    thread, said = link_from("ou_teammate")
    item = wait_for(lambda: items.by_thread(thread), 30, what="the linked item")
    assert item.record_id == rec["record_id"] and item.item_id in said


def test_records_and_analyses_show_mentions_as_names_without_the_bots_own(rig, feishu, claude, r) -> None:  # noqa: F811
    """A14: the report's `@_user_1` placeholders never reach the record or the analysis: the bot's own @ is dropped,
    a colleague's becomes `@Name`, as in a turn."""
    from sandbox.feishu.events import mention
    from tests.harness import BOT_OPEN_ID

    web, keys, _ = rig
    chat, thread = unique("oc_items"), unique("omt")
    mentions = [mention(BOT_OPEN_ID, "助手", key="@_user_1"), mention("ou_zhang", "张三", key="@_user_2")]
    deliver(web, feishu, chat_id=chat, chat_type="group", thread_id=thread, mentions=mentions,
            text="@_user_1 对账单导出为空 @_user_2 帮忙看下日志", sender_open_id="ou_reporter")
    items = Items(r, keys)
    item = wait_for(lambda: items.by_thread(thread), 60, what="the topic's item")
    wait_for(lambda: (items.get(item.item_id) or item).analysis == "done", 60, what="the first answer")
    fields = records_of(feishu, item.item_id)[0]["fields"]
    written = _text(fields["描述"]) + _text(fields["标题"])
    asked = [json.dumps(q["body"]["messages"], ensure_ascii=False) for q in claude.requests
             if "对账单导出为空" in json.dumps(q["body"]["messages"], ensure_ascii=False)]
    for text in [written, *asked]:
        assert "@_user" not in text and "@助手" not in text
    assert "@张三 帮忙看下日志" in _text(fields["描述"]) and all("@张三" in a for a in asked)
    assert _text(fields["标题"]).startswith("对账单导出为空")


def test_a_first_answer_card_is_json_2_and_cannot_ping_the_group(rig, feishu, claude, r) -> None:  # noqa: F811
    """B1: the analysis asks for headings and tables (JSON 2.0 renders them) and may quote `<at id=all>`: the
    card posted and patched at Feishu is a 2.0 card whose text mentions nobody."""
    from feishu.cards import elements_of
    from sandbox.claude.wire import default_reply

    def responder(body: dict[str, Any]) -> str:
        asked = json.dumps(body.get("messages"), ensure_ascii=False)  # the task follows the materials (issue 34)
        if "FULL ANALYSIS" in asked or "SHORT SUMMARY" in asked:
            return "## 结论\n<at id=all></at> 大家注意\n| 项 | 值 |\n|---|---|\n| 区域 | 华东 |"
        return default_reply(body)

    claude.set_responder(responder)
    web, keys, _ = rig
    _chat, _thread, _root, item = open_topic(web, feishu, r, keys, text="@_user_1 账单页白屏")
    versions = feishu.card_versions(item.answer_message_id)
    assert len(versions) == 3 and all(c["schema"] == "2.0" and "body" in c for c in versions)
    shown = "\n".join(str(e.get("content", "")) for e in elements_of(versions[-1]))
    assert "## 结论" in shown and "| 区域 | 华东 |" in shown
    assert "<at id=all>" not in shown and "大家注意" in shown


def test_a_record_create_whose_answer_was_lost_makes_one_record(rig, feishu, r) -> None:  # noqa: F811
    """Issue 14 C: Bitable applies the create and the answer is lost (connection reset after the write): the
    retried analysis finds the row by its item id (and the create's client_token is derived from the item id),
    so the item still has exactly one record."""
    web, keys, _ = rig
    feishu.inject_fault("bitable_create", "reset_after", times=1)
    _chat, _thread, _root, item = open_topic(web, feishu, r, keys)
    creates = [q for q in feishu.requests if q["op"] == "bitable_create"]
    assert creates  # the first create's answer was lost
    rows = [x for x in feishu.records(APP, TABLE) if _text(x["fields"].get("事项ID")) == item.item_id]
    assert [x["record_id"] for x in rows] == [item.record_id]
    # B7 (issue 23 B3): the links written to the record open the topic, and the card where Feishu put it
    assert rows[0]["fields"]["话题链接"]["link"] == topic_link("https://feishu.cn", item.chat_id, item.thread_id)
    assert rows[0]["fields"]["首答链接"]["link"] == feishu.app_link(item.answer_message_id)


def test_the_records_owner_and_an_item_admin_may_approve(rig, feishu, r) -> None:  # noqa: F811
    """Issue 14 C: besides the reporter, the record's owner (read at decision time) and ITEM_ADMINS decide."""
    web, keys, _ = rig
    chat, thread, root, item = open_topic(web, feishu, r, keys)
    feishu.edit_record(APP, TABLE, item.record_id, {"负责人": [{"id": "ou_owner_now"}]})  # an owner set later
    for who, wanted in (("ou_owner_now", "处理中"), ("ou_admin", "已解决")):
        follow_up(web, feishu, chat, thread, root, f"把状态改成{wanted}", sender="ou_dev")
        card = wait_for(lambda w=wanted: (c := _proposal_card(feishu, chat)) and w in json.dumps(
            feishu.card_versions(c["message_id"])[0], ensure_ascii=False) and c, 30, what="the approval card")
        _click(web, who, _buttons(feishu, card["message_id"])["approve"], card["message_id"], chat)
        wait_for(lambda c=card: len(feishu.card_versions(c["message_id"])) >= 2, 30, what="the decided card")
        wait_route_idle(r, keys, topic_rk(keys, chat, thread))
    assert _status_writes(feishu, item.record_id) == ["处理中", "已解决"]


def test_a_refused_record_subscription_is_named_in_readyz_and_items_still_work(rig, feishu, r) -> None:  # noqa: F811
    """Issue 14 B5: only a base's owner or manager may subscribe its record events. A refusal is a named /readyz
    item with the fix, never a pause: a topic's report still becomes an item with its record."""
    import requests

    from items import table_check

    web, keys, own = rig
    feishu.inject("drive_subscribe", code=1063002, times=1, msg="permission denied")
    assert table_check.run(_runtime(own)) is True  # the schema is fine; the subscription is retried hourly
    ready = requests.get(f"{web.url}/readyz", timeout=10).json()
    assert ready["status"] == "degraded" and ready["paused"] == {}
    assert ready["bitable"]["subscription"].startswith("failed") and "owner" in ready["bitable"]["subscription_fix"]
    _chat, _thread, _root, item = open_topic(web, feishu, r, keys)
    assert item.record_id and records_of(feishu, item.item_id)
    assert table_check.run(_runtime(own)) is True  # granted meanwhile: the next check clears it
    assert requests.get(f"{web.url}/readyz", timeout=10).json()["bitable"]["subscription"] == "ok"


# -- issue 23 B3: the record's links open the topic and the first answer, not the chat --------------------------

def test_the_records_links_open_the_topic_and_the_first_answer(rig, feishu, r) -> None:  # noqa: F811
    """话题链接 is the topic's AppLink (`client/thread/open`); 首答链接 is the message_app_link Feishu answered the
    first-answer card's post with. Neither is the chat AppLink, which opened the chat and not the topic."""
    web, keys, _ = rig
    chat, thread, _root, item = open_topic(web, feishu, r, keys)
    fields = records_of(feishu, item.item_id)[0]["fields"]
    answer = feishu.app_link(item.answer_message_id)
    assert "/client/thread/open?" in answer and f"open_thread_id={thread}" in answer  # the card, in its topic
    assert item.answer_link == answer and fields["首答链接"]["link"] == answer
    assert fields["话题链接"]["link"] == topic_link("https://feishu.cn", chat, thread)
    assert "client/chat/open" not in json.dumps(fields, ensure_ascii=False)


def test_a_record_naming_a_topic_by_an_old_chat_link_is_linked_and_rewritten(rig, feishu, r) -> None:  # noqa: F811
    """Records written before hold the chat AppLink with the topic in its fragment: such a record still names its
    topic (it is linked to it), and its 话题链接 is rewritten to the topic's AppLink."""
    web, keys, _ = rig
    chat, thread = unique("oc_items"), unique("omt")
    feishu.add_message(unique("om"), chat, sender_open_id="ou_tester", thread_id=thread,
                       content=json.dumps({"text": "登录页偶发 502"}))
    old = f"https://applink.feishu.cn/client/chat/open?openChatId={chat}#thread_id={thread}&message_id=om_x1"
    rec = feishu.add_record(APP, TABLE, {"标题": "登录页偶发 502", "提出人": [{"id": "ou_tester"}],
                                         "话题链接": {"text": "话题", "link": old}})
    event = bitable_record_changed_event(APP, TABLE, rec["record_id"], "record_added", "ou_tester",
                                         after=feishu.record_change_values(APP, TABLE, rec["record_id"]),
                                         token=VERIFICATION_TOKEN, app_id=APP_ID)
    assert web.post(event).status_code == 200
    items = Items(r, keys)
    item = wait_for(lambda: items.by_thread(thread), 30, what="the record's topic linked")
    assert item.record_id == rec["record_id"]
    new = topic_link("https://feishu.cn", chat, thread)

    def link_now() -> str:
        row = next(x for x in feishu.records(APP, TABLE) if x["record_id"] == rec["record_id"])
        return str(row["fields"]["话题链接"]["link"])

    wait_for(lambda: link_now() == new, 30, what="the topic link rewritten")
