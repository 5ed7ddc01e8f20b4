"""Message content as the model should read it: layout kept, mentions resolved, cards and templates filled. Pure."""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

_PLACEHOLDER = re.compile(r"( ?)(@_user_\d+)([ \t]*)")
_AT_ALL = re.compile(r"@_all(?![A-Za-z0-9_])")
_TEMPLATE_VAR = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)\}")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
MENTION_ALL = "@all"
_STYLE_MARKS = (("bold", "**"), ("italic", "*"), ("lineThrough", "~~"), ("strikethrough", "~~"), ("code", "`"))


def image_mark(image_key: str) -> str:
    """How an image inside a message appears in `Inbound.text`; the worker swaps it for the picture."""
    return f'<image key="{image_key}"/>'


@dataclass(frozen=True)
class Person:
    key: str
    open_id: str | None
    name: str | None


class MentionBook:
    """Who `@_user_N` placeholders and post/card at-tags stand for, and which of them is this bot."""

    def __init__(self, people: Iterable[Person], bot_open_id: str | None) -> None:
        self.bot_open_id = bot_open_id
        self.by_key: dict[str, Person] = {}
        self.by_open_id: dict[str, Person] = {}
        for person in people:
            if person.key:
                self.by_key[person.key] = person
            if person.open_id:
                self.by_open_id[person.open_id] = person
        self.dropped_bot = False

    def at(self, user_id: str | None, user_name: str | None = None) -> str | None:
        """`@Name` for an at-tag or placeholder; None for this bot's own mention (it is dropped)."""
        uid = user_id or ""
        if uid in ("all", "@_all"):
            return MENTION_ALL
        person = self.by_key.get(uid) or self.by_open_id.get(uid)
        open_id = person.open_id if person else (uid if uid.startswith("ou_") else None)
        if self.bot_open_id and open_id == self.bot_open_id:
            self.dropped_bot = True
            return None
        name = user_name or (person.name if person else None)
        if name:
            return f"@{name.removeprefix('@')}"
        if uid:  # a placeholder nobody resolved stays as Feishu sent it; a bare id gets its @
            return uid if uid.startswith("@") else f"@{uid}"
        return ""  # an at-tag with neither id nor name: nothing to show, not a stray "@"


def _tidy(text: str, book: MentionBook) -> str:
    """After dropping the bot's mention, no blank first line or trailing spaces are left; indentation stays."""
    return _LEADING_BLANK_LINES.sub("", text).rstrip() if book.dropped_bot else text


def resolve_text(text: str, book: MentionBook) -> str:
    """Placeholders → `@Name`, the bot's own mention dropped with the spaces after it; nothing else changes."""

    def replace(match: re.Match[str]) -> str:
        before, key, after = match.groups()
        shown = book.at(key)
        if shown is None:
            return " " if before and after else ""
        return f"{before}{shown}{after}"

    return _tidy(_AT_ALL.sub(MENTION_ALL, _PLACEHOLDER.sub(replace, text)), book)


# --- post ----------------------------------------------------------------------------------------------


def post_document(data: dict[str, Any]) -> dict[str, Any]:
    """The post body: received posts have none, sent ones a locale wrapper ({"zh_cn": {...}})."""
    if "content" in data or "title" in data:
        return data
    return next((v for v in data.values() if isinstance(v, dict)), {})


def _styled(text: str, style: Any) -> str:
    styles = style if isinstance(style, list) else []
    for name, mark in _STYLE_MARKS:
        if name in styles and text.strip():
            text = f"{mark}{text}{mark}"
    return text


def _post_element(el: dict[str, Any], book: MentionBook) -> str | None:
    """One inline element; None when it was the bot's own mention."""
    tag = el.get("tag")
    raw = el.get("text")
    text = raw if isinstance(raw, str) else ""
    if tag in ("text", "md"):
        return _styled(text, el.get("style"))
    if tag == "a":
        href = el.get("href") or ""
        return f"[{text}]({href})" if href else text
    if tag == "at":
        return book.at(el.get("user_id"), el.get("user_name"))
    if tag == "img":
        return image_mark(el["image_key"]) if el.get("image_key") else "<image/>"
    if tag == "media":
        return f'<video key="{el.get("file_key") or ""}"/>'
    if tag == "emotion":
        return f":{el.get('emoji_type') or ''}:"
    if tag == "code_block":
        return f"```{(el.get('language') or '').lower()}\n{text}\n```"
    if tag == "hr":
        return "---"
    return text


def _post_line(paragraph: list[Any], book: MentionBook) -> str:
    chunks: list[str] = []
    strip_next = False
    for el in paragraph:
        if not isinstance(el, dict):
            continue
        chunk = _post_element(el, book)
        if chunk is None:  # the bot's mention: its separating space goes with it
            strip_next = True
            if chunks and chunks[-1].endswith(" "):
                chunks[-1] = chunks[-1][:-1]
                strip_next = False
            continue
        if strip_next:
            chunk, strip_next = chunk.lstrip(" "), False
        chunks.append(chunk)
    return "".join(chunks)


def render_post(data: dict[str, Any], book: MentionBook) -> str:
    """Title, then one line per paragraph: line breaks, blank lines and code indentation are kept."""
    doc = post_document(data)
    lines = [_post_line(p, book) for p in doc.get("content") or [] if isinstance(p, list)]
    while lines and not lines[-1].strip():
        lines.pop()
    while lines and not lines[0].strip():
        lines.pop(0)
    body = "\n".join(lines)
    title = doc.get("title")
    text = f"# {title}\n\n{body}" if title and body else f"# {title}" if title else body
    return _tidy(text, book)


def post_at_tags(data: dict[str, Any]) -> list[tuple[str, str | None]]:
    """(user_id, user_name) of every at-tag in a post, in order."""
    found: list[tuple[str, str | None]] = []
    for paragraph in post_document(data).get("content") or []:
        for el in paragraph if isinstance(paragraph, list) else []:
            if isinstance(el, dict) and el.get("tag") == "at" and el.get("user_id"):
                found.append((str(el["user_id"]), el.get("user_name") or None))
    return found


def image_keys(message_type: str, data: dict[str, Any]) -> list[str]:
    """Image keys the message shows, in reading order: the image of an image message, a post's img tags."""
    if message_type == "image":
        return [data["image_key"]] if data.get("image_key") else []
    if message_type != "post":
        return []
    keys: list[str] = []
    for paragraph in post_document(data).get("content") or []:
        for el in paragraph if isinstance(paragraph, list) else []:
            if isinstance(el, dict) and el.get("tag") == "img" and el.get("image_key") not in (None, "", *keys):
                keys.append(el["image_key"])
    return keys


# --- interactive (received format: title + rows of elements) ---------------------------------------------


def _card_node(node: Any, book: MentionBook) -> str:
    """Visible text of a received-card element (or, defensively, of a raw card JSON element)."""
    if isinstance(node, list):
        return " ".join(s for s in (_card_node(n, book) for n in node) if s)
    if not isinstance(node, dict):
        return node if isinstance(node, str) else ""
    tag = node.get("tag")
    text = node.get("text")
    label = _card_node(text, book) if isinstance(text, dict) else text if isinstance(text, str) else ""
    raw_options = node.get("options")
    options: list[Any] = raw_options if isinstance(raw_options, list) else []
    if tag == "at":
        return book.at(node.get("user_id"), node.get("user_name")) or ""
    if tag == "a":
        return f"[{label}]({node.get('href') or ''})"
    if tag == "img":
        return "[image]"  # the resource API refuses card images (234043): nothing to fetch
    if tag == "hr":
        return "---"
    if tag == "button":
        return f"[button: {label}]"
    if options or tag in ("select_static", "overflow", "date_picker", "picker_time", "picker_datetime"):
        shown = [o if isinstance(o, str) else _card_node(o, book) for o in options]
        hint = node.get("placeholder") or node.get("initial_date") or ""
        hint = _card_node(hint, book) if isinstance(hint, dict) else str(hint)
        return f"[{tag}: {' / '.join(s for s in [hint, *shown] if s)}]"
    if isinstance(node.get("content"), str):
        return str(node["content"])
    parts = [label] if label else []
    for key in ("elements", "fields", "columns", "actions", "title"):
        if key in node:
            parts.append(_card_node(node[key], book))
    return " ".join(p for p in parts if p)


def render_card(data: dict[str, Any], book: MentionBook) -> str:
    """A received card: its title, then one line per row of elements."""
    lines: list[str] = []
    title = data.get("title")
    if isinstance(title, str) and title:
        lines.append(f"# {title}")
    for row in data.get("elements") or []:
        line = "".join(_card_node(el, book) for el in row) if isinstance(row, list) else _card_node(row, book)
        if line.strip():
            lines.append(line)
    return "\n".join(lines) or "[card]"


# --- system ----------------------------------------------------------------------------------------------


def _template_value(value: Any) -> Any:
    """A template variable's value in a form lark-oapi's system converter renders (it keeps dicts raw)."""
    if isinstance(value, dict):  # divider_text: {"text": default, "i18n_text": {locale: text}}
        raw = value.get("i18n_text")
        i18n: dict[str, Any] = raw if isinstance(raw, dict) else {}
        candidates = [value.get("text"), i18n.get("zh_cn"), i18n.get("zh_CN"), *i18n.values()]
        return next((c for c in candidates if isinstance(c, str) and c), "")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if value is None or isinstance(value, (str, list)):
        return value
    return ""


def fill_system(data: dict[str, Any]) -> dict[str, Any]:
    """The system content with every `{var}` of its template given a renderable value (unknown ones: "")."""
    template = data.get("template")
    if not isinstance(template, str):
        return data
    filled = dict(data)
    for name in _TEMPLATE_VAR.findall(template):
        filled[name] = _template_value(data.get(name))
    return filled
