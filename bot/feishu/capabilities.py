"""Optional Feishu capabilities and the scopes they need: a missing scope turns one off, loudly, never all work.

Only credentials and the scopes needed to reply (`im:message:send_as_bot`) pause work. Any other call names
the capability it serves; when Feishu answers 99991672 (the app lacks a scope) the capability is marked off
for `OFF_SECONDS` (then tried again): an ERROR log line naming the scope, one admin alert, `/readyz`
"degraded" with the capability and the scope. The caller treats the failure like any unreadable material:
the message is still answered, and the model is told what could not be read.
"""

from __future__ import annotations

import json
import logging
import re
import time
from dataclasses import dataclass

import redis

from memory.keys import Keys

log = logging.getLogger(__name__)
SCOPE_MISSING = 99991672  # "Access denied. One of the following scopes is required: [...]"
OFF_SECONDS = 3600  # tried again after this long (an admin may have granted the scope meanwhile)
ALERTS_KEPT = 200  # as jobs/alerts.py


@dataclass(frozen=True)
class Capability:
    name: str
    scopes: tuple[str, ...]  # any one of them is enough (as Feishu documents each API's scopes)
    what: str  # what stops working without it


CAPABILITIES = {c.name: c for c in (
    Capability("reactions", ("im:message.reactions:write_only", "im:message"), "progress reactions (OnIt, CrossMark)"),
    Capability("resources", ("im:resource", "im:message:readonly", "im:message"), "images and files in messages"),
    Capability("message_read", ("im:message:readonly", "im:message"), "forwarded bundles, quoted and single messages"),
    Capability("thread_history", ("im:message.group_msg:readonly", "im:message.group_msg"),
               "topic history: bootstrap, read_thread, first-answer materials"),
    Capability("chat_members", ("im:chat.members:read", "im:chat:readonly", "im:chat"),
               "membership checks (item references, /item link)"),
    Capability("record_events", ("bitable:app", "drive:drive"), "Bitable record events (records naming a topic)"),
    Capability("documents", ("docx:document:readonly", "docx:document"), "reading linked docx documents"),
    Capability("drive_files", ("drive:drive.metadata:readonly", "drive:drive:readonly", "drive:drive"),
               "names of linked drive files and document owners"),
    Capability("wiki", ("wiki:wiki:readonly", "wiki:wiki", "wiki:node:read"), "resolving linked wiki pages"),
    Capability("sheets", ("sheets:spreadsheet:readonly", "sheets:spreadsheet", "drive:drive:readonly", "drive:drive"),
               "reading linked sheets"),
    Capability("doc_permissions", ("docs:permission.member:retrieve", "docs:permission.setting:read",
                                   "drive:drive:readonly", "drive:drive"),
               "checking who may view a linked document (without it only item materials are used)"),
    Capability("streaming", ("cardkit:card:write",), "streaming answers in a typewriter card (plain replies instead)"),
)}
_SCOPES_IN_MESSAGE = re.compile(r"\[([a-z0-9_:., -]+)\]", re.I)


def scopes_named(msg: str) -> list[str]:
    """The scopes Feishu's 99991672 message lists ("... one of the following scopes is required: [a, b]")."""
    found = _SCOPES_IN_MESSAGE.search(msg or "")
    return [s.strip() for s in found.group(1).split(",") if s.strip()] if found else []


def turn_off(r: redis.Redis, keys: Keys, name: str, msg: str) -> None:
    """Mark `name` off (once per OFF_SECONDS: one ERROR line, one admin alert). Never fails the caller."""
    cap = CAPABILITIES.get(name) or Capability(name, (), name)
    scopes = scopes_named(msg) or list(cap.scopes)
    record = {"capability": name, "scopes": scopes, "what": cap.what, "since": round(time.time(), 3),
              "error": (msg or "")[:300]}
    try:
        if not r.set(keys.capability_off(name), json.dumps(record, ensure_ascii=False), nx=True, ex=OFF_SECONDS):
            return
        text = (f"⚠️ 飞书应用缺少权限 {' 或 '.join(scopes)}：{cap.what} 已停用，其余功能照常。"
                "在开发者后台开通权限并发布新版本后会自动恢复。")
        alert = json.dumps({"text": text, "at": time.time(), "tries": 0}, ensure_ascii=False)
        pipe = r.pipeline()
        pipe.rpush(keys.alerts, alert)
        pipe.ltrim(keys.alerts, -ALERTS_KEPT, -1)
        pipe.execute()
    except redis.RedisError:
        return
    log.error("capability turned off: the app lacks a scope",
              extra={"reason": name, "error": f"missing scope {' or '.join(scopes)}: {cap.what} off"})


def off(r: redis.Redis, keys: Keys) -> dict[str, dict[str, object]]:
    """The capabilities currently off, for /readyz and the doctor."""
    names = list(CAPABILITIES)
    values = r.mget([keys.capability_off(n) for n in names])
    return {n: json.loads(v) for n, v in zip(names, values, strict=True) if v}
