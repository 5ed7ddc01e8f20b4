"""The operator console's Redis keys: sign-ins, Feishu sign-ins under way, wrong-token counters, the cookie secret,
the audit stream."""

from __future__ import annotations

from core.keys import Keys


def audit(k: Keys) -> str:
    """STREAM of operator actions (console/audit.py), capped."""
    return f"{k.prefix}:audit"


def console_session(k: Keys, sid: str) -> str:
    """HASH of one console sign-in (console/signin.py); expires with it."""
    return f"{k.prefix}:console:session:{sid}"


def console_oauth(k: Keys, state: str) -> str:
    """A Feishu sign-in under way: its `state`, single use, ten minutes."""
    return f"{k.prefix}:console:oauth:{state}"


def console_tries(k: Keys, address: str) -> str:
    """Wrong ADMIN_TOKENs (console form and admin API) from one client, expiring ten minutes after the first."""
    return f"{k.prefix}:console:tries:{address}"


def console_secret(k: Keys) -> str:
    """The key that signs console cookies, made once per deployment."""
    return f"{k.prefix}:console:secret"
