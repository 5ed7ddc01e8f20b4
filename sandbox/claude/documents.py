"""The stand-in's reading of linked documents: asked to read a document through, it calls read_document.

Offline and deterministic: a question containing a trigger ("读完文档", "全文", "read the whole document")
whose request shows a document only in part (`<more document="X" next_cursor="N"…/>`) gets a read_document
tool call at that cursor, at most READS_PER_TURN per turn; then it answers naming what it read.
"""

from __future__ import annotations

import html
import re
from typing import Any

from sandbox.claude.recall import _results, _tool_use
from sandbox.claude.wire import block_text, offered

TRIGGERS = ("读完文档", "全文", "read the whole document")
READS_PER_TURN = 2
_MORE = re.compile(r'<more document="([^"]+)" next_cursor="(\d+)"')
_TITLE = re.compile(r'<document(?:_part)? title="([^"]*)"[^>]*revision="(\d+)"')


def document_reply(body: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    if not offered(body, "read_document"):
        return None
    messages = body["messages"]
    turn_results: list[str] = []
    question = ""
    for message in reversed(messages):
        results = _results(message)
        if message.get("role") == "user" and not results:
            question = block_text(message.get("content") or "")
            break
        turn_results = results + turn_results
    if not any(t in question for t in TRIGGERS):
        return None
    latest = turn_results[-1] if turn_results else question
    more = _MORE.findall(latest)
    allowed = (body.get("tool_choice") or {}).get("type") != "none"
    if more and allowed and len(turn_results) < READS_PER_TURN:
        token, cursor = more[-1]
        block = _tool_use(body, "read_document", {"document": token, "cursor": int(cursor)})
        block[0]["text"] = "我接着读文档。"
        return block
    titles = [f"《{html.unescape(t)}》r{r}" for t, r in _TITLE.findall(question + "".join(turn_results))]
    left = "还有部分没读完，可以让我继续。" if more else "已读到结尾。"
    return f"我读了{'、'.join(dict.fromkeys(titles)) or '文档'}（{len(turn_results)} 次续读）。{left}"
