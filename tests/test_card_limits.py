"""Issue 23 B12/B8: card Markdown within Feishu's documented limits (feishu/cardmd.py) — four tables a
markdown element, five a card, code fences at the start of their lines, a plain-text summary — as pure tables and
through the real stack (a rendered reply the emulator accepts and records no render defect for)."""

from __future__ import annotations

import json

import pytest

from feishu.cardmd import before_table, dedent_fences, plain_summary, split_tables, table_starts
from feishu.render import render
from sandbox.feishu.rules import count_tables
from tests.harness import deliver, message_id, route_key, unique, wait_route_idle


def tables(n: int, tag: str = "表") -> str:
    return "\n\n".join(f"| {tag}{i} | 值 |\n| --- | --- |\n| 甲{i} | 乙{i} |" for i in range(n))


LISTED_CODE = "1. 安装依赖：\n   ```bash\n   pip install x\n       --upgrade\n   ```\n2. 运行"


@pytest.mark.parametrize(("md", "starts"), [
    (tables(3), [0, 4, 8]),
    ("说明\n| a | b |\n|---|---|\n| 1 | 2 |", [1]),
    ("```\n| a | b |\n|---|---|\n```\n" + tables(1), [4]),  # a table in a code block is no table
    ("a | b\n--- | ---\n1 | 2", [0]),  # GFM: the outer pipes are optional
    ("标题\n---\n正文", []),  # a setext heading, not a table
])
def test_tables_are_found_outside_code(md: str, starts: list[int]) -> None:
    assert table_starts(md) == starts
    assert count_tables(md) == len(starts)  # the emulator counts the same, written separately


@pytest.mark.parametrize(("n", "most", "counts"), [(3, 4, [3]), (4, 4, [4]), (5, 4, [4, 1]), (9, 4, [4, 4, 1]),
                                                   (11, 5, [5, 5, 1])])
def test_split_tables_keeps_every_piece_within_the_limit(n: int, most: int, counts: list[int]) -> None:
    md = "开头\n\n" + tables(n) + "\n\n结尾"
    pieces = split_tables(md, most)
    assert [len(table_starts(p)) for p in pieces] == counts
    assert pieces[0].startswith("开头") and pieces[-1].endswith("结尾")
    assert all(f"甲{i} " in "\n".join(pieces) for i in range(n))


def test_the_streamed_head_stops_before_the_fifth_table() -> None:
    md = "开头\n\n" + tables(6)
    head = before_table(md, 4)
    assert len(table_starts(head)) == 4 and "表4" not in head and head.startswith("开头")
    assert before_table(tables(3), 4) == tables(3)


@pytest.mark.parametrize(("md", "want"), [
    (LISTED_CODE, "1. 安装依赖：\n```bash\npip install x\n    --upgrade\n```\n2. 运行"),
    ("  ~~~\n  code\n  ~~~", "~~~\ncode\n~~~"),
    ("```\n    kept as written\n```", "```\n    kept as written\n```"),  # a fence at column 0 keeps its code
    ("用 `code` 行内", "用 `code` 行内"),
])
def test_indented_fences_move_to_the_start_of_their_lines(md: str, want: str) -> None:
    assert dedent_fences(md) == want


@pytest.mark.parametrize(("md", "want"), [
    ("## 结论（导出）\n\n**重要**：见 [文档](https://x.cn/d) 与 `make`", "结论（导出） 重要：见 文档 与 make"),
    ('请 <at user_id="ou_a">张三</at> 与 @ou_b 看看 <at id=ou_c></at>', "请 @张三 与 @李四 看看"),
    ("@ou_s 你好，@ou_x 也看看", "你好，@ou_x 也看看"),  # a sender (no name known): left out, not a bare "@"
    ("| a | b |\n|---|---|\n| 1 | 2 |", "a b 1 2"),
    ("```py\nprint(1)\n```\n- 第一点", "第一点"),
    ("字" * 80, "字" * 60 + "…"),
])
def test_the_summary_is_plain_text(md: str, want: str) -> None:
    assert plain_summary(md, {"ou_b": "李四", "ou_s": ""}) == want


def test_a_reply_with_many_tables_becomes_cards_of_five_in_elements_of_four() -> None:
    chunks = render("结论如下：\n\n" + tables(12) + "\n\n" + LISTED_CODE)
    per_element = [[count_tables(e["content"]) for e in c.content["body"]["elements"]] for c in chunks]
    assert per_element == [[4, 1], [4, 1], [2]], per_element
    shown = "\n".join(e["content"] for c in chunks for e in c.content["body"]["elements"])
    assert all(shown.count(f"| 甲{i} |") == 1 for i in range(12))
    assert "\n```bash\npip install x" in shown and "   ```" not in shown


def test_a_rendered_reply_within_the_limits_is_accepted_and_shows_well(service, feishu, claude, r, keys) -> None:
    """Through the real stack (REPLY_STREAMING=off here): seven tables and a fence inside a list item. Before,
    one card of seven tables was refused (230099, 11310) and the fence showed as text."""
    answer = "## 对比\n\n" + tables(7) + "\n\n" + LISTED_CODE
    claude.set_responder(lambda body: answer if "七个表格" in json.dumps(body, ensure_ascii=False) else "收到。")
    chat = unique("oc_p2p")
    msg = deliver(service, feishu, chat_id=chat, chat_type="p2p", text="七个表格的对比")
    wait_route_idle(r, keys, route_key("p2p", chat), timeout=60)
    replies = feishu.replies_to(message_id(msg))
    assert [m["msg_type"] for m in replies] == ["interactive", "interactive"], replies
    cards = [json.loads(m["body"]["content"]) for m in replies]
    assert [[count_tables(e["content"]) for e in c["body"]["elements"]] for c in cards] == [[4, 1], [2]]
    assert feishu.render_defects() == []
    shown = "\n".join(e["content"] for c in cards for e in c["body"]["elements"])
    assert all(shown.count(f"| 甲{i} |") == 1 for i in range(7)) and "\n```bash\n" in shown
