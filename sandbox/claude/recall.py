"""The stand-in's recall behaviour: asked to read the thread, it calls read_thread (paging), then answers.

Offline only, deterministic: a user turn asking to look at the topic's earlier messages gets a
`tool_use` block in the Messages API wire format; a `tool_result` with `has_more="true"` gets one more
page (at most PAGES_PER_TURN per turn); then a text answer quoting what the results held.
"""

from __future__ import annotations

import html
import re
from typing import Any

from sandbox.claude.wire import block_text, offered, stable_hash

TRIGGERS = ("看看话题里之前的消息", "话题里之前", "read the thread", "继续看", "继续读")
PAGES_PER_TURN = 2
_NEXT = re.compile(r'next_cursor="([^"]*)" has_more="true"')
_TEXT = re.compile(r"<thread_message [^>]*>\n(.*?)\n</thread_message>", re.DOTALL)
# The service's own note on where reading stopped ("An earlier turn read the thread partway…") is not the user
# asking: a trigger counts only in what people wrote.
_RECALL_STATE = re.compile(r"<recall_state>.*?</recall_state>", re.DOTALL)
_GIVEN = re.compile(r'<recall_state>[^<]*?cursor="([^"]*)"')  # where the last turn's reading stopped


def _results(message: dict[str, Any]) -> list[str]:
    """The text of each tool_result block of a user message ([] for a plain user turn)."""
    content = message.get("content")
    if message.get("role") != "user" or not isinstance(content, list):
        return []
    out = []
    for block in content:
        if isinstance(block, dict) and block.get("type") == "tool_result":
            inner = block.get("content")
            out.append(inner if isinstance(inner, str) else block_text(inner or []))
    return out


def _tool_use(body: dict[str, Any], name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"type": "text", "text": "我先看一下话题里之前的消息。"},
            {"type": "tool_use", "id": "toolu_" + stable_hash(body)[:22], "name": name, "input": args}]


def recall_reply(body: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    """The stand-in's answer when recall applies to this request; None lets the default answer it."""
    if not offered(body, "read_thread"):
        return None
    messages = body["messages"]
    allowed = (body.get("tool_choice") or {}).get("type") != "none"
    turn_results: list[str] = []
    for message in reversed(messages):  # this turn's tool results, newest first, up to the user's question
        results = _results(message)
        if message.get("role") == "user" and not results:
            said = block_text(message.get("content") or "")
            question = _RECALL_STATE.sub("", said)
            break
        turn_results = results + turn_results
    else:
        return None
    if not turn_results:  # asked to read on: with the cursor the service's note gave, as a model would
        given = _GIVEN.search(said)
        args = {"cursor": html.unescape(given.group(1))} if given else {}
        return _tool_use(body, "read_thread", args) if allowed and any(t in question for t in TRIGGERS) else None
    nxt = _NEXT.search(turn_results[-1])
    if nxt and allowed and len(turn_results) < PAGES_PER_TURN:
        return _tool_use(body, "read_thread", {"cursor": nxt.group(1)})
    texts = [html.unescape(t) for r in turn_results for t in _TEXT.findall(r)]
    summary = f"我读了话题里的 {len(texts)} 条消息（{len(turn_results)} 页）"
    if texts:
        summary += f"，从「{texts[0][:30]}」到「{texts[-1][:30]}」"
    return summary + ("。还有更早/更多的消息没读完，可以让我继续看。" if nxt else "。")
