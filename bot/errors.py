"""Our own failure types: adapters turn SDK failures into these two, the drain job decides from them."""

from __future__ import annotations


class Retryable(Exception):
    """Worth trying again later (rate limits, overload, timeouts, 5xx)."""

    def __init__(self, message: str, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Permanent(Exception):
    """Trying again will not help (bad request, target gone, no permission)."""
