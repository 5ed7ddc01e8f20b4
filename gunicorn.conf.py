"""gunicorn settings for the webhook: many light threads, nothing slow ever runs in a request."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import gc

from app import build_app
from core import boot
from core.settings import load_settings

# Validate in the master: a bad config must stop start-up, not make workers crash-loop. The features' own settings
# too (app.build_app reads each feature's model); the workers then find the product's modules imported already.
_settings = load_settings()
build_app(_settings)

# Sandbox credentials are public fakes, so a sandbox service only listens on loopback.
bind = f"{'127.0.0.1' if _settings.sandbox else '0.0.0.0'}:{_settings.port}"
workers = int(os.environ.get("WEB_CONCURRENCY", "2"))
worker_class = "gthread"
threads = int(os.environ.get("WEB_THREADS", "8"))
timeout = 30
graceful_timeout = 20
keepalive = 5
# Recycling is a leak guard; a boot costs ~2 CPU-s (lark-oapi import), so keep it rare under load.
max_requests = 200000
max_requests_jitter = 20000
control_socket_disable = True
accesslog = None
errorlog = "-"


def when_ready(server: object) -> None:
    """One line saying where the operator console is (the first thing a person running `make run` looks for)."""
    host = "127.0.0.1" if _settings.sandbox else "<this host>"
    who = ("Feishu sign-in as ou_sandbox_admin (the emulator plays the authorize page)" if _settings.sandbox
           and not (_settings.console_admins or _settings.item_admins) else "Feishu sign-in for CONSOLE_ADMINS")
    token = ", or ADMIN_TOKEN" if _settings.admin_token else ""
    print(f"console: http://{host}:{_settings.port}/console/  ({who}{token})", flush=True)


def post_fork(server: object, worker: object) -> None:
    """A new worker imports the app next (no preload): the collector waits until it has (core/boot.py)."""
    gc.disable()


def post_worker_init(worker: object) -> None:
    boot.started()
