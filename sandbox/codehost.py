"""Deliveries as GitHub and GitLab send them, for tests, the chaos suite and the benchmark: the body and headers of
one webhook request, signed with the production signer (codehost.signature.sign_github)."""

from __future__ import annotations

import json
import uuid
from typing import Any

from codehost.signature import (
    GITHUB_DELIVERY,
    GITHUB_EVENT,
    GITHUB_SIGNATURE,
    GITLAB_EVENT,
    GITLAB_TOKEN,
    GITLAB_UUID,
    sign_github,
)


def github_request(event: str, payload: dict[str, Any] | bytes, secret: str, *,
                   delivery: str | None = None) -> tuple[bytes, dict[str, str]]:
    """What GitHub POSTs: the JSON body, `X-Hub-Signature-256` over exactly those bytes, a delivery GUID."""
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode("utf-8")
    return body, {"Content-Type": "application/json", "User-Agent": "GitHub-Hookshot/test",
                  GITHUB_EVENT: event, GITHUB_DELIVERY: delivery or str(uuid.uuid4()),
                  GITHUB_SIGNATURE: sign_github(secret, body)}


def gitlab_request(event: str, payload: dict[str, Any], token: str, *,
                   event_uuid: str | None = None) -> tuple[bytes, dict[str, str]]:
    """What GitLab POSTs: the JSON body, the secret token, the event's name and UUID."""
    body = json.dumps(payload).encode("utf-8")
    return body, {"Content-Type": "application/json", "User-Agent": "GitLab/17.6.0", GITLAB_EVENT: event,
                  GITLAB_TOKEN: token, GITLAB_UUID: event_uuid or str(uuid.uuid4())}
