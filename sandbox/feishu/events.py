"""Builders for what Feishu pushes to the webhook (feishu.md §1.6, §2.2), signed like the real platform."""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from typing import Any

from bot.crypto import encrypted_body, sign
from core.settings import SANDBOX_APP_ID, SANDBOX_SECRETS

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


FORWARDED_CONTENT = "Merged and Forwarded Message"  # fixed text of every merge_forward (message_content doc)

# The documented received-format samples (open.feishu.cn "接收消息内容结构", im-v1/message/events/message_content).
DOC_POST: dict[str, Any] = {"title": "我是一个标题", "content": [
    [{"tag": "text", "text": "第一行 :", "style": ["bold", "underline"]},
     {"tag": "a", "href": "http://www.feishu.cn", "text": "超链接", "style": ["bold", "italic"]},
     {"tag": "at", "user_id": "@_user_1", "user_name": "", "style": []}],
    [{"tag": "img", "image_key": "img_47354fbc-a159-40ed-86ab-2ad0f1acb42g"}],
    [{"tag": "text", "text": "第二行:", "style": ["bold", "underline"]},
     {"tag": "text", "text": "文本测试", "style": []}],
    [{"tag": "img", "image_key": "img_47354fbc-a159-40ed-86ab-2ad0f1acb42g"}],
    [{"tag": "media", "file_key": "file_v2_0dcdd7d9-fib0-4432-a519-41d25aca542j",
      "image_key": "img_7ea74629-9191-4176-998c-2e603c9c5e8g"}],
    [{"tag": "emotion", "emoji_type": "SMILE"}],
    [{"tag": "hr"}],
    [{"tag": "code_block", "language": "GO", "text": "func main() int64 {\n    return 0\n}"}],
]}
_IMG = "img_acd8a194-3e63-49ca-bcf6-224624457a3g"
DOC_CARD: dict[str, Any] = {"title": "卡片标题", "elements": [
    [{"tag": "button", "text": "主按钮", "type": "primary"}, {"tag": "button", "text": "次按钮", "type": "default"},
     {"tag": "button", "text": "危险按钮", "type": "danger"}],
    [{"tag": "a", "href": "https://www.feishu.cn", "text": "飞书"},
     {"tag": "text", "text": "整合即时沟通、日历、音视频会议、云文档、云盘、工作台等功能于一体，成就组织和个人，"},
     {"tag": "at", "user_id": "@_user_1", "user_name": ""}, {"tag": "text", "text": "更高效、更愉悦。"}],
    [{"tag": "hr"}],
    [{"tag": "text", "text": "图片标题"}, {"tag": "img", "image_key": _IMG}],
    [{"tag": "note", "elements": [{"tag": "img", "image_key": _IMG}, {"tag": "text", "text": "备注信息"}]}],
    [{"tag": "text", "text": "在移动端同样进行便捷的沟通、互动与协作，手机电脑随时随地保持同步。"},
     {"tag": "select_static", "options": ["选项1", "选项2", "选项3", "选项4"], "placeholder": "默认提示文本"}],
    [{"tag": "text", "text": "ISV产品接入及企业自主开发，更好地对接现有系统，满足不同组织的需求。"},
     {"tag": "overflow", "options": ["打开飞书应用目录", "打开飞书开发文档", "打开飞书官网"]}],
    [{"tag": "text", "text": "国际权威安全认证与信息安全管理体系，为企业提供全生命周期安全保障。"},
     {"tag": "date_picker", "placeholder": "请选择日期", "initial_date": "2021-1-1"}],
]}
DOC_DIVIDER: dict[str, Any] = {
    "template": "{divider_text}", "from_user": [], "to_chatters": [],
    "divider_text": {"text": "新会话", "i18n_text": {"zh_cn": "新话题", "en_us": "New Session"}},
}

# Received-format `content` of every documented message type, as feishu.md §2.3 and the docs show it.
SAMPLE_CONTENT: dict[str, dict[str, Any]] = {
    "text": {"text": "@_user_1 hello"},
    "post": DOC_POST,
    "image": {"image_key": "img_v2_041b28e3"},
    "file": {"file_key": "file_v2_1", "file_name": "test.txt"},
    "audio": {"file_key": "file_v2_2", "duration": 2000},
    "media": {"file_key": "file_v2_3", "image_key": "img_v2_3", "file_name": "测试.mp4", "duration": 2000},
    "sticker": {"file_key": "file_v2_4"},
    "folder": {"file_key": "file_v2_5", "file_name": "资料"},
    "interactive": DOC_CARD,
    "merge_forward": {"content": FORWARDED_CONTENT},
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


def post_with_code_block(
    paragraphs: list[str], code: str, *, language: str = "PYTHON", mention_key: str | None = "@_user_1",
    title: str = "",
) -> str:
    """A received post as a user writes it: @bot first, text paragraphs ("" = blank line), then a code block."""
    lines: list[list[dict[str, Any]]] = [[{"tag": "text", "text": p}] if p else [] for p in paragraphs]
    if mention_key is not None:
        lines[0:1] = [[{"tag": "at", "user_id": mention_key, "user_name": ""}, {"tag": "text", "text": " "},
                       *(lines[0] if lines else [])]]
    lines.append([{"tag": "code_block", "language": language, "text": code}])
    return post_content(title, lines)


def merge_forward_content() -> str:
    return json.dumps({"content": FORWARDED_CONTENT})


def card_content(title: str, rows: list[list[dict[str, Any]]]) -> str:
    """A received `interactive` content: title + rows of text/a/at/img/button elements (not the card JSON sent)."""
    return json.dumps({"title": title, "elements": rows}, ensure_ascii=False)


def image_content(image_key: str) -> str:
    return json.dumps({"image_key": image_key})


def file_content(file_key: str, file_name: str) -> str:
    return json.dumps({"file_key": file_key, "file_name": file_name}, ensure_ascii=False)


def system_content(template: str = DOC_DIVIDER["template"], **fields: Any) -> str:
    """A `system` content; with no arguments the documented divider ({divider_text})."""
    body = {"template": template, **fields} if fields or template != DOC_DIVIDER["template"] else DOC_DIVIDER
    return json.dumps(body, ensure_ascii=False)


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


def message_updated_event(*, update_time_ms: int | None = None, **message: Any) -> dict[str, Any]:
    """`im.message.updated_v1` (a user edited a message): the receive_v1 body with the new content and update_time.

    Takes message_event's keyword arguments (pass the original message_id and create_time_ms).
    """
    envelope = message_event(**message)
    updated = update_time_ms if update_time_ms is not None else int(time.time() * 1000)
    envelope["header"]["event_type"] = "im.message.updated_v1"
    envelope["header"]["create_time"] = str(updated)
    envelope["event"]["message"]["update_time"] = str(updated)
    return envelope


def message_recalled_event(
    message_id: str, chat_id: str, *, recall_type: str = "message_owner", event_id: str | None = None,
    recall_time_ms: int | None = None, token: str = DEFAULT_TOKEN, app_id: str = SANDBOX_APP_ID,
) -> dict[str, Any]:
    """`im.message.recalled_v1` (feishu.md §2.6): recall_type message_owner|group_owner|group_manager|…"""
    recalled = recall_time_ms if recall_time_ms is not None else int(time.time() * 1000)
    return {
        "schema": "2.0",
        "header": _header("im.message.recalled_v1", event_id, recalled, token, app_id),
        "event": {"message_id": message_id, "chat_id": chat_id, "recall_time": str(recalled),
                  "recall_type": recall_type},
    }


def card_action_event(
    operator_open_id: str, value: dict[str, Any], *, message_id: str, chat_id: str, event_id: str | None = None,
    token: str | None = None, update_token: str | None = None, tag: str = "button", app_id: str = SANDBOX_APP_ID,
) -> dict[str, Any]:
    """A `card.action.trigger` callback (feishu.md §1.10) for a button on a card in a chat.

    token: the header's verification token (default the sandbox one); update_token: event.token, the
    delayed-update token ("c-…", generated when omitted). The header's create_time is in microseconds.
    """
    now_us = int(time.time() * 1_000_000)
    operator = {**user_ids(operator_open_id), "tenant_key": TENANT_KEY}
    return {
        "schema": "2.0",
        "header": _header("card.action.trigger", event_id, now_us, token or DEFAULT_TOKEN, app_id),
        "event": {
            "operator": {k: operator[k] for k in ("open_id", "union_id", "user_id", "tenant_key")},
            "token": update_token or "c-" + uuid.uuid4().hex,
            "action": {"value": value, "tag": tag},
            "host": "im_message",
            "context": {"open_message_id": message_id, "open_chat_id": chat_id},
        },
    }


def bitable_record_changed_event(
    app_token: str, table_id: str, record_id: str, action: str = "record_added",
    operator_open_id: str = "ou_user", *, after: list[dict[str, str]] | dict[str, Any] | None = None,
    before: list[dict[str, str]] | dict[str, Any] | None = None, event_id: str | None = None,
    revision: int = 1, subscribers: list[str] | None = None, token: str = DEFAULT_TOKEN,
    app_id: str = SANDBOX_APP_ID,
) -> dict[str, Any]:
    """`drive.file.bitable_record_changed_v1`: one record added/edited/deleted in a subscribed base.

    after/before: [{field_id, field_value (JSON string)}] as FeishuEmulator.record_change_values gives them,
    or {field_id: value}, whose values are JSON-serialised here.
    """
    now_ms = int(time.time() * 1000)
    change = {"record_id": record_id, "action": action, "before_value": _field_values(before),
              "after_value": _field_values(after)}
    return {
        "schema": "2.0",
        "header": _header("drive.file.bitable_record_changed_v1", event_id, now_ms, token, app_id),
        "event": {
            "file_token": app_token, "file_type": "bitable", "table_id": table_id, "revision": revision,
            "operator_id": user_ids(operator_open_id), "action_list": [change],
            "subscriber_id_list": [user_ids(s) for s in subscribers or []], "update_time": now_ms // 1000,
        },
    }


def _field_values(values: list[dict[str, str]] | dict[str, Any] | None) -> list[dict[str, str]]:
    if values is None:
        return []
    if isinstance(values, dict):
        return [{"field_id": fid, "field_value": json.dumps(v, ensure_ascii=False)} for fid, v in values.items()]
    return [dict(v) for v in values]


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
