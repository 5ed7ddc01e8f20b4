"""Session compression, pure parts: the prompt that asks for a summary, and the survivor check.

The model may paraphrase or drop things. What must never be lost at a rotation is extracted from the
compressed turns with plain patterns (ids, versions, negations, failures, unknowns, open "to verify"
points); every fact the summary does not contain verbatim is appended to it, verbatim.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from claude.prompt import Entry

# The prompt's own first words, no tag of ours: a model reads a literal "<<…>>" as noise at best. The sandbox stand-in
# recognises compression requests by this opening sentence.
MARKER = "You compress the older part of a team chat"
RESTORED_HEADER = "原文保留的要点（摘要可能遗漏，逐字保留）/ Verbatim facts kept from the compressed turns:"

COMPRESSION_SYSTEM = f"""{MARKER} between colleagues and an assistant into a summary that
replaces those turns in the next requests. Write it in the language of the conversation, as short
notes. Keep, verbatim: message ids (om_…, oc_…, ou_…, omt_…), record ids (rec…), versions, numbers
and names. Keep every negation and correction exactly ("not the ETL job", "不是 ETL 任务"), every
failure and error, every unknown, and every open "to verify" / 待确认 / TODO point. For each
conclusion say which scope (person, chat, system, version) it applies to. Do not answer anything;
output only the summary."""

_ID = re.compile(r"\b(?:om|oc|ou|on|omt|ot|msg)_[A-Za-z0-9_-]{3,}|\brec[A-Za-z0-9]{4,}\b")
_VERSION = re.compile(r"(?<![\w.])v?\d+\.\d+(?:\.\d+)+(?![\w.])|\bv\d+(?:\.\d+)?\b", re.IGNORECASE)
_NEGATION = re.compile(r"不是|并非|并不是|不在|没有|\bnot\b|n't\b|\bnever\b|\bno longer\b", re.IGNORECASE)
_OPEN = re.compile(r"待确认|待核实|待验证|to verify|\bTODO\b|需要确认|open question", re.IGNORECASE)
_FAILURE = re.compile(r"失败|报错|错误|异常|\berror\b|\bfailed\b|\bfailure\b|\bexception\b", re.IGNORECASE)
_UNKNOWN = re.compile(r"不确定|不清楚|未知|\bunknown\b|\bunclear\b|\bnot sure\b", re.IGNORECASE)
_SENTENCE_END = re.compile(r"(?<=[。！？!?；;])|(?<=\.)\s+|\n+")
_TAG = re.compile(r"</?message\b[^>]*>|</?session_summary>")
_RESTORED_LINE = re.compile(r"^- \[[a-z]+\] ")  # a fact restored by an earlier rotation
SENTENCE_KINDS = (("negation", _NEGATION), ("open", _OPEN), ("failure", _FAILURE), ("unknown", _UNKNOWN))
MAX_SENTENCE_CHARS = 300  # a "sentence" longer than this is a paste: keep its first part


@dataclass(frozen=True)
class Fact:
    kind: str  # id, version, negation, open, failure, unknown
    text: str


def plain(text: str) -> str:
    """A turn's words without the `<message …>` attribution tags, unescaped."""
    return html.unescape(_TAG.sub("", text))


def sentences(text: str) -> list[str]:
    out = []
    for part in _SENTENCE_END.split(plain(text)):
        s = _RESTORED_LINE.sub("", part.strip())
        if s and s != RESTORED_HEADER:
            out.append(s[:MAX_SENTENCE_CHARS])
    return out


def extract_facts(turns: Sequence[Entry]) -> list[Fact]:
    """Everything that must survive a compression of `turns`, in order of appearance, without repeats."""
    facts: list[Fact] = []
    seen: set[str] = set()

    def add(kind: str, text: str) -> None:
        if text not in seen:
            seen.add(text)
            facts.append(Fact(kind, text))

    for turn in turns:
        for m in _ID.finditer(turn["text"]):  # attributes too: the batch's message ids live there
            add("id", m.group(0))
        for m in _VERSION.finditer(plain(turn["text"])):
            add("version", m.group(0))
        for s in sentences(turn["text"]):
            for kind, pattern in SENTENCE_KINDS:
                if pattern.search(s):
                    add(kind, s)
                    break
    return facts


def _normal(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def missing(summary: str, facts: Sequence[Fact]) -> list[Fact]:
    """The facts the summary does not contain verbatim (whitespace-insensitive)."""
    have = _normal(summary)
    return [f for f in facts if _normal(f.text) not in have]


def restore(summary: str, facts: Sequence[Fact]) -> str:
    """The summary with every fact it dropped appended verbatim under a header."""
    lost = missing(summary, facts)
    if not lost:
        return summary
    lines = [f"- [{f.kind}] {f.text}" for f in lost]
    return "\n".join([summary.rstrip(), "", RESTORED_HEADER, *lines])


def restore_within(summary: str, facts: Sequence[Fact], cost: Callable[[str], int], room: int) -> str:
    """`restore`, bounded to `room` (by `cost`, additive over lines): the dropped facts that fit, chosen by
    priority — negations, open points, failures, unknowns and versions first, the newer before the older
    (the latest state of what is known); then ids, the older first (where the issue began: the newest
    turns, with their ids, are carried over verbatim anyway) — and listed in their original order; a last
    line counts the ones left out (they stay readable in the ended session: read_history). A summary
    therefore never outgrows its share of the budget, however long the history."""
    lost = missing(summary, facts)
    used = cost(_with_facts(summary, [], len(lost)))  # the summary, the header and the "left out" line
    chosen: list[int] = []
    for i in sorted(range(len(lost)), key=lambda i: (1, i) if lost[i].kind == "id" else (0, -i)):
        line = cost(f"- [{lost[i].kind}] {lost[i].text}\n")
        if used + line <= room:
            chosen.append(i)
            used += line
    chosen.sort()
    return _with_facts(summary, [lost[j] for j in chosen], len(lost) - len(chosen))


def _with_facts(summary: str, facts: Sequence[Fact], omitted: int) -> str:
    if not facts and not omitted:
        return summary
    lines = [f"- [{f.kind}] {f.text}" for f in facts]
    if omitted:
        lines.append(f"- （另有 {omitted} 条较早的要点未列出，可用 read_history 查看 / {omitted} older facts left out)")
    return "\n".join([summary.rstrip(), "", RESTORED_HEADER, *lines]).strip()


def compression_request(turns: Sequence[Entry], earlier_summary: str = "") -> list[dict[str, str]]:
    """The user message of a compression call: the turns to compress, attributed by role."""
    parts = []
    if earlier_summary:
        parts.append(f"<earlier_summary>\n{earlier_summary}\n</earlier_summary>")
    parts.append("<turns>")
    for t in turns:
        parts.append(f'<turn role="{t["role"]}">\n{t["text"]}\n</turn>')
    parts.append("</turns>")
    parts.append("Summarise the turns above (and the earlier summary, if any) following the rules.")
    return [{"role": "user", "content": "\n".join(parts)}]


def summary_entry_text(summary: str) -> str:
    """How a summary appears in the new session's history (a user-role turn the model reads first)."""
    return f"<session_summary>\n{summary}\n</session_summary>"
