"""Pure rules of how a run walks its batch and reads commands and ids (jobs/segments.py, the registered commands of
turn/registry.py, bitable/refs.py): no fakes needed."""

from __future__ import annotations

import json

import pytest

from app import build_app
from bitable.refs import item_ids, record_ids, thread_ids
from core.inbound import CARD_ACTION_TYPE, Inbound
from core.settings import Settings
from items.claim import link_argument, opens_topic
from jobs.segments import COMMAND, STALE, TURN, next_segment
from tests.harness import settings_from

APP = build_app()
command_of = APP.command_of


def msg(text: str = "hi", *, mid: str = "om_1", thread: str | None = None, root: str | None = None,
        gen: int | None = None, kind: str = "text") -> Inbound:
    return Inbound(event_id="e", message_id=mid, chat_id="oc", chat_type="group", sender_open_id="ou_a",
                   sender_type="user", message_type=kind, text=text, content=json.dumps({"text": text}),
                   thread_id=thread, root_id=root, gen=gen)


ITEM_NEW, ITEM_LINK, RESET, STATUS, CARD, ITEM_OPEN = "item_new", "item_link", "reset", "status", CARD_ACTION_TYPE, \
    "item_open"


def name(c: object) -> str | None:
    return getattr(c, "name", None)


def items_on(on: bool) -> Settings:
    env = {"ITEM_CREATE_POLICY": "topic_root", "BITABLE_APP_TOKEN": "bascnA", "BITABLE_TABLE_ID": "tblA"}
    return settings_from(env if on else {})


def test_item_commands_are_whole_texts_only() -> None:
    assert name(command_of("text", "/登记")) == ITEM_NEW and name(command_of("post", "/item  new。")) == ITEM_NEW
    assert name(command_of("text", "/item link recAbc12345X")) == ITEM_LINK
    assert link_argument("/item link https://x/base/b?table=t&record=recAbc12345X") == \
        "https://x/base/b?table=t&record=recAbc12345X"
    assert command_of("text", "请帮我 /登记 一下") is None and command_of("text", "/item link") is None
    assert command_of("image", "/登记") is None and name(command_of("text", "/reset")) == RESET
    assert name(command_of("text", "/status")) == STATUS


def test_a_topic_opening_report_is_an_item_only_when_items_are_on() -> None:
    root = msg("报表是空的", mid="om_r", thread="omt_1")
    assert opens_topic(root) and opens_topic(msg(mid="om_r", thread="omt_1", root="om_r"))
    assert not opens_topic(msg(mid="om_2", thread="omt_1", root="om_r")) and not opens_topic(msg())
    first = next_segment([root], 0, APP, "topic", items_on(True))
    assert first == next_segment([root], 0, APP, "topic", items_on(True))
    assert next_segment([root], 0, APP, "topic", items_on(True)).command == ITEM_OPEN
    assert next_segment([root], 0, APP, "topic", items_on(False)).kind == TURN
    reply = msg("追问", mid="om_2", thread="omt_1", root="om_r")
    assert next_segment([reply, reply], 0, APP, "topic", items_on(True)).kind == TURN


def test_a_card_click_is_never_stale_and_stands_alone() -> None:
    click = msg("", mid="om_card", kind=CARD_ACTION_TYPE, gen=0)
    seg = next_segment([click, msg(gen=1)], 1, APP)
    assert (seg.kind, seg.command, seg.n) == (COMMAND, CARD, 1)
    assert next_segment([msg(gen=0), click], 1, APP).kind == STALE


def test_ids_in_text_only_ours_and_never_words() -> None:
    text = ("see recordings and recnE5Ahw1Kq9, https://x.feishu.cn/base/bascnA?table=tblA&record=recAB12cdEF3 "
            "https://x.feishu.cn/base/other?table=tblA&record=recZZ12cdEF3 itm_0123456789ab omt_abc123")
    assert record_ids(text, "bascnA", "tblA") == ["recAB12cdEF3", "recnE5Ahw1Kq9"]
    assert item_ids(text) == ["itm_0123456789ab"] and thread_ids(text) == ["omt_abc123"]
    assert item_ids("itm_0123456789abc") == [] and record_ids("recording_studio") == []


def test_topic_links_open_the_topic_and_still_name_it() -> None:
    """Issue 23 B3 (was issue 14 B7): 话题链接 opens the topic itself (the thread AppLink, `client/thread/open` with
    both spellings of its keys, larksuite/cli's thread_app_link), not its chat: the chat AppLink this service wrote
    before named the topic only in a fragment, which the client ignores. Every form still names the topic."""
    from urllib.parse import parse_qs, urlsplit

    from bitable.refs import thread_ids, topic_link

    link = topic_link("https://feishu.cn", "oc_chat01", "omt_topic01")
    parts = urlsplit(link)
    assert (parts.scheme, parts.netloc, parts.path, parts.fragment) == (
        "https", "applink.feishu.cn", "/client/thread/open", "")
    assert parse_qs(parts.query) == {"open_chat_id": ["oc_chat01"], "open_thread_id": ["omt_topic01"],
                                     "openchatid": ["oc_chat01"], "openthreadid": ["omt_topic01"]}
    assert urlsplit(topic_link("https://acme.larksuite.com", "oc_chat01", "omt_topic01")).netloc \
        == "applink.larksuite.com"
    for written in (link, CHAT_FORM, PRE_14_FORM, FEISHU_APP_LINK):
        assert thread_ids(written) == ["omt_topic01"]  # a record naming any of them links to the topic


CHAT_FORM = "https://applink.feishu.cn/client/chat/open?openChatId=oc_chat01#thread_id=omt_topic01&message_id=om_a1"
PRE_14_FORM = "https://feishu.cn/client/thread/open?chat_id=oc_chat01&thread_id=omt_topic01"
FEISHU_APP_LINK = ("https://applink.feishu.cn/client/thread/open?open_chat_id=oc_chat01&open_thread_id=omt_topic01"
                   "&openchatid=oc_chat01&openthreadid=omt_topic01&thread_position=3")


@pytest.mark.parametrize(("written", "opens"), [
    (CHAT_FORM, "topic"),  # ours since issue 14: opened the chat only
    (PRE_14_FORM, "topic"),  # ours before that
    (CHAT_FORM.replace("applink.feishu.cn", "applink.larksuite.com"), "lark topic"),
    (FEISHU_APP_LINK, "kept"),  # Feishu's own message_app_link opens the topic already
    ("https://x.feishu.cn/t?thread_id=omt_topic01", "kept"),  # a person's link: theirs
    ("https://applink.feishu.cn/client/chat/open?openChatId=oc_chat01", "kept"),  # names no topic
    ("https://applink.feishu.cn/client/chat/open?openChatId=oc_chat01#thread_id=omt_x", "kept"),  # no topic id
    ("话题", "kept"),
])
def test_links_written_before_are_read_as_the_topics_applink(written: str, opens: str) -> None:
    from bitable.refs import openable, topic_link

    expected = {"topic": topic_link("https://feishu.cn", "oc_chat01", "omt_topic01"),
                "lark topic": topic_link("https://larksuite.com", "oc_chat01", "omt_topic01"), "kept": written}
    assert openable(written) == expected[opens]


@pytest.mark.parametrize(("app_link", "used"), [
    (FEISHU_APP_LINK, True), ("", False), ("javascript:alert(1)", False), ("http://applink.feishu.cn/x", False),
    ("https://applink.feishu.cn/a b", False), ("https://applink.feishu.cn/" + "x" * 1000, False),
])
def test_the_first_answers_link_is_feishus_message_app_link_or_the_topics(app_link: str, used: bool) -> None:
    """首答链接: the message_app_link Feishu answered the card's post with, when it is a plain https link; else the
    topic's AppLink (never the chat's)."""
    from bitable.refs import answer_link, topic_link

    topic = topic_link("https://feishu.cn", "oc_chat01", "omt_topic01")
    assert answer_link(app_link, "https://feishu.cn", "oc_chat01", "omt_topic01") == (app_link if used else topic)
