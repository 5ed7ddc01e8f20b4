"""The session side of a run: find or start the route's session; `/reset`, `/status` and card clicks (the session's
own `FEATURE`), and the service's answer to every registered command, event and opener."""

from __future__ import annotations

import json
import logging
import time

from core.errors import Permanent
from core.inbound import CARD_ACTION_TYPE, Inbound
from core.texts import say
from memory.sessions import END_IDLE, RouteState, SessionFenced, entry
from routing.keys import kind_of
from runs.outbox import LeaseLost, Superseded
from runs.runtime import Runtime
from turn.bootstrap import bootstrap_entries
from turn.registry import Command, Context, Event, Feature, Said, app_of, click_of

log = logging.getLogger(__name__)


def ensure_session(rt: Runtime, rk: str, exec_id: str, state: RouteState) -> str:
    """The session this turn continues: the current one (across days), or a new one when the route has
    none yet or its idle boundary passed. Raises `Superseded` / `LeaseLost` when the run was fenced."""
    sid = state.session_id
    try:
        if sid is None:
            return rt.sessions.start(rk, (exec_id, state.generation), expected=None, entries=_seed(rt, rk))
        idle = rt.settings.session_idle_s(kind_of(rk))
        last = rt.sessions.last_activity(rk, sid) if idle else None
        if idle and last is not None and time.time() - last > idle:
            log.info("idle boundary passed: new session", extra={"route_key": rk, "session_id": sid})
            return rt.sessions.start(rk, (exec_id, state.generation), expected=sid, end_reason=END_IDLE,
                                     boundary=END_IDLE)
    except SessionFenced as exc:
        if not rt.inbox.holds(rk, exec_id):
            raise LeaseLost(rk) from exc
        raise Superseded(rk) from exc
    return sid


def _seed(rt: Runtime, rk: str) -> list[str]:
    """A route's first session carries the transcript a release before sessions kept (upgrade path), or, for
    a topic, its root and earlier thread messages (turn/bootstrap.py). Never reached after a user reset: the
    reset's PUSH starts the new session, so the route has one."""
    raw = rt.state.lrange(rt.keys.transcript(rk), 0, -1)
    if not raw:
        return bootstrap_entries(rt, rk)
    rt.state.delete(rt.keys.transcript(rk))
    return [entry(e["role"], e["text"], batch_id=e.get("batch_id", "")) for e in map(json.loads, raw)]


def _shared(rk: str, message: Inbound) -> bool:
    """A group or topic route every participant shares (not one ending in the sender's id)."""
    return kind_of(rk) != "p2p" and not rk.endswith(f":{message.sender_id}")


def answer_command(c: Context, name: str) -> None:
    """A registered command, event or opener, answered by the service: a command's reply goes under its message."""
    app = app_of(c.rt)
    command = app.command_named(name)
    if command is not None:
        said = command.run(c)
        if said is not None:
            c.rt.outbox.reply(c.destination, c.batch_id, said.text, people=said.people or None)
        return
    event = app.events.get(name)
    if event is not None:
        event.run(c)
        return
    opener = app.opener_named(name)
    if opener is None:
        raise Permanent(f"no feature answers {name!r} any more")
    opener.run(c)


def click(c: Context) -> object:
    """A card button, dispatched to the feature whose action its value names (`items:approve`); one no feature of
    this App claims (a feature removed since its card was posted) is logged and answered by nothing more than the
    toast the web already showed."""
    app = app_of(c.rt)
    name, value = click_of(c.message)
    action = app.actions.get(name or app.action_for(value) or "")
    if action is None:
        log.warning("card action no feature claims", extra={"route_key": c.rk, "message_id": c.message.message_id,
                                                            "reason": name[:80]})
        return "unknown action"
    return action.run(c)


def reset(c: Context) -> Said:
    """`/reset`: the session started over at ingress; the reply says so, what was dropped, and what each feature did
    (follow-ups cancelled or kept …)."""
    m = c.message
    text = say("reset_done_shared" if _shared(c.rk, m) else "reset_done", m.text)
    if c.dropped:
        text += "\n" + say("reset_dropped", m.text, n=c.dropped)
    people: dict[str, str] = {}
    for f in app_of(c.rt).features:
        if f.reset is not None:
            said = f.reset(c)
            text = "\n".join(x for x in (text, said.text) if x)
            people.update(said.people)
    return Said(text, people)


def status(c: Context) -> Said:
    rt, rk, m = c.rt, c.rk, c.message
    state = c.state or rt.sessions.state(rk)
    session = rt.sessions.get(rk, state.session_id) if state.session_id else None
    none = "无" if say("reset_done", m.text).startswith("好") else "none"
    counters = session.counters if session else {}
    item = rt.items.of_route(rk)
    text = say("status", m.text, session_id=state.session_id or none,
               parent_id=(session.parent_id if session else None) or none, generation=state.generation,
               tokens_in=counters.get("in", 0), tokens_out=counters.get("out", 0), turns=counters.get("turns", 0),
               item_id=item.item_id if item else none)
    return Said(text + "".join(f.status(c, none) for f in app_of(c.rt).features if f.status is not None))


# The session's own feature: `/reset` and `/status`, and card clicks dispatched to their features' actions.
FEATURE = Feature(
    "session", order=0,
    commands=(Command("reset", reset, words=("/reset", "/new", "重置", "新话题"), resets=True),
              Command("status", status, words=("/status",))),
    events=(Event(CARD_ACTION_TYPE, click, stale_after_reset=False),),  # a decision outlives a reset
)
