"""Bitable failures as our own error types: retryable, paused (an operator must act) or permanent."""

from __future__ import annotations

from core.errors import AdapterError, Paused, Permanent, Retryable
from feishu.client import APP_FAULTS, RATE_LIMITED, TOKEN_INVALID

SOURCE = "bitable"
# Retried inside the call with backoff (feishu.md §5.5): rate limit, write conflict, data not ready, "Fail".
LOCAL_RETRY = {1254290, 1254291, 1254607, 1254002}
# Worth a later run: the above once local tries are spent, a Bitable timeout, its internal errors, a
# duplicate concurrent submit on one revision, and the Open API's own rate limits and token rejections.
RETRYABLE = LOCAL_RETRY | {1255040, 1255001, 1255002, 1255003, 1255004, 1255005, 1254608} | RATE_LIMITED | TOKEN_INVALID
# The app cannot use the table at all: no permission (not a collaborator, missing scope), plan limits,
# the app's credentials, or BITABLE_APP_TOKEN / BITABLE_TABLE_ID naming no base or table. Nothing a
# message did; an operator must fix it, so work pauses instead of failing users' messages.
CONFIG_FAULTS = {1254003, 1254004, 1254040, 1254041}
PAUSED = {1254302, 1254304, 1254306, 91403} | APP_FAULTS | CONFIG_FAULTS


class BitableError(AdapterError):
    """A Bitable failure: `code` the error code as text (metrics), `msg` Bitable's message, `log_id` its X-Tt-Logid."""

    msg: str = ""
    http_status: int = 0
    log_id: str = ""


class BitableRetryable(Retryable, BitableError):
    pass


class BitablePaused(Paused, BitableError):
    pass


class BitablePermanent(Permanent, BitableError):
    pass


class SchemaError(BitablePaused):
    """A configured BITABLE_FIELD_* name is not a field of the table: the configuration must change."""

    def __init__(self, message: str) -> None:
        super().__init__(message, source=SOURCE, code="schema")
        self.msg = message


def classify(code: int | str, msg: str, *, http_status: int = 0, log_id: str = "") -> BitableError:
    """The error an answer with this code (or HTTP status) stands for; `code` may be a word such as `transport`."""
    number = code if isinstance(code, int) else -1
    text = f"bitable error {code}: {msg}"
    err: BitableError
    if number in PAUSED:
        err = BitablePaused(text, source=SOURCE, code=str(code))
    elif number in RETRYABLE or http_status >= 500 or http_status == 429 or number < 0:
        err = BitableRetryable(text, source=SOURCE, code=str(code))
    else:
        err = BitablePermanent(text, source=SOURCE, code=str(code))
    err.msg, err.http_status, err.log_id = msg, http_status, log_id
    return err
