"""Test harness: embedded Redis, emulators, the real web app over HTTP, real RQ worker processes."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import redis
import requests
from werkzeug.serving import make_server

from app import FEATURES, create_app
from core.keys import Keys
from core.settings import Settings
from sandbox.feishu.events import signed_request
from tests import forkserver

ROOT = Path(__file__).resolve().parent.parent
NETGUARD_DIR = Path(__file__).resolve().parent / "netguard"  # its sitecustomize.py guards every subprocess
NO_ENV_FILE = os.devnull  # ENV_FILE for everything the tests run: a developer's .env is never read
ENCRYPT_KEY = "test-encrypt-key"
VERIFICATION_TOKEN = "test-verification-token"
APP_ID = "cli_test"
APP_SECRET = "test-app-secret"
BOT_OPEN_ID = "ou_bot"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def service_env(redis_url: str, feishu_url: str, model_url: str, **extra: str) -> dict[str, str]:
    """The environment a real deployment would have, pointed at the local emulators."""
    env = {
        "FEISHU_APP_ID": APP_ID, "FEISHU_APP_SECRET": APP_SECRET,
        "FEISHU_VERIFICATION_TOKEN": VERIFICATION_TOKEN, "FEISHU_ENCRYPT_KEY": ENCRYPT_KEY,
        "FEISHU_DOMAIN": feishu_url, "ANTHROPIC_API_KEY": "sk-test", "ANTHROPIC_BASE_URL": model_url,
        "ANTHROPIC_MODEL": "claude-sonnet-5-5", "REDIS_URL": redis_url, "BOT_PROFILE": "test",
        "RUN_LEASE_SECONDS": "3", "RUN_RETRY_DELAYS": "1,1,1", "DEAD_LETTER_AFTER": "3",
        "SWEEP_INTERVAL_SECONDS": "0.5", "LOG_LEVEL": "INFO", "WORKER_CONCURRENCY": "2",
        # The suite checks the rendered reply path; streaming cards have their own scenarios (test_streaming.py)
        "REPLY_STREAMING": "off",
        "CLOCK_ADJUSTABLE": "1",  # the service clock follows the offset tests set (core/clock.py)
    }
    env.update(extra)
    return env


def dream_cron_far_from(now: datetime, tz: str = "Asia/Shanghai") -> str:
    """A daily MEMORY_DREAM_CRON slot twelve hours from `now` (BOT_TIMEZONE's default zone): a stack on the real
    clock never reaches it within a suite run, so whether its scopes get consolidated mid-run (extra model requests
    beside the tests' turns) does not depend on the hour the suite runs at. Stacks with a pinned clock keep the
    product's slot (tests/own_stack.py)."""
    at = now.astimezone(ZoneInfo(tz)) + timedelta(hours=12)
    return f"{at.minute} {at.hour} * * *"


def settings_from(env: dict[str, str]) -> Settings:
    return Settings(_env_file=None, **{k.lower(): v for k, v in env.items()})  # type: ignore[call-arg,arg-type]


class WebServer:
    """The real Flask app on a real socket (port 0), as Feishu would reach it."""

    def __init__(self, settings: Settings, port: int = 0) -> None:
        self.app = create_app(settings)
        self.server = make_server("127.0.0.1", port, self.app, threaded=True)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()

    def post(self, payload: dict[str, Any], *, encrypt: bool = True, headers: dict[str, str] | None = None,
             now: float | None = None, key: str = ENCRYPT_KEY) -> requests.Response:
        body, signed = signed_request(payload, encrypt_key=key, encrypt=encrypt, now=now)
        return requests.post(f"{self.url}/feishu/events", data=body, headers={**signed, **(headers or {})},
                             timeout=10)


# Service variables are never inherited from the developer's shell, only set by the test.
_SERVICE_VARS = {name.upper() for name in Settings.model_fields} | {"WEB_CONCURRENCY", "WEB_THREADS", "ENV_FILE"} | {
    name.upper() for f in FEATURES if f.settings is not None for name in f.settings.model_fields}
_SERVICE_PREFIXES = ("FEISHU_", "ANTHROPIC_", "ROUTING_", "BITABLE_")


def subprocess_env(env: dict[str, str]) -> dict[str, str]:
    """The environment of every process a test starts: no dotenv file, loopback-only network guard."""
    base = {k: v for k, v in os.environ.items() if k not in _SERVICE_VARS and not k.startswith(_SERVICE_PREFIXES)}
    bindir = str(Path(sys.executable).parent)
    path = os.pathsep.join([str(NETGUARD_DIR), str(ROOT)])
    return {**base, "ENV_FILE": NO_ENV_FILE, **env, "TEST_NETGUARD": "1", "PYTHONPATH": path,
            "PATH": f"{bindir}:{base.get('PATH', '')}"}


_server: forkserver.Server | None = None


def forking() -> bool:
    return os.environ.get("TEST_FORKSERVER", "1") != "0"


def fork_server() -> forkserver.Server:
    """This pytest process's fork server (tests/forkserver.py), started on first use."""
    global _server
    if _server is None or _server.proc.poll() is not None:
        _server = forkserver.Server(subprocess_env({}), str(ROOT))
    return _server


class Proc:
    """A service process (worker, sweeper, long connection) running its `python -m` entry point: forked from the
    pre-imported interpreter of tests/forkserver.py (as the entry point, with the test's env, cwd and log), or,
    for anything else, started as a fresh interpreter."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: str, log_path: Path) -> None:
        self.log_path = log_path
        self.log_from = log_path.stat().st_size if log_path.exists() else 0  # a restart appends to the same log
        self.log = open(log_path, "ab")  # noqa: SIM115  (closed in stop())
        self.p: subprocess.Popen[bytes] | forkserver.Forked
        if len(args) >= 2 and args[0] == "-m" and args[1] in forkserver.ENTRY_POINTS and forking():
            self.p = fork_server().start(args[1], args[2:], subprocess_env(env), cwd, str(log_path))
        else:
            self.p = subprocess.Popen([sys.executable, *args], env=subprocess_env(env), cwd=cwd,
                                      stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def children(self) -> list[int]:
        """Every descendant: the supervisor's RQ workers, their work-horses and scheduler processes."""
        parents: dict[int, int] = {}
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError, IndexError):
                continue
        found, frontier = [], [self.p.pid]
        while frontier:
            kids = [pid for pid, ppid in parents.items() if ppid in frontier]
            found.extend(kids)
            frontier = kids
        return found

    def kill9(self) -> None:
        """SIGKILL the process and its forked children (RQ work-horses live in their own group)."""
        with contextlib.suppress(ProcessLookupError):  # a supervisor must not respawn while we collect
            os.kill(self.p.pid, signal.SIGSTOP)
        for pid in [*self.children(), self.p.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.p.wait(timeout=10)

    def logged(self, text: str) -> bool:
        """This process (not an earlier one with the same log) has written `text` to its log."""
        with open(self.log_path, "rb") as f:
            f.seek(self.log_from)
            return text.encode() in f.read()

    def alive(self) -> bool:
        """True while running; an AssertionError with the log's tail once it has exited."""
        if self.p.poll() is None:
            return True
        tail = self.log_path.read_bytes()[-2000:].decode("utf-8", "replace")
        raise AssertionError(f"{self.p.args!r} exited with {self.p.returncode}:\n{tail}")

    def terminate(self) -> None:
        """Ask for a graceful stop (SIGTERM to its process group) without waiting for it."""
        if self.p.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.p.pid, signal.SIGTERM)

    def stop(self) -> None:
        self.terminate()
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.kill9()
        self.log.close()


def stop_all(procs: list[Proc]) -> None:
    """Stop processes side by side: each graceful stop takes seconds, so ask all of them first."""
    for p in procs:
        p.terminate()
    for p in procs:
        p.stop()


def wait_for(predicate: Callable[[], Any], timeout: float = 20.0, interval: float = 0.05,
             what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


def worker_count(r: redis.Redis, queue: str) -> int:
    from rq import Worker

    return sum(1 for w in Worker.all(connection=r) if queue in w.queue_names())


def wait_serving(r: redis.Redis, procs: list[Proc], profile: str, timeout: float = 120.0) -> None:
    """A rig's processes are alive and a worker of its own listens on `{profile}-runs`: a first test must not
    spend its own deadline on the worker's start (at the suite's start, every test worker starts stacks on the
    same cores)."""
    wait_for(lambda: all(p.alive() for p in procs) and worker_count(r, f"{profile}-runs") >= 1, timeout,
             interval=0.2, what=f"{profile}'s worker to register")


def route_key(kind: str, chat: str, *rest: str, profile: str = "test") -> str:
    """README "Route keys": p2p `chat`; group `chat, sender`; topic `chat, thread`."""
    return ":".join(["feishu", profile, kind, chat, *rest])


def route_is_idle(r: redis.Redis, keys: Keys, rk: str) -> bool:
    """No stored work (inbox, proc), no run or pending retry (lease), and not marked dirty."""
    pipe = r.pipeline(transaction=True)
    pipe.llen(keys.inbox(rk))
    pipe.llen(keys.proc(rk))
    pipe.exists(keys.lease(rk))
    pipe.zscore(keys.dirty, rk)
    inbox, proc, lease, dirty = pipe.execute()
    return inbox == 0 and proc == 0 and lease == 0 and dirty is None


def wait_route_idle(r: redis.Redis, keys: Keys, rk: str, timeout: float = 30.0, polls: int = 4,
                    interval: float = 0.1) -> None:
    """Barrier before counting "exactly once": the route is idle and still idle `polls` checks later.

    Every redo path keeps the route busy until it has run: a crashed run's lease until it expires, a
    retry's hand-over lease, a lost kick's dirty mark. So no wrong second call or reply can follow.
    """
    deadline = time.monotonic() + timeout
    streak = 0
    while streak < polls:
        streak = streak + 1 if route_is_idle(r, keys, rk) else 0
        if time.monotonic() > deadline:
            raise AssertionError(f"route {rk} not idle after {timeout}s")
        time.sleep(interval)


def wait_routes_idle(r: redis.Redis, keys: Keys, rks: list[str], timeout: float = 120.0, polls: int = 4,
                     interval: float = 0.1) -> None:
    """`wait_route_idle` for many routes at once: every poll checks them all in one pipeline."""
    deadline = time.monotonic() + timeout
    streak = 0
    while streak < polls:
        pipe = r.pipeline(transaction=False)
        for rk in rks:
            pipe.llen(keys.inbox(rk))
            pipe.llen(keys.proc(rk))
            pipe.exists(keys.lease(rk))
            pipe.zscore(keys.dirty, rk)
        values = pipe.execute()
        idle = all(v in (0, None) for v in values)
        streak = streak + 1 if idle else 0
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(rks)} routes not idle after {timeout}s")
        time.sleep(interval)


def rq_jobs(redis_url: str, queue: str, state: str) -> list[Any]:
    """RQ jobs of `queue` by state: "queued", "started", "finished" or "failed"."""
    from rq import Queue
    from rq.job import Job
    from rq.serializers import JSONSerializer

    conn = redis.Redis.from_url(redis_url)  # RQ needs a bytes client
    q = Queue(queue, connection=conn, serializer=JSONSerializer)
    registry = {"started": q.started_job_registry, "finished": q.finished_job_registry,
                "failed": q.failed_job_registry}
    ids = q.get_job_ids() if state == "queued" else registry[state].get_job_ids()
    return [j for j in Job.fetch_many(ids, connection=conn, serializer=JSONSerializer) if j is not None]


def unique(prefix: str) -> str:
    import uuid

    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def deliver(service: WebServer, feishu: Any, *, expect: int = 200, **kw: Any) -> dict[str, Any]:
    """Register a user message in the emulator, then push its event to our endpoint like Feishu does."""
    from sandbox.feishu.events import message_event

    envelope = message_event(token=VERIFICATION_TOKEN, app_id=APP_ID, **kw)
    m = envelope["event"]["message"]
    feishu.add_message(m["message_id"], m["chat_id"], sender_open_id=kw.get("sender_open_id", "ou_user"),
                       thread_id=m.get("thread_id"), root_id=m.get("root_id"), parent_id=m.get("parent_id"),
                       msg_type=m["message_type"], content=m["content"],
                       chat_mode="p2p" if m["chat_type"] == "p2p" else "group", mentions=m.get("mentions"))
    resp = service.post(envelope)
    assert resp.status_code == expect, resp.text
    return envelope


def message_id(envelope: dict[str, Any]) -> str:
    return str(envelope["event"]["message"]["message_id"])


def model_requests_with(claude: Any, needle: str) -> list[dict[str, Any]]:
    """The requests whose messages carry needle, memory consolidations left out: they quote the recent conversations
    of the scopes they tidy (so any needle) and run at their own cron slot, beside other tests' turns."""
    import json

    from memory.scopes.dream import SYSTEM_MARKER

    return [r for r in claude.requests if needle in json.dumps(r["body"]["messages"], ensure_ascii=False)
            and SYSTEM_MARKER not in json.dumps(r["body"].get("system", ""), ensure_ascii=False)]


def reply_text(message: dict[str, Any]) -> str:
    """What a reply shows as plain text, whatever it was rendered as (text, post, card)."""
    from feishu.render import plain_of

    return plain_of(message["msg_type"], message["body"]["content"])


def session_log(r: redis.Redis, keys: Keys, rk: str) -> list[dict[str, Any]]:
    """The entries of the route's current session (memory/sessions.py); [] when it has none yet."""
    sid = r.hget(keys.route_state(rk), "sid")
    return [json.loads(e) for e in r.lrange(keys.session_log(rk, sid), 0, -1)] if sid else []
