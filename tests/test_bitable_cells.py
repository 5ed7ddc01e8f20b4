"""Bitable cells, pure: every read shape of feishu.md §5.3 as text, users and links; write values per field type."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bitable.cells import (
    GROUP_CHAT,
    NUMBER,
    PHONE,
    SINGLE_SELECT,
    TEXT,
    URL,
    USER,
    cell_links,
    cell_text,
    cell_user_ids,
    write_value,
)

SEGMENTS = [
    {"type": "text", "text": "登录页报错，见 "},
    {"type": "mention", "mentionType": "User", "token": "ou_alice", "name": "Alice", "text": "@Alice"},
    {"type": "text", "text": " 和 "},
    {"type": "url", "text": "排查文档", "link": "https://docs.example.com/x"},
]
USERS = [{"id": "ou_alice", "name": "Alice", "en_name": "Alice", "email": "a@example.com", "avatar_url": "https://a"},
         {"id": "ou_bob", "name": "小王"}]
CHATS = [{"id": "oc_1", "name": "运维群", "avatar_url": "https://img/1"}]
URL_CELL = {"text": "话题", "link": "https://applink.feishu.cn/client/thread/open?threadid=omt_1"}
ATTACHMENTS = [{"file_token": "box1", "name": "日志.txt", "size": 12, "type": "text/plain", "url": "https://dl/1",
                "tmp_url": "https://tmp/1"}]
LOCATION = {"address": "望京", "full_address": "北京市朝阳区望京", "location": "116.48,39.99", "name": "望京 SOHO"}

READS = [
    # (cell, text, user ids, links)
    (None, "", [], []),
    ("纯文本 https://x.example.com/a", "纯文本 https://x.example.com/a", [], ["https://x.example.com/a"]),
    (3, "3", [], []),
    (3.0, "3", [], []),
    (2.5, "2.5", [], []),
    (True, "true", [], []),
    (False, "false", [], []),
    (SEGMENTS, "登录页报错，见 @Alice 和 排查文档", ["ou_alice"], ["https://docs.example.com/x"]),
    ([{"type": "mention", "token": "ou_c", "name": "Carol"}], "@Carol", ["ou_c"], []),
    (USERS, "Alice, 小王", ["ou_alice", "ou_bob"], []),
    (CHATS, "运维群", [], []),
    (URL_CELL, "话题", [], [URL_CELL["link"]]),
    ({"link_record_ids": ["rec1", "rec2"]}, "rec1, rec2", [], []),
    ({"type": 1, "value": [{"type": "text", "text": "查到的"}]}, "查到的", [], []),
    ({"type": 2, "value": [7]}, "7", [], []),
    ({"type": 11, "value": [{"id": "ou_d", "name": "Dan"}]}, "Dan", ["ou_d"], []),
    (LOCATION, "北京市朝阳区望京", [], []),
    (ATTACHMENTS, "日志.txt", [], []),
    ("选项A", "选项A", [], []),
    (["a", "b"], "a, b", [], []),
    ({"id": "ou_creator", "name": "创建者"}, "创建者", ["ou_creator"], []),
    ([], "", [], []),
]


@pytest.mark.parametrize(("cell", "text", "users", "links"), READS, ids=[json.dumps(r[0])[:40] for r in READS])
def test_read_shapes(cell: Any, text: str, users: list[str], links: list[str]) -> None:
    assert cell_text(cell) == text
    assert cell_user_ids(cell) == users
    assert cell_links(cell) == links


def test_links_are_collected_once_and_in_order() -> None:
    cell = [{"type": "url", "text": "https://a.example.com", "link": "https://a.example.com"},
            {"type": "text", "text": " 再看 https://b.example.com/p?q=1 和 https://a.example.com"}]
    assert cell_links(cell) == ["https://a.example.com", "https://b.example.com/p?q=1"]


WRITES = [
    (TEXT, "标题", "标题"),
    (SINGLE_SELECT, "处理中", "处理中"),
    (PHONE, "+8613000000000", "+8613000000000"),
    (USER, "ou_a", [{"id": "ou_a"}]),
    (USER, ["ou_a", "ou_b"], [{"id": "ou_a"}, {"id": "ou_b"}]),
    (GROUP_CHAT, "oc_1", [{"id": "oc_1"}]),
    (GROUP_CHAT, ("oc_1", "oc_2"), [{"id": "oc_1"}, {"id": "oc_2"}]),
    (URL, ("话题", "https://x/1"), {"text": "话题", "link": "https://x/1"}),
    (URL, ("", "https://x/1"), {"text": "https://x/1", "link": "https://x/1"}),
    (URL, "https://x/2", {"text": "https://x/2", "link": "https://x/2"}),
    (NUMBER, 3, 3),
    (NUMBER, 2.5, 2.5),
    (NUMBER, "4", 4),
    (NUMBER, " 1.5 ", 1.5),
]


@pytest.mark.parametrize(("field_type", "value", "wire"), WRITES)
def test_write_values(field_type: int, value: Any, wire: Any) -> None:
    assert write_value(field_type, value) == wire


@pytest.mark.parametrize(("field_type", "value", "named"), [
    (TEXT, 3, "1 (text)"),
    (USER, [], "11 (user)"),
    (USER, [{"id": "ou_a"}], "11 (user)"),
    (GROUP_CHAT, None, "23 (group chat)"),
    (URL, ("only text",), "15 (url)"),
    (NUMBER, "three", "2 (number)"),
    (NUMBER, True, "2 (number)"),
    (NUMBER, float("nan"), "2 (number)"),
    (PHONE, "call me", "13 (phone)"),
    (5, 1700000000000, "5 (date)"),
    (999, "x", "999 (unknown)"),
])
def test_write_refuses_naming_the_type(field_type: int, value: Any, named: str) -> None:
    with pytest.raises(ValueError, match=re.escape(f"type {named}")):
        write_value(field_type, value)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children, max_size=5) | st.dictionaries(
        st.sampled_from(["type", "text", "link", "name", "token", "id", "value", "link_record_ids", "mentionType",
                         "address", "full_address", "location"]) | st.text(max_size=5),
        children | st.sampled_from(["text", "mention", "url"]), max_size=6),
    max_leaves=40,
)


@settings(max_examples=400, deadline=None)
@given(json_values)
def test_reads_never_raise_on_any_json(value: Any) -> None:
    assert isinstance(cell_text(value), str)
    assert all(isinstance(u, str) and u.startswith("ou_") for u in cell_user_ids(value))
    assert all(isinstance(link, str) and link for link in cell_links(value))


def test_deep_nesting_does_not_recurse_forever() -> None:
    cell: Any = "leaf"
    for _ in range(5000):
        cell = {"type": 1, "value": [cell]}
    assert cell_text(cell) == ""
    assert cell_links(cell) == [] and cell_user_ids(cell) == []
