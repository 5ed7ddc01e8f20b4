"""The stand-in's item behaviour: first-answer analyses and proposed record changes. Offline, deterministic.

- A first-answer request (its <task> asks for a SHORT SUMMARY or the FULL ANALYSIS) gets
  "摘要：…" or "完整分析：…" quoting the report, so the two versions differ and tests can tell them apart.
- Asked to change the item's status ("状态改成 X" / "状态改为 X"), with the propose_record_change tool
  offered, it proposes once, then confirms.
"""

from __future__ import annotations

import html
import re
from typing import Any

from sandbox.claude.recall import _results
from sandbox.claude.wire import block_text, offered, stable_hash, without_quotes

_MATERIAL = re.compile(r"<message\b[^>]*>\n?(.*?)\n?</message>", re.DOTALL)
_TASK = re.compile(r"<task>(.*?)</task>", re.DOTALL)
_STATUS = re.compile(r"状态(?:改成|改为|设为)\s*[「“\"]?([^\s」”\"。，,]+)")


def _system_text(body: dict[str, Any]) -> str:
    system = body.get("system")
    return system if isinstance(system, str) else block_text(system or [])


def analysis_reply(body: dict[str, Any]) -> str | None:
    users = [m for m in body["messages"] if m.get("role") == "user"]
    text = block_text(users[-1]["content"]) if users else ""
    task = _TASK.search(text)  # the task follows the materials (their shared prefix is cached)
    asked = task.group(1) if task else _system_text(body)
    if "SHORT SUMMARY" not in asked and "FULL ANALYSIS" not in asked:
        return None
    parts = [html.unescape(p.strip()) for p in _MATERIAL.findall(text)]
    report = parts[0] if parts else ""
    if "SHORT SUMMARY" in asked:
        return f"摘要：报告的问题是「{report[:80]}」。先核对最近的改动。"
    return (f"完整分析：\n1. 现象：{report[:200]}\n2. 可能原因：最近的发布或配置变更。\n"
            f"3. 需要核实：复现步骤和日志（共看了 {len(parts)} 条消息）。")


def propose_reply(body: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    messages = body["messages"]
    if not offered(body, "propose_record_change") or not messages:
        return None
    results = _results(messages[-1])
    if results:
        done = any("proposed" in r for r in results)
        return "好的，已发出审批卡片，负责人或提出人批准后才会改记录。" if done else None
    question = html.unescape(block_text(messages[-1].get("content") or ""))
    asked = _MATERIAL.findall(question)
    match = _STATUS.search(without_quotes(asked[-1]) if asked else "")
    if not match:
        return None
    return [{"type": "text", "text": "我来提一个修改。"},
            {"type": "tool_use", "id": "toolu_" + stable_hash(body)[:22], "name": "propose_record_change",
             "input": {"field": "status", "value": match.group(1), "reason": "用户在话题里要求"}}]
