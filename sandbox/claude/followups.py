"""The stand-in's follow-ups: it sets one when asked to remind, and decides a firing one from markers. Offline.

- A user turn "<when>提醒我<what>" / "remind me <when> to <what>" with the schedule_followup tool offered gets a
  tool call (when = the words before 提醒我, what = the rest); the tool's result is then echoed in the answer.
- A FOLLOW-UP CHECK request (jobs/timers/followup.py) answers {"post": false} when the follow-up waits for a
  reply (回复 / 答复 / reply) and a message since is marked owner="true"; otherwise it posts "提醒：<what>".
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from sandbox.claude.items import _system_text
from sandbox.claude.recall import _results
from sandbox.claude.wire import block_text, stable_hash

_MATERIAL = re.compile(r"<message\b[^>]*>\n?(.*?)\n?</message>", re.DOTALL)
_ZH = re.compile(r"^(?P<when>.+?)(?:再)?提醒(?:我|一下|大家)?(?P<what>.+)$", re.DOTALL)
_EN = re.compile(r"remind me (?P<when>.+?) to (?P<what>.+)$", re.IGNORECASE | re.DOTALL)
_FOLLOWUP = re.compile(r"<followup [^>]*>(.*?)</followup>", re.DOTALL)
_WAITS_FOR_REPLY = re.compile(r"回复|答复|回应|reply|respond|answer", re.IGNORECASE)


def schedule_reply(body: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    names = {t.get("name") for t in body.get("tools") or [] if isinstance(t, dict)}
    messages = body["messages"]
    if "schedule_followup" not in names or not messages:
        return None
    results = _results(messages[-1])
    if results:
        done = [r for r in results if r.startswith(("set:", "not set:"))]
        if not done:
            return None
        if done[0].startswith("not set:"):
            return "没能设上提醒：" + done[0][len("not set:"):].strip()
        return "好的，到时候我来跟进。"
    asked = _MATERIAL.findall(html.unescape(block_text(messages[-1].get("content") or "")))
    text = html.unescape(asked[-1]).strip() if asked else ""
    match = _ZH.match(text) or _EN.search(text)
    if not match:
        return None
    when = match.group("when").strip(" ，,。")
    what = match.group("what").strip(" ，,。")
    return [{"type": "text", "text": "我来设一个提醒。"},
            {"type": "tool_use", "id": "toolu_" + stable_hash(body)[:22], "name": "schedule_followup",
             "input": {"when": when, "what": what}}]


def check_reply(body: dict[str, Any]) -> str | None:
    if "FOLLOW-UP CHECK" not in _system_text(body):
        return None
    users = [m for m in body["messages"] if m.get("role") == "user"]
    text = block_text(users[-1]["content"]) if users else ""
    found = _FOLLOWUP.search(text)
    what = html.unescape(found.group(1)) if found else ""
    owner_spoke = 'owner="true"' in text
    if owner_spoke and _WAITS_FOR_REPLY.search(what):
        return json.dumps({"post": False, "text": "", "why": "负责人已在话题里回复"}, ensure_ascii=False)
    return json.dumps({"post": True, "text": f"提醒：{what}", "why": "还没有回复"}, ensure_ascii=False)
