"""Wrong ADMIN_TOKENs, one limit for the console's token form and the admin API's bearer: counted per client in Redis.

The client is the socket's address, or, when CONSOLE_TRUSTED_PROXIES says how many reverse proxies append to
X-Forwarded-For, the address the outermost trusted one saw (entries further left are the sender's own claim). The
lock refuses wrong tokens only: the right one is compared first (constant time) and always gets in, a little slower
while its client is locked, so a stranger behind the same proxy can never lock the real operator out.
"""

from __future__ import annotations

import time

from flask import request

from console import keys as console_keys
from runs.runtime import Runtime

LIMIT = 10  # wrong tokens per client per window; the next one is refused with 429
WINDOW_S = 600
SLOW_S = 0.5  # the right token's wait while its client is locked
# One step, so a counter never lives without its expiry (a crash between INCR and EXPIRE would keep it forever).
COUNT = ("local n = redis.call('INCR', KEYS[1]) "
         "if redis.call('TTL', KEYS[1]) < 0 then redis.call('EXPIRE', KEYS[1], ARGV[1]) end return n")


def client_of(remote_addr: str, forwarded_for: str, trusted: int) -> str:
    """Pure: who sent the request, as the `trusted`-th proxy from the right reports it (werkzeug ProxyFix's rule)."""
    hops = [h.strip() for h in forwarded_for.split(",") if h.strip()]
    if trusted <= 0 or len(hops) < trusted:
        return remote_addr
    return hops[-trusted]


def client(rt: Runtime) -> str:
    return client_of(request.remote_addr or "", request.headers.get("X-Forwarded-For", ""),
                     rt.settings.console_trusted_proxies)


def refusal(rt: Runtime, right: bool) -> int:
    """After comparing a token: 0 = answer as usual (in, or wrong), else the seconds until a wrong one is heard."""
    key = console_keys.console_tries(rt.keys, client(rt))
    if right:
        if int(rt.state.get(key) or 0) >= LIMIT:
            time.sleep(SLOW_S)
        return 0
    if int(rt.state.eval(COUNT, 1, key, WINDOW_S)) <= LIMIT:
        return 0
    return max(1, int(rt.state.ttl(key)))
