"""Recalled and edited messages in what later turns see: a recalled message is withdrawn, an edited one shows
its newest edit. The web notes them (bot/side_events.py); every read of history, batch and related
discussion applies them here.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from typing import Any

import redis

from core.inbound import Inbound
from core.keys import Keys
from memory import keys as memory_keys

RECALLED_TEXT = "[该消息已被撤回，内容作废]"
ANSWER_WITHDRAWN = "[这条回答所答的消息已被撤回，回答一并作废]"
EDITED_MARK = "（已编辑）"
SUMMARY_WITHDRAWN = ("<session_summary>\n[较早对话的摘要已作废：它涉及的消息已被撤回 / the summary of earlier "
                     "turns was withdrawn: a message it covered was recalled]\n</session_summary>")
# One message element of a logged batch (memory/context.format_batch): its attributes and escaped body.
ELEMENT = re.compile(r'(<message [^>]*message_id="([^"]+)"[^>]*>\n)(.*?)(\n</message>)', re.DOTALL)


def notes(r: redis.Redis, keys: Keys, chat_id: str, message_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """message id → {"recalled": True} or {"text": newest edit}, for those of `message_ids` that changed."""
    ids = [m for m in dict.fromkeys(message_ids) if m]
    if not ids or not chat_id:
        return {}
    values = r.hmget(memory_keys.withdrawn(keys, chat_id), ids)
    return {m: json.loads(v) for m, v in zip(ids, values, strict=True) if v}


def any_recalled(r: redis.Redis, keys: Keys, route_key: str, message_ids: Sequence[str]) -> bool:
    """Was any of these messages recalled (one HMGET)?"""
    return any(n.get("recalled") for n in notes(r, keys, chat_of(route_key), message_ids).values())


def all_recalled(r: redis.Redis, keys: Keys, chat_id: str, message_ids: Sequence[str]) -> bool:
    """Was every one of these messages recalled (one HMGET)? A batch's answer is void then (apply_to_entries)."""
    ids = [m for m in dict.fromkeys(message_ids) if m]
    changed = notes(r, keys, chat_id, ids)
    return bool(ids) and all(changed.get(m, {}).get("recalled") for m in ids)


def chat_of(route_key: str) -> str:
    parts = route_key.split(":")
    return parts[3] if len(parts) > 3 and parts[2] in ("p2p", "group", "topic") else ""


def rewrite(text: str, changed: dict[str, dict[str, Any]]) -> str:
    """A logged batch with recalled bodies withdrawn and edited ones replaced by their newest edit. Pure."""
    if not changed:
        return text

    def one(m: re.Match[str]) -> str:
        note = changed.get(html.unescape(m.group(2)))
        if not note:
            return m.group(0)
        if note.get("recalled"):
            return m.group(1) + RECALLED_TEXT + m.group(4)
        return m.group(1) + html.escape(str(note.get("text", "")), quote=False) + EDITED_MARK + m.group(4)

    return ELEMENT.sub(one, text)


def apply_to_entries(r: redis.Redis, keys: Keys, route_key: str, entries: list[dict[str, Any]]) -> None:
    """Rewrite user log entries in place (one HMGET for all of them)."""
    ids = [i for e in entries if e.get("role") == "user" for i in e.get("message_ids") or []]
    changed = notes(r, keys, chat_of(route_key), ids)
    if not changed:
        return
    gone: set[str] = set()  # batches whose every message was recalled: their answers go too
    for e in entries:
        mids = set(e.get("message_ids") or [])
        if e.get("role") == "user" and mids & changed.keys():
            e["text"] = rewrite(str(e.get("text", "")), changed)
            if all(changed.get(m, {}).get("recalled") for m in mids) and e.get("batch_id"):
                gone.add(str(e["batch_id"]))
    for e in entries:
        if e.get("role") == "assistant" and e.get("batch_id") in gone:
            e["text"] = ANSWER_WITHDRAWN
            e.pop("rounds", None)  # what it looked up for the recalled question goes with it


def apply_to_batch(r: redis.Redis, keys: Keys, batch: Sequence[Inbound]) -> list[Inbound]:
    """The batch as it stands now: recalled messages dropped, edited ones with their newest text."""
    if not batch:
        return []
    changed = notes(r, keys, batch[-1].chat_id, [m.message_id for m in batch])
    out = []
    for m in batch:
        note = changed.get(m.message_id)
        if note and note.get("recalled"):
            continue
        out.append(m.model_copy(update={"text": str(note["text"])}) if note and "text" in note else m)
    return out


def apply_to_related(r: redis.Redis, keys: Keys, chat_id: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    changed = notes(r, keys, chat_id, [str(i.get("message_id", "")) for i in items])
    out = []
    for item in items:
        note = changed.get(str(item.get("message_id", "")))
        if note and note.get("recalled"):
            continue
        out.append({**item, "text": note["text"]} if note and "text" in note else item)
    return out
