"""Per-process runtime for jobs: settings, Redis clients and adapters, built lazily after fork."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, TypeVar

import redis

from bitable.client import Bitable
from bitable.index import Items
from claude.client import Claude
from core.clock import Clock
from core.keys import Keys
from core.settings import Settings, load_settings
from feishu.client import FeishuApi
from memory.notes import read_text
from memory.sessions import Sessions
from routing.keys import kind_of
from routing.policy import Policy, policy_from
from runs.inbox import Inbox
from runs.outbox import Limits, Outbox
from runs.queues import enqueue_drain
from state.store import resolve_url, rq_client, state_client

T = TypeVar("T")
_configured: Settings | None = None
_current: Runtime | None = None


@dataclass
class Runtime:
    settings: Settings
    redis_url: str
    _owned: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def own(self, name: str, build: Callable[[Runtime], T]) -> T:
        """A feature's own per-process object (its store), built by `build` on first use and kept: the runtime knows
        no feature, a feature reaches its own through its package (`timers.timers_of(rt)`)."""
        if name not in self._owned:
            self._owned[name] = build(self)
        return self._owned[name]  # type: ignore[no-any-return]

    @cached_property
    def app(self) -> Any:
        """The deployment's App (turn/registry.py, read through `registry.app_of`): its features, built once per
        process by the factory APP_FACTORY names (default app.py's `build_app`; `registry.load_app`, reached by name:
        runs sit below the turn). A test may assign one."""
        return importlib.import_module("turn.registry").load_app(self.settings)

    @cached_property
    def keys(self) -> Keys:
        return Keys(self.settings.bot_profile)

    @cached_property
    def state(self) -> redis.Redis:
        return state_client(self.redis_url)

    @cached_property
    def rq(self) -> redis.Redis:
        return rq_client(self.redis_url)

    @cached_property
    def inbox(self) -> Inbox:
        s = self.settings
        return Inbox(self.state, self.keys, int(s.run_lease_seconds * 1000), keep=s.transcript_turns * 2,
                     session_retention_s=s.session_retention_s, route_retention_s=s.route_retention_s)

    @cached_property
    def persona(self) -> str:
        s = self.settings
        return read_text(s.assistant_persona, s.assistant_persona_file)

    @cached_property
    def team_notes(self) -> str:
        return read_text(None, self.settings.team_notes_file)

    @cached_property
    def sessions(self) -> Sessions:
        return Sessions(self.state, self.keys, self.settings.session_retention_s)

    @cached_property
    def feishu(self) -> FeishuApi:
        return FeishuApi(self.settings, self.state, self.keys)

    @cached_property
    def llm(self) -> Claude:
        return Claude(self.settings)

    @cached_property
    def items(self) -> Items:
        return Items(self.state, self.keys)

    @cached_property
    def bitable(self) -> Bitable | None:
        """The items table; None when no Bitable is configured (item features off)."""
        if not self.settings.items_enabled:
            return None
        return Bitable(self.settings, self.state, self.keys, self.feishu.client)

    @cached_property
    def outbox(self) -> Outbox:
        s = self.settings
        limits = s.feishu_limits
        return Outbox(self.inbox, self.keys, self.feishu, Limits(limits.reply_chunk_chars, limits.chat_qps,
                                                                 limits.app_qps, limits.api_qpm))

    @cached_property
    def clock(self) -> Clock:
        return Clock(self.state, self.keys, adjustable=self.settings.adjustable_clock)

    @cached_property
    def policy(self) -> Policy:
        return policy_from(self.settings)

    def queue_of(self, route_key: str) -> str:
        return self.policy.queue_of(kind_of(route_key))

    def start_run(self, route_key: str, kick_token: str, queue: str | None = None) -> str:
        """Enqueue the drain run a kick token stands for, on its route kind's queue."""
        return enqueue_drain(self.rq, self.settings.bot_profile, queue or self.queue_of(route_key), route_key,
                             kick_token)


def configure(settings: Settings) -> None:
    """Called once by the worker entry point before forking, so horses skip re-reading the env."""
    global _configured
    _configured = settings


def current() -> Runtime:
    """This process's runtime. A work-horse inherits the one its worker built before forking (see
    `prepare`): redis-py's pools notice the new pid and open fresh connections, and the SDK clients
    have never connected, so no socket crosses a fork while their costly setup is paid once."""
    global _current
    if _current is None:
        settings = _configured or load_settings()
        _current = Runtime(settings, resolve_url(settings))
    return _current
