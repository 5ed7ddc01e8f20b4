"""Bitable cell values, pure: what a search/batch_get cell says (text, users, links) and what a write sends."""

from __future__ import annotations

import math
import re
from collections.abc import Iterator
from typing import Any

# Field types as the field list reports them (feishu.md §5.3).
TEXT, NUMBER, SINGLE_SELECT, MULTI_SELECT, DATE, CHECKBOX = 1, 2, 3, 4, 5, 7
USER, PHONE, URL, ATTACHMENT, SINGLE_LINK, LOOKUP, FORMULA, DUPLEX_LINK, LOCATION, GROUP_CHAT = (
    11, 13, 15, 17, 18, 19, 20, 21, 22, 23)
TYPE_NAMES = {
    TEXT: "text", NUMBER: "number", SINGLE_SELECT: "single select", MULTI_SELECT: "multi select", DATE: "date",
    CHECKBOX: "checkbox", USER: "user", PHONE: "phone", URL: "url", ATTACHMENT: "attachment",
    SINGLE_LINK: "one-way link", LOOKUP: "lookup", FORMULA: "formula", DUPLEX_LINK: "two-way link",
    LOCATION: "location", GROUP_CHAT: "group chat",
}
SEGMENT_TYPES = {"text", "mention", "url"}
MAX_DEPTH = 16  # real cells nest at most three deep (formula → segments); deeper input is not a cell
URL_IN_TEXT = re.compile(r"https?://[^\s<>\"'，。、；）]+")
PHONE_RE = re.compile(r"\+?\d{0,63}")


def type_name(field_type: int) -> str:
    return f"{field_type} ({TYPE_NAMES.get(field_type, 'unknown')})"


# -- reading ---------------------------------------------------------------------------------------------


def cell_text(value: Any) -> str:
    """A cell as one line of text, for any shape search/batch_get can answer; never raises."""
    return _text(value, 0)


def _text(value: Any, depth: int) -> str:
    if value is None or depth > MAX_DEPTH:
        return ""
    if isinstance(value, bool):  # before int: bool is an int
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, str):
        return value
    if isinstance(value, dict):
        return _dict_text(value, depth)
    if isinstance(value, list | tuple):
        return _list_text(value, depth)
    return ""


def _number(value: float) -> str:
    if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
        return str(int(value))  # 3.0 → "3": Bitable numbers arrive as JSON floats
    return repr(value)


def _list_text(items: list[Any] | tuple[Any, ...], depth: int) -> str:
    # Text segments join seamlessly ("见 " + "@张三" + " 的文档"); other lists (users, chats, options,
    # attachments, lookup values) are separate things and get a separator.
    if items and all(_is_segment(i) for i in items):
        return "".join(_text(i, depth + 1) for i in items)
    return ", ".join(t for t in (_text(i, depth + 1) for i in items) if t)


def _is_segment(item: Any) -> bool:
    return isinstance(item, dict) and _str(item.get("type")) in SEGMENT_TYPES  # a list there is not hashable


def _dict_text(cell: dict[Any, Any], depth: int) -> str:
    if "link_record_ids" in cell:  # one-/two-way link
        return _text(cell.get("link_record_ids"), depth + 1)
    if "value" in cell and isinstance(cell.get("type"), int):  # lookup / formula
        return _text(cell.get("value"), depth + 1)
    if cell.get("type") == "mention":
        text = _str(cell.get("text")) or (f"@{_str(cell.get('name'))}" if _str(cell.get("name")) else "")
        return text or _str(cell.get("link")) or _str(cell.get("token"))
    for key in ("text", "full_address", "address", "name", "location", "link", "id"):
        # url object / url or text segment: text, else the link; location: the fullest address;
        # user, group chat, attachment: the name, else the id
        text = _str(cell.get(key))
        if text:
            return text
    return ""


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""


def cell_user_ids(value: Any) -> list[str]:
    """The open_ids a cell names: user cells (also inside lookups) and @mention segments, in order, once each."""
    found: list[str] = []
    for node in _dicts(value, 0):
        if node.get("type") == "mention":
            candidate = _str(node.get("token")) or _str(node.get("id"))
        else:
            candidate = _str(node.get("id"))
        if candidate.startswith("ou_") and candidate not in found:
            found.append(candidate)
    return found


def cell_chat_ids(value: Any) -> list[str]:
    """The chat ids (oc_…) a group chat cell names, in order, once each."""
    found: list[str] = []
    for node in _dicts(value, 0):
        candidate = _str(node.get("id"))
        if candidate.startswith("oc_") and candidate not in found:
            found.append(candidate)
    return found


def cell_links(value: Any) -> list[str]:
    """Every link a cell holds: url cells and segments, mention links, URLs written in its text; once each.

    Attachment download URLs (`url`, `tmp_url`) are not links a person wrote, so they are left out.
    """
    found: list[str] = []

    def add(link: str) -> None:
        if link and link not in found:
            found.append(link)

    for node in _nodes(value, 0):
        if isinstance(node, str):
            for match in URL_IN_TEXT.findall(node):
                add(match)
        elif isinstance(node, dict):
            add(_str(node.get("link")))
    return found


def _nodes(value: Any, depth: int) -> Iterator[Any]:
    """Strings and dicts of a cell, depth first; only keys that carry cell content are entered."""
    if depth > MAX_DEPTH:
        return
    if isinstance(value, str):
        yield value
    elif isinstance(value, list | tuple):
        for item in value:
            yield from _nodes(item, depth + 1)
    elif isinstance(value, dict):
        yield value
        text = value.get("text")
        if isinstance(text, str) and text != value.get("link"):
            yield text
        for key in ("value", "link_record_ids"):
            if key in value:
                yield from _nodes(value[key], depth + 1)


def _dicts(value: Any, depth: int) -> Iterator[dict[Any, Any]]:
    return (n for n in _nodes(value, depth) if isinstance(n, dict))


# -- writing ---------------------------------------------------------------------------------------------


def write_value(field_type: int, value: Any) -> Any:
    """The wire value create/update sends for `value` in a field of `field_type`; ValueError if it cannot be."""
    if field_type in (TEXT, SINGLE_SELECT) and isinstance(value, str):
        return value
    if field_type == PHONE and isinstance(value, str) and PHONE_RE.fullmatch(value):
        return value
    if field_type in (USER, GROUP_CHAT):
        ids = [value] if isinstance(value, str) else value
        if isinstance(ids, list | tuple) and ids and all(isinstance(i, str) and i for i in ids):
            return [{"id": i} for i in ids]
    if field_type == URL:
        url = _url(value)
        if url is not None:
            return url
    if field_type == NUMBER:
        number = _number_of(value)
        if number is not None:
            return number
    raise ValueError(f"cannot write a {type(value).__name__} to a Bitable field of type {type_name(field_type)}")


def _url(value: Any) -> dict[str, str] | None:
    if isinstance(value, str) and value:
        return {"text": value, "link": value}
    if isinstance(value, tuple) and len(value) == 2 and all(isinstance(v, str) for v in value) and value[1]:
        return {"text": value[0] or value[1], "link": value[1]}
    return None


def _number_of(value: Any) -> int | float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value):
        return value
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
        try:
            parsed = float(value.strip())
        except ValueError:
            return None
        return parsed if math.isfinite(parsed) else None
    return None
