"""What features contribute to a turn and to a run, registered from their own rooms. The turn and the drain iterate
this registry; they never name a feature (style.md §15: Bolt's listeners, python-telegram-bot's handlers).

A feature registers, from its own room (loaded by jobs/features.py, in every process):
- `Feature`: a factory of its `Part` of each turn — model tools (schema, handler), a request block before the batch
  (this request only), system text after the cached prefix, what it adds to the turn's recall record, the reply's
  prefix and footer, and what it does once the answer is kept or posted;
- `Command`: a chat command answered by the service, not the model (`/reset`, `/followups`, `/登记` …);
- `Event`: an inbox entry of its own message type (a card click, a timer's wake-up), answered by the service;
- `Opener`: a message that starts the feature's work instead of a turn (a topic's opening report);
- `RouteWork`: the whole work of an internal route kind (an item's analysis route, a chat's digest route);
- `TimerKind`: what a due timer of its kind does;
- `Periodic`: housekeeping every sweeper runs about once a second (idempotent across sweepers).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from core.inbound import Inbound

if TYPE_CHECKING:
    from claude.client import Completion
    from core.settings import Settings
    from memory.budget import Budget
    from memory.sessions import RouteState
    from memory.timer import Timer
    from runs.runtime import Runtime

Fence = Callable[[], bool]


@dataclass(frozen=True)
class Turn:
    """One turn's context: what every part of the turn and every feature's part needs, passed as one value."""

    rt: Runtime
    rk: str  # route key
    kind: str  # route kind: p2p, group, topic
    batch: tuple[Inbound, ...]
    batch_id: str
    fence: Fence
    session_id: str
    owner: tuple[str, int] | None  # the run's execution id and generation (they fence a rotation's write)
    budget: Budget
    text: str = ""  # the request's text of the batch (related discussion, the batch): what it links, what it says
    previous: Mapping[str, Any] = field(default_factory=dict)  # the session's last recall record (reading so far)

    @property
    def gen(self) -> int:
        return self.owner[1] if self.owner else 0

    @property
    def last(self) -> Inbound:
        return self.batch[-1]

    @property
    def senders(self) -> list[str]:
        return sorted({m.sender_id for m in self.batch})


class ToolRefused(Exception):
    """A part's tool refused the call; str(err) is the tool error the model reads (is_error)."""


class Part:
    """One feature's share of one turn. Every method has a no-op default; a feature overrides what it uses."""

    footer_merged = False  # another part's footer speaks for this one (materials names items' evidence)

    def system(self) -> str:
        """Text after the cached system prefix (stable while its scope's facts are)."""
        return ""

    def block(self) -> str:
        """Text before the batch in this request only (never in the session log)."""
        return ""

    def tools(self) -> list[dict[str, Any]]:
        """Tool schemas offered this turn (a subset of the feature's `Feature.tools` for the route kind)."""
        return []

    def call(self, name: str, args: dict[str, Any], room: int) -> str | None:
        """The result of one of its tools (None: not its tool); `room`: tokens the result may take."""
        return None

    def sent(self, request_text: str) -> None:
        """A request went out carrying `request_text` (what of the part's material it used)."""

    def record(self) -> dict[str, Any]:
        """What the turn's recall record keeps for it (the next turn reads it back)."""
        return {}

    def prefix(self) -> str:
        return ""

    def footer(self, text: str) -> str:
        """The reply's footer line(s) for the answer `text` (its language)."""
        return ""

    def answered(self, session_id: str) -> None:
        """The answer is final (before it is kept), in `session_id` (after a rotation: the new one): touch what the
        turn used."""

    def kept(self) -> None:
        """The answer is kept (a rerun posts this very answer): remember what the turn showed."""


@dataclass(frozen=True)
class Feature:
    name: str
    order: int  # parts start in this order; a part sees the parts started before it
    start: Callable[[Turn, Mapping[str, Part]], Part | None]
    tools: Callable[[str], Sequence[dict[str, Any]]] = lambda _kind: ()  # every tool it may offer on a route kind
    replied: Callable[[Turn, Completion], None] | None = None  # after the reply was posted (cached answers too)
    superseded: Callable[[Turn], object] | None = None  # a user reset overtook the turn: it never answers
    reset: Callable[[Call], Said] | None = None  # what a user reset does to its state, said in the reset's reply
    status: Callable[[Call, str], str] | None = None  # lines /status adds (the word for "none" in the reply's language)


@dataclass(frozen=True)
class Said:
    """A service reply: its text and the people it may mention (open_id → name)."""

    text: str
    people: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Call:
    """One entry answered by the service (a command, a click, a wake-up, an item route's work)."""

    rt: Runtime
    rk: str
    message: Inbound
    batch_id: str
    fence: Fence
    state: RouteState | None = None
    dropped: int = 0  # messages consumed unanswered because a user reset came after them (for /reset's reply)
    told: list[str] = field(default_factory=list)  # session log entries of what it posted unasked (committed with it)


@dataclass(frozen=True)
class Command:
    name: str
    run: Callable[[Call], Said | None]  # None: it replied itself (or says nothing)
    words: tuple[str, ...] = ()  # the whole text, lower-cased, spaces collapsed
    pattern: re.Pattern[str] | None = None  # or a pattern the whole text matches
    resets: bool = False  # accepted as a user reset at ingress (the route's generation moves on at once)


@dataclass(frozen=True)
class Event:
    message_type: str
    run: Callable[[Call], object]
    stale_after_reset: bool = True  # consumed unanswered when a reset came after it, like a message
    tell_sender: bool = True  # a give-up tells its sender (a timer has nobody to tell: the dead letter says it)


@dataclass(frozen=True)
class Opener:
    name: str
    applies: Callable[[Inbound, str, Settings], bool]  # (message, route kind, settings)
    run: Callable[[Call], object]


@dataclass(frozen=True)
class RouteWork:
    kind: str
    run: Callable[[Call], object]
    gave_up: Callable[[Call, str], None] | None = None  # (call, reason): best effort after a dead letter


@dataclass(frozen=True)
class Periodic:
    """Housekeeping each sweeper runs about once a second (idempotent across sweepers): a digest's next slot, a
    memory consolidation slot's events."""

    name: str
    run: Callable[[Runtime], object]


TimerRun = Callable[["Runtime", str, "Timer", str, Fence, "RouteState | None"], str]


@dataclass(frozen=True)
class TimerKind:
    kind: str
    run: TimerRun


FEATURES: list[Feature] = []
COMMANDS: list[Command] = []
EVENTS: dict[str, Event] = {}
OPENERS: list[Opener] = []
ROUTE_WORK: dict[str, RouteWork] = {}
TIMER_KINDS: dict[str, TimerKind] = {}
PERIODIC: list[Periodic] = []


def feature(f: Feature) -> Feature:
    _replace(FEATURES, f, lambda x: x.name == f.name)
    FEATURES.sort(key=lambda x: x.order)
    return f


def command(c: Command) -> Command:
    _replace(COMMANDS, c, lambda x: x.name == c.name)
    return c


def event(e: Event) -> Event:
    EVENTS[e.message_type] = e
    return e


def opener(o: Opener) -> Opener:
    _replace(OPENERS, o, lambda x: x.name == o.name)
    return o


def route_work(w: RouteWork) -> RouteWork:
    ROUTE_WORK[w.kind] = w
    return w


def timer_kind(t: TimerKind) -> TimerKind:
    TIMER_KINDS[t.kind] = t
    return t


def periodic(p: Periodic) -> Periodic:
    _replace(PERIODIC, p, lambda x: x.name == p.name)
    return p


def _replace(items: list[Any], new: Any, same: Callable[[Any], bool]) -> None:
    """Register once: a module imported again (tests, reloads) replaces its entry instead of adding a second."""
    items[:] = [x for x in items if not same(x)] + [new]


# -- lookups --------------------------------------------------------------------------------------------------------

_TRAILING = re.compile(r"[\s。.!！~～]+$")


def command_of(message_type: str, text: str) -> Command | None:
    """The command a message is: its whole text (the bot's @mention stripped) and nothing else, in a `text` or `post`
    message. Quoted, forwarded and card content never is. Pure over the registered commands."""
    if message_type not in ("text", "post"):
        return None
    word = _TRAILING.sub("", text.strip())
    plain = re.sub(r"\s+", " ", word.lower())
    for c in COMMANDS:
        if plain in c.words or (c.pattern is not None and c.pattern.match(word)):
            return c
    return None


def command_argument(c: Command, text: str) -> str:
    """The argument the command's pattern captured ("" when none)."""
    match = c.pattern.match(_TRAILING.sub("", text.strip())) if c.pattern else None
    return (match.group(1) or "") if match and match.groups() else ""


def tools_for(kind: str, reading: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every tool a route kind's model may be offered: the turn's own reading tools, then each feature's, in order.
    The same list every turn, so the request prefix stays cacheable and a rerun sizes its batch alike."""
    return [*reading, *(t for f in FEATURES for t in f.tools(kind))]
