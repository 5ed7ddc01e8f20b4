"""Our own failure types: adapters turn SDK failures into these, the drain job decides from them."""

from __future__ import annotations


class AdapterError(Exception):
    """A failure of an outside system; `source` is `model` or `feishu`, `code` its status or error code."""

    def __init__(self, message: str, *, source: str = "", code: str = "") -> None:
        super().__init__(message)
        self.source, self.code = source, code


class Retryable(AdapterError):
    """Worth trying again later (rate limits, overload, timeouts, 5xx)."""

    def __init__(self, message: str, retry_after: float | None = None, *, source: str = "", code: str = "") -> None:
        super().__init__(message, source=source, code=code)
        self.retry_after = retry_after


class Permanent(AdapterError):
    """This message cannot succeed, however often it is tried (bad request, target gone)."""


class Paused(AdapterError):
    """The service itself cannot work (revoked key, app credentials, missing scope): an operator must act.

    Not the message's fault: its batch is kept, work on the component pauses, admins are told, and
    everything is answered once a probe sees the credential work again.
    """


class CapabilityOff(Permanent):
    """An optional capability (reactions, resources, thread history, …) is off: the app lacks its scope.

    Permanent for this call, and only for it: callers degrade (the message is still answered) instead of pausing.
    """

    def __init__(self, message: str, *, source: str = "", code: str = "", capability: str = "") -> None:
        super().__init__(message, source=source, code=code)
        self.capability = capability
