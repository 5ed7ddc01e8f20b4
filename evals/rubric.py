"""A scenario's rubric: which tool the answer calls (or none), with which arguments, what the answer must and must not
say, in which language. Pure: it judges the content blocks of one model response."""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

ArgCheck = Callable[[Any, Mapping[str, Any]], bool]  # (the argument's value, the request body) → acceptable
NO_TOOL = ""


@dataclass(frozen=True)
class Rubric:
    tool: str | None = None  # the tool the first call must name; NO_TOOL: no call at all; None: either
    args: Mapping[str, ArgCheck] = field(default_factory=dict)  # per argument of that call
    must_say: Sequence[str] = ()  # patterns the text must match (each)
    must_not_say: Sequence[str] = ()  # patterns the text must not match (any)
    must_not_call: Sequence[str] = ()  # tools it must not call
    language: str = ""  # "en" / "zh": the text is mostly in that language


def text_of(content: Sequence[Mapping[str, Any]]) -> str:
    return "".join(str(b.get("text", "")) for b in content if b.get("type") == "text")


def calls_of(content: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [b for b in content if b.get("type") == "tool_use"]


def judge(rubric: Rubric, content: Sequence[Mapping[str, Any]], body: Mapping[str, Any]) -> list[str]:
    """What the answer got wrong ([] = pass)."""
    problems: list[str] = []
    calls = calls_of(content)
    text = text_of(content)
    if rubric.tool == NO_TOOL and calls:
        problems.append(f"called {calls[0].get('name')} (expected no tool call)")
    elif rubric.tool and not calls:
        problems.append(f"no tool call (expected {rubric.tool})")
    elif rubric.tool and calls[0].get("name") != rubric.tool:
        problems.append(f"called {calls[0].get('name')} (expected {rubric.tool})")
    elif rubric.tool:
        args = calls[0].get("input") or {}
        for name, ok in rubric.args.items():
            if not ok(args.get(name), body):
                problems.append(f"{rubric.tool}.{name} = {json.dumps(args.get(name), ensure_ascii=False)[:120]}")
    problems += [f"called {c.get('name')} (must not)" for c in calls if c.get("name") in rubric.must_not_call]
    checked = text if not calls or text else ""
    for pattern in rubric.must_say:
        if calls and not text:
            break  # a tool call without words: what it says comes after the tool's result
        if not re.search(pattern, checked, re.IGNORECASE):
            problems.append(f"does not say /{pattern}/")
    problems += [f"says /{p}/" for p in rubric.must_not_say if re.search(p, text, re.IGNORECASE)]
    if rubric.language and text and language_of(text) != rubric.language:
        problems.append(f"answers in {language_of(text)} (expected {rubric.language})")
    return problems


def language_of(text: str) -> str:
    """"zh" when CJK characters are at least a fifth of the letters, else "en". Pure."""
    cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    latin = sum(1 for ch in text if ch.isascii() and ch.isalpha())
    return "zh" if cjk * 5 >= cjk + latin and cjk else "en"
