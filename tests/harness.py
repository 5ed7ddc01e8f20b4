"""Test harness: embedded Redis, emulators, the real web app over HTTP, real RQ worker processes."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
import requests
from werkzeug.serving import make_server

from app import create_app
from bot.settings import Settings
from sandbox.events import signed_request

ROOT = Path(__file__).resolve().parent.parent
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
        "SWEEP_INTERVAL_SECONDS": "0.5", "LOG_LEVEL": "INFO",
    }
    env.update(extra)
    return env


def settings_from(env: dict[str, str]) -> Settings:
    return Settings(_env_file=None, **{k.lower(): v for k, v in env.items()})  # type: ignore[call-arg]


class WebServer:
    """The real Flask app on a real socket (port 0), as Feishu would reach it."""

    def __init__(self, settings: Settings) -> None:
        self.app = create_app(settings)
        self.server = make_server("127.0.0.1", 0, self.app, threaded=True)
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


def subprocess_env(env: dict[str, str]) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FEISHU_", "ANTHROPIC_", "ROUTING_"))}
    bindir = str(Path(sys.executable).parent)
    return {**base, **env, "PYTHONPATH": str(ROOT), "PATH": f"{bindir}:{base.get('PATH', '')}"}


class Proc:
    """A service process (worker, sweeper) started the way the Procfile starts it."""

    def __init__(self, args: list[str], env: dict[str, str], cwd: str, log_path: Path) -> None:
        self.log_path = log_path
        self.log = open(log_path, "ab")  # noqa: SIM115  (closed in stop())
        self.p = subprocess.Popen([sys.executable, *args], env=subprocess_env(env), cwd=cwd,
                                  stdout=self.log, stderr=subprocess.STDOUT, start_new_session=True)

    def children(self) -> list[int]:
        kids = []
        for stat in Path("/proc").glob("[0-9]*/stat"):
            try:
                fields = stat.read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == self.p.pid:
                kids.append(int(stat.parent.name))
        return kids

    def kill9(self) -> None:
        """SIGKILL the process and its forked children (RQ work-horses live in their own group)."""
        for pid in [*self.children(), self.p.pid]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.p.wait(timeout=10)

    def stop(self) -> None:
        if self.p.poll() is None:
            os.killpg(self.p.pid, signal.SIGTERM)
            try:
                self.p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill9()
        self.log.close()


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


def unique(prefix: str) -> str:
    import uuid

    return f"{prefix}_{uuid.uuid4().hex[:10]}"


def deliver(service: WebServer, feishu: Any, *, expect: int = 200, **kw: Any) -> dict[str, Any]:
    """Register a user message in the emulator, then push its event to our endpoint like Feishu does."""
    from sandbox.events import message_event

    envelope = message_event(token=VERIFICATION_TOKEN, app_id=APP_ID, **kw)
    m = envelope["event"]["message"]
    feishu.add_message(m["message_id"], m["chat_id"], sender_open_id=kw.get("sender_open_id", "ou_user"),
                       thread_id=m.get("thread_id"), root_id=m.get("root_id"), parent_id=m.get("parent_id"),
                       msg_type=m["message_type"], content=m["content"],
                       chat_mode="p2p" if m["chat_type"] == "p2p" else "group")
    resp = service.post(envelope)
    assert resp.status_code == expect, resp.text
    return envelope


def message_id(envelope: dict[str, Any]) -> str:
    return str(envelope["event"]["message"]["message_id"])


def model_requests_with(claude: Any, needle: str) -> list[dict[str, Any]]:
    import json

    return [r for r in claude.requests if needle in json.dumps(r["body"]["messages"], ensure_ascii=False)]


def reply_text(message: dict[str, Any]) -> str:
    import json

    return str(json.loads(message["body"]["content"])["text"])
