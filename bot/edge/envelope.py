"""Schema-2.0 envelope and `im.message.receive_v1` as pydantic models, plus the neutral `Inbound`."""

from __future__ import annotations

import hashlib
import json
import re
from typing import Any

# Imported at module load on purpose: lark-oapi takes seconds to import, which must be paid at
# worker boot, never by the first request against Feishu's 3 s deadline.
from lark_oapi.channel import flatten_content, parse_message_content
from lark_oapi.channel.normalize.mentions import text_has_mention_all
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from bot.feishu.content import (
    MentionBook,
    Person,
    fill_system,
    image_mark,
    post_at_tags,
    render_card,
    render_post,
    resolve_text,
)

MESSAGE_RECEIVE = "im.message.receive_v1"
MAX_CONTENT_DEPTH = 64  # real cards nest ~20 levels; lark-oapi's card walker recurses once per level
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_B = re.compile(rb"\\u[dD][89a-fA-F]")


class ContentError(ValueError):
    """`message.content` does not have the shape its `message_type` documents (feishu.md §2.3)."""


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


class Mention(BaseModel):
    key: str
    open_id: str | None = None
    name: str | None = None


class Inbound(BaseModel):
    """One admitted user message, JSON-serialisable; what travels through the inbox to the worker.

    New fields must have defaults: entries queued by an older release are parsed by this model.
    """

    event_id: str
    message_id: str
    chat_id: str
    chat_type: str
    sender_open_id: str = ""
    sender_union_id: str | None = None
    sender_user_id: str | None = None
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
    # The route's generation when the event was stored: stamped by the PUSH script (never by the web), so
    # a worker can tell messages sent before a user reset. None: from before sessions, or a replay.
    gen: int | None = None

    @property
    def sender_id(self) -> str:
        """Who speaks, for routes, attribution and user lists: open_id, else union_id (`on_`), else user_id.

        Raw ids: the prefixes (`ou_`, `on_`, none) keep the three kinds apart. "" when Feishu sent none.
        """
        return self.sender_open_id or self.sender_union_id or self.sender_user_id or ""

    def content_key(self) -> str:
        """Redeliveries can carry a new message_id; this key is stable across them."""
        parts = [self.sender_id, self.chat_id, self.create_time or "", self.thread_id or "",
                 hashlib.sha256(self.content.encode("utf-8")).hexdigest()]
        return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


def has_lone_surrogate(raw: str | bytes, value: Any) -> bool:
    """True if JSON `raw` (already parsed into `value`) holds a `\\ud800`-style escape UTF-8 cannot encode."""
    found = _SURROGATE_ESCAPE_B.search(raw) if isinstance(raw, bytes) else _SURROGATE_ESCAPE.search(raw)
    if not found:
        return False  # the common case costs one regex scan; paired escapes (emoji) are told apart below
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


# --- message content, per message_type (received format, feishu.md §2.3) -----------------------------

_Str = str | None
_Num = int | float | str | None  # durations and timestamps: numbers or ms strings; the converters take both


class _PostElement(_Loose):
    tag: _Str = None
    text: _Str = None
    href: _Str = None
    user_id: _Str = None
    user_name: _Str = None
    emoji_type: _Str = None
    image_key: _Str = None
    file_key: _Str = None
    file_name: _Str = None
    language: _Str = None
    style: list[str] | None = None


class _PostDoc(_Loose):
    title: _Str = None
    content: list[list[_PostElement] | None] | None = None


class _Named(_Loose):
    name: _Str = None
    open_id: _Str = None
    id: _Str = None


class _TodoSummary(_Loose):
    title: _Str = None
    content: list[list[_PostElement] | None] | None = None


def _shape(model_name: str, /, **fields: Any) -> type[BaseModel]:
    """A loose model whose fields are all optional (Feishu omits empty ones) but typed."""
    optional = {k: (t, None) for k, t in fields.items()}
    return create_model(model_name, __base__=_Loose, **optional)  # type: ignore[call-overload, no-any-return]


_MEDIA = _shape("Media", file_key=_Str, image_key=_Str, file_name=_Str, duration=_Num)
_CALENDAR = _shape("Calendar", summary=_Str, title=_Str, organizer=_Str, organizer_display_name=_Str,
                   start_time=_Num, end_time=_Num)
_People = list[str | _Named] | None
# Types lark-oapi's converters assume: every documented field, typed as the docs give it.
CONTENT_SHAPES: dict[str, type[BaseModel]] = {
    "text": _shape("Text", text=_Str),
    "post": _PostDoc,
    "image": _shape("Image", image_key=_Str),
    "file": _shape("File", file_key=_Str, file_name=_Str),
    "folder": _shape("Folder", file_key=_Str, file_name=_Str, name=_Str),
    "audio": _shape("Audio", file_key=_Str, duration=_Num),
    "media": _MEDIA,
    "video": _MEDIA,
    "sticker": _shape("Sticker", file_key=_Str),
    "interactive": _shape("Interactive", title=_Str, elements=list[Any] | None),
    "merge_forward": _shape("MergeForward", content=_Str),
    "share_chat": _shape("ShareChat", chat_id=_Str),
    "share_user": _shape("ShareUser", user_id=_Str),
    "system": _shape("System", template=_Str, from_user=_People, to_chatters=_People,
                     divider_text=dict[str, Any] | None),
    "location": _shape("Location", name=_Str, longitude=_Num, latitude=_Num),
    "video_chat": _shape("VideoChat", topic=_Str, start_time=_Num),
    "calendar": _CALENDAR,
    "general_calendar": _CALENDAR,
    "share_calendar_event": _CALENDAR,
    "vote": _shape("Vote", topic=_Str, options=list[str] | None),
    "hongbao": _shape("Hongbao", text=_Str, title=_Str),
    "todo": _shape("Todo", task_id=_Str, summary=_TodoSummary | str | None, due_time=_Num),
}


def _depth(value: Any) -> int:
    """Nesting depth without recursion (the input decides how deep it goes)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        node, level = stack.pop()
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
        for child in children:
            if isinstance(child, (dict, list)):
                if level + 1 > MAX_CONTENT_DEPTH:
                    return level + 1
                stack.append((child, level + 1))
        deepest = max(deepest, level)
    return deepest


def first_error(exc: ValidationError) -> str:
    """The first problem, by field path; never the offending value (it may be huge or sensitive)."""
    err = exc.errors()[0]
    return f"{'.'.join(str(p) for p in err['loc']) or 'value'}: {err['msg']}"


def content_object(message_type: str, raw: str) -> dict[str, Any]:
    """The content JSON object, checked against its type's documented shape; raises `ContentError`."""
    if not raw:
        return {}
    try:
        data = json.loads(raw)
    except RecursionError:
        raise ContentError("content is nested too deeply") from None
    except ValueError:
        raise ContentError("content is not valid JSON") from None
    if not isinstance(data, dict):
        raise ContentError("content is not a JSON object")
    if _depth(data) > MAX_CONTENT_DEPTH:
        raise ContentError("content is nested too deeply")
    if has_lone_surrogate(raw, data):
        raise ContentError("content contains a lone UTF-16 surrogate")
    shape = CONTENT_SHAPES.get(message_type)
    # A post may also come wrapped in locales ({"zh_cn": {...}}); lark-oapi reads each wrapped document.
    docs = [data] if message_type != "post" or "content" in data else [v for v in data.values() if isinstance(v, dict)]
    try:
        for doc in docs if shape else []:
            shape.model_validate(doc)  # type: ignore[union-attr]
    except ValidationError as exc:
        raise ContentError(f"{message_type} content: {first_error(exc)}") from None
    return data


FORWARDED_PLACEHOLDER = "<forwarded_messages/>"  # the worker fetches the bundle (bot/feishu/materials.py)


def render_content(message_type: str, data: dict[str, Any], book: MentionBook) -> str:
    """Plain text of checked content; our renderers where lark-oapi's lose layout or text, its converters else."""
    if message_type == "text":
        text = data.get("text")
        return resolve_text(text if isinstance(text, str) else "", book)
    if message_type == "post":
        return render_post(data, book)
    if message_type == "interactive":
        return render_card(data, book)
    if message_type == "image":
        return image_mark(data["image_key"]) if data.get("image_key") else "<image/>"
    if message_type == "merge_forward":
        return FORWARDED_PLACEHOLDER
    if message_type not in CONTENT_SHAPES:  # undocumented type: never guess at its shape
        text = data.get("text")
        return text if isinstance(text, str) and text else f"[{message_type} message]"
    if message_type == "system":
        data = fill_system(data)
    try:
        text, _resources = flatten_content(parse_message_content(message_type, data))
    except Exception as exc:  # a shape the checks above let through is still bad input, not our outage
        raise ContentError(f"{message_type} content cannot be read ({exc.__class__.__name__})") from None
    if not isinstance(text, str):
        raise ContentError(f"{message_type} content has no readable text")
    return text


def flatten_text(message_type: str, raw_content: str, book: MentionBook | None = None) -> str:
    """Plain text of any message type; raises `ContentError`."""
    return render_content(message_type, content_object(message_type, raw_content), book or MentionBook([], None))


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


def dumps(inbound: Inbound) -> str:
    """The inbox entry: a JSON object without `gen`, which PUSH appends as the object's last member."""
    return json.dumps(inbound.model_dump(mode="json", exclude={"gen"}), ensure_ascii=False, separators=(",", ":"))
