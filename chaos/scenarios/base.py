"""The scenario registry: a scenario registers itself here, drives the running stack, then checks its invariants."""

from __future__ import annotations

import os
import random
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field

from chaos.measure import Leaks, Run
from chaos.report import Result
from chaos.stack import Stack


@dataclass
class Context:
    stack: Stack
    quick: bool
    seed: int
    leaks: Leaks
    rng: random.Random = field(default_factory=random.Random)

    def size(self, quick: int, full: int) -> int:
        return quick if self.quick else full

    def run(self, result: Result, **sender_kw: object) -> Run:
        sender_kw.setdefault("seed", self.seed)
        return Run(self.stack, self.leaks, result, self.quick, **sender_kw)  # type: ignore[arg-type]


ScenarioFn = Callable[[Context, Result], None]


@dataclass(frozen=True)
class Scenario:
    num: int
    name: str
    fn: ScenarioFn
    # Leaves the stack in a state a later scenario must not inherit (e.g. routes held for minutes).
    fresh_stack_after: bool = False


REGISTRY: dict[int, Scenario] = {}


def scenario(num: int, name: str, fresh_stack_after: bool = False) -> Callable[[ScenarioFn], ScenarioFn]:
    def register(fn: ScenarioFn) -> ScenarioFn:
        REGISTRY[num] = Scenario(num, name, fn, fresh_stack_after)
        return fn

    return register


def execute(ctx: Context, sc: Scenario) -> Result:
    """Run one scenario with calm emulators; an exception becomes a failed result, never a crash of the suite."""
    result = Result(sc.num, sc.name, "")
    ctx.rng = random.Random(ctx.seed * 1000 + sc.num)
    ctx.stack.calm()
    started, load = time.monotonic(), os.getloadavg()[0]
    try:
        sc.fn(ctx, result)
    except Exception as exc:
        result.error = f"{exc.__class__.__name__}: {exc}"
        result.notes.append("traceback: " + traceback.format_exc(limit=6).replace("\n", " ⏎ ")[-1500:])
    finally:
        ctx.stack.calm()
    result.seconds = time.monotonic() - started
    result.notes.append(f"machine load (1-min average, {os.cpu_count()} CPUs): {load:.1f} → {os.getloadavg()[0]:.1f}")
    return result
