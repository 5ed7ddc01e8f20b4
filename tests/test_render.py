"""Pure: Markdown answers → Feishu message content (feishu/render.py)."""

from __future__ import annotations

import json
import re

import pytest

from feishu.render import (
    CARD_MIN_CHARS,
    RICH_LIMIT_BYTES,
    TEXT_LIMIT_BYTES,
    ZWSP,
    Chunk,
    choose_style,
    plain_of,
    render,
    split_markdown,
)

FENCE = re.compile(r"^(`{3,}|~{3,})([\w+#.-]*)\s*$")


def md_rows(chunk: Chunk) -> list[str]:
    assert chunk.msg_type == "post"
    body = chunk.content["zh_cn"]
    assert isinstance(body["content"], list)
    return [e["text"] for row in body["content"] for e in row if e["tag"] == "md"]


def fences_balanced(text: str) -> bool:
    """Every fence opened in `text` is closed in it (by a bare fence of the same marker)."""
    open_marker = None
    for line in text.split("\n"):
        m = FENCE.match(line.strip())
        if not m:
            continue
        if open_marker is None:
            open_marker = m.group(1)
        elif m.group(1).startswith(open_marker[0]) and not m.group(2):
            open_marker = None
    return open_marker is None


def long_answer_with_code(n_lines: int = 400) -> str:
    code = "\n".join(f"    value_{i} = compute({i})  # 第 {i} 步" for i in range(n_lines))
    prose = "\n\n".join(f"第 {i} 段说明：" + "这一段解释上面的代码为什么这样写。" * 6 for i in range(12))
    return f"# 长回答\n\n{prose}\n\n```python\ndef run():\n{code}\n```\n\n## 小结\n\n- 第一点\n- 第二点\n"


@pytest.mark.parametrize("answer", [
    "好的，已经帮你看过了，没问题。",
    "第一行\n- 只有一行像列表\n结尾",
    "价格是 3*4 元，a_b_c 不是斜体",
])
def test_plain_text_stays_text(answer: str) -> None:
    chunks = render(answer)
    assert [c.msg_type for c in chunks] == ["text"]
    assert chunks[0].content == {"text": answer}


def test_heading_list_code_link_become_post_md() -> None:
    answer = ("## 排查步骤\n\n**先看日志**，再看 [文档](https://open.feishu.cn/document)。\n\n"
              "- 重启服务\n- 清缓存\n\n```bash\ntail -f app.log\n```\n之后再试。")
    chunks = render(answer)
    assert [c.msg_type for c in chunks] == ["post"]
    rows = md_rows(chunks[0])
    joined = "\n".join(rows)
    assert "## 排查步骤" in joined and "**先看日志**" in joined and "[文档](https://open.feishu.cn/document)" in joined
    assert "- 重启服务\n- 清缓存" in joined
    assert "```bash\ntail -f app.log\n```" in rows  # the code block is a row of its own
    assert rows[-1].strip() == "之后再试。"  # prose after a fence starts a new md row


def test_table_or_long_answer_is_a_card() -> None:
    table = "| 项 | 值 |\n|---|---|\n| a | 1 |\n| b | 2 |"
    assert choose_style(table) == "interactive"
    card = render(table)[0]
    assert card.msg_type == "interactive"
    assert card.content["schema"] == "2.0"
    assert card.content["body"]["elements"] == [{"tag": "markdown", "content": table}]
    long_md = "# 标题\n\n" + "很长的说明。" * (CARD_MIN_CHARS // 6 + 10)
    assert choose_style(long_md) == "interactive"
    assert choose_style("# 标题\n\n短说明") == "post"


def test_12000_char_answer_with_code_chunks_in_order_without_splitting_code() -> None:
    answer = long_answer_with_code()
    assert len(answer) >= 12000
    chunks = render(answer, chunk_chars=3500)
    assert len(chunks) >= 4
    texts = [plain_of(c.msg_type, c.content) for c in chunks]
    for chunk, text in zip(chunks, texts, strict=True):
        limit = TEXT_LIMIT_BYTES if chunk.msg_type == "text" else RICH_LIMIT_BYTES
        assert chunk.body_bytes() <= limit
        assert fences_balanced(text), text[:200]
        assert len(text) <= 3500
    # In order and complete: dropping the fences added at the cuts gives back every source line.
    source_lines = [ln for ln in answer.split("\n") if ln.strip()]
    got_lines = [ln for t in texts for ln in t.split("\n") if ln.strip()]
    cut_fences = {"```", "```python"}
    assert [ln for ln in got_lines if ln not in cut_fences] == [ln for ln in source_lines if ln not in cut_fences]
    # The code block was cut: each later part reopens it with its language.
    assert sum(t.lstrip().startswith("```python") for t in texts) >= 2


def test_one_code_line_longer_than_a_chunk_is_cut_inside_fences() -> None:
    answer = "看这个：\n\n```json\n" + '{"k": "' + "x" * 9000 + '"}\n```\n'
    parts = split_markdown(answer, 3500)
    assert len(parts) >= 3
    assert all(len(p) <= 3500 and fences_balanced(p) for p in parts)
    assert "".join(ln for p in parts for ln in p.split("\n") if not ln.startswith("```")).count("x") == 9000


def test_escaping_heavy_chunk_is_split_under_the_byte_limit() -> None:
    # Quotes and backslashes double when content (a JSON string) is put inside the JSON body.
    answer = "## 引号\n\n" + "\n".join('"\\"\\"\\"' * 200 for _ in range(40))
    chunks = render(answer, chunk_chars=30000)
    assert len(chunks) > 1
    assert all(c.body_bytes() <= RICH_LIMIT_BYTES for c in chunks)


def test_mentions_only_for_people_in_the_conversation() -> None:
    people = {"ou_alice": "Alice", "ou_bob": ""}
    answer = ("**结论**：@ou_alice 负责前端，@ou_bob 负责后端，@ou_stranger 不在群里。\n\n"
              '<at user_id="ou_alice">Alice</at> 和 <at user_id="ou_eve">Eve</at>')
    rows = "\n".join(md_rows(render(answer, people)[0]))
    assert rows.count('<at user_id="ou_alice">Alice</at>') == 2
    assert '<at user_id="ou_bob"></at>' in rows
    assert "@ou_stranger" in rows and 'user_id="ou_stranger"' not in rows
    assert "ou_eve" not in rows and "@Eve" in rows  # a stranger's written tag becomes plain text
    text = render("请 @ou_alice 看一下", people)[0]
    assert text.content == {"text": '请 <at user_id="ou_alice">Alice</at> 看一下'}
    card = render("| 谁 | 做什么 |\n|---|---|\n| @ou_alice | 前端 |", people)[0]
    assert "<at id=ou_alice></at>" in card.content["body"]["elements"][0]["content"]


@pytest.mark.parametrize("answer", [
    'hi <at user_id="all"></at> 大家好',
    "## 标题\n\n<at user_id=\"all\">所有人</at> 和 <font color='red'>红字</font>",
    "| a | b |\n|---|---|\n| <at id=all></at> | <text_tag color='red'>x</text_tag> |",
])
def test_text_imitating_feishu_markup_stays_text(answer: str) -> None:
    chunk = render(answer, {"ou_alice": "Alice"})[0]
    shown = plain_of(chunk.msg_type, chunk.content)
    assert not re.search(r"<(at|font|text_tag)\b", shown)  # nothing Feishu would parse as a tag
    assert shown.replace(ZWSP, "") == answer  # and the reader still sees exactly what was written


def test_render_is_deterministic() -> None:
    answer = long_answer_with_code(100)
    first = [json.dumps(c.content, ensure_ascii=False) for c in render(answer)]
    assert first == [json.dumps(c.content, ensure_ascii=False) for c in render(answer)]


def test_tildes_in_post_prose_cannot_pair_into_an_underline() -> None:
    """Issue 14 B6: `md` rows read `~text~` as underline. Words with a tilde on such a line become inline code
    (their text kept exactly); fenced code, `~~strikethrough~~` and a lone tilde stay as they are."""
    answer = "## 备份\n先 **确认** 再执行 cp ~/.bashrc ~/backup 即可\n约 ~5 分钟\n\n```bash\ncp ~/a ~/b\n```"
    [chunk] = render(answer)
    assert chunk.msg_type == "post"
    rows = [el.get("text", "") for para in next(iter(chunk.content.values()))["content"] for el in para]
    shown = "\n".join(rows)
    assert "`~/.bashrc` `~/backup`" in shown and "约 ~5 分钟" in shown and "cp ~/a ~/b" in shown
