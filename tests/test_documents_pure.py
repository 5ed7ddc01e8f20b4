"""documents.links and documents.render on documented payloads, plus properties on arbitrary input.

Payloads copied from the Feishu Open Platform docs (URLs beside each); the rest follow the documented block
schema (https://open.feishu.cn/document/ukTMukTMukTM/uUDN04SN0QjL1QDN/document-docx/docx-v1/data-structure/block)
field for field, as the lark-oapi models (lark_oapi/api/docx/v1/model) name them.
"""

from __future__ import annotations

import json
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from documents.links import DocRef, find_refs, link_of
from documents.render import BLOCK_TYPES, Heading, Rendered, docx_markdown, outline_text, sheet_table

# https://open.feishu.cn/document/faq/trouble-shooting/how-to-get-docs-tokens (Method 1: the browser address bar)
DOCUMENTED_LINKS = [
    ("https://sample.feishu.cn/file/ndqUw1kpjnGNNaegyqDyoQDCLx1", "file", "ndqUw1kpjnGNNaegyqDyoQDCLx1"),
    ("https://sample.feishu.cn/docs/2olt0Ts4Mds7j7iqzdwrqEUnO7q", "doc", "2olt0Ts4Mds7j7iqzdwrqEUnO7q"),
    ("https://sample.feishu.cn/docx/UXEAd6cRUoj5pexJZr0cdwaFnpd", "docx", "UXEAd6cRUoj5pexJZr0cdwaFnpd"),
    ("https://sample.feishu.cn/sheets/MRLOWBf6J47ZUjmwYRsN8utLEoY", "sheet", "MRLOWBf6J47ZUjmwYRsN8utLEoY"),
    ("https://sample.feishu.cn/base/Pc9OpwAV4nLdU7lTy71t6Kmmkoz", "bitable", "Pc9OpwAV4nLdU7lTy71t6Kmmkoz"),
    ("https://sample.feishu.cn/wiki/sZdeQp3m4nFGzwqR5vx4vZksMoe", "wiki", "sZdeQp3m4nFGzwqR5vx4vZksMoe"),
    # https://open.feishu.cn/document/ukTMukTMukTM/uUDN04SN0QjL1QDN/docs-doc-overview (legacy docToken)
    ("https://xxx.feishu.cn/docs/doccnmPiiJWfj1uk8bV7N5SzXaa", "doc", "doccnmPiiJWfj1uk8bV7N5SzXaa"),
]
DOCX = "UXEAd6cRUoj5pexJZr0cdwaFnpd"
SHEET = "MRLOWBf6J47ZUjmwYRsN8utLEoY"
WIKI = "sZdeQp3m4nFGzwqR5vx4vZksMoe"
LEGACY_DOCX = "doxcnePuYufKa49ISjhD8Ih0ikh"  # the example document_id of the docx API pages
SANDBOX = "http://127.0.0.1:8123"


@pytest.mark.parametrize("link, kind, token", DOCUMENTED_LINKS)
def test_documented_links(link: str, kind: str, token: str) -> None:
    assert find_refs(f"请看 {link} 谢谢") == [DocRef(kind, token, None, link)]


def test_the_folder_and_wiki_settings_links_are_no_documents() -> None:
    # same page: a folder token and a wiki space's settings page
    text = ("https://sample.feishu.cn/drive/folder/cSJe2JgtFFBwRuTKAJK6baNGUn0 "
            "https://sample.feishu.cn/wiki/settings/7075377271827264924")
    assert find_refs(text) == []


@pytest.mark.parametrize("text, expected", [
    (f"https://a.feishu.cn/docx/{DOCX}?from=from_copylink", DocRef("docx", DOCX)),
    (f"https://a.feishu.cn/docx/{DOCX}#share-AbCdEf", DocRef("docx", DOCX)),
    (f"https://a.feishu.cn/docx/{DOCX}/", DocRef("docx", DOCX)),
    (f"（https://a.feishu.cn/docx/{DOCX}），", DocRef("docx", DOCX)),
    (f"**https://a.larksuite.com/wiki/{WIKI}**", DocRef("wiki", WIKI)),
    (f"a.larkoffice.com/wiki/{WIKI}.", DocRef("wiki", WIKI)),
    (f"https://feishu.cn/mindnotes/{DOCX}", DocRef("mindnote", DOCX)),
    (f"https://a.feishu.cn/slides/{DOCX}", DocRef("slides", DOCX)),
    (f"https://a.feishu.cn/sheets/{SHEET}?sheet=Q7PlXT", DocRef("sheet", SHEET, "Q7PlXT")),
    (f"https://a.feishu.cn/sheets/{SHEET}?sheet=Q7PlXT&range=A1:C10", DocRef("sheet", SHEET, "Q7PlXT!A1:C10")),
    (f"https://a.feishu.cn/sheets/{SHEET}?sheet=Q7PlXT&amp;range=QTE6QzEw", DocRef("sheet", SHEET, "Q7PlXT!A1:C10")),
    (f"https://a.feishu.cn/sheets/{SHEET}#Q7PlXT", DocRef("sheet", SHEET, "Q7PlXT")),
    (f"https://a.feishu.cn/sheets/{SHEET}?from=x#share-token", DocRef("sheet", SHEET)),
    (f"[周报](https://a.feishu.cn/docx/{DOCX})", DocRef("docx", DOCX)),
    (f"见{LEGACY_DOCX}。", DocRef("docx", LEGACY_DOCX)),
    ("wikcnePuYufKa49ISjhD8Ih0ikh shtcngNygNfuqhxTBf588jwgWbJ", DocRef("wiki", "wikcnePuYufKa49ISjhD8Ih0ikh")),
    (f"{SANDBOX}/docx/{DOCX}", DocRef("docx", DOCX)),
])
def test_first_reference(text: str, expected: DocRef) -> None:
    found = find_refs(text, [SANDBOX])
    assert found, text
    assert replace(found[0], url="") == expected
    assert found[0].url in text


@pytest.mark.parametrize("text", [
    f"https://github.com/team/docx/{DOCX}",  # a docx path on another host
    f"https://example.com/{LEGACY_DOCX}",  # a bare token inside another host's URL
    f"gitlab.com/x/{LEGACY_DOCX}",
    f"https://example.com/search?q=a+{LEGACY_DOCX}",
    f"https://example.com/a,{LEGACY_DOCX}",
    f"[{LEGACY_DOCX}](https://evil.example/page)",  # a markdown link counts by its target only
    f"docx/{LEGACY_DOCX}",
    f"[https://a.feishu.cn/docx/{DOCX}](https://evil.example/docx/{DOCX})",  # link text is not the target
    f"https://a.feishu.cn.evil.example/docx/{DOCX}",
    f"https://evilfeishu.cn/docx/{DOCX}",
    f"https://a.feishu.cn@evil.example/docx/{DOCX}",
    f"https://open.feishu.cn/document/docx-v1/docx/{DOCX}",  # documentation pages, not a document
    f"https://a.feishu.cn/docx/{DOCX}x-y",  # not a token
    f"x{LEGACY_DOCX}",  # inside a longer word
    f"{LEGACY_DOCX}9",
    f"{LEGACY_DOCX}_v2",
    "doxcnShort",
    f"http://127.0.0.1:8124/docx/{DOCX}",  # another port than the sandbox's
    f"https://127.0.0.1:8123/docx/{DOCX}",  # another scheme
    f"127.0.0.1:8123/docx/{DOCX}",  # an origin is matched with its scheme
])
def test_lookalikes_are_no_references(text: str) -> None:
    assert find_refs(text, [SANDBOX]) == []


def test_order_of_first_appearance_once_each() -> None:
    text = (f"{LEGACY_DOCX} then https://a.feishu.cn/sheets/{SHEET}?sheet=abc123 and "
            f"https://b.feishu.cn/docx/{LEGACY_DOCX} again, https://a.feishu.cn/sheets/{SHEET}?sheet=abc123 "
            f"and the whole sheet https://a.feishu.cn/sheets/{SHEET}")
    assert [(r.kind, r.token, r.range) for r in find_refs(text)] == [
        ("docx", LEGACY_DOCX, None), ("sheet", SHEET, "abc123"), ("sheet", SHEET, None)]
    assert find_refs(text)[0].url == LEGACY_DOCX


@pytest.mark.parametrize("ref", [DocRef("docx", DOCX), DocRef("sheet", SHEET, "Q7PlXT!A1:C10"), DocRef("doc", DOCX),
                                 DocRef("sheet", SHEET, "Q7PlXT"), DocRef("bitable", DOCX)])
@pytest.mark.parametrize("origin", ["https://sample.feishu.cn", "https://sample.larksuite.com/", SANDBOX])
def test_link_of_reads_back(origin: str, ref: DocRef) -> None:
    link = link_of(origin, ref)
    assert link.startswith(origin.rstrip("/") + "/")
    assert find_refs(link, [SANDBOX]) == [replace(ref, url=link)]


def test_link_of_known_paths() -> None:
    assert link_of("https://x.feishu.cn", DocRef("docx", DOCX)) == f"https://x.feishu.cn/docx/{DOCX}"
    assert link_of("https://x.feishu.cn", DocRef("doc", DOCX)) == f"https://x.feishu.cn/docs/{DOCX}"
    assert link_of("https://x.feishu.cn", DocRef("sheet", SHEET, "Q7PlXT")) == \
        f"https://x.feishu.cn/sheets/{SHEET}?sheet=Q7PlXT"
    with pytest.raises(ValueError):
        link_of("https://x.feishu.cn", DocRef("folder", DOCX))


# --- docx → Markdown -------------------------------------------------------------------------------------------

# The response example of "Get all blocks of a group announcement", same block schema as a document's
# (https://open.feishu.cn/document/group/upgraded-group-announcement/chat-announcement/list), verbatim.
ANNOUNCEMENT = json.loads("""{"code": 0, "data": {"has_more": false, "items": [
 {"block_id": "oc_5ad11d72b830411d72b836c20", "block_type": 1,
  "children": ["EJ8pdBT6RoA2BtxKXfuc1TD0n8f", "WoF4dolv0ohvegxctR9c1t0sn4b", "UPD7dhkrLo8ZCfxoAYLcuEbDnzd"],
  "page": {"elements": [{"text_run": {"content": "", "text_element_style": {"bold": false, "inline_code": false,
   "italic": false, "strikethrough": false, "underline": false}}}], "style": {"align": 1}}, "parent_id": ""},
 {"block_id": "EJ8pdBT6RoA2BtxKXfuc1TD0n8f", "block_type": 3, "heading1": {"elements": [{"text_run": {
   "content": "新版群公告", "text_element_style": {"bold": false, "inline_code": false, "italic": false,
   "strikethrough": false, "underline": false}}}], "style": {"align": 1, "folded": false}},
  "parent_id": "oc_5ad11d72b830411d72b836c20"},
 {"block_id": "WoF4dolv0ohvegxctR9c1t0sn4b", "block_type": 2, "parent_id": "oc_5ad11d72b830411d72b836c20",
  "text": {"elements": [
   {"text_run": {"content": "当你需要向群内所有成员传达", "text_element_style": {"bold": false, "inline_code": false,
    "italic": false, "strikethrough": false, "underline": false}}},
   {"text_run": {"content": "重要信息", "text_element_style": {"bold": true, "inline_code": false, "italic": false,
    "strikethrough": false, "underline": false}}},
   {"text_run": {"content": "时，可以使用群公告功能。后续入群的成员也可看到当前群公告。", "text_element_style": {
    "bold": false, "inline_code": false, "italic": false, "strikethrough": false, "underline": false}}}],
   "style": {"align": 1, "folded": false}}},
 {"block_id": "UPD7dhkrLo8ZCfxoAYLcuEbDnzd", "block_type": 2, "parent_id": "oc_5ad11d72b830411d72b836c20",
  "text": {"elements": [
   {"text_run": {"content": "群公告编辑", "text_element_style": {"bold": false, "inline_code": false,
    "italic": false, "strikethrough": false, "underline": false}}},
   {"text_run": {"content": "支持实时保存及多人协作", "text_element_style": {"background_color": 4, "bold": false,
    "inline_code": false, "italic": false, "strikethrough": false, "underline": false}}},
   {"text_run": {"content": "，群成员", "text_element_style": {"bold": false, "inline_code": false, "italic": false,
    "strikethrough": false, "underline": false}}},
   {"text_run": {"content": "可实时查看最新群公告内容。", "text_element_style": {"background_color": 4,
    "bold": false, "inline_code": false, "italic": false, "strikethrough": false, "underline": false}}}],
   "style": {"align": 1, "folded": false}}}]}, "msg": "success"}""")


def test_documented_announcement() -> None:
    rendered = docx_markdown(ANNOUNCEMENT["data"]["items"])
    assert rendered.text == (
        "# 新版群公告\n\n"
        "当你需要向群内所有成员传达**重要信息**时，可以使用群公告功能。后续入群的成员也可看到当前群公告。\n\n"
        "群公告编辑支持实时保存及多人协作，群成员可实时查看最新群公告内容。")
    assert rendered.outline == (Heading(1, "新版群公告", 0),)


def run(content: str, **style: Any) -> dict:
    return {"text_run": {"content": content, "text_element_style": style}}


def block(block_id: str, block_type: int, children: list[str] | None = None, parent: str = "doc", **body: Any) -> dict:
    key = BLOCK_TYPES[block_type]
    return {"block_id": block_id, "block_type": block_type, "parent_id": parent, "children": children or [],
            key: body.get("body", {"elements": body.get("elements", []), "style": body.get("style", {})})}


def cells(table: str, rows: list[list[str]]) -> list[dict]:
    out = []
    for r, row in enumerate(rows):
        for c, text in enumerate(row):
            out += [block(f"{table}{r}{c}", 32, [f"{table}{r}{c}t"], table, body={}),
                    block(f"{table}{r}{c}t", 2, parent=f"{table}{r}{c}", elements=[run(text)])]
    return out


# Listed out of document order on purpose: the order comes from `children`, not from the list.
DOCUMENT = [
    block("code", 14, elements=[run("def hello():\n    return 'hi'\n")], style={"language": 49, "wrap": False}),
    block("doc", 1, ["h1", "intro", "b1", "o1", "o2", "todo", "h2", "code", "table", "quote", "divider", "callout",
                     "h7", "img", "sheet", "eq"], parent="", elements=[run("Doc title")]),
    block("h1", 3, elements=[run("Overview "), run("v2", italic=True)]),
    block("intro", 2, elements=[
        run("Read "), run("the spec", bold=True, link={"url": "https%3A%2F%2Fexample.com%2Fspec%3Fa%3D1%26b%3D2"}),
        run(", ask "), {"mention_user": {"user_id": "ou_3b1c"}}, run(" or see "),
        {"mention_doc": {"token": DOCX, "obj_type": 22, "url": f"https%3A%2F%2Fx.feishu.cn%2Fdocx%2F{DOCX}",
                         "title": "Design"}},
        run("; "), run("old", strikethrough=True), run(" "), run("x = 1", inline_code=True), run(" "),
        {"equation": {"content": "E=mc^2\n"}}]),
    block("b1", 12, ["b2"], elements=[run("parent item")]),
    block("b2", 12, ["b3"], parent="b1", elements=[run("child item")]),
    block("b3", 13, parent="b2", elements=[run("grandchild")]),
    block("o1", 13, elements=[run("third")], style={"sequence": "3"}),
    block("o2", 13, elements=[run("fourth")], style={"sequence": "auto"}),
    block("todo", 17, elements=[run("ship it")], style={"done": True}),
    block("h2", 4, elements=[run("Details")]),
    {"block_id": "table", "block_type": 31, "parent_id": "doc", "children": ["t00", "t01", "t10", "t11"],
     "table": {"cells": ["t00", "t01", "t10", "t11"],
               "property": {"row_size": 2, "column_size": 2, "merge_info": [{"row_span": 1, "col_span": 1}] * 4}}},
    *cells("t", [["Name", "Owner"], ["a|b", "Li"]]),
    block("quote", 15, elements=[run("quoted words")]),
    block("divider", 22, body={}),
    {"block_id": "callout", "block_type": 19, "parent_id": "doc", "children": ["inside"],
     "callout": {"background_color": 5, "emoji_id": "bulb"}},
    block("inside", 2, parent="callout", elements=[run("Heads up")]),
    block("h7", 9, elements=[run("Deep heading")]),
    block("img", 27, body={"token": "boxcnImageToken", "width": 100, "height": 50}),
    block("sheet", 30, body={"token": "shtcnEmbedded_abc123"}),
    block("eq", 2, elements=[{"equation": {"content": "a^2+b^2"}}]),
    block("lost", 2, parent="nowhere", elements=[run("# an orphan paragraph")]),
]


@pytest.fixture(scope="module")
def rendered() -> Any:
    return docx_markdown(DOCUMENT)


@pytest.mark.parametrize("expected", [
    "# Overview v2\n",  # headings are plain text, so the outline matches the line
    "Read [**the spec**](https://example.com/spec?a=1&b=2), ask @ou_3b1c or see "
    f"[Design](https://x.feishu.cn/docx/{DOCX}); ~~old~~ `x = 1` $E=mc^2$",
    "- parent item\n  - child item\n    1. grandchild",
    "3. third\n4. fourth",
    "- [x] ship it",
    "```python\ndef hello():\n    return 'hi'\n```",
    "| Name | Owner |\n| --- | --- |\n| a\\|b | Li |",
    "> quoted words",
    "\n---\n",
    "> Heads up",
    "###### Deep heading",
    "[image]",
    "[embedded sheet shtcnEmbedded_abc123]",
    "$a^2+b^2$",
])
def test_document_parts(rendered: Any, expected: str) -> None:
    assert expected in rendered.text


def test_document_order_and_orphans(rendered: Any) -> None:
    text = rendered.text
    order = ["# Overview", "Read ", "- parent item", "3. third", "## Details", "```python", "| Name", "> quoted",
             "> Heads up", "###### Deep", "[image]", "[embedded sheet"]
    assert [text.index(part) for part in order] == sorted(text.index(part) for part in order)
    assert text.endswith("\\# an orphan paragraph")  # last, and not read as a heading
    assert "Doc title" not in text  # the page block's text is the title, which the caller has
    assert [(h.level, h.text) for h in rendered.outline] == [(1, "Overview v2"), (2, "Details"), (7, "Deep heading")]
    for heading in rendered.outline:
        assert text[heading.offset:].startswith("#" * min(heading.level, 6) + " ")


@pytest.mark.parametrize("language, fence", [(1, "```\n"), (7, "```bash\n"), (63, "```typescript\n"),
                                             (75, "```toml\n"), (999, "```\n"), ("49", "```\n")])
def test_code_languages(language: Any, fence: str) -> None:
    blocks = [block("d", 1, ["c"], parent=""), block("c", 14, parent="d", elements=[run("x")],
                                                      style={"language": language})]
    assert docx_markdown(blocks).text.startswith(fence)


def test_code_with_backticks_gets_a_longer_fence() -> None:
    blocks = [block("d", 1, ["c"], parent=""), block("c", 14, parent="d", elements=[run("a ``` b")])]
    assert docx_markdown(blocks).text == "````\na ``` b\n````"


def test_malformed_blocks_are_skipped() -> None:
    blocks: list[Any] = [
        None, "text", 3, {"block_type": "x"}, {"block_id": 5, "text": {"elements": "nope"}},
        {"block_id": "doc", "block_type": 1, "children": ["a", "a", "b", 7, None, "missing", "doc"]},
        {"block_id": "a", "block_type": 2, "children": ["doc", "a"], "text": {"elements": [run("kept")]}},
        {"block_id": "b", "block_type": 31, "table": {"cells": "abc", "property": {"column_size": 10**9}}},
        {"block_id": "c", "block_type": 13, "ordered": {"style": {"sequence": "9" * 5000}, "elements": [None, 5]}},
        {"block_id": "d", "block_type": 2, "text": {"elements": [{"reminder": {"expire_time": "soon"}},
                                                                 {"text_run": {"content": None}}, {"unknown": {}}]}},
        {"block_id": "e", "block_type": 2, "text": {"elements": [{"reminder": {"expire_time": 10**30}}]}},
        {"block_id": "f", "heading2": {"elements": [run("typeless heading")]}},
    ]
    rendered = docx_markdown(blocks)
    assert "kept" in rendered.text and "## typeless heading" in rendered.text and "[reminder]" in rendered.text
    malformed: list[Any] = [[], None, "junk", [None], [{}]]
    assert all(docx_markdown(payload) == Rendered("", ()) for payload in malformed)


def test_deep_nesting_is_rendered_not_lost() -> None:
    chain = [block("d", 1, ["n0"], parent="")]
    chain += [block(f"n{i}", 12, [f"n{i + 1}"], parent=f"n{i - 1}" if i else "d", elements=[run(f"level {i}")])
              for i in range(120)]
    text = docx_markdown(chain).text
    assert all(f"level {i}" in text for i in range(120))


def test_outline_text_fits_and_drops_deep_levels_first() -> None:
    outline = [Heading(1, "Intro", 0), Heading(2, "Background", 10), Heading(3, "Detail one", 20),
               Heading(3, "Detail two", 30), Heading(2, "Plan", 40), Heading(1, "Appendix", 50)]
    full = outline_text(outline, 1000)
    assert full.splitlines() == ["- Intro", "  - Background", "    - Detail one", "    - Detail two", "  - Plan",
                                 "- Appendix"]
    assert outline_text(outline, 62) == "- Intro\n  - Background\n  - Plan\n- Appendix\n(… 2 more headings)"
    assert outline_text(outline, 61) == "- Intro\n- Appendix\n(… 4 more headings)"
    assert outline_text(outline, 30) == "- Intro\n(… 5 more headings)"
    assert outline_text(outline, 20) == "(… 6 more headings)"
    assert outline_text(outline, 5) == "" and outline_text([], 100) == ""


# --- sheet values → Markdown -----------------------------------------------------------------------------------

# "Read a single range", response example:
# https://open.feishu.cn/document/server-docs/docs/sheets-v3/data-operation/reading-a-single-range
READ_RANGE = json.loads("""{"code": 0, "data": {"revision": 7, "spreadsheetToken": "XUMasQlMYhOnMbt5htXc96h0nOg",
  "valueRange": {"majorDimension": "ROWS", "range": "Q7PlXT!A1:B2", "revision": 7,
                 "values": [["单元格A1", "单元格B1"], ["单元格A2", "单元格B2"]]}}, "msg": "success"}""")


def test_documented_range() -> None:
    assert sheet_table(READ_RANGE["data"]["valueRange"]["values"]) == \
        "| 单元格A1 | 单元格B1 |\n| --- | --- |\n| 单元格A2 | 单元格B2 |"


def test_cell_shapes() -> None:
    # Cell objects as "Supported data types for writing" documents them
    # (https://open.feishu.cn/document/server-docs/docs/sheets-v3/data-types-supported-by-sheets), and segment lists.
    values: list[list[Any]] = [
        ["Kind", "Value", None],
        ["link", {"text": "文本", "link": "http://www.dd.com", "type": "url"}, None],
        ["mention", {"type": "mention", "text": "aaa@aa.com", "textType": "email", "notify": True}, ""],
        ["formula", {"type": "formula", "text": "=A1"}],
        ["dropdown", {"type": "multipleValue", "values": [1, "test"]}],
        ["rich", [{"type": "text", "text": "a|b\nc "}, {"type": "url", "text": "site", "link": "https://e.com"}]],
        ["scalars", 3.0, 2.5, True, None],
        [None, None],
        [],
    ]
    assert sheet_table(values).splitlines() == [
        "| Kind | Value |  |  |",
        "| --- | --- | --- | --- |",
        "| link | [文本](http://www.dd.com) |  |  |",
        "| mention | aaa@aa.com |  |  |",
        "| formula | =A1 |  |  |",
        "| dropdown | 1, test |  |  |",
        "| rich | a\\|b<br>c [site](https://e.com) |  |  |",
        "| scalars | 3 | 2.5 | TRUE |",
    ]


def test_bounds_and_the_closing_line() -> None:
    values = [[f"r{r}c{c}" for c in range(30)] for r in range(250)]
    text = sheet_table(values, max_rows=2, max_cols=2, max_cell_chars=4)  # the header, then two rows
    assert text.splitlines() == ["| r0c0 | r0c1 |", "| --- | --- |", "| r1c0 | r1c1 |", "| r2c0 | r2c1 |",
                                 "(… 247 more rows / 28 more columns not shown)"]
    default = sheet_table(values).splitlines()
    assert len(default) == 203 and default[-2].startswith("| r200c0 | r200c1 |") and default[-2].endswith("| r200c25 |")
    assert default[-1] == "(… 49 more rows / 4 more columns not shown)"
    assert sheet_table(values, max_cols=0) == "(… 250 more rows / 30 more columns not shown)"
    assert sheet_table([["x" * 10]], max_cell_chars=4) == "| xxx… |\n| --- |"
    assert sheet_table([[None, ""], []]) == sheet_table([]) == sheet_table(None) == ""  # type: ignore[arg-type]


# --- properties -------------------------------------------------------------------------------------------------

FRAGMENTS = ["https://", "http://", "sample.feishu.cn", "a.larksuite.com", "x.larkoffice.com", "evil.com", "/docx/",
             "/wiki/", "/sheets/", "/docs/", "/base/", "/file/", "?sheet=", "&range=", "&amp;", "#", "?", "/", "[",
             "](", ")", " ", "。", "\n", "doxcn", "shtcn", DOCX, SHEET, LEGACY_DOCX, "Q7PlXT", "QTE6QzEw", "A1:C10",
             "127.0.0.1", ":8123", ":80", "@", "x"]
refs_texts = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=8)), max_size=16).map("".join)
origins = st.lists(st.one_of(st.just(SANDBOX), st.just("https://docs.example.com/feishu"), st.text(max_size=12)),
                   max_size=3)


@settings(max_examples=300, deadline=None)
@given(refs_texts, origins)
def test_find_refs_takes_tokens_from_the_text(text: str, allowed: list[str]) -> None:
    found = find_refs(text, allowed)
    assert len({(r.kind, r.token, r.range) for r in found}) == len(found)
    for ref in found:
        assert ref.token in text and ref.url in text and ref.token in ref.url
        assert ref.kind in {"docx", "wiki", "sheet", "file", "doc", "mindnote", "slides", "bitable"}
        assert ref.range is None or ref.kind == "sheet"


tokens = st.text(alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", min_size=16, max_size=40)
sheet_ranges = st.one_of(st.none(), st.sampled_from(["Q7PlXT", "0b6377!A1:B2", "abc!C3", "z9!AA10:AB20"]))


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(["docx", "wiki", "sheet", "file", "doc", "mindnote", "slides", "bitable"]), tokens, sheet_ranges,
       st.sampled_from(["https://t.feishu.cn", "https://t.larksuite.com", SANDBOX]))
def test_link_of_round_trips(kind: str, token: str, cell_range: str | None, origin: str) -> None:
    ref = DocRef(kind, token, cell_range if kind == "sheet" else None)
    link = link_of(origin, ref)
    assert find_refs(f"see {link}, thanks", [SANDBOX]) == [replace(ref, url=link)]


junk = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=6), st.lists(st.integers(), max_size=2),
                 st.dictionaries(st.text(max_size=4), st.integers(), max_size=2))
IDS = [f"b{i}" for i in range(10)]
styles = st.fixed_dictionaries({}, optional={
    "bold": st.booleans(), "italic": st.booleans(), "strikethrough": st.booleans(), "inline_code": st.booleans(),
    "link": st.one_of(st.fixed_dictionaries({"url": st.text(max_size=12)}), junk)})
markdown_text = st.one_of(st.text(max_size=12), st.sampled_from(["# x", "\n", "`", "**", "|", "> q", "```", "- ", " "]))
elements = st.one_of(
    st.builds(lambda content, style: {"text_run": {"content": content, "text_element_style": style}}, markdown_text,
              styles),
    st.builds(lambda user: {"mention_user": {"user_id": user}}, st.one_of(st.text(max_size=6), junk)),
    st.builds(lambda title, url: {"mention_doc": {"title": title, "url": url}}, markdown_text, st.text(max_size=12)),
    st.builds(lambda content: {"equation": {"content": content}}, st.one_of(markdown_text, junk)),
    st.builds(lambda when, whole: {"reminder": {"expire_time": when, "is_whole_day": whole}}, junk, junk),
    st.sampled_from([{"file": {"file_token": "x"}}, {"inline_block": {"block_id": "b1"}}, {"undefined": {}}]),
    junk,
)
text_bodies = st.fixed_dictionaries({"elements": st.one_of(st.lists(elements, max_size=4), junk)}, optional={
    "style": st.fixed_dictionaries({}, optional={
        "language": st.one_of(st.integers(-2, 80), junk), "done": junk, "sequence": st.one_of(
            st.sampled_from(["1", "3", "auto", "x"]), junk)})})
table_bodies = st.fixed_dictionaries({"cells": st.one_of(st.lists(st.sampled_from(IDS), max_size=6), junk),
                                      "property": st.one_of(junk, st.fixed_dictionaries({
                                          "row_size": st.one_of(st.integers(-1, 4), junk),
                                          "column_size": st.one_of(st.integers(-1, 4), junk)}))})


@st.composite
def random_blocks(draw: st.DrawFn) -> list[Any]:
    blocks: list[Any] = []
    for block_id in draw(st.lists(st.one_of(st.sampled_from(IDS), junk), max_size=12)):
        block_type = draw(st.one_of(st.sampled_from([*BLOCK_TYPES, 0, 50, 1000]), junk))
        key = BLOCK_TYPES.get(block_type, "text") if isinstance(block_type, int) else draw(st.text(max_size=8))
        blocks.append({"block_id": block_id, "block_type": block_type,
                       "parent_id": draw(st.one_of(st.sampled_from(IDS), junk)),
                       "children": draw(st.one_of(st.lists(st.one_of(st.sampled_from(IDS), junk), max_size=4), junk)),
                       key: draw(st.one_of(table_bodies if key == "table" else text_bodies, junk))})
    return draw(st.lists(st.one_of(st.just(None), junk), max_size=1)) + blocks


@settings(max_examples=300, deadline=None)
@given(random_blocks())
def test_docx_markdown_never_raises_and_the_outline_points_at_headings(blocks: list[Any]) -> None:
    rendered = docx_markdown(blocks)
    for heading in rendered.outline:
        assert 1 <= heading.level <= 9
        assert heading.offset == 0 or rendered.text[heading.offset - 1] == "\n"
        line = rendered.text[heading.offset:].split("\n", 1)[0]
        assert line == "#" * min(heading.level, 6) + " " + heading.text
    assert [h.offset for h in rendered.outline] == sorted(h.offset for h in rendered.outline)


cell_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10),
              st.sampled_from(["|", "\\", "\\|", "\n", "a\r\nb", "<br>"])),
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(
        st.sampled_from(["type", "text", "link", "values", "value"]), st.one_of(inner, st.sampled_from(
            ["url", "mention", "formula", "multipleValue", "text"])), max_size=4)),
    max_leaves=8)


def table_cells(line: str) -> list[str]:
    """The cells of one Markdown table row, with backslash escapes honoured as GFM does."""
    parts: list[str] = []
    current, i = "", 0
    while i < len(line):
        if line[i] == "\\" and i + 1 < len(line):
            current, i = current + line[i:i + 2], i + 2
        elif line[i] == "|":
            parts, current, i = [*parts, current], "", i + 1
        else:
            current, i = current + line[i], i + 1
    return [part[1:-1] for part in [*parts, current][1:-1]]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.lists(cell_values, max_size=7), junk), max_size=10), st.integers(0, 5),
       st.integers(0, 5), st.integers(0, 12))
def test_sheet_table_stays_within_bounds(values: list[Any], max_rows: int, max_cols: int, max_chars: int) -> None:
    lines = sheet_table(values, max_rows=max_rows, max_cols=max_cols, max_cell_chars=max_chars).split("\n")
    if lines[-1].startswith("(… ") or lines == [""]:
        lines.pop()
    assert len(lines) <= max_rows + 2  # the header and the separator, then max_rows
    for line in lines:
        row = table_cells(line)
        assert line.startswith("| ") or line.startswith("| --- |")
        assert 1 <= len(row) <= max_cols
        assert all(len(cell) <= max_chars for cell in row) or row == ["---"] * len(row)
