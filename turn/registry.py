"""What features contribute to a turn and to a run, registered from their own rooms. The turn and the drain iterate
this registry; they never name a feature (style.md §15: Bolt's listeners, python-telegram-bot's handlers).

A feature declares, from its own room, one `Feature` value; `app.build_app(settings)` adds the deployment's features
to an `App`, once per process (importing a module registers nothing). A `Feature` carries:
- `start`: a factory of its `Part` of each turn — its tools' handlers (the schemas are the feature's `tools`, one
  stable list for the deployment), a request block in the turn's context (this request only), system text after the
  cached prefix, what it adds to the turn's recall record, the reply's
  prefix and footer, and what it does once the answer is kept or posted;
- `Command`: a chat command answered by the service, not the model (`/reset`, `/followups`, `/登记` …);
- `Event`: an inbox entry of its own message type (a timer's wake-up), answered by the service;
- `Action`: a card button, dispatched by the namespaced action name its value carries (`items:approve`);
- `Opener`: a message that starts the feature's work instead of a turn (a topic's opening report);
- `RouteWork`: the whole work of an internal route kind (an item's analysis route, a chat's digest route);
- `TimerKind`: what a due timer of its kind does;
- `Periodic`: housekeeping every sweeper runs about once a second (idempotent across sweepers); `side` work that
  calls the Open API (the items table's hourly check) on the sweeper's side thread;
- `Probe`: how the sweeper tries again a component of its own that paused work (the items table);
- `web`: HTTP endpoints of its own (another system's webhook): a Flask blueprint the web registers, and the `Lane`s
  that answer its hot POSTs without Flask's per-request machinery (bot/lanes.py) — as thin as the Feishu edge:
  verify, parse the minimum, one PUSH, ack;
- `Check`: rows `python -m bot.doctor` prints for it (a secret set or not, a URL to paste elsewhere);
- `Panel`: a table the operator console shows for it, on a page of its own or on each item's page;
- `record_read`: what it learns from an item's record whenever a run reads the record fresh.
"""

from __future__ import annotations

import importlib
import json
import logging
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from claude.budget import Budget, factor
from core.inbound import Inbound
from core.keys import Keys
from runs.outbox import Destination

if TYPE_CHECKING:
    from flask import Blueprint
    from pydantic_settings import BaseSettings

    from bitable.client import Record
    from bitable.index import Item
    from claude.client import Completion
    from core.settings import Settings
    from memory.sessions import RouteState
    from runs.runtime import Runtime

Fence = Callable[[], bool]
log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Context:
    """One unit of work's context, the one value every handler a feature registers gets (Bolt's `context`,
    python-telegram-bot's `CallbackContext`): a turn's parts, a command, a card click, an inbox event, a due timer,
    an internal route's work. What a handler needs and its run knows: the route and its kind, the batch, the fence,
    the route state, the session, the budget, where replies go, the settings and the runtime's stores (`rt`)."""

    rt: Runtime
    rk: str  # route key
    batch: tuple[Inbound, ...]  # the entries this run answers (a service answer: the one entry)
    batch_id: str
    fence: Fence
    state: RouteState | None = None  # the route's session and generation as the run read them
    session_id: str = ""  # a turn's session (after a rotation: the one it started in)
    owner: tuple[str, int] | None = None  # a turn's execution id and generation (they fence a rotation's write)
    text: str = ""  # a turn's request text of the batch (related discussion, the batch): what it links and says
    batch_text: str = ""  # a turn's batch as the model reads it and the session log keeps it
    previous: Mapping[str, Any] = field(default_factory=dict)  # the session's last recall record (reading so far)
    dropped: int = 0  # messages consumed unanswered because a user reset came after them (for /reset's reply)
    told: list[str] = field(default_factory=list)  # session log entries of what it posted unasked (committed with it)
    timer: Any = None  # a due timer's run (TimerKind): the timer, of the timers feature's type

    @property
    def kind(self) -> str:
        """The route kind: p2p, group, topic, or a feature's internal kind (item, digest, memory …)."""
        return self.rk.split(":")[2]

    @property
    def message(self) -> Inbound:
        """The entry answered (a turn's last message: replies go under it)."""
        return self.batch[-1]

    @property
    def last(self) -> Inbound:
        return self.batch[-1]

    @property
    def senders(self) -> list[str]:
        return sorted({m.sender_id for m in self.batch})

    @property
    def gen(self) -> int:
        if self.owner:
            return self.owner[1]
        return self.state.generation if self.state else 0

    @property
    def settings(self) -> Settings:
        return self.rt.settings

    @cached_property
    def budget(self) -> Budget:
        """The request budget now (CONTEXT_BUDGET_TOKENS, MAX_OUTPUT_TOKENS, the profile's calibration factor)."""
        s = self.rt.settings
        return Budget(s.context_budget_tokens, s.max_output_tokens, factor(self.rt.state, self.rt.keys))

    @property
    def destination(self) -> Destination:
        """Replies to the entry answered, in its thread on a topic route, fenced by the run."""
        m = self.message
        return Destination(self.rk, m.chat_id, m.message_id, in_thread=self.kind == "topic", fence=self.fence)


class ToolRefused(Exception):
    """A part's tool refused the call; str(err) is the tool error the model reads (is_error)."""


class Part:
    """One feature's share of one turn. Every method has a no-op default; a feature overrides what it uses."""

    def system(self) -> str:
        """Text after the cached system prefix (stable while its scope's facts are)."""
        return ""

    def block(self) -> str:
        """Text of the turn's context block, after the batch, in this request only (never in the session log)."""
        return ""

    def tools(self) -> list[dict[str, Any]]:
        """Tools only this turn offers, beyond the deployment's stable list (`Feature.tools`): each one changes the
        request's cached prefix, so prefer declaring it on the feature and refusing it in `unavailable`."""
        return []

    def keeps(self, name: str) -> bool:
        """Whether the session's history may keep its tool `name`'s results (False: what they show depends on who
        asks — a document, a person's memory — so a later turn, maybe someone else's, must read it again)."""
        return True

    def unavailable(self) -> dict[str, str]:
        """Its tools this turn cannot use, each with why (the model reads it; a call answers "not available here")."""
        return {}

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        """The result of one of its tools (None: not its tool); `room`: tokens the result may take."""
        return None

    def sent(self, request_text: str) -> None:
        """A request went out carrying `request_text` (what of the part's material it used)."""

    def record(self) -> dict[str, Any]:
        """What the turn's recall record keeps for it (the next turn reads it back)."""
        return {}

    def links(self) -> list[Any]:
        """Documents this part names for the turn (an item's record lists them): later parts may show them."""
        return []

    def evidence(self) -> list[str]:
        """What the answer relied on (a document's revision, a first answer's version): the reply names every
        part's in one line."""
        return []

    def prefix(self) -> str:
        return ""

    def footer(self, text: str) -> str:
        """The reply's footer line(s) for the answer `text` (its language), besides the evidence line."""
        return ""

    def answered(self, session_id: str) -> None:
        """The answer is final (before it is kept), in `session_id` (after a rotation: the new one): touch what the
        turn used."""

    def kept(self) -> None:
        """The answer is kept (a rerun posts this very answer): remember what the turn showed."""


@dataclass(frozen=True)
class Said:
    """A service reply: its text and the people it may mention (open_id → name)."""

    text: str
    people: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Command:
    name: str
    run: Callable[[Context], Said | None]  # None: it replied itself (or says nothing)
    words: tuple[str, ...] = ()  # the whole text, lower-cased, spaces collapsed
    pattern: re.Pattern[str] | None = None  # or a pattern the whole text matches
    resets: bool = False  # accepted as a user reset at ingress (the route's generation moves on at once)


@dataclass(frozen=True)
class Event:
    message_type: str
    run: Callable[[Context], object]
    stale_after_reset: bool = True  # consumed unanswered when a reset came after it, like a message
    tell_sender: bool = True  # a give-up tells its sender (a timer has nobody to tell: the dead letter says it)


@dataclass(frozen=True)
class Opener:
    name: str
    applies: Callable[[Inbound, str, Settings], bool]  # (message, route kind, settings)
    run: Callable[[Context], object]


@dataclass(frozen=True)
class RouteWork:
    kind: str
    run: Callable[[Context], object]
    gave_up: Callable[[Context, str], None] | None = None  # (call, reason): best effort after a dead letter


@dataclass(frozen=True)
class Periodic:
    """Work each sweeper runs on its loop, idempotent across sweepers: due timers into their routes' inboxes (every
    TIMER_CHECK_SECONDS), a digest's next slot and a consolidation slot's events (about once a second)."""

    name: str
    run: Callable[[Runtime], object]
    every: Callable[[Settings], float] = lambda _settings: 1.0  # seconds between runs
    # It calls an outside API (the Open API): it runs on the sweeper's side thread, so a slow answer never holds up
    # dispatch. A side run that returns False (or raises) failed, and is tried again after `retry` seconds.
    side: bool = False
    retry: Callable[[Settings], float] | None = None


@dataclass(frozen=True)
class Probe:
    """While work is paused on a broken `component` (the `paused` hash), how the sweeper learns it works again:
    `run(runtime)` raises while it is still broken. Components no feature claims: the model's and Feishu's own."""

    component: str
    run: Callable[[Runtime], object]

@dataclass(frozen=True)
class Gauge:
    """A number `/metrics` shows for the feature: the size of one of its sorted sets (`zset(keys)`)."""

    name: str
    help: str
    zset: Callable[[Keys], str]


@dataclass(frozen=True)
class TimerKind:
    """What a due timer of its kind does: `run(call)` with `call.timer` set; returns a note for the log."""

    kind: str
    run: Callable[[Context], str]


@dataclass(frozen=True)
class Action:
    """A card button of the feature's, dispatched by the action's name in the button's value (`<feature>:<name>`,
    e.g. `items:approve`): two features' buttons never collide. `legacy` claims the values of cards posted before
    actions were namespaced (they are still in chats and inboxes)."""

    name: str  # within the feature: `approve` is dispatched as `items:approve`
    run: Callable[[Context], object]  # `call.message.content` is the click: {"action": …, "value": {…}}
    legacy: Callable[[dict[str, Any]], bool] | None = None


@dataclass(frozen=True)
class Check:
    """A row the doctor prints for the feature (`python -m bot.doctor`, the console's overview): what it is, what it
    needs (a variable, a URL to paste into another system), whether that is there, and how to set it up."""

    what: str
    needs: str
    verdict: str  # present | missing | unknown | off (not configured, and not required)
    fix: str
    required: bool = False


@dataclass(frozen=True)
class Panel:
    """A table the operator console shows for the feature: on a page of its own (`/console/f/<feature>/<name>`, in the
    console's menu) or, `of_item`, on every item's page. `rows(runtime, item id or "")` reads Redis only (never an
    Open API) and returns rows of column → value; every value is shown as text."""

    name: str
    title: str
    rows: Callable[[Runtime, str], Sequence[Mapping[str, Any]]]
    of_item: bool = False


@dataclass(frozen=True)
class Lane:
    """A POST endpoint the web answers straight from the WSGI environ (bot/lanes.py): `serve(headers, body, mimetype)`
    → (status, JSON body). Its blueprint keeps the same route, and answers what a lane does not take on (no
    Content-Length, a body over `max_body`), so both ways give the same answers."""

    path: str
    serve: Callable[[Mapping[str, str], bytes, str], tuple[int, bytes]]
    max_body: int


@dataclass(frozen=True)
class Web:
    """A feature's HTTP endpoints: its blueprint, and the lanes of its hot POSTs (none: Flask answers them all)."""

    blueprint: Blueprint
    lanes: tuple[Lane, ...] = ()


@dataclass(frozen=True)
class Feature:
    """Everything one feature adds, declared from its own room and registered on an `App` (nothing registers on
    import). A feature is one folder plus one line in the App's feature list (app.py)."""

    name: str  # also the namespace of its card actions and its keys
    order: int = 50  # parts start in this order; a part sees the parts started before it
    start: Callable[[Context, Mapping[str, Part]], Part | None] | None = None  # its part of each turn
    tools: Callable[[str], Sequence[dict[str, Any]]] = lambda _kind: ()  # the tools a route kind may use
    # Its tools as this deployment offers them, when that depends on the deployment (a table's options; none without
    # the table): read for every request, so it must be stable. Default: `tools` of every route kind.
    tools_in: Callable[[Runtime], Sequence[dict[str, Any]]] | None = None
    replied: Callable[[Context, Completion], None] | None = None  # after the reply was posted (cached answers too)
    superseded: Callable[[Context], object] | None = None  # a user reset overtook the turn: it never answers
    reset: Callable[[Context], Said] | None = None  # what a user reset does to its state, said in the reset's reply
    status: Callable[[Context, str], str] | None = None  # lines /status adds ("none" in the reply's language)
    commands: tuple[Command, ...] = ()
    events: tuple[Event, ...] = ()
    actions: tuple[Action, ...] = ()
    openers: tuple[Opener, ...] = ()
    route_work: tuple[RouteWork, ...] = ()  # internal route kinds it runs (`feishu:<profile>:<kind>:…`)
    timer_kinds: tuple[TimerKind, ...] = ()
    periodic: tuple[Periodic, ...] = ()
    probes: tuple[Probe, ...] = ()  # how a credential or resource of its own that paused work is tried again
    gauges: tuple[Gauge, ...] = ()
    # What it learns, in the web, from a topic message that did not address the bot (quiet triage buffers it):
    # `overheard(settings, redis, keys, message, now)` → a short outcome for the log ("" = not its business). The
    # request path stays thin: a few Redis commands, never an Open API or model call.
    overheard: Callable[[Settings, Any, Keys, Inbound, float], str] | None = None
    # Its HTTP endpoints (another system's webhook): what the web registers, built from the web's runtime.
    web: Callable[[Runtime], Web] | None = None
    checks: Callable[[Settings], Sequence[Check]] = lambda _settings: ()  # its rows in the doctor's table
    panels: tuple[Panel, ...] = ()  # its tables in the operator console
    # What it learns from an item's record each time a run reads it fresh (a record event, a turn's item facts):
    # `record_read(runtime, item, record)`. Failures are logged, never the reading run's.
    record_read: Callable[[Runtime, Item, Record], None] | None = None
    # Its offline-model behaviour in sandbox mode: `standin(request body)` → an answer (text or content blocks, as
    # a real model would choose: its tool with real arguments), or None to pass; the stand-in asks it first.
    standin: Callable[[dict[str, Any]], Any] | None = None
    settings: type[BaseSettings] | None = None  # its own settings (flat env names, in .env.example), read at build


# -- the application --------------------------------------------------------------------------------------------

CORE_ROUTE_KINDS = ("p2p", "group", "topic")  # the contract's routes, from messages; features add internal ones


class Collision(ValueError):
    """Two features declared the same command, event type, action, route kind or timer kind."""


class App:
    """The features of one deployment (Bolt's `App`, python-telegram-bot's `Application`): built once per process
    by `app.build_app(settings)`; every lookup of the turn, the drain, the sweeper and the web goes through it."""

    def __init__(self, features: Iterable[Feature] = ()) -> None:
        self.features: list[Feature] = []
        self.commands: list[Command] = []
        self.events: dict[str, Event] = {}
        self.actions: dict[str, Action] = {}
        self.openers: list[Opener] = []
        self.route_work: dict[str, RouteWork] = {}
        self.timer_kinds: dict[str, TimerKind] = {}
        self.periodic: list[Periodic] = []
        self.probes: dict[str, Probe] = {}
        self._owner: dict[str, str] = {}
        for f in features:
            self.add(f)

    def add(self, f: Feature) -> Feature:
        """Register one feature; a second declaration of anything already registered is a `Collision`."""
        self._claim(f, f"feature {f.name}")
        if ":" in f.name:
            raise ValueError(f"feature name {f.name!r} may not contain ':'")
        for what in (*(f"command {c.name}" for c in f.commands), *(f"event {e.message_type}" for e in f.events),
                     *(f"action {f.name}:{a.name}" for a in f.actions), *(f"opener {o.name}" for o in f.openers),
                     *(f"route kind {w.kind}" for w in f.route_work), *(f"timer kind {t.kind}" for t in f.timer_kinds),
                     *(f"periodic {p.name}" for p in f.periodic), *(f"probe {p.component}" for p in f.probes)):
            self._claim(f, what)
        self.features = sorted([*self.features, f], key=lambda x: x.order)
        self.commands += f.commands
        self.events |= {e.message_type: e for e in f.events}
        self.actions |= {f"{f.name}:{a.name}": a for a in f.actions}
        self.openers += f.openers
        self.route_work |= {w.kind: w for w in f.route_work}
        self.timer_kinds |= {t.kind: t for t in f.timer_kinds}
        self.periodic += f.periodic
        self.probes |= {p.component: p for p in f.probes}
        return f

    def _claim(self, f: Feature, what: str) -> None:
        kind = what.split(" ")[0]
        if what in self._owner or (kind == "route" and what.split(" ")[-1] in CORE_ROUTE_KINDS):
            raise Collision(f"{f.name}: {what} is declared by {self._owner.get(what, 'the core')} already")
        self._owner[what] = f.name

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.features)

    @property
    def route_kinds(self) -> tuple[str, ...]:
        return (*CORE_ROUTE_KINDS, *self.route_work)

    def command_of(self, message_type: str, text: str) -> Command | None:
        return command_in(self.commands, message_type, text)

    def resets(self, message_type: str, text: str) -> bool:
        """Whether the message is a command that resets its route (the webhook asks it of every event): the
        resetting commands are tried first, so most messages are matched against one or two, not every command."""
        resetting = [c for c in self.commands if c.resets]
        if command_in(resetting, message_type, text) is None:
            return False
        command = self.command_of(message_type, text)  # the first command that matches decides, as in a run
        return command is not None and command.resets

    def command_named(self, name: str) -> Command | None:
        return next((c for c in self.commands if c.name == name), None)

    def opener_named(self, name: str) -> Opener | None:
        return next((o for o in self.openers if o.name == name), None)

    def tools_for(self, reading: Sequence[dict[str, Any]], rt: Runtime | None = None) -> list[dict[str, Any]]:
        """Every tool the deployment's model is offered: the turn's own reading tools, then each feature's (what it
        declares for any route kind, or `tools_in(rt)` when the deployment shapes it), in order, each name once. The
        same list for every route and every turn — the start of every request's cached prefix, and what a rerun sizes
        its batch with; a tool a turn may not use answers "not available here" (`unavailable`)."""
        out: dict[str, dict[str, Any]] = {}
        for t in [*reading, *(t for f in self.features for t in self._tools_of(f, rt))]:
            out.setdefault(str(t.get("name")), t)
        return list(out.values())

    @staticmethod
    def _tools_of(f: Feature, rt: Runtime | None) -> list[dict[str, Any]]:
        if f.tools_in is not None and rt is not None:
            return list(f.tools_in(rt))
        return [t for kind in CORE_ROUTE_KINDS for t in f.tools(kind)]

    def offered_on(self, kind: str) -> set[str]:
        """The names of the features' tools a route kind may use (`Feature.tools(kind)`)."""
        return {str(t.get("name")) for f in self.features for t in f.tools(kind)}

    def overheard(self, settings: Settings, r: Any, keys: Keys, m: Inbound, now: float) -> str:
        """What the features made of an unaddressed topic message: every outcome reported, in the features' order,
        joined ("" = none). Each feature hears it: a message can feed triage and name a link another one follows."""
        said = [f.overheard(settings, r, keys, m, now) for f in self.features if f.overheard is not None]
        return "; ".join(s for s in said if s)

    def record_read(self, rt: Runtime, item: Item, record: Record) -> None:
        """Every feature's `record_read` for a record a run just read; one failing is logged, the others still run,
        and the reading run goes on (what a feature learns from a record is never worth the item's own work)."""
        for f in self.features:
            if f.record_read is None:
                continue
            try:
                f.record_read(rt, item, record)
            except Exception as exc:
                log.warning("a feature's record_read failed", extra={"reason": f.name, "error": repr(exc)[:200]})

    def checks(self, settings: Settings) -> list[Check]:
        """Every feature's doctor rows, in the features' order."""
        return [c for f in self.features for c in f.checks(settings)]

    def panels(self, *, of_item: bool) -> list[tuple[str, Panel]]:
        """(feature name, panel) of every feature's console tables of one kind."""
        return [(f.name, p) for f in self.features for p in f.panels if p.of_item == of_item]

    def gauges(self, keys: Keys) -> list[tuple[str, str, str]]:
        """Every feature's gauges, as core.metrics renders them: (name, help, the sorted set)."""
        return [(g.name, g.help, g.zset(keys)) for f in self.features for g in f.gauges]

    def action_for(self, value: Mapping[str, Any]) -> str | None:
        """The registered action a card button's value names (`{"action": "items:approve", …}`), or the one that
        claims a value of a card posted before actions were namespaced; None: no feature of this App's."""
        name = value.get("action")
        if isinstance(name, str):
            return name if name in self.actions else None
        return next((n for n, a in self.actions.items() if a.legacy is not None and a.legacy(dict(value))), None)


def load_app(settings: Settings) -> App:
    """The App the factory APP_FACTORY names builds (`module:function`, default app.py's `build_app`)."""
    module, _, name = settings.app_factory.partition(":")
    app = getattr(importlib.import_module(module), name)(settings)
    if not isinstance(app, App):
        raise TypeError(f"APP_FACTORY {settings.app_factory} built {type(app).__name__}, not an App")
    return app


def app_of(rt: Runtime) -> App:
    """The runtime's App, typed (runs/runtime.py keeps it untyped: it sits below the turn)."""
    app = rt.app
    if not isinstance(app, App):
        raise TypeError(f"APP_FACTORY built {type(app).__name__}, not an App")
    return app


# -- lookups --------------------------------------------------------------------------------------------------------

_TRAILING = re.compile(r"[\s。.!！~～]+$")


def command_in(commands: Sequence[Command], message_type: str, text: str) -> Command | None:
    """The command a message is: its whole text (the bot's @mention stripped) and nothing else, in a `text` or `post`
    message. Quoted, forwarded and card content never is. Pure over the commands given."""
    if message_type not in ("text", "post"):
        return None
    word = _TRAILING.sub("", text.strip())
    plain = re.sub(r"\s+", " ", word.lower())
    for c in commands:
        if plain in c.words or (c.pattern is not None and c.pattern.match(word)):
            return c
    return None


def command_argument(c: Command, text: str) -> str:
    """The argument the command's pattern captured ("" when none)."""
    match = c.pattern.match(_TRAILING.sub("", text.strip())) if c.pattern else None
    return (match.group(1) or "") if match and match.groups() else ""


def click_of(message: Inbound) -> tuple[str, dict[str, Any]]:
    """A card click's (action name, button value) from its inbox entry. Entries queued before actions were
    namespaced carry the bare value (`{"a": …, "p": …}`): the name is then "" and the value is the whole."""
    try:
        content = json.loads(message.content)
    except ValueError:
        return "", {}
    if not isinstance(content, dict):
        return "", {}
    if isinstance(content.get("action"), str) and isinstance(content.get("value"), dict):
        return content["action"], content["value"]
    return "", content
