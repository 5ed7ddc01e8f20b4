"""The daily digest: the card from rows (pure), and the open items of a chat read from the emulator's Bitable."""

from __future__ import annotations

import html
import re
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

from bitable import Bitable, client_token_for
from bitable.client import SEARCH_PAGE
from bitable.errors import classify
from core.keys import Keys
from feishu.cards import elements_of, footer_of
from feishu.client import FeishuApi
from feishu.render import RICH_LIMIT_BYTES, ZWSP, Chunk
from sandbox.feishu.emulator import FeishuEmulator
from tests.harness import service_env, settings_from
from timers.digest import MAX_ROWS, DigestRow, digest_card, open_items, relative_day

SHANGHAI = ZoneInfo("Asia/Shanghai")
CLOSED = ("已关闭", "已完成", "已解决", "关闭", "完成", "Closed", "Done")
APP = "bascnDigestApp"
TOPIC = "https://applink.feishu.cn/client/chat/open?openChatId=oc_a#thread_id=omt_{}"


def at(day: int, hour: int, minute: int = 0, tz: ZoneInfo = SHANGHAI) -> int:
    return int(datetime(2024, 5, day, hour, minute, tzinfo=tz).timestamp() * 1000)


NOW = at(3, 9)


def row(n: int, **more: Any) -> DigestRow:
    values: dict[str, Any] = {"record_id": f"rec{n:014d}", "title": f"登录页报错 {n}", "owner_ids": ("ou_amy",),
                              "status": "处理中", "last_activity_ms": at(1, 10), "topic_link": TOPIC.format(n),
                              "item_id": f"IT-{n}"}
    return DigestRow(**{**values, **more})


def card_of(rows: list[DigestRow]) -> dict[str, Any]:
    return digest_card(rows, now_ms=NOW, tz=SHANGHAI, date_label="5月3日")


def blocks(card: dict[str, Any]) -> list[str]:
    return [str(e["content"]) for e in elements_of(card) if e.get("tag") == "markdown" and "element_id" not in e]


def test_card_lists_each_item_with_link_owners_status_and_last_activity() -> None:
    rows = [row(1), row(2, owner_ids=("ou_amy", "ou_bob"), status="待处理", last_activity_ms=at(3, 1),
                         topic_link="", item_id="")]
    card = card_of(rows)
    assert card["schema"] == "2.0" and card["config"]["update_multi"] is True
    assert card["header"]["title"]["content"] == "待处理事项 · 5月3日（2 项）"
    first, second = blocks(card)
    assert first.startswith(f"**1.** [登录页报错 1]({TOPIC.format(1)}) · IT&#45;1\n")
    assert "负责人：<at id=ou_amy></at>" in first and "状态：处理中" in first and "最近动态：2 天前" in first
    assert second.startswith("**2.** 登录页报错 2\n") and "](" not in second  # no link, so plain
    assert "负责人：<at id=ou_amy></at> <at id=ou_bob></at>" in second and "最近动态：今天" in second
    assert footer_of(card) == ""


def test_no_owner_no_rows_and_unsafe_links() -> None:
    card = card_of([row(1, owner_ids=()), row(2, topic_link="http://example.com/x"),
                    row(3, topic_link="javascript:alert(1)"), row(4, topic_link="https://x.example/a)(b"),
                    row(5, last_activity_ms=None, status="")])
    texts = blocks(card)
    assert "负责人：未指派" in texts[0]
    assert all("](" not in t for t in texts[1:4])  # only a plain https URL becomes a link
    assert "最近动态：—" in texts[4] and "状态：—" in texts[4]
    empty = card_of([])
    assert empty["header"]["title"]["content"] == "待处理事项 · 5月3日（0 项）"
    assert blocks(empty) == ["暂无待处理事项。"]


HOSTILE = [
    "<at id=all></at> 紧急", '<at user_id="all">所有人</at>', "[点我](javascript:alert(1))", "**全部加粗**",
    "<font color='red'>红字</font>", "# 标题\n- 列表\n> 引用", "`code` ~~删~~ __粗__ :DONE:",
    "[x](https://evil.example) ![img](img_v2_x)", "<a href='https://evil.example'>链接</a>", "&#60;at id=all&#62;",
    "<link url='https://evil.example'>l</link> <person id='ou_x'></person> <text_tag>t</text_tag>",
]


def shown_as(title: str) -> str:
    """What the card must show for `title`: one line, clipped at 60 characters."""
    flat = " ".join(title.split())
    return flat if len(flat) <= 60 else flat[:60].rstrip() + "…"


@pytest.mark.parametrize("title", HOSTILE)
def test_hostile_text_stays_text(title: str) -> None:
    (text,) = blocks(card_of([row(1, title=title, status=title, item_id=title, owner_ids=())]))
    head, facts = text.split("\n")  # a title never adds lines (headings, lists, quotes, rules)
    link = f"]({TOPIC.format(1)})"
    assert head.startswith("**1.** [") and head.count(link) == 1
    title_part, rest = head.removeprefix("**1.** [").split(link)
    # Outside our own scaffolding no character is left that Markdown or a Feishu tag could use ...
    assert not re.search(r"[*_~`\[\]()<>#!:|\\$'\"&]", re.sub(r"&#\d+;", "", title_part + rest + facts))
    # ... and the text reads back as written (the card decodes &#N; references; ZWSP breaks tags open).
    assert html.unescape(title_part).replace(ZWSP, "") == shown_as(title)
    assert "未指派" in facts


def test_owner_ids_must_be_open_ids() -> None:
    (text,) = blocks(card_of([row(1, owner_ids=("ou_x></at><at id=all", "all", "on_union", "ou_ok-1_A"))]))
    assert text.count("<at ") == 1 and "<at id=ou_ok-1_A></at>" in text
    many = tuple(f"ou_{i}" for i in range(8))
    (crowded,) = blocks(card_of([row(1, owner_ids=many)]))
    assert crowded.count("<at ") == 5 and "等 8 人" in crowded


def test_cap_at_thirty_items() -> None:
    card = card_of([row(n) for n in range(MAX_ROWS + 7)])
    assert card["header"]["title"]["content"].endswith(f"（{MAX_ROWS + 7} 项）")
    assert len(blocks(card)) == MAX_ROWS and footer_of(card) == "另有 7 项未列出"
    assert blocks(card)[-1].startswith(f"**{MAX_ROWS}.** ")
    long = blocks(card_of([row(1, title="很长的标题" * 30)]))[0]
    assert "很长的标题" * 12 + "…" in long and "很长的标题" * 13 not in long


def test_even_the_largest_rows_keep_the_card_under_feishus_limit() -> None:
    worst = "<*[_`#~]>&" * 20  # every character escapes to several bytes
    link = "https://x.example/" + "a" * 980
    rows = [row(n, title=worst, status=worst, item_id=worst, topic_link=link,
                owner_ids=tuple(f"ou_{n}_{i}_" + "x" * 60 for i in range(9))) for n in range(MAX_ROWS)]
    card = card_of(rows)
    listed = len(blocks(card))
    assert 0 < listed < MAX_ROWS and footer_of(card) == f"另有 {MAX_ROWS - listed} 项未列出"
    assert Chunk("interactive", card).body_bytes() < RICH_LIMIT_BYTES  # as the send request measures it


@pytest.mark.parametrize(("then", "expected"), [
    (at(3, 8, 59), "今天"), (at(3, 0, 0), "今天"), (at(2, 23, 59), "昨天"), (at(2, 0, 0), "昨天"),
    (at(1, 12), "2 天前"), (int(datetime(2024, 4, 4, tzinfo=SHANGHAI).timestamp() * 1000), "29 天前"),
    (at(4, 12), "今天"), (None, "—"),  # a clock ahead of ours counts as today
])
def test_relative_day_counts_calendar_days_in_the_zone(then: int | None, expected: str) -> None:
    assert relative_day(then, NOW, SHANGHAI) == expected


def test_relative_day_depends_on_the_zone() -> None:
    then = int(datetime(2024, 5, 2, 17, 0, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)
    now = int(datetime(2024, 5, 3, 1, 0, tzinfo=ZoneInfo("UTC")).timestamp() * 1000)
    assert relative_day(then, now, ZoneInfo("UTC")) == "昨天"
    assert relative_day(then, now, SHANGHAI) == "今天"


# -- open items, through the real client against the emulator ---------------------------------------------


@pytest.fixture
def table_id(feishu: FeishuEmulator) -> str:
    table = f"tbl{uuid.uuid4().hex[:12]}"
    feishu.add_table(APP, table)
    return table


@pytest.fixture
def bt(feishu: FeishuEmulator, redis_url: str, r: redis.Redis, keys: Keys, table_id: str) -> Bitable:
    env = service_env(redis_url, feishu.url, "http://127.0.0.1:9",
                      BITABLE_APP_TOKEN=APP, BITABLE_TABLE_ID=table_id)
    settings = settings_from(env)
    return Bitable(settings, r, keys, FeishuApi(settings, r, keys).client)


def record(chat: str, status: str | None, n: int, **more: Any) -> dict[str, Any]:
    fields = {"标题": f"事项 {n}", "来源群": [{"id": chat}], "事项ID": f"IT-{n}",
              "话题链接": {"text": "话题", "link": TOPIC.format(n)}, **more}
    return {**fields, "状态": status} if status else fields


def searches(feishu: FeishuEmulator) -> list[dict[str, Any]]:
    seen: list[dict[str, Any]] = []
    feishu.on("bitable_search", lambda rec: seen.append({"query": rec["query"], "json": rec["json"]}))
    return seen


def test_open_items_are_the_chats_open_records_across_pages(feishu: FeishuEmulator, bt: Bitable,
                                                            table_id: str) -> None:
    add: Callable[..., dict[str, Any]] = lambda fields: feishu.add_record(APP, table_id, fields)  # noqa: E731
    expected = {add(record("oc_a", "处理中", n))["record_id"] for n in range(SEARCH_PAGE + 5)}
    expected.add(add(record("oc_a", None, 900))["record_id"])  # no status yet: open
    for n, status in enumerate(CLOSED):
        add(record("oc_a", status, 1000 + n))
    add(record("oc_b", "处理中", 2000))
    add(record("oc_b", "已完成", 2001))
    add(record("oc_a", "处理中", 2002, 来源群=[{"id": "oc_a"}, {"id": "oc_b"}]))  # shared: not "is" this chat
    seen = searches(feishu)

    rows = open_items(bt, "oc_a", CLOSED)

    assert {r.record_id for r in rows} == expected and len(rows) == SEARCH_PAGE + 6
    assert len(seen) == 2 and seen[1]["query"].get("page_token") and seen[0]["query"]["page_size"] == "500"
    body = seen[0]["json"]
    assert body["automatic_fields"] is True and body["filter"]["conjunction"] == "and"
    assert body["filter"]["conditions"][0] == {"field_name": "来源群", "operator": "is", "value": ["oc_a"]}
    assert sorted(c["value"][0] for c in body["filter"]["conditions"][1:] if c["operator"] == "isNot") \
        == sorted(CLOSED)  # the closed statuses are filtered by Bitable itself
    assert all(r.last_activity_ms is not None for r in rows)


def test_open_items_carry_the_record_and_come_stalest_first(feishu: FeishuEmulator, bt: Bitable) -> None:
    feishu.add_user("ou_amy", "Amy")
    made = [bt.create(bt.schema().encode({"title": f"事项 {n}", "chat": ["oc_a"], "status": "待处理",
                                          "topic_link": ("话题", TOPIC.format(n)), "item_id": f"IT-{n}",
                                          **({"owner": ["ou_amy"]} if n == 0 else {})}),
                      client_token_for(f"digest-{uuid.uuid4()}")).record_id for n in range(3)]
    bt.update(made[0], bt.schema().encode({"status": "处理中"}))  # the first is now the freshest

    rows = open_items(bt, "oc_a", CLOSED)

    assert [r.record_id for r in rows] == [made[1], made[2], made[0]]
    assert rows[0].last_activity_ms is not None and rows[-1].last_activity_ms is not None
    assert rows[0].last_activity_ms < rows[-1].last_activity_ms
    fresh = rows[-1]
    assert (fresh.title, fresh.owner_ids, fresh.status, fresh.topic_link, fresh.item_id) == (
        "事项 0", ("ou_amy",), "处理中", TOPIC.format(0), "IT-0")
    assert (rows[0].owner_ids, rows[0].status) == ((), "待处理")
    bt.update(made[1], bt.schema().encode({"status": "已解决"}))
    assert [r.record_id for r in open_items(bt, "oc_a", CLOSED)] == [made[2], made[0]]  # read fresh each time


def test_a_refused_status_filter_falls_back_to_filtering_here(feishu: FeishuEmulator, bt: Bitable,
                                                              table_id: str, monkeypatch: pytest.MonkeyPatch) -> None:
    open_id = feishu.add_record(APP, table_id, record("oc_a", "处理中", 1))["record_id"]
    feishu.add_record(APP, table_id, record("oc_a", "Done", 2))
    real = bt.search
    calls: list[int] = []

    def picky(*args: Any, **kwargs: Any) -> Any:
        calls.append(len(kwargs.get("also") or ()))
        if kwargs.get("also"):
            raise classify(1254018, "InvalidFilter")
        return real(*args, **kwargs)

    monkeypatch.setattr(bt, "search", picky)
    assert [r.record_id for r in open_items(bt, "oc_a", CLOSED)] == [open_id]
    assert calls == [len(CLOSED), 0]


def test_a_title_links_to_the_topic_even_when_the_record_holds_an_old_chat_link(feishu: FeishuEmulator,
                                                                                  bt: Bitable, table_id: str) -> None:
    """Issue 23 B3: records written before hold the chat AppLink with the topic in its fragment (it opened the
    chat, not the topic). The digest links such a title to the topic's AppLink; other links are kept as written."""
    from bitable.refs import topic_link

    old = "https://applink.feishu.cn/client/chat/open?openChatId=oc_a#thread_id=omt_topic7&message_id=om_x1"
    mine = "https://x.feishu.cn/wiki/abc"
    feishu.add_record(APP, table_id, record("oc_a", "处理中", 7, 话题链接={"text": "话题", "link": old}))
    feishu.add_record(APP, table_id, record("oc_a", "处理中", 8, 话题链接={"text": "话题", "link": mine}))
    rows = {r.item_id: r for r in open_items(bt, "oc_a", CLOSED)}
    topic = topic_link("https://feishu.cn", "oc_a", "omt_topic7")
    assert rows["IT-7"].topic_link == topic and rows["IT-8"].topic_link == mine
    shown = "\n".join(blocks(card_of([rows["IT-7"]])))
    assert f"]({topic})" in shown and "client/chat/open" not in shown
