"""Token budget arithmetic for one request, and the per-profile calibration of the local estimate.

CONTEXT_BUDGET_TOKENS is the input budget: everything a request carries (system prompt, tool definitions,
history, the batch, tool results). The output reserve (MAX_OUTPUT_TOKENS) is separate. Counting is local
(`estimate_tokens`, no network call) and scaled by a factor learned from the `usage.input_tokens` the API returns.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import redis

from claude.prompt import Entry, estimate_tokens
from core.keys import Keys

MIN_FACTOR, MAX_FACTOR = 0.5, 2.0  # a broken sample (cache accounting, a proxy) cannot run away with it
EWMA_WEIGHT = 0.2
SAFETY_MARGIN = 1.1  # the estimate varies per text; budget with a margin above the calibrated mean
PER_MESSAGE_TOKENS = 4  # role and framing overhead of each message
TRUNCATED = "\n…[消息过长，已截断 {n} 字 / truncated {n} characters]"
IMAGE_TOKENS = 1600  # Anthropic: ~(width × height) / 750, about 1,600 for an image at the size limit


def calibration_key(keys: Keys) -> str:
    return f"{keys.prefix}:tokens:calibration"


def factor(r: redis.Redis, keys: Keys) -> float:
    raw = r.hget(calibration_key(keys), "factor")
    return clamp(float(raw)) if raw else 1.0


def clamp(value: float) -> float:
    return min(MAX_FACTOR, max(MIN_FACTOR, value))


def next_factor(current: float, estimated: int, actual: int) -> float:
    """EWMA of actual ÷ estimated; each sample is clamped too, so one odd request moves it only a step."""
    if estimated <= 0 or actual <= 0:
        return current
    return clamp((1 - EWMA_WEIGHT) * current + EWMA_WEIGHT * clamp(actual / estimated))


def observe(r: redis.Redis, keys: Keys, estimated: int, actual: int) -> float:
    """Fold one request's (raw estimate, input tokens the API counted) into the profile's factor.
    Two workers observing at once may lose one sample; an average does not need every sample."""
    new = next_factor(factor(r, keys), estimated, actual)
    r.hset(calibration_key(keys), mapping={"factor": f"{new:.4f}", "last_estimated": estimated,
                                           "last_actual": actual})
    r.hincrby(calibration_key(keys), "samples", 1)
    return new


def raw_request_tokens(system: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]],
                       tools: Sequence[dict[str, Any]] = ()) -> int:
    """The uncalibrated estimate of a whole request's input."""
    total = sum(estimate_tokens(str(b.get("text", ""))) for b in system)
    if tools:
        total += estimate_tokens(json.dumps(list(tools), ensure_ascii=False))
    for m in messages:
        total += content_tokens(m["content"]) + PER_MESSAGE_TOKENS
    return total


def content_tokens(content: str | Sequence[dict[str, Any]]) -> int:
    """A message's content: text by estimate, an image at the API's ceiling for one image (its base64
    data says nothing about its token cost), anything else (tool use, results) by its JSON."""
    if isinstance(content, str):
        return estimate_tokens(content)
    total = 0
    for block in content:
        if block.get("type") == "text":
            total += estimate_tokens(str(block.get("text", "")))
        elif block.get("type") == "image":
            total += IMAGE_TOKENS
        else:
            total += estimate_tokens(json.dumps(block, ensure_ascii=False))
    return total


@dataclass(frozen=True)
class Budget:
    total: int  # CONTEXT_BUDGET_TOKENS: input tokens per request
    reserve: int  # MAX_OUTPUT_TOKENS: the output limit, not part of the input budget
    factor: float = 1.0

    def cost(self, text: str) -> int:
        """Calibrated tokens of one message's text, with the safety margin and the message overhead."""
        return math.ceil((estimate_tokens(text) + PER_MESSAGE_TOKENS) * self.factor * SAFETY_MARGIN)

    def scaled(self, raw: int) -> int:
        return math.ceil(raw * self.factor * SAFETY_MARGIN)

    def request_cost(self, system: Sequence[dict[str, Any]], messages: Sequence[dict[str, Any]],
                     tools: Sequence[dict[str, Any]] = ()) -> int:
        return self.scaled(raw_request_tokens(system, messages, tools))

    def input_room(self, fixed: int) -> int:
        """Input tokens left for messages once the fixed part (system, tools) is paid."""
        return max(0, self.total - fixed)

    def fit_text(self, text: str, room: int) -> str:
        """`text` cut (with a visible marker) so that its cost is at most `room`; unchanged when it fits."""
        if self.cost(text) <= room:
            return text
        lo = self.prefix_that_fits(text, room, lambda cut: TRUNCATED.format(n=len(text) - cut))
        return text[:lo] + TRUNCATED.format(n=len(text) - lo)

    def prefix_that_fits(self, text: str, room: int, tail: Callable[[int], str] = lambda _: "") -> int:
        """The longest prefix length whose cost, with `tail(length)` after it, is at most `room`."""
        lo, hi = 0, len(text)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.cost(text[:mid] + tail(mid)) <= room:
                lo = mid
            else:
                hi = mid - 1
        return lo

    def leading_that_fit(self, texts: Sequence[str], room: int) -> int:
        """How many of `texts`, from the front, fit `room` together; at least one (an oversize first one is
        spilled by its caller)."""
        used = n = 0
        for text in texts:
            used += self.cost(text)
            if used > room:
                break
            n += 1
        return max(1, n)


def entry_cost(budget: Budget, e: Mapping[str, Any]) -> int:
    """Calibrated tokens of one history entry: its text, and the tool rounds an answer carries."""
    rounds = e.get("rounds") or []
    extra = sum(content_tokens(r.get("content") or []) + PER_MESSAGE_TOKENS for r in rounds)
    return budget.cost(str(e.get("text", ""))) + (budget.scaled(extra) if extra else 0)


def newest_that_fit(budget: Budget, turns: Sequence[Entry], room: int) -> int:
    """How many of the newest `turns` fit in `room`, cut so the kept part starts with a user turn."""
    used = n = 0
    for t in reversed(turns):
        c = entry_cost(budget, t)
        if used + c > room:
            break
        used += c
        n += 1
    while n and turns[len(turns) - n]["role"] != "user":
        n -= 1
    return n


@dataclass(frozen=True)
class Fitted:
    summary: str
    turns: list[Entry]
    batch: str
    dropped: int  # older turns left out: the session no longer fits and should rotate


def fit_session(budget: Budget, fixed: int, summary: str, turns: Sequence[Entry], batch_text: str) -> Fitted:
    """What of a session goes into the next request: the batch first (cut if even it alone does not fit),
    then the summary, then the newest turns that fit. Never more than the budget."""
    room = budget.input_room(fixed)
    batch = budget.fit_text(batch_text, room)
    left = max(0, room - budget.cost(batch))
    kept_summary = ""
    if summary:
        kept_summary = budget.fit_text(summary, left) if budget.cost(TRUNCATED.format(n=len(summary))) < left else ""
        left -= budget.cost(kept_summary) if kept_summary else 0
    n = newest_that_fit(budget, turns, left)
    return Fitted(kept_summary, list(turns[len(turns) - n:]), batch, len(turns) - n)


def keep_after_rotation(budget: Budget, fixed: int, batch_cost: int, turns: Sequence[Entry]) -> int:
    """How many newest turns the next session starts with: those fitting half the room the batch leaves,
    so the new session has space to grow (and to stay cache-friendly) before it rotates again."""
    return newest_that_fit(budget, turns, max(0, budget.input_room(fixed) - batch_cost) // 2)
