"""Record the scenarios through the stack, check the requests' structure, and have a model answer each request under
test for its rubric: offline the Claude stand-in, with ANTHROPIC_API_KEY the configured model (ANTHROPIC_MODEL,
ANTHROPIC_BASE_URL as the SDK reads them). Prints one line per scenario: pass/fail, input tokens, cache-read share."""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anthropic

from evals import structure
from evals.rig import Rig
from evals.rubric import judge
from evals.scenarios import SCENARIOS, Recorded

RECORDED = Path(__file__).resolve().parent / "recorded"
DEFAULT_MODEL = "claude-sonnet-5-5"


@dataclass
class Result:
    name: str
    structure: list[str] = field(default_factory=list)
    rubric: list[str] = field(default_factory=list)
    tokens: int = 0
    cache_share: float = 0.0
    answer: str = ""

    @property
    def ok(self) -> bool:
        return not self.structure and not self.rubric


def record(rig: Rig) -> list[Recorded]:
    out: list[Recorded] = []
    for scenario in SCENARIOS:
        out += scenario(rig)
    return out


def check_structure(found: list[Recorded]) -> dict[str, list[str]]:
    """Per scenario: its request's own problems, its route's prefix stability, and one tool list across all turns."""
    problems = {r.name: structure.request_problems(r.body, r.turn) for r in found}
    for r in found:
        for earlier, later in itertools.pairwise(r.route):
            problems[r.name] += structure.prefix_kept(earlier, later)
    tools = structure.one_tool_list([r.body for r in found if r.turn])
    for r in found:
        problems[r.name] += tools
    return problems


def client_for(standin_url: str) -> tuple[anthropic.Anthropic, str, bool]:
    """(client, model, live): the configured model when ANTHROPIC_API_KEY is set, else the stand-in."""
    if os.environ.get("ANTHROPIC_API_KEY"):
        return anthropic.Anthropic(max_retries=2), os.environ.get("ANTHROPIC_MODEL") or DEFAULT_MODEL, True
    return anthropic.Anthropic(api_key="sk-offline", base_url=standin_url, max_retries=0), DEFAULT_MODEL, False


def answer(client: anthropic.Anthropic, model: str, body: dict[str, Any]) -> tuple[list[dict[str, Any]], Any]:
    sent = {k: v for k, v in body.items() if k not in ("stream", "model")}
    msg = client.messages.create(model=model, **sent)
    return [b.model_dump(exclude_none=True) for b in msg.content], msg.usage


def evaluate(found: list[Recorded], client: anthropic.Anthropic, model: str) -> list[Result]:
    problems = check_structure(found)
    results = []
    for r in found:
        content, usage = answer(client, model, r.body)
        read, written = usage.cache_read_input_tokens or 0, usage.cache_creation_input_tokens or 0
        total = (usage.input_tokens or 0) + read + written
        text = " ".join(str(b.get("text", "")) for b in content if b.get("type") == "text") + " ".join(
            f"[{b.get('name')} {json.dumps(b.get('input'), ensure_ascii=False)}]" for b in content
            if b.get("type") == "tool_use")
        results.append(Result(r.name, problems[r.name], judge(r.rubric, content, r.body), total,
                              read / total if total else 0.0, text.strip()[:160]))
    return results


def save(found: list[Recorded]) -> None:
    """The requests under test, as sent (evals/recorded/<scenario>.json): what a model is given, for review."""
    RECORDED.mkdir(exist_ok=True)
    for r in found:
        (RECORDED / f"{r.name}.json").write_text(json.dumps({"scenario": r.name, "what": r.what, "request": r.body},
                                                            ensure_ascii=False, indent=1) + "\n")


def table(results: list[Result], model: str, live: bool) -> str:
    lines = [f"model: {model} ({'live' if live else 'offline stand-in'})",
             f"{'scenario':<30} {'result':<6} {'tokens':>7} {'cache':>6}  notes"]
    for x in results:
        notes = "; ".join([*x.structure, *x.rubric]) or x.answer
        lines.append(f"{x.name:<30} {'pass' if x.ok else 'FAIL':<6} {x.tokens:>7} {x.cache_share:>6.0%}  {notes}")
    passed = sum(1 for x in results if x.ok)
    lines.append(f"{passed}/{len(results)} scenarios pass")
    return "\n".join(lines)


def run(keep: bool = True) -> tuple[list[Result], str]:
    """Record every scenario through a fresh stack, then evaluate; (results, the printed table)."""
    with Rig() as rig:
        found = record(rig)
        if keep:
            save(found)
        client, model, live = client_for(rig.stack.claude.url)
        rig.stack.claude.cache.clear()  # each answered as a first request, as the live model sees them
        results = evaluate(found, client, model)
    return results, table(results, model, live)
