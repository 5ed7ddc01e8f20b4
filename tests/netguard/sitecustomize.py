"""Loopback-only network guard, loaded into every Python process the tests start (TEST_NETGUARD=1).

`tests/harness.py:subprocess_env` puts this directory first on PYTHONPATH, so Python's `site` imports
this module at start-up in workers, the sweeper, gunicorn, honcho and everything they fork or spawn.
The pytest process itself calls `install()` from tests/conftest.py. Each check runs before the real
socket call, so a blocked address never sees a packet (nor a DNS query for a blocked name).
"""

from __future__ import annotations

import ipaddress
import os
import socket
from collections.abc import Callable
from typing import Any

ENV_VAR = "TEST_NETGUARD"
LOCAL_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
_INET = (socket.AF_INET, socket.AF_INET6)


class NetworkBlocked(RuntimeError):
    """A RuntimeError, not an OSError: HTTP clients must not mistake it for a retryable network fault."""


def is_local(host: object) -> bool:
    """Loopback (127.0.0.0/8, ::1, their mapped forms), the unspecified address (means this host), localhost."""
    if host is None:
        return True
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if not isinstance(host, str):
        return False
    name = host.strip("[]").split("%", 1)[0].rstrip(".").lower()
    if name in ("", *LOCAL_NAMES) or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def _is_ip_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.strip("[]").split("%", 1)[0])
    except ValueError:
        return False
    return True


def _check(sock: socket.socket, address: object) -> None:
    if sock.family == socket.AF_UNIX or sock.family == getattr(socket, "AF_NETLINK", None):
        return
    host = address[0] if isinstance(address, tuple) and address else address
    if sock.family not in _INET or not is_local(host):
        raise NetworkBlocked(f"test tried to reach the network: {address!r} (only loopback is allowed)")


def _check_name(host: object) -> None:
    """Resolving a non-local name would send a DNS query: refuse it (IP literals resolve locally)."""
    if isinstance(host, bytes):
        host = host.decode("ascii", "replace")
    if is_local(host) or (isinstance(host, str) and (_is_ip_literal(host) or host == socket.gethostname())):
        return
    raise NetworkBlocked(f"test tried to resolve a network name: {host!r} (only loopback is allowed)")


def install() -> None:
    """Patch the socket module in this process; idempotent."""
    if getattr(socket, "_netguard_installed", False):
        return
    cls = socket.socket
    real_connect, real_connect_ex = cls.connect, cls.connect_ex
    real_sendto, real_sendmsg = cls.sendto, cls.sendmsg
    real_getaddrinfo, real_byname, real_byname_ex = socket.getaddrinfo, socket.gethostbyname, socket.gethostbyname_ex

    def connect(self: socket.socket, address: Any) -> None:
        _check(self, address)
        return real_connect(self, address)

    def connect_ex(self: socket.socket, address: Any) -> int:
        _check(self, address)
        return real_connect_ex(self, address)

    def sendto(self: socket.socket, data: Any, *args: Any) -> int:
        _check(self, args[-1])  # sendto(data, address) or sendto(data, flags, address)
        return real_sendto(self, data, *args)

    def sendmsg(self: socket.socket, buffers: Any, *args: Any) -> int:
        if len(args) >= 3 and args[2] is not None:  # sendmsg(buffers, ancdata, flags, address)
            _check(self, args[2])
        return real_sendmsg(self, buffers, *args)

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        _check_name(host)
        return real_getaddrinfo(host, *args, **kwargs)

    def gethostbyname(host: str) -> str:
        _check_name(host)
        return real_byname(host)

    def gethostbyname_ex(host: str) -> Any:
        _check_name(host)
        return real_byname_ex(host)

    methods: dict[str, Callable[..., Any]] = {
        "connect": connect, "connect_ex": connect_ex, "sendto": sendto, "sendmsg": sendmsg}
    resolvers: dict[str, Callable[..., Any]] = {
        "getaddrinfo": getaddrinfo, "gethostbyname": gethostbyname, "gethostbyname_ex": gethostbyname_ex}
    for name, fn in methods.items():
        setattr(cls, name, fn)
    for name, fn in resolvers.items():
        setattr(socket, name, fn)
    socket._netguard_installed = True  # type: ignore[attr-defined]


if os.environ.get(ENV_VAR) == "1":
    install()
