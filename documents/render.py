"""Turn Open API payloads (docx blocks, sheet values) into compact Markdown that keeps the structure.

Block shapes: "Block data structure" (https://open.feishu.cn/document/ukTMukTMukTM/uUDN04SN0QjL1QDN/document-docx/
docx-v1/data-structure/block) and the lark-oapi models (lark_oapi/api/docx/v1/model). Sheet cells: "Read a single
range" (https://open.feishu.cn/document/server-docs/docs/sheets-v3/data-operation/reading-a-single-range) and the
writable cell types (https://open.feishu.cn/document/server-docs/docs/sheets-v3/data-types-supported-by-sheets).
Nothing here raises on a malformed payload: what cannot be read is left out and the rest still renders.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import unquote


@dataclass(frozen=True)
class Heading:
    level: int  # 1-9 as in the document (Markdown shows 7-9 as ######)
    text: str
    offset: int  # char index in Rendered.text where the heading line starts


@dataclass(frozen=True)
class Rendered:
    text: str
    outline: tuple[Heading, ...]


BLOCK_TYPES = {
    1: "page", 2: "text", **{2 + n: f"heading{n}" for n in range(1, 10)}, 12: "bullet", 13: "ordered", 14: "code",
    15: "quote", 16: "equation", 17: "todo", 18: "bitable", 19: "callout", 20: "chat_card", 21: "diagram",
    22: "divider", 23: "file", 24: "grid", 25: "grid_column", 26: "iframe", 27: "image", 28: "isv", 29: "mindnote",
    30: "sheet", 31: "table", 32: "table_cell", 33: "view", 34: "quote_container", 35: "task", 36: "okr",
    37: "okr_objective", 38: "okr_key_result", 39: "okr_progress", 40: "add_ons", 41: "jira_issue",
    42: "wiki_catalog", 43: "board", 44: "agenda", 45: "agenda_item", 46: "agenda_item_title",
    47: "agenda_item_content", 48: "link_preview", 49: "source_synced", 50: "reference_synced", 51: "sub_page_list",
    52: "ai_template", 999: "undefined",
}
NOT_SYNCED = "[synced block from another document: not shown]"
_BODY_KEYS = frozenset(BLOCK_TYPES.values())
# CodeLanguage 1-75 as documented (1 PlainText, 2 ABAP, ... 49 Python, ... 75 TOML), as Markdown fence tags.
LANGUAGES = (
    "", "abap", "ada", "apache", "apex", "asm", "bash", "csharp", "cpp", "c", "cobol", "css", "coffeescript", "d",
    "dart", "delphi", "django", "dockerfile", "erlang", "fortran", "foxpro", "go", "groovy", "html", "handlebars",
    "http", "haskell", "json", "java", "javascript", "julia", "kotlin", "latex", "lisp", "logo", "lua", "matlab",
    "makefile", "markdown", "nginx", "objectivec", "openedge", "php", "perl", "postscript", "powershell", "prolog",
    "protobuf", "python", "r", "rpg", "ruby", "rust", "sas", "scss", "sql", "scala", "scheme", "scratch", "shell",
    "swift", "thrift", "typescript", "vbscript", "vbnet", "xml", "yaml", "cmake", "diff", "gherkin", "graphql",
    "glsl", "properties", "solidity", "toml",
)
PLACEHOLDERS = {
    "chat_card": "[chat card]", "diagram": "[diagram]", "isv": "[widget]", "add_ons": "[widget]", "task": "[task]",
    "okr": "[OKR]", "jira_issue": "[Jira issue]", "wiki_catalog": "[wiki catalog]", "sub_page_list": "[wiki catalog]",
}
EMBEDDED = {"sheet": "sheet", "bitable": "bitable", "mindnote": "mindnote", "board": "whiteboard"}
_LIST_KINDS = frozenset({"bullet", "ordered", "todo"})
_MAX_DEPTH = 40
_LOOKS_STRUCTURAL = re.compile(r"(#{1,6}(\s|$)|>|`{3}|~{3}|[-*_]{3,}\s*$)")
_Line = tuple[str, tuple[int, str] | None]  # text, and (level, plain text) when the line is a heading
_Style = tuple[bool, bool, bool, bool, str]  # bold, italic, strikethrough, inline code, link


def docx_markdown(blocks: Sequence[dict], synced: Mapping[str, Sequence[dict]] | None = None) -> Rendered:
    """The document as Markdown, walked from the page block in `children` order; orphans come last.

    Synced blocks (block types 49 source_synced, 50 reference_synced): a source shows its children; a reference
    shows its own children when the list gives them, else `synced[its block_id]` (the source block and its
    descendants, read from the source document), else a placeholder saying its content is not shown."""
    walk = _Walk(blocks if isinstance(blocks, (list, tuple)) else [], synced or {})
    lines: list[_Line] = []
    root = next((key for key in walk.order if _kind(walk.blocks[key]) == "page"), None)
    if root is not None:
        walk.seen.add(root)
        lines += walk.render_ids(_children(walk.blocks[root]), 0, loose=True)
    for key in walk.order:
        for top in (walk.topmost(key), key):
            if top not in walk.seen:
                _append_loose(lines, walk.render(top, 0))
    return _assemble(lines)


class _Walk:
    def __init__(self, blocks: Sequence[Any], synced: Mapping[str, Sequence[dict]]) -> None:
        self.synced = synced
        self.blocks: dict[str, dict] = {}
        self.order: list[str] = []
        self.seen: set[str] = set()
        for index, block in enumerate(blocks):
            if isinstance(block, dict):
                key = block.get("block_id")
                key = key if isinstance(key, str) and key not in self.blocks else f"\0{index}"
                self.blocks[key] = block
                self.order.append(key)

    def topmost(self, key: str) -> str:
        """The highest unrendered ancestor of an orphan, so a lost subtree comes out whole."""
        chain = {key}
        while True:
            parent = self.blocks[key].get("parent_id")
            if not isinstance(parent, str) or parent not in self.blocks or parent in self.seen or parent in chain:
                return key
            chain.add(parent)
            key = parent

    def render_ids(self, ids: list[str], depth: int, *, loose: bool) -> list[_Line]:
        out: list[_Line] = []
        number, previous_list = 0, False
        for key in ids:
            if key in self.seen or key not in self.blocks:
                continue
            kind = _kind(self.blocks[key])
            number = _next_number(self.blocks[key], number) if kind == "ordered" else 0
            lines = self.render(key, depth, number)
            if lines:
                if out and loose and not (kind in _LIST_KINDS and previous_list):
                    out.append(("", None))
                out += lines
                previous_list = kind in _LIST_KINDS
        return out

    def render(self, key: str, depth: int, number: int = 1) -> list[_Line]:
        if depth > _MAX_DEPTH:
            return []  # left unseen: rendered later as an orphan, at the top level
        self.seen.add(key)
        block = self.blocks[key]
        try:
            return self._render(block, _kind(block), depth, number)
        except (TypeError, ValueError, AttributeError, KeyError, IndexError, OverflowError, RecursionError):
            return []

    def _render(self, block: dict, kind: str, depth: int, number: int) -> list[_Line]:
        body = _dict(block.get(kind))
        if kind in _LIST_KINDS:
            return _list_item(kind, body, number, self.render_ids(_children(block), depth + 1, loose=False))
        if kind == "table":
            return self._table(block, body, depth)
        if kind == "reference_synced" and not _children(block):
            return self._synced(block, depth)
        nested = self.render_ids(_children(block), depth + 1, loose=True)
        if kind.startswith("heading") and kind[7:].isdigit():
            plain = " ".join(_inline(body, plain=True).split())
            own: list[_Line] = [("#" * min(int(kind[7:]), 6) + " " + plain, (int(kind[7:]), plain))] if plain else []
            return _then(own, nested)
        if kind in ("text", "quote", "equation"):
            text = _inline(body)
            if kind == "equation":
                text = f"$${_inline(body, plain=True).strip()}$$" if text.strip() else ""
            own = [(_guard(line), None) for line in text.split("\n")] if text.strip() else []
            return _quoted(_then(own, nested)) if kind == "quote" else _then(own, nested)
        if kind == "code":
            return _then(_code(body), nested)
        if kind in ("callout", "quote_container"):
            return _quoted(nested)
        return _then(_leaf(kind, body), nested)

    def _synced(self, block: dict, depth: int) -> list[_Line]:
        """A reference synced block's content from its source: the source block's children, walked apart."""
        items = self.synced.get(_str(block.get("block_id")))
        if not items or not isinstance(items[0], dict):
            return [(NOT_SYNCED, None)]
        source = _Walk(items, {})
        root = source.order[0]
        source.seen.add(root)
        return source.render_ids(_children(source.blocks[root]), depth + 1, loose=True)

    def _table(self, block: dict, body: dict, depth: int) -> list[_Line]:
        listed = body.get("cells")
        cells = [c for c in listed if isinstance(c, str)] if isinstance(listed, list) else _children(block)
        if not cells:
            return []
        prop = _dict(body.get("property"))
        cols, rows = _int(prop.get("column_size")), _int(prop.get("row_size"))
        cols = min(cols, len(cells)) if cols > 0 else max(1, math.ceil(len(cells) / rows)) if rows > 0 else 1
        texts = [self._cell(cell, depth) for cell in cells]
        texts += [""] * (-len(texts) % cols)
        grid = [texts[i:i + cols] for i in range(0, len(texts), cols)]
        lines = ["| " + " | ".join(row) + " |" for row in grid]
        return [(line, None) for line in [lines[0], "|" + " --- |" * cols, *lines[1:]]]

    def _cell(self, key: str, depth: int) -> str:
        if key in self.seen or key not in self.blocks:
            return ""
        self.seen.add(key)
        lines = self.render_ids(_children(self.blocks[key]), depth + 1, loose=False)
        return _escape_cell("\n".join(f"**{head[1]}**" if head else line for line, head in lines if line.strip()))


def _list_item(kind: str, body: dict, number: int, nested: list[_Line]) -> list[_Line]:
    marker = {"bullet": "- ", "ordered": f"{number}. "}.get(kind) or (
        "- [x] " if _dict(body.get("style")).get("done") is True else "- [ ] ")
    text = _inline(body).split("\n")
    pad = " " * len(marker)
    return [(marker + text[0], None), *((pad + line, None) for line in text[1:]), *_prefixed(nested, pad)]


def _code(body: dict) -> list[_Line]:
    language = _int(_dict(body.get("style")).get("language"))
    tag = LANGUAGES[language - 1] if 1 <= language <= len(LANGUAGES) else ""
    content = _inline(body, plain=True, raw=True).removesuffix("\n")
    fence = "```"
    while fence in content:
        fence += "`"
    return [(fence + tag, None), *((line, None) for line in content.split("\n")), (fence, None)]


def _leaf(kind: str, body: dict) -> list[_Line]:
    """One line for what is not text: a divider, an image, an embedded document, a widget."""
    if kind == "divider":
        return [("---", None)]
    if kind == "image":
        caption = _str(_dict(body.get("caption")).get("content")).strip()
        return [(f"[image: {caption}]" if caption else "[image]", None)]
    if kind == "file":
        return [(" ".join(["[file", *filter(None, [_str(body.get("name")).strip()])]) + "]", None)]
    if kind in EMBEDDED:
        return [(" ".join(["[embedded", EMBEDDED[kind], *filter(None, [_str(body.get("token"))])]) + "]", None)]
    if kind in ("iframe", "link_preview"):
        url = unquote(_str(_dict(body.get("component")).get("url") or body.get("url")))
        label = "embedded page" if kind == "iframe" else "link"
        return [(f"[{label} {url}]" if url else f"[{label}]", None)]
    return [(PLACEHOLDERS[kind], None)] if kind in PLACEHOLDERS else []


def _inline(body: dict, *, plain: bool = False, raw: bool = False) -> str:
    """A Text body's elements as Markdown (or as plain text for headings, or raw for code)."""
    elements = body.get("elements")
    out: list[str] = []
    pending: tuple[_Style | None, str] | None = None
    for element in elements if isinstance(elements, list) else []:
        run = _dict(_dict(element).get("text_run"))
        if run:
            style = None if plain or raw else _style(run.get("text_element_style"))
            if pending and pending[0] == style:
                pending = (style, pending[1] + _str(run.get("content")))
                continue
            if pending:
                out.append(_styled(*pending))
            pending = (style, _str(run.get("content")))
            continue
        if pending:
            out.append(_styled(*pending))
            pending = None
        out.append("" if raw else _element(_dict(element), plain))
    if pending:
        out.append(_styled(*pending))
    return "".join(out).replace("\r\n", "\n").replace("\r", "\n")


def _style(value: Any) -> _Style:
    style = _dict(value)
    link = _str(_dict(style.get("link")).get("url"))
    return (style.get("bold") is True, style.get("italic") is True, style.get("strikethrough") is True,
            style.get("inline_code") is True, unquote(link))


def _styled(style: _Style | None, content: str) -> str:
    core = content.strip()
    if not style or not core:
        return content
    bold, italic, strike, code, link = style
    if code:
        ticks = "`" * (max((len(run) for run in re.findall("`+", core)), default=0) + 1)
        pad = " " if core.startswith("`") or core.endswith("`") else ""
        core = f"{ticks}{pad}{core}{pad}{ticks}"
    core = f"~~{core}~~" if strike else core
    core = f"*{core}*" if italic else core
    core = f"**{core}**" if bold else core
    core = f"[{core}]({_target(link)})" if link else core
    start = len(content) - len(content.lstrip())
    return content[:start] + core + content[start + len(content.strip()):]


def _element(element: dict, plain: bool) -> str:
    """A text element other than a run: @user, @document, equation, reminder, inline file or block."""
    if "mention_user" in element:
        return "@" + (_str(_dict(element["mention_user"]).get("user_id")) or "user")
    if "mention_doc" in element or "link_preview" in element:
        doc = _dict(element.get("mention_doc") or element.get("link_preview"))
        url = unquote(_str(doc.get("url")))
        title = _str(doc.get("title")) or url or _str(doc.get("token"))
        return title if plain or not url else f"[{title}]({_target(url)})"
    if "equation" in element:
        content = _str(_dict(element["equation"]).get("content")).strip()
        return content if plain or not content else f"${content}$"
    if "reminder" in element:
        return _reminder(_dict(element["reminder"]))
    if "file" in element:
        return "[file]"
    return "[embedded block]" if "inline_block" in element else ""


def _reminder(reminder: dict) -> str:
    try:
        moment = datetime.fromtimestamp(int(reminder.get("expire_time") or "") / 1000, UTC)
    except (TypeError, ValueError, OverflowError, OSError):
        return "[reminder]"
    shown = moment.strftime("%Y-%m-%d" if reminder.get("is_whole_day") else "%Y-%m-%d %H:%M UTC")
    return f"[reminder {shown}]"


def _target(url: str) -> str:
    return url.replace(" ", "%20").replace("(", "%28").replace(")", "%29")


def _next_number(block: dict, previous: int) -> int:
    """The documented `style.sequence`: a number, or "auto" to continue (absent in older documents)."""
    sequence = _dict(_dict(block.get("ordered")).get("style")).get("sequence")
    return int(sequence) if isinstance(sequence, str) and re.fullmatch(r"[0-9]{1,9}", sequence) else previous + 1


def _guard(line: str) -> str:
    """A paragraph line that would read as a heading, quote, fence or rule keeps its meaning as text."""
    return "\\" + line if _LOOKS_STRUCTURAL.match(line) else line


def _then(own: list[_Line], nested: list[_Line]) -> list[_Line]:
    return [*own, ("", None), *nested] if own and nested else own or nested


def _prefixed(lines: list[_Line], pad: str) -> list[_Line]:
    return [(pad + line if line else "", None) for line, _ in lines]


def _quoted(lines: list[_Line]) -> list[_Line]:
    return [("> " + line if line else ">", None) for line, _ in lines]


def _append_loose(lines: list[_Line], more: list[_Line]) -> None:
    if lines and more:
        lines.append(("", None))
    lines.extend(more)


def _assemble(lines: list[_Line]) -> Rendered:
    parts: list[str] = []
    outline: list[Heading] = []
    offset = 0
    for line, head in lines:
        if not line and (not parts or not parts[-1]):
            continue
        if head:
            outline.append(Heading(head[0], head[1], offset))
        parts.append(line)
        offset += len(line) + 1
    while parts and not parts[-1]:
        parts.pop()
    return Rendered("\n".join(parts), tuple(outline))


def _kind(block: dict) -> str:
    known = BLOCK_TYPES.get(_int(block.get("block_type")))
    return known or next((key for key in block if key in _BODY_KEYS), "undefined")


def _children(block: dict) -> list[str]:
    children = block.get("children")
    return [c for c in children if isinstance(c, str)] if isinstance(children, list) else []


def _dict(value: Any) -> dict:
    return value if isinstance(value, dict) else {}


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def sheet_table(values: Sequence[Sequence[Any]], *, max_rows: int = 200, max_cols: int = 26,
                max_cell_chars: int = 200) -> str:
    """Sheet values as a Markdown table: the first row is the header, then up to `max_rows` rows; trailing empty
    rows and columns trimmed; cells cut to `max_cell_chars`; a closing line counts what is left out."""
    rows = [[_cell_text(cell) for cell in _as_row(row)] for row in values] if isinstance(values, (list, tuple)) else []
    widths = [max((i + 1 for i, cell in enumerate(row) if cell.strip()), default=0) for row in rows]
    total_rows = max((i + 1 for i, width in enumerate(widths) if width), default=0)
    total_cols = max(widths, default=0)
    shown_rows = min(total_rows, 1 + max(max_rows, 0))  # the header, then max_rows
    shown_cols = min(total_cols, max(max_cols, 0))
    lines = []
    if shown_rows and shown_cols:
        grid = [[_fit(cell, max_cell_chars) for cell in (row + [""] * shown_cols)[:shown_cols]]
                for row in rows[:shown_rows]]
        lines = ["| " + " | ".join(row) + " |" for row in grid]
        lines.insert(1, "|" + " --- |" * shown_cols)
    more = ((total_rows - shown_rows if shown_cols else total_rows, "rows"), (total_cols - shown_cols, "columns"))
    hidden = [f"{n} more {what}" for n, what in more if n]
    if hidden:
        lines.append(f"(… {' / '.join(hidden)} not shown)")
    return "\n".join(lines)


def _as_row(row: Any) -> list[Any]:
    return list(row) if isinstance(row, (list, tuple)) else [row]


def _cell_text(value: Any, depth: int = 0) -> str:
    """One cell as text: scalars, and the rich shapes (segments, links, @mentions, formulas, dropdown values)."""
    if value is None or depth > 8:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float):
        return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)
    if isinstance(value, (str, int)):
        return value if isinstance(value, str) else _int_text(value)
    if isinstance(value, (list, tuple)):
        return "".join(_cell_text(part, depth + 1) for part in value)
    if isinstance(value, dict):
        return _rich_text(value, depth)
    return str(value)


def _rich_text(cell: dict, depth: int) -> str:
    kind, text = cell.get("type"), _cell_text(cell.get("text"), depth + 1)
    if kind == "url":
        link = _cell_text(cell.get("link"), depth + 1)
        return f"[{text}]({_target(link)})" if text and link and text != link else link or text
    if kind == "multipleValue" or (kind is None and "values" in cell):
        values = cell.get("values")
        return ", ".join(_cell_text(v, depth + 1) for v in values) if isinstance(values, list) else ""
    if kind == "formula" and "value" in cell:
        return _cell_text(cell.get("value"), depth + 1)
    if text:
        return text
    try:
        return json.dumps(cell, ensure_ascii=False, default=str)
    except (TypeError, ValueError, RecursionError):
        return ""


def _int_text(value: int) -> str:
    try:
        return str(value)
    except ValueError:  # more digits than int-to-str allows
        return "…"


def _escape_cell(text: str) -> str:
    """Pipes escaped (a backslash before one doubled, so it stays text) and line breaks as <br>."""
    text = re.sub(r"(\\*)\|", lambda m: m.group(1) * 2 + "\\|", text)
    return text.replace("\r\n", "\n").replace("\r", "\n").replace("\n", "<br>")


def _fit(cell: str, limit: int) -> str:
    text = _escape_cell(cell)
    if len(text) <= limit:
        return text
    if limit <= 0:
        return ""
    cut = re.sub(r"<(?:br?)?$", "", text[: limit - 1])
    cut = cut[:-1] if (len(cut) - len(cut.rstrip("\\"))) % 2 else cut
    return cut + "…"


def outline_text(outline: Sequence[Heading], limit_chars: int) -> str:
    """The headings as an indented list within `limit_chars`: deeper levels go first, then the tail."""
    headings = [h for h in outline if isinstance(h, Heading)]
    if limit_chars <= 0 or not headings:
        return ""
    levels = sorted({_level(h) for h in headings}, reverse=True)
    for cap in levels:
        chosen = [h for h in headings if _level(h) <= cap]
        text = _outline_lines(chosen, len(headings) - len(chosen), levels)
        if len(text) <= limit_chars:
            return text
    chosen = [h for h in headings if _level(h) == levels[-1]]
    for count in range(len(chosen) - 1, -1, -1):
        text = _outline_lines(chosen[:count], len(headings) - count, levels)
        if len(text) <= limit_chars:
            return text
    return ""


def _level(heading: Heading) -> int:
    return min(max(heading.level, 1), 9) if isinstance(heading.level, int) else 1


def _outline_lines(headings: list[Heading], dropped: int, levels: list[int]) -> str:
    """One line per heading, indented by its rank among the levels present (so h1, h3 read as two steps)."""
    rank = {level: len(levels) - 1 - i for i, level in enumerate(levels)}  # levels run deepest first
    lines = ["  " * rank[_level(h)] + "- " + h.text for h in headings]
    return "\n".join([*lines, f"(… {dropped} more headings)"] if dropped else lines)
