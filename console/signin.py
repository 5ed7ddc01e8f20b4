"""Console sign-ins: a random id in a signed cookie, the sign-in itself in Redis (who, how, its CSRF token).

The cookie is HttpOnly, SameSite=Lax and Secure outside sandbox mode, signed with a key made once per deployment
(kept in Redis, so every web process and restart accepts it). The sign-in expires after CONSOLE_SESSION_HOURS,
and signing out deletes it everywhere at once. Who may sign in is decided here too: an open_id in
CONSOLE_ADMINS (else ITEM_ADMINS), or whoever presents ADMIN_TOKEN.
"""

from __future__ import annotations

import hmac
import secrets
import time
from dataclasses import dataclass

import redis
from itsdangerous import BadSignature, Signer

from console import keys as console_keys
from core.keys import Keys
from core.settings import Settings

COOKIE = "fb_console"
PRE_COOKIE = "fb_console_pre"  # before sign-in: the login form's CSRF token (double submit) and the OAuth state
TOKEN_OPERATOR = "admin-token"
# Only onto a sign-in that still exists: a line written after sign-out must not leave a hash without expiry.
SAY = "if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], 'said', ARGV[1]) end return 0"


@dataclass(frozen=True)
class Operator:
    sid: str
    who: str  # an open_id, or "admin-token"
    name: str
    how: str  # feishu | token
    csrf: str
    since: float


def may_sign_in(settings: Settings, open_id: str) -> bool:
    """Pure: the contract's rule (CONSOLE_ADMINS, falling back to ITEM_ADMINS); nobody when both are empty."""
    return bool(open_id) and open_id in settings.console_operators


def token_matches(settings: Settings, given: str) -> bool:
    """ADMIN_TOKEN, compared in constant time; never when it is unset."""
    expected = settings.secret("admin_token")
    return bool(expected) and hmac.compare_digest(given.strip().encode(), expected.encode())


def csrf_ok(expected: str, given: str | None) -> bool:
    return bool(expected) and bool(given) and hmac.compare_digest(expected.encode(), str(given).encode())


class SignIns:
    def __init__(self, r: redis.Redis, keys: Keys, ttl_s: float) -> None:
        self.r, self.keys, self.ttl_s = r, keys, int(ttl_s)
        self._signer: Signer | None = None

    @property
    def signer(self) -> Signer:
        if self._signer is None:
            self.r.set(console_keys.console_secret(self.keys), secrets.token_hex(32), nx=True)
            self._signer = Signer(str(self.r.get(console_keys.console_secret(self.keys))), salt="fb-console")
        return self._signer

    def sign(self, value: str) -> str:
        return self.signer.sign(value).decode()

    def unsign(self, cookie: str | None) -> str | None:
        if not cookie:
            return None
        try:
            return self.signer.unsign(cookie).decode()
        except BadSignature:
            return None

    def open(self, who: str, name: str, how: str) -> tuple[Operator, str]:
        """A new sign-in; returns it and the cookie value that names it."""
        op = Operator(secrets.token_urlsafe(24), who, name, how, secrets.token_urlsafe(24), time.time())
        key = console_keys.console_session(self.keys, op.sid)
        pipe = self.r.pipeline(transaction=True)  # one MULTI/EXEC: never a sign-in without its expiry
        pipe.hset(key, mapping={"who": op.who, "name": op.name, "how": op.how, "csrf": op.csrf,
                                "since": f"{op.since:.3f}"})
        pipe.expire(key, self.ttl_s)
        pipe.execute()
        return op, self.sign(op.sid)

    def find(self, cookie: str | None) -> Operator | None:
        sid = self.unsign(cookie)
        if sid is None:
            return None
        rec = {str(k): str(v) for k, v in self.r.hgetall(console_keys.console_session(self.keys, sid)).items()}
        if not rec.get("who"):
            return None
        return Operator(sid, rec["who"], rec.get("name", ""), rec.get("how", ""), rec.get("csrf", ""),
                        float(rec.get("since") or 0))

    def say(self, sid: str, message: str, ok: bool) -> None:
        """One line for the next page this sign-in renders (how an action went)."""
        self.r.eval(SAY, 1, console_keys.console_session(self.keys, sid), ("ok:" if ok else "no:") + message)

    def said(self, sid: str) -> tuple[str, bool] | None:
        pipe = self.r.pipeline()
        pipe.hget(console_keys.console_session(self.keys, sid), "said")
        pipe.hdel(console_keys.console_session(self.keys, sid), "said")
        raw, _ = pipe.execute()
        return (raw[3:], raw.startswith("ok:")) if raw else None

    def close(self, sid: str) -> None:
        self.r.delete(console_keys.console_session(self.keys, sid))

    # -- a Feishu sign-in under way ---------------------------------------------------------------------------

    def begin_oauth(self, browser: str, next_url: str) -> str:
        """A single-use `state` bound to this browser's pre-sign-in cookie (a forged callback carries another)."""
        state = secrets.token_urlsafe(24)
        pipe = self.r.pipeline(transaction=True)
        pipe.hset(console_keys.console_oauth(self.keys, state), mapping={"browser": browser, "next": next_url})
        pipe.expire(console_keys.console_oauth(self.keys, state), 600)
        pipe.execute()
        return state

    def finish_oauth(self, state: str, browser: str) -> str | None:
        """The `next` page of a sign-in this browser began; None when unknown, used, expired or another's."""
        key = console_keys.console_oauth(self.keys, state)
        pipe = self.r.pipeline()
        pipe.hgetall(key)
        pipe.delete(key)
        rec, _ = pipe.execute()
        if not rec or not browser or not hmac.compare_digest(rec.get("browser", "").encode(), browser.encode()):
            return None
        return rec.get("next") or "/console/"
