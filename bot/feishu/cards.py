"""Interactive cards the bot posts and later patches: the first answer and approval requests. Pure.

Cards are built as JSON objects, never by pasting text into JSON strings, so text that looks like card
markup stays text. Every card declares `update_multi`, which Feishu needs to patch it for everyone.
"""

from __future__ import annotations

from typing import Any

BODY_CHARS = 8000  # a card must stay under 30 KB; CJK text takes 3 bytes a character
STATUS_ZH = {"placeholder": "分析中", "summary": "摘要", "full": "完整分析", "failed": "分析失败"}
TEMPLATE = {"placeholder": "grey", "summary": "blue", "full": "green", "failed": "red"}


def _md(text: str) -> dict[str, Any]:
    return {"tag": "markdown", "content": text}


def _note(text: str) -> dict[str, Any]:
    return {"tag": "note", "elements": [{"tag": "plain_text", "content": text}]}


def _card(title: str, template: str, elements: list[dict[str, Any]]) -> dict[str, Any]:
    return {"config": {"update_multi": True, "wide_screen_mode": True},
            "header": {"title": {"tag": "plain_text", "content": title[:100]}, "template": template},
            "elements": elements}


def clip(body: str, limit: int = BODY_CHARS) -> str:
    return body if len(body) <= limit else body[:limit].rstrip() + "\n…（内容过长，已截断）"


def answer_card(*, item_id: str, title: str, status: str, version: int, body: str,
                record_url: str = "") -> dict[str, Any]:
    """The first answer, one version of it; the footer names the item, the version and its status."""
    footer = f"事项 {item_id} · 第 {version} 版 · {STATUS_ZH.get(status, status)}"
    elements = [_md(clip(body)), {"tag": "hr"}]
    if record_url:
        elements.append(_md(f"[查看多维表格记录]({record_url})"))
    elements.append(_note(footer))
    return _card(f"首答 · {title or item_id}", TEMPLATE.get(status, "blue"), elements)


def footer_of(card: dict[str, Any]) -> str:
    """The footer text of a card built here (for tests and the admin view)."""
    for element in reversed(card.get("elements") or []):
        if element.get("tag") == "note":
            return "".join(e.get("content", "") for e in element.get("elements") or [])
    return ""


def approval_card(*, proposal_id: str, route_key: str, item_id: str, field: str, value: str, reason: str,
                  proposer: str, state: str = "pending", decided_by: str = "") -> dict[str, Any]:
    """A proposed record change; buttons while pending, the outcome after."""
    lines = [f"**字段**：{field}", f"**新值**：{value}", f"**理由**：{reason or '—'}", f"**事项**：{item_id}"]
    elements: list[dict[str, Any]] = [_md("\n".join(lines))]
    if state == "pending":
        elements.append({"tag": "action", "actions": [
            _button("批准", "primary", {"a": "approve", "p": proposal_id, "rk": route_key}),
            _button("拒绝", "danger", {"a": "reject", "p": proposal_id, "rk": route_key}),
        ]})
        elements.append(_note("仅负责人、提出人或管理员可以审批；24 小时内有效。"))
    else:
        outcome = {"approved": "已批准并写入记录", "rejected": "已拒绝，记录未改动",
                   "expired": "已过期，记录未改动", "failed": "写入失败，记录未改动"}.get(state, state)
        elements.append(_note(outcome))
        if decided_by and state in ("approved", "rejected"):  # lark_md renders the decider as a mention
            elements.append({"tag": "div", "text": {"tag": "lark_md", "content": f"审批人：<at id={decided_by}></at>"}})
    template = {"pending": "orange", "approved": "green"}.get(state, "grey")
    return _card("待审批：修改记录" if state == "pending" else "审批结果：修改记录", template, elements)


def _button(text: str, kind: str, value: dict[str, str]) -> dict[str, Any]:
    return {"tag": "button", "text": {"tag": "plain_text", "content": text}, "type": kind, "value": value}
