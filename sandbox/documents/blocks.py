"""Document content for the emulator's docs APIs: Markdown → docx blocks, sheets' A1 ranges, paging and byte ranges.

Block shapes follow the docx v1 block data structure (lark_oapi/api/docx/v1/model/block.py, text.py,
text_style.py, text_element_style.py, table.py, table_property.py; open.feishu.cn "块的数据结构"): block_type 1
page, 2 text, 3-11 heading1-9, 12 bullet, 13 ordered, 14 code, 15 quote, 17 todo, 22 divider, 31 table,
32 table_cell, 49 source_synced, 50 reference_synced; code languages as the TextStyle.language enum (1 PlainText …
49 Python … 75 TOML).

Synced blocks (block.md SourceSynced / ReferenceSynced, docx FAQ "如何获取引用同步块的内容"): a source synced
block holds its content as children; a reference synced block pasted into another document carries only
{source_document_id, source_block_id} and no children (riba2534/feishu-cli#177 saw the same: cross-document
references list no children); its content is read with block children get `with_descendants=true` on the source.
"""

from __future__ import annotations

import base64
import json
import re
import secrets
import string
from typing import Any
from urllib.parse import quote

from sandbox.feishu.rules import FeishuError

ALPHABET = string.ascii_letters + string.digits
KINDS = {1: "page", 2: "text", 12: "bullet", 13: "ordered", 14: "code", 15: "quote", 17: "todo", 22: "divider",
         31: "table", 32: "table_cell", 49: "source_synced", 50: "reference_synced",
         **{2 + level: f"heading{level}" for level in range(1, 10)}}
LANGUAGES = {  # TextStyle.language: the names a fence is likely to carry
    "": 1, "text": 1, "plaintext": 1, "bash": 7, "sh": 60, "shell": 60, "c#": 8, "csharp": 8, "c++": 9, "cpp": 9,
    "c": 10, "css": 12, "dockerfile": 18, "go": 22, "html": 24, "http": 26, "json": 28, "java": 29,
    "javascript": 30, "js": 30, "kotlin": 32, "lua": 36, "makefile": 38, "markdown": 39, "md": 39, "nginx": 40,
    "php": 43, "python": 49, "py": 49, "ruby": 52, "rust": 53, "scss": 55, "sql": 56, "swift": 61,
    "typescript": 63, "ts": 63, "xml": 66, "yaml": 67, "yml": 67, "diff": 69, "graphql": 71, "toml": 75,
}
_INLINE = re.compile(r"\*\*(.+?)\*\*|`([^`]+)`|\[([^\]]+)\]\(([^)\s]+)\)")
_LINE = [  # (pattern, block_type or None for headings) in priority order
    (re.compile(r"^(#{1,9}) (.*)$"), None),
    (re.compile(r"^[-*] \[([ xX])\] (.*)$"), 17),
    (re.compile(r"^[-*+] (.*)$"), 12),
    (re.compile(r"^\d+[.)] (.*)$"), 13),
    (re.compile(r"^> ?(.*)$"), 15),
]


def new_token(length: int = 27) -> str:
    """A token in today's style: 27 letters and digits (docx, sheets, wiki nodes, blocks alike)."""
    return "".join(secrets.choice(ALPHABET) for _ in range(length))


def _style(**extra: Any) -> dict[str, Any]:
    return {"bold": False, "inline_code": False, "italic": False, "strikethrough": False, "underline": False,
            **extra}


def elements(text: str) -> list[dict[str, Any]]:
    """Text runs for one line: **bold**, `inline code` and [links](url) (link URLs percent-encoded, as docx)."""
    out: list[dict[str, Any]] = []
    pos = 0
    for m in _INLINE.finditer(text):
        if m.start() > pos:
            out.append(_run(text[pos:m.start()]))
        if m.group(1) is not None:
            out.append(_run(m.group(1), bold=True))
        elif m.group(2) is not None:
            out.append(_run(m.group(2), inline_code=True))
        else:
            out.append(_run(m.group(3), link={"url": quote(m.group(4), safe="")}))
        pos = m.end()
    if pos < len(text) or not out:
        out.append(_run(text[pos:]))
    return out


def _run(content: str, **style: Any) -> dict[str, Any]:
    return {"text_run": {"content": content, "text_element_style": _style(**style)}}


class _Builder:
    """Collects blocks in list order (each parent before its descendants), as the blocks API returns them."""

    def __init__(self, document_id: str, title: str) -> None:
        self.page: dict[str, Any] = {"block_id": document_id, "block_type": 1, "parent_id": "", "children": [],
                     "page": {"elements": elements(title), "style": {"align": 1}}}
        self.blocks: list[dict[str, Any]] = [self.page]

    def add(self, block_type: int, body: dict[str, Any], parent: dict[str, Any] | None = None) -> dict[str, Any]:
        parent = parent or self.page
        block = {"block_id": new_token(), "block_type": block_type, "parent_id": parent["block_id"],
                 KINDS[block_type]: body}
        parent.setdefault("children", []).append(block["block_id"])
        self.blocks.append(block)
        return block

    def text(self, block_type: int, line: str, parent: dict[str, Any] | None = None,
             style: dict[str, Any] | None = None) -> None:
        body = {"elements": elements(line), "style": {"align": 1, "folded": False, **(style or {})}}
        self.add(block_type, body, parent)

    def code(self, language: str, lines: list[str]) -> None:
        body = {"elements": [_run("\n".join(lines))],
                "style": {"language": LANGUAGES.get(language.strip().lower(), 1), "wrap": False}}
        self.add(14, body)

    def table(self, rows: list[list[str]]) -> None:
        columns = max(len(r) for r in rows)
        table = self.add(31, {"cells": [], "property": {
            "row_size": len(rows), "column_size": columns, "column_width": [100] * columns,
            "merge_info": [{"row_span": 1, "col_span": 1} for _ in range(len(rows) * columns)]}})
        table["children"] = []
        for row in rows:
            for col in range(columns):
                cell = self.add(32, {}, table)
                cell["children"] = []
                table["table"]["cells"].append(cell["block_id"])
                self.text(2, row[col] if col < len(row) else "", cell)


def markdown_blocks(document_id: str, title: str, markdown: str) -> list[dict[str, Any]]:
    """The document's blocks (page first, the page's block_id is the document_id) from simple Markdown."""
    out = _Builder(document_id, title)
    lines = markdown.replace("\r\n", "\n").split("\n")
    i = 0
    while i < len(lines):
        line = lines[i].rstrip()
        if line.lstrip().startswith("```"):
            end = next((j for j in range(i + 1, len(lines)) if lines[j].strip().startswith("```")), len(lines))
            out.code(line.strip()[3:], lines[i + 1:end])
            i = end + 1
            continue
        if line.startswith("|"):
            end = next((j for j in range(i, len(lines)) if not lines[j].startswith("|")), len(lines))
            out.table([_cells(row) for row in lines[i:end] if not _separator(row)])
            i = end
            continue
        _line(out, line)
        i += 1
    return out.blocks


def synced_source(document_id: str, markdown: str) -> list[dict[str, Any]]:
    """A source synced block (under the page `document_id`) and its content's blocks, in list order."""
    inner = markdown_blocks(document_id, "", markdown)
    source = {"block_id": new_token(), "block_type": 49, "parent_id": document_id,
              "children": list(inner[0].get("children") or []), "source_synced": {"elements": [], "align": 1}}
    for block in inner[1:]:
        if block["parent_id"] == document_id:
            block["parent_id"] = source["block_id"]
    return [source, *inner[1:]]


def synced_reference(document_id: str, source_document: str, source_block: str) -> dict[str, Any]:
    """A reference synced block (under the page `document_id`): the source's ids, no children."""
    return {"block_id": new_token(), "block_type": 50, "parent_id": document_id,
            "reference_synced": {"source_document_id": source_document, "source_block_id": source_block}}


def descendants(blocks: list[dict[str, Any]], block_id: str, deep: bool) -> list[dict[str, Any]]:
    """Block children get: the block's children, or (`deep`) the block and all its descendants in preorder."""
    by_id = {b["block_id"]: b for b in blocks}
    if block_id not in by_id:
        raise FeishuError(1770002, http_status=404)
    if not deep:
        return [by_id[c] for c in by_id[block_id].get("children") or [] if c in by_id]
    out, stack = [], [block_id]
    while stack:
        block = by_id[stack.pop()]
        out.append(block)
        stack.extend(reversed([c for c in block.get("children") or [] if c in by_id]))
    return out


def _line(out: _Builder, line: str) -> None:
    line = line.strip()  # nested lists come out flat
    if not line:
        return
    if re.fullmatch(r"\s*(-{3,}|\*{3,})\s*", line):
        out.add(22, {})
        return
    for pattern, block_type in _LINE:
        m = pattern.match(line)
        if m is None:
            continue
        if block_type is None:
            out.text(2 + len(m.group(1)), m.group(2))
        elif block_type == 17:
            out.text(17, m.group(2), style={"done": m.group(1) != " "})
        else:
            out.text(block_type, m.group(1), style={"sequence": "auto"} if block_type == 13 else None)
        return
    out.text(2, line)


def _cells(row: str) -> list[str]:
    return [c.strip() for c in row.strip().strip("|").split("|")]


def _separator(row: str) -> bool:
    return bool(re.fullmatch(r"\|?(\s*:?-+:?\s*\|)+\s*:?-*:?\s*\|?", row.strip()))


# -- sheets: A1 ranges ("<sheetId>", "<sheetId>!A1:C10", "<sheetId>!A:C", "<sheetId>!A2:C") ----------------------

_A1 = re.compile(r"^([A-Z]+)(\d*)(?::([A-Z]+)(\d*))?$")


def column_index(letters: str) -> int:
    n = 0
    for ch in letters:
        n = n * 26 + ord(ch) - 64
    return n - 1


def column_letters(index: int) -> str:
    out = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        out = chr(65 + rem) + out
    return out


def parse_range(text: str) -> tuple[str, int, int, int | None, int | None]:
    """(sheet_id, first row, first column, last row or None, last column or None), all 0-based and inclusive.

    A bad range is 1310202 Wrong Range (HTTP 400), as the sheets error tables list it.
    """
    sheet_id, _, cells = text.partition("!")
    if not sheet_id:
        raise FeishuError(1310202, f"Wrong Range: {text!r}")
    if not cells:
        return sheet_id, 0, 0, None, None
    m = _A1.match(cells.upper())
    if m is None or (m.group(2) == "" and m.group(3) is not None and m.group(4)):
        raise FeishuError(1310202, f"Wrong Range: {text!r}")
    first_col, first_row = column_index(m.group(1)), int(m.group(2) or 1) - 1
    if first_row < 0:
        raise FeishuError(1310202, f"Wrong Range: {text!r}")
    if m.group(3) is None:  # a single cell
        return sheet_id, first_row, first_col, first_row, first_col
    last_row = int(m.group(4)) - 1 if m.group(4) else None
    last_col = column_index(m.group(3))
    if last_col < first_col or (last_row is not None and last_row < first_row):
        raise FeishuError(1310202, f"Wrong Range: {text!r}")
    return sheet_id, first_row, first_col, last_row, last_col


# -- request parsing: page tokens, page sizes, byte ranges --------------------------------------------------------


def block_changes(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> int:
    """How many blocks an edit changed (ids aside): real edits bump revision_id once per changed block."""
    def shape(block: dict[str, Any]) -> str:
        body = {k: v for k, v in (block.get(KINDS[block["block_type"]]) or {}).items() if k != "cells"}
        return json.dumps([block["block_type"], body], sort_keys=True, ensure_ascii=False)

    return sum(a != b for a, b in zip(map(shape, old), map(shape, new), strict=False)) + abs(len(old) - len(new))


def page_size(raw: str | None, most: int) -> int:
    """page_size: default and maximum `most` (a documented range; out of it the gateway answers 99992402)."""
    size = query_int(raw or str(most), "page_size")
    if not 1 <= size <= most:
        raise FeishuError(99992402, f"field validation failed: page_size is 1 to {most}")
    return size


def query_int(raw: str, name: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise FeishuError(99992402, f"field validation failed: {name} must be an integer") from None


def page_token(owner: str, offset: int) -> str:
    """An opaque page_token: which document, and where the next page starts."""
    return base64.urlsafe_b64encode(json.dumps([owner, offset]).encode()).decode()


def page_offset(token: str | None, document_id: str) -> int:
    """Where a page_token points; one for another document, or garbage, is 1770022 invalid page token."""
    if not token:
        return 0
    try:
        owner, offset = json.loads(base64.urlsafe_b64decode(token.encode()))
        if owner == document_id and int(offset) >= 0:
            return int(offset)
    except (ValueError, TypeError):
        pass
    raise FeishuError(1770022)


def byte_range(header: str | None, size: int) -> tuple[int, int, int]:
    """(first, last, status) for a download's `Range: bytes=a-b` header (206), or the whole file (200)."""
    if not header or not header.startswith("bytes=") or size == 0:
        return 0, size - 1, 200
    start, _, end = header[len("bytes="):].partition("-")
    try:
        first = int(start) if start else max(size - int(end), 0)
        last = min(int(end), size - 1) if start and end else size - 1
    except ValueError:
        raise FeishuError(1061002, "params error.") from None
    if first > last:
        raise FeishuError(1061002, "params error.")
    return first, last, 206
