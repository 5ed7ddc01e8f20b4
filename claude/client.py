"""Claude adapter: one `messages.create` call through the anthropic SDK, failures mapped to ours."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anthropic
import httpx2

from claude.cache import with_breakpoints
from core.errors import Paused, Permanent, Retryable
from core.settings import Settings

# The key or the account is the problem, not the message: pause and tell an operator.
PAUSING = (401, 402, 403)
RETRY_STATUSES = (408, 409, 429)
# An error inside a stream (SSE `event: error`) arrives with the stream's HTTP status, 200: its `error.type` says
# what failed. These are worth another try; any other type in a stream is the request's own fault.
RETRY_TYPES = ("overloaded_error", "api_error", "rate_limit_error", "timeout_error")
PAUSING_TYPES = ("authentication_error", "permission_error", "billing_error")


@dataclass(frozen=True)
class How:
    """How one step is asked: `model` (None: the deployment's, ANTHROPIC_MODEL); `turn`: the index of the message
    that opens with the turn's batch (its breakpoints: claude/cache.py; None: a request without a session turn)."""

    model: str | None = None
    turn: int | None = None


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    stop_reason: str | None
    recall: dict[str, Any] | None = None  # fetched / included / pending of recall tools (turn/recall.py)
    cache_creation_tokens: int = 0  # input written to the prompt cache (counted apart from input_tokens)
    rounds: list[dict[str, Any]] | None = None  # the turn's tool rounds as its history keeps them (turn/rounds.py)


@dataclass(frozen=True)
class Step:
    """One request of a tool loop: the answer's text, its content blocks (to send back) and its tool calls."""

    text: str
    content: list[dict[str, Any]]
    tool_uses: list[dict[str, Any]]
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    stop_reason: str | None
    cache_creation_tokens: int = 0


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    headers = exc.response.headers
    for name, scale in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        try:
            value = headers.get(name)
            if value:
                return float(value) / scale
        except ValueError:
            continue
    return None


def _mapped(exc: Exception) -> Exception:
    """Our failure type for an SDK exception; `code` is the HTTP status or the connection error kind."""
    if isinstance(exc, anthropic.APIConnectionError):
        kind = "timeout" if isinstance(exc, anthropic.APITimeoutError) else "connection"
        return Retryable(f"model {kind} failed: {exc.__class__.__name__}", source="model", code=kind)
    if not isinstance(exc, anthropic.APIStatusError):
        return exc
    status, code = exc.status_code, str(exc.status_code)
    if status < 400:  # a mid-stream error: the HTTP status is the stream's
        return _mid_stream(exc)
    if status in PAUSING:
        return Paused(f"model refused our credentials: HTTP {status}", source="model", code=code)
    if status >= 500 or status in RETRY_STATUSES:
        return Retryable(f"model unavailable: HTTP {status}", _retry_after(exc), source="model", code=code)
    return Permanent(f"model rejected the request: HTTP {status}", source="model", code=code)


def _mid_stream(exc: anthropic.APIStatusError) -> Exception:
    """An SSE `event: error` after the stream began: decided by its `error.type` (kept as the code)."""
    kind = str(exc.type or "unknown_error")
    if kind in RETRY_TYPES:
        return Retryable(f"model stream failed: {kind}", source="model", code=kind)
    if kind in PAUSING_TYPES:
        return Paused(f"model refused our credentials mid-stream: {kind}", source="model", code=kind)
    return Permanent(f"model rejected the request mid-stream: {kind}", source="model", code=kind)


class Claude:
    def __init__(self, settings: Settings) -> None:
        # Few SDK retries: the SDK obeys retry-after without a cap; longer waits go through the queue.
        self.client = anthropic.Anthropic(
            api_key=settings.secret("anthropic_api_key") or None, base_url=settings.anthropic_base_url,
            max_retries=1, timeout=settings.llm_timeout_seconds,
        )
        self.model = settings.anthropic_model
        self.max_tokens = settings.max_output_tokens

    def complete(self, system: list[dict[str, Any]], messages: list[dict[str, Any]], *, model: str | None = None,
                 max_tokens: int | None = None) -> Completion:
        """One request without tools; `model` / `max_tokens` override the defaults (a small model's short call). Its
        breakpoints: the system's first block, what the caller marked (shared materials), the end (claude/cache.py)."""
        system, messages = with_breakpoints(system, messages)
        try:
            msg = self.client.messages.create(
                model=model or self.model, max_tokens=max_tokens or self.max_tokens, system=system,  # type: ignore[arg-type]
                messages=messages,  # type: ignore[arg-type]
            )
        except anthropic.AnthropicError as exc:
            raise _mapped(exc) from exc
        text = "".join(getattr(block, "text", "") for block in msg.content if block.type == "text")
        usage = msg.usage
        return Completion(
            text=text.strip(), input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
            cache_read_tokens=usage.cache_read_input_tokens or 0, stop_reason=msg.stop_reason,
            cache_creation_tokens=usage.cache_creation_input_tokens or 0,
        )

    def step(self, system: list[dict[str, Any]], messages: list[dict[str, Any]], tools: list[dict[str, Any]],
             *, final: bool = False, on_text: Callable[[str], None] | None = None, how: How = How()) -> Step:
        """One request offering `tools`; `final` forbids tool calls (tool_choice none) so the loop ends.
        `on_text`: the request is streamed and called with this step's text so far as it grows. `how`: the model (None:
        the deployment's) and the turn's breakpoints."""
        model, turn = how.model, how.turn
        system, messages = with_breakpoints(system, messages, turn)
        extra: dict[str, Any] = {"tools": tools} if tools else {}
        if tools and final:
            extra["tool_choice"] = {"type": "none"}
        kw: dict[str, Any] = dict(model=model or self.model, max_tokens=self.max_tokens, system=system,
                                  messages=messages, **extra)
        try:
            msg = self._streamed(kw, on_text) if on_text else self.client.messages.create(**kw)
        except anthropic.AnthropicError as exc:
            raise _mapped(exc) from exc
        except httpx2.HTTPError as exc:  # a stream cut off mid-answer
            raise Retryable(f"model stream broke: {exc.__class__.__name__}", source="model",
                            code="connection") from exc
        content: list[dict[str, Any]] = []
        for block in msg.content:
            if block.type == "text":
                content.append({"type": "text", "text": block.text})
            elif block.type == "tool_use":
                content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
        usage = msg.usage
        return Step(
            text="".join(b["text"] for b in content if b["type"] == "text").strip(), content=content,
            tool_uses=[b for b in content if b["type"] == "tool_use"], input_tokens=usage.input_tokens or 0,
            output_tokens=usage.output_tokens or 0, cache_read_tokens=usage.cache_read_input_tokens or 0,
            stop_reason=msg.stop_reason, cache_creation_tokens=usage.cache_creation_input_tokens or 0,
        )

    def _streamed(self, kw: dict[str, Any], on_text: Callable[[str], None]) -> Any:
        """The same request streamed: `on_text` sees the text so far after each delta (all text blocks)."""
        parts: list[str] = []
        with self.client.messages.stream(**kw) as stream:
            for event in stream:
                if event.type == "text" and event.text:
                    parts.append(event.text)
                    on_text("".join(parts))
            return stream.get_final_message()

    def probe(self) -> None:
        """A free call that needs valid credentials (count_tokens); raises our failure types."""
        try:
            self.client.with_options(max_retries=0, timeout=15).messages.count_tokens(
                model=self.model, messages=[{"role": "user", "content": "ping"}]
            )
        except anthropic.AnthropicError as exc:
            raise _mapped(exc) from exc
