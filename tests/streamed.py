"""What the streaming tests share: an answer the stand-in writes for a marker, and where a card shows up."""

from __future__ import annotations

import json
from typing import Any


def long_answer(tag: str, paragraphs: int = 8) -> str:
    """Markdown the model 'writes': a heading, a list and prose, ~90 characters a paragraph."""
    body = [f"## 结论（{tag}）", "", "- 第一点：导出任务在队列里排队", "- 第二点：重试之后恢复", ""]
    line = "这里是较长的分析内容，用来观察卡片随着模型输出逐步增长，直到最后显示完整答案。"
    body += [f"第 {i} 段：{line}" for i in range(paragraphs)]
    return "\n".join(body)


def answer_with(claude, marker: str, text: str) -> None:
    previous = claude._responder  # chained: other tests' responders keep answering their own markers

    def respond(body: dict[str, Any]) -> Any:
        if marker in json.dumps(body["messages"], ensure_ascii=False):
            return text
        return previous(body) if previous else "收到。"

    claude.set_responder(respond)


def card_messages(feishu, user_message: str) -> list[dict[str, Any]]:
    return [m for m in feishu.replies_to(user_message) if m["msg_type"] == "interactive"]


def entity_of(feishu, card_message: dict[str, Any]) -> dict[str, Any]:
    found = [c for c in feishu.cards() if c["message_id"] == card_message["message_id"]]
    assert len(found) == 1, found
    return found[0]


def content_ops(history: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [h for h in history if h["op"] in ("card_create", "card_content", "card_update")]
