"""The loopback-only guard holds in the pytest process and in every process a test starts."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest

from tests.harness import subprocess_env

# Runs in a started process. The first probe is a UDP connect, which sends no packet even unguarded:
# only once it shows the guard is active are the probes tried that would send one without it.
CHILD = r"""
import json, socket, subprocess, sys

def blocked(call):
    try:
        call()
    except RuntimeError as exc:
        return "only loopback is allowed" in str(exc)
    return False

udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
if not blocked(lambda: udp.connect(("10.255.255.1", 9))):
    print(json.dumps({"guarded": False}))
    sys.exit(0)
dns_patched = socket.getaddrinfo.__module__ != "_socket"
with socket.create_connection(("127.0.0.1", int(sys.argv[1])), timeout=5) as s:
    s.sendall(b"ping")
    echoed = s.recv(4).decode()
grandchild = subprocess.run([sys.executable, "-c", "import socket; print(hasattr(socket, '_netguard_installed'))"],
                            capture_output=True, text=True)
print(json.dumps({
    "guarded": True,
    "tcp": blocked(lambda: socket.create_connection(("10.255.255.1", 9), timeout=1)),
    "tcp_ex": blocked(lambda: socket.socket().connect_ex(("192.0.2.1", 9))),
    "v6": blocked(lambda: socket.socket(socket.AF_INET6).connect(("2001:db8::1", 9))),
    "udp_sendto": blocked(lambda: udp.sendto(b"x", ("10.255.255.1", 9))),
    "dns": dns_patched and blocked(lambda: socket.getaddrinfo("example.com", 443)),
    "loopback": echoed,
    "grandchild": grandchild.stdout.strip(),
}))
"""


@pytest.fixture()
def echo_port() -> Iterator[int]:
    """A loopback TCP server that echoes one message."""
    server = socket.create_server(("127.0.0.1", 0))

    def serve() -> None:
        conn, _ = server.accept()
        with conn:
            conn.sendall(conn.recv(4))

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield server.getsockname()[1]
    server.close()


def test_started_processes_reach_loopback_only(echo_port: int, tmp_path) -> None:
    result = subprocess.run([sys.executable, "-c", CHILD, str(echo_port)], env=subprocess_env({}), cwd=tmp_path,
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["guarded"], "a started process could connect to 10.255.255.1 (no guard)"
    assert seen == {"guarded": True, "tcp": True, "tcp_ex": True, "v6": True, "udp_sendto": True, "dns": True,
                    "loopback": "ping", "grandchild": "True"}


def test_the_pytest_process_reaches_loopback_only() -> None:
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)  # connect sends no packet, guarded or not
    with pytest.raises(RuntimeError, match="only loopback is allowed"):
        udp.connect(("10.255.255.1", 9))
    udp.close()
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as ok:
        ok.connect(("127.0.0.1", 9))
