"""Schema-2.0 envelope and `im.message.receive_v1` as pydantic models, plus the neutral `Inbound`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# Imported at module load on purpose: lark-oapi takes seconds to import, which must be paid at
# worker boot, never by the first request against Feishu's 3 s deadline.
from lark_oapi.channel import flatten_content, parse_message_content
from lark_oapi.channel.normalize.mentions import extract_mentions, resolve_mentions, text_has_mention_all
from pydantic import BaseModel, ConfigDict, Field

MESSAGE_RECEIVE = "im.message.receive_v1"


class _Loose(BaseModel):
    # Feishu adds fields over time; unknown ones must not break parsing.
    model_config = ConfigDict(extra="ignore")


class Header(_Loose):
    event_id: str = Field(min_length=1)
    event_type: str = Field(min_length=1)
    create_time: str | None = None
    token: str | None = None
    app_id: str | None = None
    tenant_key: str | None = None


class Envelope(_Loose):
    schema_: str = Field(alias="schema", pattern=r"^2\.0$")
    header: Header
    event: dict[str, Any] = {}


class UserId(_Loose):
    open_id: str | None = None
    union_id: str | None = None
    user_id: str | None = None


class Sender(_Loose):
    sender_id: UserId = UserId()
    sender_type: str = "user"
    tenant_key: str | None = None


class MentionIn(_Loose):
    key: str = ""
    id: UserId = UserId()
    name: str | None = None
    mentioned_type: str | None = None


class MessageIn(_Loose):
    message_id: str = Field(min_length=1)
    chat_id: str = Field(min_length=1)
    chat_type: str = Field(min_length=1)
    message_type: str = Field(min_length=1)
    content: str = ""
    create_time: str | None = None
    root_id: str | None = None
    parent_id: str | None = None
    thread_id: str | None = None
    mentions: list[MentionIn] | None = None


class MessageEvent(_Loose):
    sender: Sender
    message: MessageIn


class Mention(BaseModel):
    key: str
    open_id: str | None = None
    name: str | None = None


class Inbound(BaseModel):
    """One admitted user message, JSON-serialisable; what travels through the inbox to the worker."""

    event_id: str
    message_id: str
    chat_id: str
    chat_type: str
    sender_open_id: str
    sender_type: str
    message_type: str
    text: str
    content: str
    create_time: str | None = None
    thread_id: str | None = None
    root_id: str | None = None
    parent_id: str | None = None
    mentions: list[Mention] = []
    mentioned_all: bool = False

    def content_key(self) -> str:
        """Redeliveries can carry a new message_id; this key is stable across them."""
        parts = [self.sender_open_id, self.chat_id, self.create_time or "", self.thread_id or "",
                 hashlib.sha256(self.content.encode("utf-8")).hexdigest()]
        return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def flatten_text(message_type: str, raw_content: str) -> str:
    """Plain text of any message type, via lark-oapi's own content parsers."""
    text, _resources = flatten_content(parse_message_content(message_type, raw_content))
    return text


def to_inbound(envelope: Envelope, event: MessageEvent, bot_open_id: str | None = None) -> Inbound:
    msg, sender = event.message, event.sender
    text = flatten_text(msg.message_type, msg.content)
    if msg.mentions:  # `@_user_N` placeholders → `@Name`; the bot's own mention is dropped
        found = extract_mentions(msg.mentions, bot_open_id=bot_open_id)
        text = resolve_mentions(text, found, strip_bot_mentions=True, bot_open_id=bot_open_id)
    mentions = [Mention(key=m.key, open_id=m.id.open_id, name=m.name) for m in msg.mentions or []]
    mentioned_all = any(m.key == "@_all" or m.id.user_id == "all" for m in msg.mentions or [])
    return Inbound(
        event_id=envelope.header.event_id, message_id=msg.message_id, chat_id=msg.chat_id,
        chat_type=msg.chat_type, sender_open_id=sender.sender_id.open_id or "",
        sender_type=sender.sender_type, message_type=msg.message_type, text=text, content=msg.content,
        create_time=msg.create_time, thread_id=msg.thread_id or None, root_id=msg.root_id or None,
        parent_id=msg.parent_id or None, mentions=mentions,
        mentioned_all=mentioned_all or text_has_mention_all(msg.content),
    )


def dumps(inbound: Inbound) -> str:
    return json.dumps(inbound.model_dump(mode="json"), ensure_ascii=False, separators=(",", ":"))
