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


def _content(message_type: str, text: str, content: str | None) -> str:
    if content is not None:
        return content
    if message_type == "text":
        return json.dumps({"text": text}, ensure_ascii=False)
    if message_type == "post":
        return post_content("", [[{"tag": "text", "text": text}]])
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
