"""The deployment's features (`FEATURES`, `build_app`) and the Flask application factory; `app` is built on first
access, so importing this module has no side effects and registers nothing.

Adding a feature = one folder declaring its `FEATURE` (turn/registry.py) + one line in `FEATURES` (ARCHITECTURE.md).
Every process builds its App through `build_app` (APP_FACTORY names it: the web, each worker, the sweeper, the long
connection)."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from codehost import feature as codehost
from core import logs
from core.keys import Keys
from core.settings import Settings, load_feature_settings, load_settings
from feishu import identity
from items import feature as items
from materials import feature as materials
from memory.scopes import feature as memory
from polls import feature as polls
from runs.runtime import Runtime
from share import feature as share
from state.store import resolve_url, state_client
from timers import feature as timers
from triage import feature as triage
from turn import session
from turn.registry import App, Feature, app_of

if TYPE_CHECKING:
    from flask import Flask

    from bot.ingress import Ingress

log = logging.getLogger(__name__)

# The product's features, one line each (their order in a turn is each one's `order`, not this list's).
FEATURES: tuple[Feature, ...] = (
    session.FEATURE,  # /reset, /status, card clicks to their feature's action
    items.FEATURE,  # items, their records, first answers and approvals
    materials.FEATURE,  # documents a turn shows and read_document
    memory.FEATURE,  # the memory tool, loaded memory (old notes read only), /memory /forget, consolidation
    timers.FEATURE,  # follow-ups, digests, /followups /cancel
    triage.FEATURE,  # quiet triage of unaddressed topic messages
    polls.FEATURE,  # /poll in a group: one vote per person, closed at a time said
    share.FEATURE,  # /share <chat>, 同步到…, the share_to_chat tool: a result posted into another chat, authorised
    codehost.FEATURE,  # GitHub/GitLab webhooks into the watching item's topic, /watch /unwatch /watching
)


def build_app(settings: Settings | None = None, features: tuple[Feature, ...] = FEATURES) -> App:
    """The App of this deployment: every feature of `features`, registered on a new instance (a test may pass a
    subset, or a feature of its own)."""
    read = settings.feature if settings is not None else load_feature_settings
    for f in features:  # every feature is in; a feature switches itself off by its own settings (items without Bitable)
        if f.settings is not None:
            read(f.settings)  # now: a bad value stops the process at start, as the service's own do
    return App(features)


def create_app(settings: Settings | None = None) -> Flask:
    """The web process's Flask app (the worker builds only its App: it never imports Flask)."""
    from flask import Flask

    import console
    from bot import admin
    from bot.ingress import Ingress
    from bot.lanes import Lanes
    from bot.web import bp, lane

    settings = settings or load_settings()
    logs.setup(settings.log_level, settings.log_format)
    url = resolve_url(settings)
    runtime = Runtime(settings, url)
    ingress = Ingress(settings, state_client(url), runtime.app)
    app = Flask(__name__)
    app.config["MAX_CONTENT_LENGTH"] = settings.max_body_bytes
    app.extensions["feishu_ingress"] = ingress
    app.register_blueprint(bp)
    lanes = [lane(ingress)]
    for feature in app_of(runtime).features:  # a feature's own endpoints (another system's webhook)
        if feature.web is not None:
            web = feature.web(runtime)
            app.register_blueprint(web.blueprint)
            lanes.extend(web.lanes)
    admin.init_app(app, runtime)
    console.init_app(app, runtime)
    app.wsgi_app = Lanes(app.wsgi_app, lanes)  # type: ignore[method-assign]  # hot POSTs skip Flask's machinery
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
