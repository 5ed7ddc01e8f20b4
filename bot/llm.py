"""Claude adapter: one `messages.create` call through the anthropic SDK, failures mapped to ours."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import anthropic

from bot.errors import Permanent, Retryable
from bot.settings import Settings


@dataclass(frozen=True)
class Completion:
    text: str
    input_tokens: int
    output_tokens: int
    cache_read_tokens: int
    stop_reason: str | None


def _retry_after(exc: anthropic.APIStatusError) -> float | None:
    value = exc.response.headers.get("retry-after")
    try:
        return float(value) if value else None
    except ValueError:
        return None


class Claude:
    def __init__(self, settings: Settings) -> None:
        # Few SDK retries: the SDK obeys retry-after without a cap; longer waits go through the queue.
        self.client = anthropic.Anthropic(
            api_key=settings.secret("anthropic_api_key") or None, base_url=settings.anthropic_base_url,
            max_retries=1, timeout=settings.llm_timeout_seconds,
        )
        self.model = settings.anthropic_model
        self.max_tokens = settings.max_output_tokens

    def complete(self, system: list[dict[str, Any]], messages: list[dict[str, Any]]) -> Completion:
        try:
            msg = self.client.messages.create(
                model=self.model, max_tokens=self.max_tokens, system=system, messages=messages  # type: ignore[arg-type]
            )
        except (anthropic.RateLimitError, anthropic.InternalServerError) as exc:
            raise Retryable(f"model unavailable: {exc.status_code}", _retry_after(exc)) from exc
        except anthropic.APIConnectionError as exc:
            raise Retryable(f"model connection failed: {exc.__class__.__name__}") from exc
        except anthropic.APIStatusError as exc:
            if exc.status_code in (408, 409):
                raise Retryable(f"model busy: {exc.status_code}") from exc
            raise Permanent(f"model rejected the request: {exc.status_code}") from exc
        text = "".join(getattr(block, "text", "") for block in msg.content if block.type == "text")
        usage = msg.usage
        return Completion(
            text=text.strip(), input_tokens=usage.input_tokens or 0, output_tokens=usage.output_tokens or 0,
            cache_read_tokens=usage.cache_read_input_tokens or 0, stop_reason=msg.stop_reason,
        )
