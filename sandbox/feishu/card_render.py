"""How Feishu shows a card it accepted: the chat list's preview, and the defects a client renders silently (no
error code) that tests can assert absent.

Sources (open.feishu.cn, card JSON 2.0 and CardKit):
- content-components/rich-text: "单个富文本组件中，最多可放置四个表格"; code blocks: "代码块语法和代码内容需在行首使用".
- cardkit-v1/card-element/content: "若 content 中含有代码块，你需将代码块前后的空格去掉，否则可能导致代码渲染失败".
- streaming-updates-openapi-overview: config.summary is the chat list's preview; while streaming an empty one shows
  "[生成中...]"; "关闭流式更新模式并不会改变开发者自定义的摘要文本" (a custom one outlives streaming).

Emulator choices where the docs say nothing: a markdown element with a fifth table, or a fence that does not
start its line, is accepted and recorded as a render defect (the pages state the rule, not an error code); a
summary is shown verbatim, so Markdown or tags in it are a defect, and so is "[生成中...]" on a card that no
longer streams; a card without a summary previews as the start of its text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

from sandbox.feishu.rules import count_tables

MARKDOWN_TABLES_MAX = 4
STREAMING_PREVIEW = "[生成中...]"
_INDENTED_FENCE = re.compile(r"^[ \t]+(`{3,}|~{3,})", re.M)
_MARKUP = re.compile(r"<[A-Za-z/][^<>]*>|\*\*|__|~~|`|\]\(|^\s*#{1,6}\s|^\s*\|", re.M)


def summary_of(card: dict[str, Any]) -> str | None:
    config = card.get("config")
    summary = config.get("summary") if isinstance(config, dict) else None
    content = summary.get("content") if isinstance(summary, dict) else None
    return content if isinstance(content, str) else None


def streaming(card: dict[str, Any]) -> bool:
    config = card.get("config")
    return isinstance(config, dict) and config.get("streaming_mode") is True


def chat_preview(card: dict[str, Any]) -> str:
    """What the chat list shows for the card now."""
    custom = summary_of(card)
    if custom:
        return custom
    if streaming(card):
        return STREAMING_PREVIEW
    text = " ".join(" ".join(markdown_texts(card)).split())
    return text[:60]


def card_defects(card: dict[str, Any]) -> list[tuple[str, str]]:
    """(kind, detail) for each way the client shows the accepted card badly."""
    found: list[tuple[str, str]] = []
    for md in markdown_texts(card):
        tables = count_tables(md)
        if tables > MARKDOWN_TABLES_MAX:
            found.append(("tables_per_markdown", f"a markdown element holds {tables} tables; it shows four"))
        fence = _INDENTED_FENCE.search(md)
        if fence:
            found.append(("indented_fence", f"code fence not at the start of its line: {fence.group(0)!r}"))
    summary = summary_of(card)
    if summary and _MARKUP.search(summary):
        found.append(("summary_markup", f"the chat list shows the summary verbatim: {summary[:60]!r}"))
    if not streaming(card) and chat_preview(card) == STREAMING_PREVIEW:
        found.append(("stale_summary", "the card stopped streaming but the chat list still shows [生成中...]"))
    return found


def markdown_texts(card: dict[str, Any]) -> Iterator[str]:
    stack: list[Any] = [card.get("body") or {"elements": card.get("elements") or []}]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if node.get("tag") == "markdown" and isinstance(node.get("content"), str):
                yield node["content"]
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))


class DefectLog:
    """Render defects as tests read them: each (where, kind) once, in the order first seen."""

    def __init__(self) -> None:
        self.entries: list[dict[str, str]] = []
        self._seen: set[tuple[str, str]] = set()

    def note(self, where: str, card: dict[str, Any]) -> None:
        for kind, detail in card_defects(card):
            if (where, kind) not in self._seen:
                self._seen.add((where, kind))
                self.entries.append({"where": where, "kind": kind, "detail": detail})
