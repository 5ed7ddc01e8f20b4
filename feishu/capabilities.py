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

from core.keys import Keys

log = logging.getLogger(__name__)
SCOPE_MISSING = 99991672  # "Access denied. One of the following scopes is required: [...]"
OFF_SECONDS = 3600  # tried again after this long (an admin may have granted the scope meanwhile)
ALERTS_KEPT = 200  # as runs/alerts.py


@dataclass(frozen=True)
class Capability:
    name: str
    scopes: tuple[str, ...]  # any one of them is enough (as Feishu documents each API's scopes)
    what: str  # what stops working without it
    also: tuple[str, ...] = ()  # and one of these too (an API whose documentation asks for two grants)

    def granted(self, scopes: set[str]) -> bool:
        """Whether a tenant that granted `scopes` may make the calls. Pure."""
        return any(s in scopes for s in self.scopes) and (not self.also or any(s in scopes for s in self.also))


# Each list is the API reference's "权限要求" (open.feishu.cn server docs; the pages are named in
# sandbox/feishu/rules.py, which makes the emulator refuse by the same lists).
READ_MESSAGES = ("im:message:readonly", "im:message", "im:message.history:readonly")
CAPABILITIES = {c.name: c for c in (
    Capability("reactions", ("im:message.reactions:write_only", "im:message"), "progress reactions (OnIt, CrossMark)"),
    Capability("resources", READ_MESSAGES, "images and files in messages"),
    Capability("message_read", ("im:message:readonly", "im:message"), "forwarded bundles, quoted and single messages"),
    # 获取会话历史消息: a read scope, and for group chats (every topic is in one) im:message.group_msg as well.
    Capability("thread_history", READ_MESSAGES, "topic history: bootstrap, read_thread, first-answer materials",
               also=("im:message.group_msg",)),
    Capability("chat_members", ("im:chat.members:read", "im:chat:readonly", "im:chat"),
               "membership checks (item references, /item link, delivery to another chat)"),
    # 搜索对用户或机器人可见的群列表 (im-v1 chat/search).
    Capability("chat_search", ("im:chat:readonly", "im:chat", "im:chat:read", "im:chat.group_info:readonly"),
               "naming a chat by its name (/share 运维群; an oc_ id or a chat link still works)"),
    Capability("chat_info", ("im:chat.group_info:readonly", "im:chat:readonly", "im:chat"),
               "who owns a group (without it only MEMORY_ADMINS change a chat's shared memory)"),
    Capability("record_events", ("bitable:app", "drive:drive"), "Bitable record events (records naming a topic)"),
    Capability("documents", ("docx:document:readonly", "docx:document"), "reading linked docx documents"),
    Capability("drive_files", ("drive:drive.metadata:readonly", "drive:drive"),
               "names of linked drive files and document owners (without it an owner counts only through the other "
               "checks)"),
    Capability("file_size", ("drive:file:readonly", "drive:file:download", "drive:file", "drive:drive:readonly",
                             "drive:drive"), "sizes of linked drive files (named without a size)"),
    Capability("wiki", ("wiki:wiki:readonly", "wiki:wiki", "wiki:node:read"), "resolving linked wiki pages"),
    Capability("sheets", ("sheets:spreadsheet:readonly", "sheets:spreadsheet", "drive:drive:readonly", "drive:drive"),
               "reading linked sheets"),
    Capability("doc_share", ("docs:permission.setting:read", "docs:doc", "docx:document", "drive:drive",
                             "drive:drive:readonly", "drive:file", "sheets:spreadsheet", "wiki:wiki",
                             "bitable:bitable"),
               "link-share check of linked documents (without it a tenant-wide link lets nobody in)"),
    Capability("doc_members", ("docs:permission.member:retrieve", "docs:doc", "drive:drive", "sheets:spreadsheet",
                               "wiki:wiki", "bitable:app", "bitable:bitable"),
               "collaborator check of linked documents (without it collaborators count only through the other "
               "checks)"),
    Capability("streaming", ("cardkit:card:write",), "streaming answers in a typewriter card (plain replies instead)"),
    # 获取单个用户信息 (contact-v3/user/get); the name itself needs the field grant contact:user.base:readonly.
    Capability("contact_names", ("contact:contact.base:readonly", "contact:contact:access_as_app",
                                 "contact:contact:readonly", "contact:contact:readonly_as_app"),
               "people's display names (without it the model sees their open_ids only)"),
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
