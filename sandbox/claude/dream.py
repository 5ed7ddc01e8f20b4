"""The stand-in's memory consolidation (a MEMORY CONSOLIDATION request, memory/scopes/dream.py). Offline, deterministic.

It reads the scope's files from the request and, with the memory tool:
- owner facts about one subject ("X负责人是A（12-01 记…）", later "X改由B负责（12-02 记…）") become one file saying
  "X负责人：B（自 12-02 起；原为 A）"; the older notes are deleted;
- a note whose words repeat an older one's is deleted;
everything else (negations, unknowns, to-verify items) is left as it is. Then it answers with what it changed.
"""

from __future__ import annotations

import html
import re
from typing import Any

from sandbox.claude.items import _system_text
from sandbox.claude.memory import _calls, _turn

_FILE = re.compile(r'<file path="(/memories/[^"]+)">\n(.*?)\n</file>', re.DOTALL)
_OWNER = re.compile(r"^(?P<subject>.+?)(?:的)?负责人是(?P<who>[^（(，,。]+)[（(](?P<day>\d\d-\d\d)")
_MOVED = re.compile(r"^(?P<subject>.+?)改由(?P<who>[^（(，,。]+?)负责[（(](?P<day>\d\d-\d\d)")
_WORDS = re.compile(r"^(.*?)[（(]\d\d-\d\d 记")


def dream_reply(body: dict[str, Any]) -> list[dict[str, Any]] | str | None:
    if "MEMORY CONSOLIDATION" not in _system_text(body):
        return None
    question, results = _turn(body["messages"])
    if results:
        failed = [r for r in results if not r.startswith(("File created", "Successfully", "The memory file"))]
        done = f"整理完成：改了 {len(results) - len(failed)} 处"
        return done + (f"，{len(failed)} 处没成功" if failed else "") + "。"
    files = {path: html.unescape(text) for path, text in _FILE.findall(question)}
    commands = _owners(files) + _duplicates(files)
    return _calls(body, commands, "我来整理。") if commands else "没有需要整理的。"


def _owners(files: dict[str, str]) -> list[dict[str, Any]]:
    facts: dict[str, list[tuple[str, str, str]]] = {}  # subject → [(day, who, path)]
    for path, text in files.items():
        line = text.strip().split("\n")[0]
        m = _OWNER.match(line) or _MOVED.match(line)
        if m:
            facts.setdefault(m.group("subject").strip(), []).append((m.group("day"), m.group("who").strip(), path))
    out: list[dict[str, Any]] = []
    for subject, said in facts.items():
        if len(said) < 2:
            continue
        said.sort()
        (_, was, _), (day, now, keep) = said[-2], said[-1]
        out.append({"command": "str_replace", "path": keep, "old_str": files[keep].strip().split("\n")[0],
                    "new_str": f"{subject}负责人：{now}（自 {day} 起；原为 {was}）"})
        out += [{"command": "delete", "path": p} for _, _, p in said[:-1]]
    return out


def _duplicates(files: dict[str, str]) -> list[dict[str, Any]]:
    seen: dict[str, str] = {}
    out: list[dict[str, Any]] = []
    for path in sorted(files):
        m = _WORDS.match(files[path].strip())
        if not m:
            continue
        words = m.group(1).strip()
        if words in seen and not (_OWNER.match(files[path]) or _MOVED.match(files[path])):
            out.append({"command": "delete", "path": path})
        else:
            seen.setdefault(words, path)
    return out
