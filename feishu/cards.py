"""Interactive cards the bot posts and later patches: the first answer and approval requests. Pure.

Cards are JSON 2.0 (lark-oapi's card builder), built as objects, never by pasting text into JSON strings;
text from people or the model is defused like a reply's, so it cannot mention anyone or restyle the card.
Every card declares `update_multi`, which Feishu needs to patch it for everyone.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from lark_oapi.channel.card import new_card
from lark_oapi.channel.card.builder import CardBuilder

from feishu.render import ZWSP, defuse

BODY_CHARS = 8000  # a card must stay under 30 KB; CJK text takes 3 bytes a character
STATUS_ZH = {"placeholder": "分析中", "summary": "摘要", "full": "完整分析", "failed": "分析失败"}
OPEN_ID = re.compile(r"ou_[0-9A-Za-z_-]{1,64}")
TEMPLATE = {"placeholder": "grey", "summary": "blue", "full": "green", "failed": "red"}


def _card(title: str, template: str) -> CardBuilder:
    """A JSON 2.0 card (headings, quotes, tables and inline code render; 1.0 shows them as raw text) that
    Feishu patches for everyone who sees it (`update_multi`)."""
    return new_card().config(update_multi=True, width_mode="fill").header(title[:100], template=template)


def _footer(text: str) -> dict[str, Any]:
    return {"tag": "markdown", "element_id": "footer", "text_size": "notation", "content": defuse(text)}


def clip(body: str, limit: int = BODY_CHARS) -> str:
    return body if len(body) <= limit else body[:limit].rstrip() + "\n…（内容过长，已截断）"


def answer_card(*, item_id: str, title: str, status: str, version: int, body: str,
                record_url: str = "") -> dict[str, Any]:
    """The first answer, one version of it; the footer names the item, the version and its status. The
    model's text is defused like a reply's (`<at id=all>` stays text)."""
    footer = f"事项 {item_id} · 第 {version} 版 · {STATUS_ZH.get(status, status)}"
    card = _card(f"首答 · {title or item_id}", TEMPLATE.get(status, "blue"))
    card.markdown(defuse(clip(body))).divider()
    if record_url:
        card.markdown(f"[查看多维表格记录]({record_url})")
    return card.raw(_footer(footer)).to_dict()


def elements_of(card: dict[str, Any]) -> list[dict[str, Any]]:
    """Every element of a card, nested ones (columns) included, in order; JSON 2.0 (`body`) or 1.0."""
    out: list[dict[str, Any]] = []
    stack = list(reversed((card.get("body") or {}).get("elements") or card.get("elements") or []))
    while stack:
        element = stack.pop()
        if not isinstance(element, dict):
            continue
        out.append(element)
        inner = [e for col in element.get("columns") or [] for e in col.get("elements") or []]
        inner += element.get("actions") or []  # a JSON 1.0 action module (cards posted before 2.0)
        stack.extend(reversed(inner))
    return out


def footer_of(card: dict[str, Any]) -> str:
    """The footer text of a card built here (for tests, the CLI and the admin view)."""
    for element in reversed(elements_of(card)):
        if element.get("element_id") == "footer":
            return str(element.get("content", "")).replace(ZWSP, "")
        if element.get("tag") == "note":  # JSON 1.0
            return "".join(e.get("content", "") for e in element.get("elements") or [])
    return ""


def buttons_of(card: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """(label, callback value) of each button."""
    return [(str((e.get("text") or {}).get("content", "")), dict(e.get("value") or {}))
            for e in elements_of(card) if e.get("tag") == "button"]


@dataclass(frozen=True)
class Proposal:
    """What an approval card shows of a proposed record change (items/approvals.py keeps the proposal)."""

    proposal_id: str
    route_key: str
    item_id: str
    field: str
    value: str
    reason: str
    proposer: str
    state: str = "pending"
    decided_by: str = ""


def approval_card(p: Proposal) -> dict[str, Any]:
    """A proposed record change; buttons while pending, the outcome after. What the model wrote is defused."""
    proposal_id, route_key, item_id, field, value, reason = (p.proposal_id, p.route_key, p.item_id, p.field,
                                                              p.value, p.reason)
    state, decided_by = p.state, p.decided_by
    lines = [f"**字段**：{defuse(field)}", f"**新值**：{defuse(value)}", f"**理由**：{defuse(reason) or '—'}",
             f"**事项**：{item_id}"]
    template = {"pending": "orange", "approved": "green"}.get(state, "grey")
    card = _card("待审批：修改记录" if state == "pending" else "审批结果：修改记录", template)
    card.markdown("\n".join(lines))
    if state == "pending":
        card.buttons([_button("批准", "primary", {"action": "items:approve", "p": proposal_id, "rk": route_key}),
                      _button("拒绝", "danger", {"action": "items:reject", "p": proposal_id, "rk": route_key})])
        return card.raw(_footer("仅负责人、提出人或管理员可以审批；24 小时内有效。")).to_dict()
    outcome = {"approved": "已批准并写入记录", "rejected": "已拒绝，记录未改动",
               "expired": "已过期，记录未改动", "failed": "写入失败，记录未改动"}.get(state, state)
    if OPEN_ID.fullmatch(decided_by) and state in ("approved", "rejected"):  # a real mention of the decider
        card.markdown(f"审批人：<at id={decided_by}></at>")
    return card.raw(_footer(outcome)).to_dict()


def _button(label: str, style: str, value: dict[str, str]) -> dict[str, Any]:
    """A button for lark-oapi's `buttons` row: its callback value comes back in card.action.trigger."""
    return {"label": label, "style": style, "action": value}


def choice_card(*, title: str, body: str, buttons: list[tuple[str, dict[str, str]]], footer: str = "",
                template: str = "blue") -> dict[str, Any]:
    """A card of text and buttons for any feature: each button's value names its action (`<feature>:<name>`, see
    turn/registry.py `Action`) and comes back in card.action.trigger. Text is defused like a reply's."""
    card = _card(title, template)
    card.markdown(defuse(clip(body)))
    if buttons:
        card.buttons([_button(label[:40], "primary" if n == 0 else "default", value)
                      for n, (label, value) in enumerate(buttons)])
    return card.raw(_footer(footer)).to_dict() if footer else card.to_dict()
