"""The whole real service as processes (gunicorn web, worker supervisor, sweeper, embedded Redis) against the
Feishu emulator and the Claude stand-in running in this process, with the kill and restart levers chaos needs."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import requests

from chaos.procs import Service, alive, children, memory_kb, proc_table, signal_pids
from core.keys import Keys
from sandbox.claude.standin import ClaudeStandin
from sandbox.feishu.emulator import OPS, FeishuEmulator
from state.embedded import ensure_server

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
NETGUARD = ROOT / "tests" / "netguard"  # loopback-only guard for every process we start (sitecustomize)
APP_ID = "cli_chaos"
BOT_OPEN_ID = "ou_chaos_bot"
SERVICE_PREFIXES = ("FEISHU_", "ANTHROPIC_", "ROUTING_", "BITABLE_", "RUN_", "REDIS_", "WORKER_", "WEB_")


@dataclass(frozen=True)
class Secrets:
    """Every secret the service holds, as canary strings: scenario 9 looks for them wherever they must not be."""

    app_secret: str
    encrypt_key: str
    verification_token: str
    api_key: str
    admin_token: str

    @classmethod
    def canaries(cls) -> Secrets:
        tag = os.urandom(4).hex()
        return cls(*(f"canary{tag}{name}" for name in ("appsecret", "encryptkey", "verifytoken", "apikey",
                                                         "admintoken")))

    def by_env(self) -> dict[str, str]:
        return {"FEISHU_APP_SECRET": self.app_secret, "FEISHU_ENCRYPT_KEY": self.encrypt_key,
                "FEISHU_VERIFICATION_TOKEN": self.verification_token, "ANTHROPIC_API_KEY": self.api_key,
                "ADMIN_TOKEN": self.admin_token}


def service_env(redis_url: str, feishu_url: str, model_url: str, secrets: Secrets, profile: str,
                var_dir: Path, netguard: bool, **extra: str) -> dict[str, str]:
    """A deployment's environment pointed at the emulators, with short timers so faults play out in seconds."""
    base = {k: v for k, v in os.environ.items() if not k.startswith(SERVICE_PREFIXES)
            and k not in ("BOT_PROFILE", "ADMIN_TOKEN", "ENV_FILE", "LOG_LEVEL", "PYTHONPATH")}
    path = [str(NETGUARD), str(ROOT)] if netguard else [str(ROOT)]
    env = {
        **base, **secrets.by_env(), "FEISHU_APP_ID": APP_ID, "FEISHU_DOMAIN": feishu_url,
        "ANTHROPIC_BASE_URL": model_url, "REDIS_URL": redis_url, "BOT_PROFILE": profile, "VAR_DIR": str(var_dir),
        "ENV_FILE": os.devnull, "LOG_LEVEL": "INFO", "PYTHONPATH": os.pathsep.join(path),
        "PATH": f"{BIN}:{base.get('PATH', '')}", "PYTHONUNBUFFERED": "1",
        "RUN_LEASE_SECONDS": "3", "RUN_RETRY_DELAYS": "1,1,1,1", "DEAD_LETTER_AFTER": "4",
        "RUN_BUDGET_SECONDS": "40", "SWEEP_INTERVAL_SECONDS": "0.5", "PAUSE_PROBE_SECONDS": "1",
        "LLM_TIMEOUT_SECONDS": "5", "FEISHU_TIMEOUT_SECONDS": "2", "WORKER_CONCURRENCY": "8", "WEB_CONCURRENCY": "2",
        "REPLY_STREAMING": "off",  # scenarios count rendered replies; the streaming scenario turns it on
    }
    if netguard:
        env["TEST_NETGUARD"] = "1"
    env.update(extra)
    return env


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Host:
    """One machine's processes: gunicorn web, the worker supervisor and the sweeper, each in a session of its own,
    on their own port and VAR_DIR, sharing the stack's Redis and emulators. Host 1 is the stack's own `services`
    (what every scenario drives); `Stack.add_host` starts more, their logs named `h<n>-<service>.log`."""

    def __init__(self, stack: Stack, num: int, services: dict[str, Service], port: int) -> None:
        self.stack, self.num, self.services, self.port = stack, num, services, port
        self.url = f"http://127.0.0.1:{port}"
        self.sweeper_log_from = 0  # where the current sweeper's log starts (its "started" line is after it)
        self.killed_at: float | None = None  # time.time() of the last `kill`

    def commands(self, var: Path) -> dict[str, list[str]]:
        py = str(BIN / "python")
        suffix = "" if self.num == 1 else f"-h{self.num}"
        return {
            "web": [str(BIN / "gunicorn"), "app:app", "-c", str(ROOT / "gunicorn.conf.py"),
                    "--bind", f"127.0.0.1:{self.port}"],
            "worker": [py, "-m", "jobs.worker", "--name", f"{self.stack.profile}{suffix}-w"],
            "sweeper": [py, "-m", "jobs.sweeper"],
        }

    def rq_workers(self) -> list[int]:
        """The supervisor's children: one RQ worker process per slot."""
        sup = self.services.get("worker")
        return children(sup.pid) if sup and sup.running() else []

    def horses(self) -> list[tuple[int, int]]:
        """(horse, its RQ worker) for every busy slot. A horse leads its own process group (RQ calls setpgrp),
        which tells it from the scheduler process an RQ worker may also have forked."""
        table = proc_table()
        out = []
        for parent in self.rq_workers():
            out += [(pid, parent) for pid in children(parent, table) if table[pid].pgid == pid]
        return out

    def orphans(self) -> list[int]:
        """Processes of the worker session no longer under the supervisor (horses whose RQ worker died)."""
        sup = self.services["worker"]
        table = proc_table()
        tree = {sup.pid}
        frontier = [sup.pid]
        while frontier:
            frontier = [p.pid for p in table.values() if p.ppid in frontier]
            tree.update(frontier)
        return [pid for pid in sup.members() if pid not in tree]

    def worker_processes(self) -> list[int]:
        """Every process of the worker service but the supervisor: RQ workers, busy horses, orphans."""
        sup = self.services["worker"]
        return [pid for pid in sup.members() if pid != sup.pid] if sup.proc is not None else []

    def members(self) -> list[int]:
        return sorted(pid for s in self.services.values() for pid in s.members())

    def kill(self) -> float:
        """SIGKILL the whole host at once (web master and workers, supervisor, RQ workers, horses, sweeper): every
        session leader is stopped first, so nothing respawns while the rest is collected. Returns the kill time."""
        for service in self.services.values():
            if service.running():
                signal_pids([service.pid], signal.SIGSTOP)
        self.killed_at = time.time()
        for _ in range(3):
            if not signal_pids(self.members(), signal.SIGKILL):
                break
            time.sleep(0.05)
        for service in self.services.values():
            service.kill()  # reaps the leader; nothing is left to signal
        return self.killed_at

    def registered_workers(self) -> list[int]:
        """Live RQ worker processes of this host's supervisor that have registered with Redis."""
        from rq import Worker

        live = set(self.rq_workers())
        conn = redis.Redis.from_url(self.stack.redis_url)
        try:
            return [w.pid for w in Worker.all(connection=conn) if w.pid in live]
        finally:
            conn.close()

    def problems(self) -> list[str]:
        """What keeps this host from serving (dead processes, missing workers, web not ready, sweeper starting)."""
        tag = "" if self.num == 1 else f"host {self.num}: "
        found = [f"{tag}{name} exited" for name, s in self.services.items() if not s.running()]
        web = self.services.get("web")
        if web and web.running() and http_status(self.url, "/readyz") != 200:
            found.append(f"{tag}web not ready")
        workers = len(self.registered_workers()) if "worker" in self.services else self.stack.concurrency
        if workers < self.stack.concurrency:
            found.append(f"{tag}{workers}/{self.stack.concurrency} RQ workers")
        sweeper = self.services.get("sweeper")
        if sweeper and "sweeper started" not in Stack._log_from(sweeper, self.sweeper_log_from):
            found.append(f"{tag}sweeper starting")
        return found


def http_status(url: str, path: str, **kw: Any) -> int | None:
    try:
        return requests.get(f"{url}{path}", timeout=2, **kw).status_code
    except requests.RequestException:
        return None


class Stack:
    def __init__(self, *, workers: int = 8, env: dict[str, str] | None = None, netguard: bool = True,
                 keep: bool = False) -> None:
        # Short path: unix socket paths are limited to ~107 bytes.
        self.dir = Path(tempfile.mkdtemp(prefix="chaos-"))
        self.var, self.logs = self.dir / "var", self.dir / "logs"
        self.logs.mkdir()
        self.keep, self.netguard = keep, netguard and NETGUARD.exists()
        self.profile = f"chaos{os.urandom(3).hex()}"
        self.keys = Keys(self.profile)
        self.secrets = Secrets.canaries()
        self.concurrency = workers
        self.feishu = FeishuEmulator(app_id=APP_ID, app_secret=self.secrets.app_secret, bot_open_id=BOT_OPEN_ID)
        self.claude = ClaudeStandin()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.redis_url = ""
        self._extra_env = dict(env or {})
        self.env: dict[str, str] = {}
        self.services: dict[str, Service] = {}
        self.hosts = [Host(self, 1, self.services, self.port)]  # more with `add_host` (two-host scenarios)
        self._r: redis.Redis | None = None

    # -- lifecycle -----------------------------------------------------------------------------------------

    def start(self, timeout: float = 300.0) -> Stack:
        """Start everything and wait until it serves; on any failure, stop what was started and re-raise."""
        try:
            return self._start(timeout)
        except BaseException:
            self.close()
            raise

    def _start(self, timeout: float) -> Stack:
        self.start_redis()
        self.feishu.start()
        self.claude.start()
        self.env = service_env(self.redis_url, self.feishu.url, self.claude.url, self.secrets, self.profile,
                               self.var, netguard=self.netguard,
                               WORKER_CONCURRENCY=str(self.concurrency), **self._extra_env)
        for name, argv in self.hosts[0].commands(self.var).items():
            self.services[name] = Service(name, argv, self.env, self.dir, self.logs)
            self.services[name].start()
        self.wait_ready(timeout)
        return self

    def add_host(self, timeout: float = 300.0, **env: str) -> Host:
        """Start another host (web, worker supervisor, sweeper) on the same Redis and emulators, with its own port,
        VAR_DIR and log names, from the deployment's current environment plus `env`; wait until it serves."""
        num = len(self.hosts) + 1
        host = Host(self, num, {}, free_port())
        self.hosts.append(host)
        var = self.dir / f"var{num}"
        var.mkdir()
        host_env = {**self.env, "VAR_DIR": str(var), **env}
        for name, argv in host.commands(var).items():
            host.services[name] = Service(f"h{num}-{name}", argv, host_env, self.dir, self.logs)
            host.services[name].start()
        deadline = time.monotonic() + timeout
        while problems := host.problems():
            if time.monotonic() > deadline:
                tails = "\n".join(f"== {s.name}\n{s.tail()}" for s in host.services.values())
                raise RuntimeError(f"host {num} not ready after {timeout:.0f}s: {problems}\n{tails}")
            time.sleep(0.2)
        return host

    def close(self) -> None:
        for host in reversed(self.hosts):
            for service in host.services.values():
                service.kill()
        self.stop_redis(kill=True)
        for server in (self.feishu, self.claude):
            with contextlib.suppress(Exception):
                server.stop()
        if not self.keep:
            shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> Stack:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def r(self) -> redis.Redis:
        if self._r is None:
            self._r = redis.Redis.from_url(self.redis_url, decode_responses=True, socket_timeout=5)
        return self._r

    # -- readiness and health ------------------------------------------------------------------------------

    def wait_ready(self, timeout: float = 300.0) -> None:
        deadline = time.monotonic() + timeout
        while problems := self.problems():
            if time.monotonic() > deadline:
                tails = "\n".join(f"== {s.name}\n{s.tail()}" for s in self.services.values())
                raise RuntimeError(f"stack not ready after {timeout:.0f}s: {problems}\n{tails}")
            time.sleep(0.2)

    def problems(self) -> list[str]:
        """What keeps the stack from serving: dead processes, missing workers, Redis or web not answering (on host 1
        and on every added host; a host killed on purpose is one, since a later scenario expects host 1)."""
        found: list[str] = []
        try:
            for host in self.hosts:
                found += host.problems()
            if self.r.get(self.keys.bot_open_id) != BOT_OPEN_ID:
                found.append("bot identity not cached")
        except redis.RedisError as exc:
            found.append(f"redis: {exc.__class__.__name__}")
        return found

    @staticmethod
    def _log_from(service: Service, offset: int) -> str:
        with open(service.log_path, "rb") as f:
            f.seek(offset)
            return f.read().decode("utf-8", "replace")

    def reconfigure(self, services: tuple[str, ...] = ("worker", "sweeper"), timeout: float = 300.0,
                    unset: tuple[str, ...] = (), **env: str) -> float:
        """Restart `services` (of host 1) with `env` added to the deployment's environment and the variables in
        `unset` removed (so the service's own defaults apply), and wait until the stack serves again; returns the
        seconds it took. Between scenarios the stack is idle, so a SIGKILL loses nothing. Later starts of any
        service (a scenario's web reboot, an added host) use the new environment too."""
        started = time.monotonic()
        self.env = {**{k: v for k, v in self.env.items() if k not in unset}, **env}
        if "sweeper" in services:
            self.hosts[0].sweeper_log_from = self.services["sweeper"].log_path.stat().st_size
        for name in services:
            self.services[name].kill()
        for name, service in self.services.items():
            service.env = self.env
            if name in services:
                service.start()
        self.wait_ready(timeout)
        return time.monotonic() - started

    def http_status(self, path: str, **kw: Any) -> int | None:
        return http_status(self.url, path, **kw)

    def registered_workers(self) -> list[int]:
        """Live RQ worker processes of host 1's supervisor that have registered with Redis."""
        return self.hosts[0].registered_workers()

    # -- the worker tree (host 1) --------------------------------------------------------------------------

    def rq_workers(self) -> list[int]:
        """The supervisor's children: one RQ worker process per slot."""
        return self.hosts[0].rq_workers()

    def horses(self) -> list[tuple[int, int]]:
        """(horse, its RQ worker) for every busy slot."""
        return self.hosts[0].horses()

    def orphans(self) -> list[int]:
        """Processes of the worker session no longer under the supervisor (horses whose RQ worker died)."""
        return self.hosts[0].orphans()

    def kill(self, pids: list[int]) -> list[int]:
        return signal_pids(pids, signal.SIGKILL)

    def worker_memory(self) -> dict[str, int]:
        """Memory (kB) of the long-lived worker processes (supervisor + RQ workers), summed, and of busy horses."""
        horses = {h for h, _ in self.horses()}
        resident = [self.services["worker"].pid, *self.rq_workers()]
        out = {"processes": len(resident), "horses": len(horses),
               "horses_pss": sum(memory_kb(h)["pss"] for h in horses)}
        for pid in resident:
            for kind, kb in memory_kb(pid).items():
                out[kind] = out.get(kind, 0) + kb
        return out

    # -- Redis ---------------------------------------------------------------------------------------------

    def start_redis(self) -> None:
        self.redis_url = ensure_server(str(self.var))

    def redis_pid(self) -> int | None:
        try:
            pid = int((self.var / "redis.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if alive(pid) else None

    def stop_redis(self, kill: bool = False, timeout: float = 15.0) -> None:
        """SIGTERM: Redis writes its append-only file and exits (SIGKILL with kill=True)."""
        if self._r is not None:
            self._r.close()
        pid = self.redis_pid()
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL if kill else signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)

    # -- emulators -----------------------------------------------------------------------------------------

    def calm(self) -> None:
        """No faults, delays, poison or pacing limits left over from a scenario."""
        self.feishu.clear_faults()
        self.feishu.set_chat_qps(None)
        self.feishu.set_bitable_write_time(0)
        for op in OPS:
            self.feishu.set_delay(op, 0)
        self.claude.clear_profile()
        self.claude.clear_fail_when()
        self.claude.set_delay(0)
        self.claude.set_responder(None)
        self.claude.restore_keys()

    def log_files(self) -> list[Path]:
        return sorted([*self.logs.glob("*.log"), self.var / "redis.log"])
