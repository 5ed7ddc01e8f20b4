"""Builders for what Feishu pushes to the webhook (feishu.md §1.6, §2.2), signed like the real platform."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from bot.crypto import encrypted_body, sign
from bot.settings import SANDBOX_APP_ID, SANDBOX_SECRETS

TENANT_KEY = "tenant_sandbox"
DEFAULT_TOKEN = SANDBOX_SECRETS["feishu_verification_token"]


def _digest(value: str, size: int) -> str:
    return hashlib.sha256(value.encode("utf-8")).hexdigest()[:size]


def user_ids(open_id: str) -> dict[str, str]:
    """A stable {union_id, user_id, open_id} triple derived from the open_id, so repeats agree."""
    if open_id == "all":
        return {"union_id": "", "user_id": "all", "open_id": ""}
    return {
        "union_id": "on_" + _digest(open_id, 32), "user_id": _digest("u" + open_id, 8), "open_id": open_id,
    }


def mention(open_id: str, name: str, key: str = "@_user_1", mentioned_type: str = "user") -> dict[str, Any]:
    """One `message.mentions[]` entry as the event carries it (id is an object here, unlike list/get)."""
    return {
        "key": key,
        "id": user_ids(open_id),
        "name": name,
        "tenant_key": TENANT_KEY,
        "mentioned_type": mentioned_type,
    }


def mention_all() -> dict[str, Any]:
    """The @all entry: key `@_all`, user_id `all`."""
    return {"key": "@_all", "id": user_ids("all"), "name": "所有人", "tenant_key": TENANT_KEY}


def post_content(title: str, paragraphs: list[list[dict[str, Any]]]) -> str:
    """A received-format `post` content string: no locale wrapper, unlike the send format."""
    return json.dumps({"title": title, "content": paragraphs}, ensure_ascii=False)


# Received-format `content` of every documented message type, as feishu.md §2.3 shows it.
SAMPLE_CONTENT: dict[str, dict[str, Any]] = {
    "text": {"text": "@_user_1 hello"},
    "post": {"title": "报错截图", "content": [
        [{"tag": "text", "text": "加粗", "style": ["bold"]}, {"tag": "a", "href": "https://x.cn", "text": "链接"},
         {"tag": "at", "user_id": "@_user_1", "user_name": "助手"}],
        [{"tag": "img", "image_key": "img_v2_1"}, {"tag": "media", "file_key": "file_v2_1", "image_key": "img_v2_2"},
         {"tag": "emotion", "emoji_type": "SMILE"}],
        [{"tag": "hr"}], [{"tag": "code_block", "language": "GO", "text": "func main() {}"}],
        [{"tag": "md", "text": "**md**"}],
    ]},
    "image": {"image_key": "img_v2_041b28e3"},
    "file": {"file_key": "file_v2_1", "file_name": "test.txt"},
    "audio": {"file_key": "file_v2_2", "duration": 2000},
    "media": {"file_key": "file_v2_3", "image_key": "img_v2_3", "file_name": "测试.mp4", "duration": 2000},
    "sticker": {"file_key": "file_v2_4"},
    "folder": {"file_key": "file_v2_5", "file_name": "资料"},
    "interactive": {"title": "卡片标题", "elements": [[{"tag": "text", "text": "卡片内容"}]]},
    "merge_forward": {"content": "Merged and Forwarded Message"},
    "share_chat": {"chat_id": "oc_0dd200d32fda15216d2c2ef1ddb32f76"},
    "share_user": {"user_id": "ou_0dd200d32fda15216d2c2ef1ddb32f76"},
    "system": {"template": "{from_user} invited {to_chatters} to this chat.", "from_user": ["Amy"],
               "to_chatters": ["Bob", "Cai"], "divider_text": {"text": "", "i18n_text": {"zh_CN": ""}}},
    "location": {"name": "北京天安门", "longitude": "116.397", "latitude": "39.909"},
    "video_chat": {"topic": "周会", "start_time": "1700000000000"},
    "todo": {"task_id": "e1d5f2c4", "summary": {"title": "修复登录", "content": [[{"tag": "text", "text": "周五前"}]]},
             "due_time": "1700000000000"},
    "vote": {"topic": "午饭吃什么", "options": ["面", "饭"]},
    "hongbao": {"text": "恭喜发财"},
    "share_calendar_event": {"summary": "评审会", "start_time": "1700000000000", "end_time": "1700003600000"},
    "calendar": {"summary": "评审会", "start_time": "1700000000000", "end_time": "1700003600000"},
    "general_calendar": {"summary": "评审会", "start_time": "1700000000000", "end_time": "1700003600000"},
}


def sample_content(message_type: str) -> str:
    """The documented `content` string of `message_type`."""
    return json.dumps(SAMPLE_CONTENT[message_type], ensure_ascii=False)


def _content(message_type: str, text: str, content: str | None) -> str:
    if content is not None:
        return content
    if message_type == "text":
        return json.dumps({"text": text}, ensure_ascii=False)
    if message_type == "post":
        return post_content("", [[{"tag": "text", "text": text}]])
    if message_type in SAMPLE_CONTENT:
        return sample_content(message_type)
    raise ValueError(f"content is required for message_type={message_type!r}")


def _header(
    event_type: str, event_id: str | None, create_time_ms: int, token: str, app_id: str
) -> dict[str, str]:
    return {
        "event_id": event_id or uuid.uuid4().hex,
        "event_type": event_type,
        "create_time": str(create_time_ms),
        "token": token,
        "app_id": app_id,
        "tenant_key": TENANT_KEY,
    }


def message_event(
    *,
    chat_id: str,
    text: str = "",
    chat_type: str = "p2p",
    sender_open_id: str = "ou_user",
    sender_type: str = "user",
    mentions: list[dict[str, Any]] | None = None,
    thread_id: str | None = None,
    root_id: str | None = None,
    parent_id: str | None = None,
    message_type: str = "text",
    content: str | None = None,
    message_id: str | None = None,
    event_id: str | None = None,
    create_time_ms: int | None = None,
    token: str = DEFAULT_TOKEN,
    app_id: str = SANDBOX_APP_ID,
) -> dict[str, Any]:
    """A schema-2.0 `im.message.receive_v1` envelope; optional ids are omitted, as Feishu omits them."""
    created = create_time_ms if create_time_ms is not None else int(time.time() * 1000)
    message: dict[str, Any] = {"message_id": message_id or "om_" + uuid.uuid4().hex}
    for key, value in (("root_id", root_id), ("parent_id", parent_id)):
        if value is not None:
            message[key] = value
    message.update({"create_time": str(created), "update_time": str(created), "chat_id": chat_id})
    if thread_id is not None:
        message["thread_id"] = thread_id
    message.update({
        "chat_type": chat_type,
        "message_type": message_type,
        "content": _content(message_type, text, content),
        "mentions": list(mentions or []),
    })
    sender = {"sender_id": user_ids(sender_open_id), "sender_type": sender_type, "tenant_key": TENANT_KEY}
    return {
        "schema": "2.0",
        "header": _header("im.message.receive_v1", event_id, created, token, app_id),
        "event": {"sender": sender, "message": message},
    }


def url_verification(challenge: str, token: str = DEFAULT_TOKEN) -> dict[str, Any]:
    """The challenge Feishu sends when the request URL is saved in the console."""
    return {"challenge": challenge, "token": token, "type": "url_verification"}


def signed_request(
    payload: dict[str, Any], *, encrypt_key: str, encrypt: bool = True, now: float | None = None
) -> tuple[bytes, dict[str, str]]:
    """Body bytes and headers exactly as Feishu would POST them (signature covers the raw bytes)."""
    if encrypt:
        body = encrypted_body(payload, encrypt_key)
    else:
        body = json.dumps(payload, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    headers = sign(body, encrypt_key, now=now)
    headers["Content-Type"] = "application/json; charset=utf-8"
    return body, headers
