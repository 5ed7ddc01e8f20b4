"""Scenario results: the counts every scenario reports, its checks, and the Markdown/JSON report."""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


@dataclass
class Check:
    name: str
    ok: bool
    detail: str = ""
    timed: bool = False  # a timing bound: reported by `make chaos`, never asserted by tests (machine-dependent)


@dataclass
class Counts:
    """What happened to the events a scenario sent (see chaos/README.md for each definition)."""

    sent: int = 0
    accepted: int = 0  # got a 200, possibly after redeliveries
    answered: int = 0  # a reply carries its token, or it was dead-lettered and its sender told
    lost: int = 0  # accepted, never answered, not dead-lettered
    duplicates: int = 0  # events whose token is in more than one distinct bot message
    out_of_order: int = 0  # per route, replies that must be dropped for the rest to follow acceptance order
    dead_lettered: int = 0  # events in dead-letter records now
    misplaced: int = 0  # answers outside the event's chat or topic
    redeliveries: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None
    posts: int = 0  # HTTP deliveries made (duplicates included)


@dataclass
class Result:
    num: int
    name: str
    size: str
    counts: Counts = field(default_factory=Counts)
    checks: list[Check] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    error: str = ""
    events: list[dict[str, Any]] = field(default_factory=list, repr=False)  # per event: statuses, latencies

    @property
    def ok(self) -> bool:
        return not self.error and all(c.ok for c in self.checks)

    def check(self, name: str, ok: bool, detail: str = "", timed: bool = False) -> bool:
        self.checks.append(Check(name, bool(ok), detail, timed))
        return bool(ok)

    def failures(self, timed: bool = True) -> list[Check]:
        """Failed checks; timed=False leaves out the timing bounds."""
        return [c for c in self.checks if not c.ok and (timed or not c.timed)]

    def to_json(self) -> dict[str, Any]:
        return {**{k: v for k, v in asdict(self).items() if k != "events"}, "ok": self.ok}


def percentile(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 1)


COLUMNS = ("#", "scenario", "size", "sent", "accepted", "answered", "lost", "dup", "out of order", "dead-lettered",
           "p50 ms", "p99 ms", "redeliveries", "time s", "result")


def _cell(value: Any) -> str:
    return "–" if value is None else str(value)


def row(r: Result) -> list[str]:
    c = r.counts
    verdict = "ok" if r.ok else "**FAIL**: " + "; ".join(f.name for f in r.failures()) + (r.error and " " + r.error)
    return [str(r.num), r.name, r.size, *map(_cell, (c.sent, c.accepted, c.answered, c.lost, c.duplicates,
                                                       c.out_of_order, c.dead_lettered, c.p50_ms, c.p99_ms,
                                                       c.redeliveries)), f"{r.seconds:.0f}", verdict]


def table(results: list[Result]) -> str:
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "|".join("---" for _ in COLUMNS) + "|"]
    lines += ["| " + " | ".join(cell.replace("|", "/") for cell in row(r)) + " |" for r in results]
    return "\n".join(lines)


def details(results: list[Result]) -> str:
    """Per scenario: its notes and every check, so a failure says what was seen."""
    out = []
    for r in results:
        out.append(f"**{r.num}. {r.name}** ({r.size}, {r.seconds:.0f} s){' — ' + r.error if r.error else ''}")
        out += [f"- {note}" for note in r.notes]
        out += [f"- [{'x' if c.ok else ' '}] {c.name}{': ' + c.detail if c.detail else ''}" for c in r.checks]
        out.append("")
    return "\n".join(out)


def write(results: list[Result], meta: dict[str, Any], out_dir: Path = RESULTS) -> Path:
    """chaos/results/latest.md (table + details), latest.json, and events.json (every delivery of every event)."""
    out_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    head = f"# Chaos run {stamp}\n\n`{meta.get('command', 'python -m chaos')}` — {meta.get('wall_s', 0):.0f} s wall\n\n"
    (out_dir / "latest.md").write_text(head + table(results) + "\n\n" + details(results))
    payload = {"meta": {**meta, "date": stamp}, "results": [r.to_json() for r in results]}
    (out_dir / "latest.json").write_text(json.dumps(payload, indent=2, ensure_ascii=False, default=str) + "\n")
    events = {str(r.num): r.events for r in results}
    (out_dir / "events.json").write_text(json.dumps(events, ensure_ascii=False, separators=(",", ":")) + "\n")
    return out_dir / "latest.md"
