"""Schema-2.0 envelope and `im.message.receive_v1` as pydantic models, read into the neutral `Inbound`."""

from __future__ import annotations

from typing import Any

from lark_oapi.channel.normalize.mentions import text_has_mention_all
from pydantic import BaseModel, ConfigDict, Field

from core.inbound import Inbound, Mention
from feishu.content import MentionBook, Person, post_at_tags
from feishu.message import content_object, render_content

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
    key: str | None = None
    id: UserId | None = None
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


def _event_people(mentions_in: list[MentionIn]) -> list[Person]:
    return [Person(m.key or "", m.id.open_id if m.id else None, m.name) for m in mentions_in]


def _tag_mentions(message_type: str, data: dict[str, Any], known: list[Mention]) -> list[Mention]:
    """At-tags of a post that name an open_id the `mentions` array lacks (Feishu sometimes leaves it empty)."""
    if message_type != "post":
        return []
    seen = {m.open_id for m in known if m.open_id}
    extra: list[Mention] = []
    for user_id, user_name in post_at_tags(data):
        if user_id.startswith("ou_") and user_id not in seen:
            seen.add(user_id)
            extra.append(Mention(key="", open_id=user_id, name=user_name))
    return extra


def to_inbound(envelope: Envelope, event: MessageEvent, bot_open_id: str | None = None) -> Inbound:
    """The neutral message; raises `ContentError` for content of the wrong shape."""
    msg, sender = event.message, event.sender
    data = content_object(msg.message_type, msg.content)
    mentions_in = msg.mentions or []
    # `@_user_N` placeholders and at-tags → `@Name`; the bot's own mention is dropped; layout untouched.
    text = render_content(msg.message_type, data, MentionBook(_event_people(mentions_in), bot_open_id))
    mentions = [Mention(key=m.key or "", open_id=m.id.open_id if m.id else None, name=m.name) for m in mentions_in]
    mentions += _tag_mentions(msg.message_type, data, mentions)
    mentioned_all = any(m.key == "@_all" or (m.id and m.id.user_id == "all") for m in mentions_in)
    tag_all = msg.message_type == "post" and any(uid in ("all", "@_all") for uid, _ in post_at_tags(data))
    ids = sender.sender_id
    return Inbound(
        event_id=envelope.header.event_id, message_id=msg.message_id, chat_id=msg.chat_id,
        chat_type=msg.chat_type, sender_open_id=ids.open_id or "", sender_union_id=ids.union_id or None,
        sender_user_id=ids.user_id or None, sender_type=sender.sender_type, message_type=msg.message_type,
        text=text, content=msg.content, create_time=msg.create_time, thread_id=msg.thread_id or None,
        root_id=msg.root_id or None, parent_id=msg.parent_id or None, mentions=mentions,
        mentioned_all=mentioned_all or tag_all or text_has_mention_all(msg.content),
    )
