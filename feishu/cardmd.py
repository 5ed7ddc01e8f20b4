"""Card Markdown within Feishu's documented limits: tables per markdown element and per card, code fences at the
start of their lines, and a chat-list summary of plain text. Pure functions.

Sources (open.feishu.cn, card JSON 2.0):
- content-components/rich-text: "单个富文本组件中，最多可放置四个表格"; "代码块语法和代码内容需在行首使用".
- content-components/table: "单张卡片最多支持放置五个表格组件" — and a card over it is refused with 230099
  "ErrCode: 11310; ErrMsg: card table number over limit" (reported from production: larksuite/openclaw-lark#46,
  HKUDS/nanobot#1382), so Feishu counts the Markdown tables of all of a card's elements against it.
- cardkit-v1/card-element/content: "若 content 中含有代码块，你需将代码块前后的空格去掉，否则可能导致代码渲染失败".
- streaming-updates-openapi-overview: the summary is what the chat list shows; a custom one survives the end of
  streaming, so it must read as plain text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise

MARKDOWN_TABLES_MAX = 4  # tables in one markdown element
CARD_TABLES_MAX = 5  # tables in one card, across its elements
SUMMARY_CHARS = 60

_FENCE_LINE = re.compile(r"^([ \t]*)(`{3,}|~{3,})(.*)$")
_TABLE_DELIMITER = re.compile(r"^\s*\|?\s*:?-+:?\s*(?:\|\s*:?-+:?\s*)+\|?\s*$|^\s*\|\s*:?-+:?\s*\|\s*$")


def dedent_fences(md: str) -> str:
    """Code fences moved to the start of their lines (a fence inside a list item is indented): the opening
    fence's indent is taken off it, off the block's lines (as far as they have it) and off the closing fence."""
    out: list[str] = []
    block: tuple[str, int] | None = None  # (fence marker, indent width) while inside a block
    for line in md.split("\n"):
        m = _FENCE_LINE.match(line)
        if block is None:
            if m and _opens(m):
                block = (m.group(2), len(m.group(1)))
                line = line[len(m.group(1)):]
            out.append(line)
            continue
        marker, indent = block
        if m and m.group(2)[0] == marker[0] and len(m.group(2)) >= len(marker) and not m.group(3).strip():
            out.append(line.lstrip(" \t"))
            block = None
            continue
        out.append(_strip_indent(line, indent))
    return "\n".join(out)


def _opens(m: re.Match[str]) -> bool:
    return not (m.group(2)[0] == "`" and "`" in m.group(3))  # an info string with a backtick is inline code


def _strip_indent(line: str, width: int) -> str:
    taken = 0
    while taken < width and taken < len(line) and line[taken] in " \t":
        taken += 1
    return line[taken:]


def _fenced(line: str, fence: str | None) -> tuple[bool, str | None]:
    """(is `line` a fence, the fence character open after it) — `fence` the one open before it."""
    m = _FENCE_LINE.match(line)
    if m is None:
        return False, fence
    if fence is None:
        return (True, m.group(2)[0]) if _opens(m) else (False, None)
    if m.group(2)[0] == fence and not m.group(3).strip():
        return True, None
    return False, fence


def table_starts(md: str) -> list[int]:
    """The line index where each GFM table starts (its header row), code blocks left out."""
    lines, starts, fence = md.split("\n"), [], None
    for i, line in enumerate(lines):
        is_fence, fence = _fenced(line, fence)
        if not is_fence and fence is None and i > 0 and "|" in lines[i - 1] and _TABLE_DELIMITER.match(line):
            starts.append(i - 1)
    return starts


def split_tables(md: str, most: int) -> list[str]:
    """`md` cut just before every (`most` + 1)-th table, so no piece holds more than `most` tables."""
    lines, starts = md.split("\n"), table_starts(md)
    if len(starts) <= most:
        return [md]  # as it was, to the character
    cuts = [starts[i] for i in range(most, len(starts), most)]
    bounds = [0, *cuts, len(lines)]
    pieces = ["\n".join(lines[a:b]).strip("\n") for a, b in pairwise(bounds)]
    return [p for p in pieces if p.strip()] or [md]


def before_table(md: str, n: int) -> str:
    """The part of `md` before its (n + 1)-th table: all of it when it has `n` tables or fewer."""
    starts = table_starts(md)
    if len(starts) <= n:
        return md
    return "\n".join(md.split("\n")[:starts[n]]).rstrip()


_TAG = re.compile(r"</?[A-Za-z][\w-]*(?:\s[^<>]*)?/?>")
_AT_NAMED = re.compile(r"<at\b[^>]*>([^<]*)</at>", re.I)
_AT_ID = re.compile(r"(?<![\w@])@(ou_[0-9A-Za-z_-]+)")
_LINK = re.compile(r"!?\[([^\]\n]*)\]\([^)\n]*\)")
_EMPHASIS = re.compile(r"(\*\*|__|~~|\*|`)")
_LINE_MARK = re.compile(r"^\s{0,3}(?:#{1,6}\s+|>\s?|[-*+]\s+|\d+[.)]\s+)")


def plain_summary(md: str, people: Mapping[str, str] | None = None, limit: int = SUMMARY_CHARS) -> str:
    """What the chat list shows for a finished answer: its first words as plain text — no Markdown, no Feishu
    tags (a mention of someone in `people` reads as @name, or is left out when the name is unknown; anyone else
    stays as written, as in the card), code and table rules left out."""
    people = people or {}

    def named(open_id: str) -> str:  # a person whose name we do not know (a sender) is left out, not "@"
        return "@" + open_id if open_id not in people else ("@" + people[open_id] if people[open_id] else "")

    words: list[str] = []
    for line in _prose_lines(md):
        line = _AT_NAMED.sub(lambda m: "@" + m.group(1) if m.group(1) else "", line)
        line = _AT_ID.sub(lambda m: named(m.group(1)), line)
        line = _TAG.sub("", _LINK.sub(r"\1", _LINE_MARK.sub("", line)))
        line = _EMPHASIS.sub("", line).replace("|", " ")
        words += line.split()
        if sum(len(w) + 1 for w in words) > limit:
            break
    text = " ".join(words)
    return text if len(text) <= limit else text[:limit] + "…"


def _prose_lines(md: str) -> list[str]:
    """The lines that are not code, fences or table delimiter rows."""
    out, fence = [], None
    for line in md.split("\n"):
        is_fence, fence = _fenced(line, fence)
        if not is_fence and fence is None and not _TABLE_DELIMITER.match(line) and line.strip():
            out.append(line)
    return out
