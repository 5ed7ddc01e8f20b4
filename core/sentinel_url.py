"""The `redis+sentinel://` URL every process passes around (the de-facto form; redis-py itself has none), read and
written. Pure: settings check it at start-up, state/ha.py connects through it.

`redis+sentinel://[[user]:password@]host:port[,host:port...]/<master name>[/<db>]`, sentinel port 26379 when left out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from urllib.parse import quote, unquote

SCHEME = "redis+sentinel"
DEFAULT_PORT = 26379


class SentinelConfigError(ValueError):
    """A Sentinel setting or URL that cannot work; raised at start-up."""


@dataclass(frozen=True)
class Target:
    """Where the data lives: the sentinels to ask, the master's name and the data nodes' credentials."""

    sentinels: tuple[tuple[str, int], ...]
    master: str
    password: str | None = None
    username: str | None = None
    db: int = 0

    def url(self) -> str:
        auth = ""
        if self.password is not None or self.username:
            auth = f"{quote(self.username or '', safe='')}:{quote(self.password or '', safe='')}@"
        hosts = ",".join(f"{host_part(h)}:{p}" for h, p in self.sentinels)
        db = f"/{self.db}" if self.db else ""
        return f"{SCHEME}://{auth}{hosts}/{quote(self.master, safe='')}{db}"

    def describe(self) -> str:
        """The URL without credentials, fit for logs and /readyz."""
        return Target(self.sentinels, self.master, db=self.db).url()


def host_part(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def parse_address(text: str) -> tuple[str, int]:
    """`host:port` (or `[v6]:port`, or a bare host with the sentinel port)."""
    text = text.strip()
    if not text:
        raise SentinelConfigError("an empty sentinel address")
    if text.startswith("["):
        host, _, rest = text[1:].partition("]")
        port_text = rest[1:] if rest.startswith(":") else ""
        if rest and not rest.startswith(":"):
            raise SentinelConfigError(f"sentinel address {text!r} is not host:port")
    elif text.count(":") == 1:
        host, port_text = text.split(":")
    elif ":" in text:
        raise SentinelConfigError(f"sentinel address {text!r}: write an IPv6 host as [host]:port")
    else:
        host, port_text = text, ""
    if not host or any(c in host for c in "/@,? "):
        raise SentinelConfigError(f"sentinel address {text!r} is not host:port")
    if not port_text:
        return host, DEFAULT_PORT
    if not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise SentinelConfigError(f"sentinel address {text!r} has no valid port")
    return host, int(port_text)


def is_sentinel_url(url: str) -> bool:
    return url.lower().startswith(SCHEME + "://")


def parse_url(url: str) -> Target:
    if not is_sentinel_url(url):
        raise SentinelConfigError(f"not a {SCHEME}:// URL")
    rest = url[len(SCHEME) + 3:]
    netloc, _, path = rest.partition("/")
    path, _, _query = path.partition("?")
    username = password = None
    if "@" in netloc:
        auth, _, netloc = netloc.rpartition("@")
        user_text, sep, pass_text = auth.partition(":")
        username = unquote(user_text) or None
        password = unquote(pass_text) if sep else None
    sentinels = tuple(parse_address(part) for part in netloc.split(",") if part.strip())
    if not sentinels:
        raise SentinelConfigError(f"{SCHEME}:// URL names no sentinel (host:port,host:port)")
    parts = [unquote(p) for p in path.split("/") if p]
    if not parts:
        raise SentinelConfigError(f"{SCHEME}:// URL names no master: {SCHEME}://host:port,host:port/<master>")
    if len(parts) > 2 or (len(parts) == 2 and not parts[1].isdigit()):
        raise SentinelConfigError(f"{SCHEME}:// URL path must be /<master>[/<db>]")
    return Target(sentinels, parts[0], password, username, int(parts[1]) if len(parts) == 2 else 0)


def target_of(sentinels: Sequence[str], master: str | None, password: str | None = None) -> Target:
    """From REDIS_SENTINELS / REDIS_SENTINEL_MASTER / REDIS_PASSWORD."""
    if not sentinels:
        raise SentinelConfigError("REDIS_SENTINEL_MASTER is set but REDIS_SENTINELS is empty")
    if not master or not master.strip():
        raise SentinelConfigError("REDIS_SENTINELS is set but REDIS_SENTINEL_MASTER (the master's name) is not")
    return Target(tuple(parse_address(s) for s in sentinels), master.strip(), password or None)
