"""Who sent a delivery: GitHub's HMAC-SHA256 of the raw body, GitLab's secret token. Pure; constant-time compares.

`sign_github` is what GitHub computes (tests and the sandbox sign with it, the production check verifies with it).
Neither sender signs a timestamp: a replayed delivery is recognised by its id (the inbox's dedupe), not by age.
"""

from __future__ import annotations

import hashlib
import hmac

GITHUB_SIGNATURE = "X-Hub-Signature-256"
GITHUB_EVENT, GITHUB_DELIVERY = "X-GitHub-Event", "X-GitHub-Delivery"
GITLAB_TOKEN, GITLAB_EVENT = "X-Gitlab-Token", "X-Gitlab-Event"
GITLAB_UUID, GITLAB_IDEMPOTENCY = "X-Gitlab-Event-UUID", "Idempotency-Key"


def sign_github(secret: str, body: bytes) -> str:
    """The `X-Hub-Signature-256` value GitHub sends: `sha256=` + the hex HMAC-SHA256 of the raw body."""
    return "sha256=" + hmac.new(secret.encode("utf-8"), body, hashlib.sha256).hexdigest()


def github_signed(secret: str, header: str | None, body: bytes) -> bool:
    """The signature header matches the body under `secret` (an empty secret never matches)."""
    if not secret or not header:
        return False
    given = header.strip().encode("latin-1", "replace")  # HTTP header bytes, whatever they are
    return hmac.compare_digest(given, sign_github(secret, body).encode("ascii"))


def gitlab_signed(token: str, header: str | None) -> bool:
    """The `X-Gitlab-Token` header is the configured token (an empty token never matches)."""
    if not token or header is None:
        return False
    return hmac.compare_digest(header.encode("latin-1", "replace"), token.encode("utf-8"))
