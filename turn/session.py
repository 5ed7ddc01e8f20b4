"""The session side of a run: find or start the route's session, and answer `/reset`, `/status` and the
follow-up commands (timers/commands.py)."""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable

from bitable.index import Item
from bitable.refs import record_link
from core.inbound import Inbound
from core.texts import say
from edge.commands import CANCEL, FOLLOWUPS
from feishu.cards import STATUS_ZH
from memory.sessions import END_IDLE, RouteState, SessionFenced, entry
from routing.keys import kind_of
from runs.outbox import LeaseLost
from runs.runtime import Runtime
from timers import commands as timer_commands
from turn.bootstrap import bootstrap_entries

log = logging.getLogger(__name__)


class Superseded(Exception):
    """A user reset moved the route to a newer generation while this segment was being worked on."""


def ensure_session(rt: Runtime, rk: str, exec_id: str, state: RouteState) -> str:
    """The session this turn continues: the current one (across days), or a new one when the route has
    none yet or its idle boundary passed. Raises `Superseded` / `LeaseLost` when the run was fenced."""
    sid = state.session_id
    try:
        if sid is None:
            return rt.sessions.start(rk, exec_id, state.generation, expected=None, entries=_seed(rt, rk))
        idle = rt.settings.session_idle_s(kind_of(rk))
        last = rt.sessions.last_activity(rk, sid) if idle else None
        if idle and last is not None and time.time() - last > idle:
            log.info("idle boundary passed: new session", extra={"route_key": rk, "session_id": sid})
            return rt.sessions.start(rk, exec_id, state.generation, expected=sid, end_reason=END_IDLE,
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


def answer_command(rt: Runtime, rk: str, message: Inbound, command: str, state: RouteState, batch_id: str,
                   fence: Callable[[], bool], dropped: int) -> None:
    people: dict[str, str] = {}
    if command == "reset":
        text = say("reset_done_shared" if _shared(rk, message) else "reset_done", message.text)
        if dropped:
            text += "\n" + say("reset_dropped", message.text, n=dropped)
        followups = timer_commands.on_reset(rt, rk, message, batch_id)
        text, people = "\n".join(p for p in (text, followups.text) if p), followups.people
    elif command == FOLLOWUPS:
        text = timer_commands.list_text(rt, rk, message)
    elif command == CANCEL:
        said = timer_commands.cancel_text(rt, rk, message)
        text, people = said.text, said.people
    else:
        text = status_text(rt, rk, message, state)
    rt.outbox.reply(rk, batch_id, message.message_id, text, chat_id=message.chat_id,
                    in_thread=kind_of(rk) == "topic", fence=fence, people=people or None)


def status_text(rt: Runtime, rk: str, message: Inbound, state: RouteState) -> str:
    session = rt.sessions.get(rk, state.session_id) if state.session_id else None
    none = "无" if say("reset_done", message.text).startswith("好") else "none"
    counters = session.counters if session else {}
    item = rt.items.of_route(rk)
    text = say("status", message.text, session_id=state.session_id or none,
               parent_id=(session.parent_id if session else None) or none, generation=state.generation,
               tokens_in=counters.get("in", 0), tokens_out=counters.get("out", 0), turns=counters.get("turns", 0),
               item_id=item.item_id if item else none)
    return text + (_item_status(rt, item, message.text, none) if item else "")


def _item_status(rt: Runtime, item: Item, sample: str, none: str) -> str:
    """The record link and the first answer's latest version (from the index: /status reads no Bitable)."""
    s = rt.settings
    link = record_link(s.feishu_web_origin, s.bitable_app_token or "", s.bitable_table_id or "", item.record_id) \
        if item.record_id else none
    versions = rt.items.versions(item.item_id)
    latest = versions[-1] if versions else None
    return say("status_item", sample, record_link=link, version=latest.version if latest else 0,
               answer_status=STATUS_ZH.get(latest.status, latest.status) if latest else none)
