"""Flask application factory; `app` is built on first access so importing this module has no side effects."""

from __future__ import annotations

import logging
import threading
from typing import Any

from flask import Flask

import console
from core import logs
from core.keys import Keys
from core.settings import Settings, load_settings
from edge import admin
from edge.ingress import Ingress
from edge.web import bp
from feishu import identity
from memory.store import resolve_url, state_client
from runs.runtime import Runtime

log = logging.getLogger(__name__)


def create_app(settings: Settings | None = None) -> Flask:
    settings = settings or load_settings()
    logs.setup(settings.log_level, settings.log_format)
    url = resolve_url(settings)
    ingress = Ingress(settings, state_client(url))
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.extensions["feishu_ingress"] = ingress
    app.register_blueprint(bp)
    runtime = Runtime(settings, url)
    admin.init_app(app, runtime)
    console.init_app(app, runtime)
    threading.Thread(target=_warm_identity, args=(settings, ingress), daemon=True).start()
    return app


def _warm_identity(settings: Settings, ingress: Ingress) -> None:
    """Best effort at start-up; the sweeper keeps it fresh. Never on the request path."""
    try:
        if identity.cached_open_id(ingress.state, ingress.keys) is None:
            from feishu.client import FeishuApi

            identity.refresh(FeishuApi(settings, ingress.state, Keys(settings.bot_profile)),
                             ingress.state, ingress.keys)
    except Exception as exc:
        log.warning("bot identity not fetched at start-up", extra={"error": exc.__class__.__name__})


_app: Flask | None = None


def __getattr__(name: str) -> Any:  # PEP 562: gunicorn's `app:app` builds the app lazily
    global _app
    if name == "app":
        if _app is None:
            _app = create_app()
        return _app
    raise AttributeError(name)
