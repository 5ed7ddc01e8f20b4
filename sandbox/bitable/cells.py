"""Bitable cell rules for the emulator: field types, written values → cells, read formats, filters, pages (§5)."""

from __future__ import annotations

import base64
import copy
import json
import re
import string
import uuid
from collections.abc import Callable
from typing import Any

from sandbox.feishu.rules import FeishuError

TEXT, NUMBER, SINGLE, MULTI, DATE, CHECKBOX, USER, PHONE, URL, GROUP = 1, 2, 3, 4, 5, 7, 11, 13, 15, 23
UI_TYPES = {TEXT: "Text", NUMBER: "Number", SINGLE: "SingleSelect", MULTI: "MultiSelect", DATE: "DateTime",
            CHECKBOX: "Checkbox", USER: "User", PHONE: "Phone", URL: "Url", GROUP: "GroupChat"}
# Per-type conversion failures (§5.4); a group chat cell has no code of its own, so the generic mismatch.
CONVERSION_CODES = {TEXT: 1254060, NUMBER: 1254061, SINGLE: 1254062, MULTI: 1254063, DATE: 1254064,
                    CHECKBOX: 1254065, USER: 1254066, PHONE: 1254072, URL: 1254068, GROUP: 1254015}
HTTP_400_CODES = frozenset({1254011, 1254015, 1254037, 99992402})
OPERATORS = frozenset({"is", "isNot", "contains", "doesNotContain", "isEmpty", "isNotEmpty", "isGreater",
                       "isGreaterEqual", "isLess", "isLessEqual"})
NEGATED = {"isNot": "is", "doesNotContain": "contains"}
COMPARE: dict[str, Callable[[float, float], bool]] = {
    "isGreater": lambda a, b: a > b, "isGreaterEqual": lambda a, b: a >= b,
    "isLess": lambda a, b: a < b, "isLessEqual": lambda a, b: a <= b,
}
_URL_RE = re.compile(r"https?://[^\s<>\"']+")
_ALNUM = string.ascii_letters + string.digits
Person = Callable[[str], dict[str, str]]


def bitable_error(code: int, msg: str = "") -> FeishuError:
    """Most Bitable errors are HTTP 200 with a non-zero code (§5.4); a few are 400."""
    return FeishuError(code, msg, 400 if code in HTTP_400_CODES else 200)


def new_bitable_id(prefix: str, size: int = 14) -> str:
    """Bitable ids are a prefix plus alphanumerics (rec + 14, fld + 10, opt + 10)."""
    raw = uuid.uuid4().int
    chars = []
    for _ in range(size):
        raw, index = divmod(raw, len(_ALNUM))
        chars.append(_ALNUM[index])
    return prefix + "".join(chars)


def segments(text: str) -> list[dict[str, str]]:
    """A text cell as search/batch_get read it: text segments, with URLs as url segments."""
    out: list[dict[str, str]] = []
    pos = 0
    for match in _URL_RE.finditer(text):
        if match.start() > pos:
            out.append({"type": "text", "text": text[pos:match.start()]})
        out.append({"type": "url", "text": match.group(), "link": match.group()})
        pos = match.end()
    if pos < len(text):
        out.append({"type": "text", "text": text[pos:]})
    return out


def _ids(value: Any, prefix: str) -> list[str] | None:
    """[{"id": "ou_…"}] (only `id` accepted) → the ids, or None when the shape is wrong."""
    if not isinstance(value, list):
        return None
    ids = [v.get("id") for v in value if isinstance(v, dict) and set(v) == {"id"}]
    if len(ids) != len(value) or not all(isinstance(i, str) and i.startswith(prefix) for i in ids):
        return None
    return [str(i) for i in ids]


def to_cell(kind: int, value: Any) -> Any:
    """A written value → the stored cell (None clears it); raises the per-type conversion code."""
    if value is None or value == "" or value == []:
        return None
    cell: Any = None
    if kind in (TEXT, SINGLE, PHONE) and isinstance(value, str):
        cell = value if kind != PHONE or re.fullmatch(r"\+?\d{0,64}", value) else None
    elif kind in (NUMBER, DATE) and isinstance(value, int | float) and not isinstance(value, bool):
        cell = value if kind == NUMBER else int(value)
    elif kind == CHECKBOX and isinstance(value, bool):
        cell = value
    elif kind == MULTI and isinstance(value, list) and all(isinstance(v, str) for v in value):
        cell = list(value)
    elif kind in (USER, GROUP):
        cell = _ids(value, "ou_" if kind == USER else "oc_")
    elif kind == URL and isinstance(value, dict) and isinstance(value.get("link"), str) \
            and isinstance(value.get("text", ""), str) and set(value) <= {"text", "link"}:
        cell = {"text": value.get("text") or value["link"], "link": value["link"]}
    if cell is None:
        raise bitable_error(CONVERSION_CODES[kind], f"{CONVERSION_CODES[kind]}: bad value for a type {kind} field")
    return cell


def read_cell(kind: int, cell: Any, person: Person, chat_name: Callable[[str], str]) -> Any:
    """A stored cell as search/batch_get answer it."""
    if kind == TEXT:
        return segments(cell)
    if kind == USER:
        return [person(open_id) for open_id in cell]
    if kind == GROUP:
        return [{"id": c, "name": chat_name(c), "avatar_url": ""} for c in cell]
    return copy.deepcopy(cell)


def texts_of(kind: int, cell: Any) -> list[str]:
    if kind == URL:
        return [cell["text"], cell["link"]]
    if kind == CHECKBOX:
        return ["true" if cell else "false"]
    if isinstance(cell, list):
        return [str(c) for c in cell]
    return [str(cell)]


def matches(kind: int, cell: Any, operator: str, values: list[str]) -> bool:
    """One filter condition against one cell (text-like cells compare on their plain text)."""
    if operator in ("isEmpty", "isNotEmpty"):
        return (cell is None) == (operator == "isEmpty")
    if operator in NEGATED:
        return not matches(kind, cell, NEGATED[operator], values)
    if cell is None or not values:
        return False
    if operator in COMPARE:
        if kind not in (NUMBER, DATE):
            raise bitable_error(1254018, f"InvalidFilter: {operator} needs a number or date field")
        try:
            return COMPARE[operator](float(cell), float(values[0]))
        except ValueError:
            raise bitable_error(1254018, "InvalidFilter: value must be a number") from None
    if kind in (USER, GROUP, MULTI):  # people, chats, options: set semantics
        return set(cell) == set(values) if operator == "is" else bool(set(cell) & set(values))
    if kind == NUMBER and operator == "is":
        try:
            return float(cell) == float(values[0])
        except ValueError:
            raise bitable_error(1254018, "InvalidFilter: value must be a number") from None
    texts = texts_of(kind, cell)
    if operator == "is":
        return any(t == v for t in texts for v in values)
    return any(v.casefold() in t.casefold() for t in texts for v in values)


def page_token(offset: int) -> str:
    return base64.urlsafe_b64encode(json.dumps({"offset": offset}).encode()).decode()


def page_offset(token: str | None) -> int:
    if not token:
        return 0
    try:
        return int(json.loads(base64.urlsafe_b64decode(token.encode()))["offset"])
    except (ValueError, TypeError, KeyError):
        raise bitable_error(1254002, "Fail: invalid page_token") from None


def bounded_size(raw: Any, default: int, top: int, code: int = 1254011) -> int:
    if raw in (None, ""):
        return default
    try:
        size = int(raw)
    except (TypeError, ValueError):
        size = 0
    if not 1 <= size <= top:
        raise bitable_error(code, f"page_size must be between 1 and {top}")
    return size
