"""Feishu message content as received (feishu.md §2.3): each `message_type`'s documented shape, checked, and read
into the text the model sees (layout kept, mentions resolved). Pure; raises `ContentError` for a wrong shape."""

from __future__ import annotations

import json
import re
from typing import Any

# Imported at module load on purpose: lark-oapi takes seconds to import, which must be paid at
# worker boot, never by the first request against Feishu's 3 s deadline.
from lark_oapi.channel import flatten_content, parse_message_content
from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from feishu.content import (
    MentionBook,
    fill_system,
    image_mark,
    render_card,
    render_post,
    resolve_text,
)

MAX_CONTENT_DEPTH = 64  # real cards nest ~20 levels; lark-oapi's card walker recurses once per level
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
_SURROGATE_ESCAPE_B = re.compile(rb"\\u[dD][89a-fA-F]")


class ContentError(ValueError):
    """`message.content` does not have the shape its `message_type` documents (feishu.md §2.3)."""


class _Loose(BaseModel):
    # Feishu adds fields over time; unknown ones must not break parsing.
    model_config = ConfigDict(extra="ignore")


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


FORWARDED_PLACEHOLDER = "<forwarded_messages/>"  # the worker fetches the bundle (feishu/resources.py)


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
