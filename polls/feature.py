"""Polls as a feature (`FEATURE`): the `/poll` command, the `polls:vote` button, the `poll` timer kind that closes it,
its settings. The rest of the service knows it only through the App."""

from __future__ import annotations

import hashlib
import re
from dataclasses import replace
from datetime import datetime, timedelta

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from polls.card import poll_card, result_text
from polls.spec import SpecError, read_spec
from polls.store import BAD, CLOSED, FULL, NAME, SAME, Poll, Polls
from timers import Timer, timers_of
from turn.registry import Action, Command, Context, Destination, Feature, Said, TimerKind, click_of, command_argument

COMMAND = re.compile(r"^/(?:poll|投票)\s+(.+)$", re.IGNORECASE | re.DOTALL)
TIMER_KIND = "poll"  # its closing timer
TOLD = {CLOSED: "这个投票已经截止了。", BAD: "这个投票已失效。"}


class PollSettings(BaseSettings):
    """POLL_DEFAULT_HOURS: a poll without `截止 …` closes after this; POLL_MAX_VOTERS: most people one poll counts."""

    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore")
    poll_default_hours: float = Field(24.0, gt=0, le=720)
    poll_max_voters: int = Field(500, ge=2, le=10000)


def settings(c: Context) -> PollSettings:
    return c.settings.feature(PollSettings)


def _polls(c: Context) -> Polls:
    return Polls(c.rt.state, c.rt.keys)


def start(c: Context) -> Said | None:
    """`/poll 问题 | A | B [| 截止 …]`: the poll once per message (a rerun finds it), its card, its closing timer."""
    m = c.message
    if c.kind not in ("group", "topic"):
        return Said("投票只能在群里发起。")
    now = datetime.fromtimestamp(c.rt.clock.now(), c.rt.settings.tz)
    try:
        spec = read_spec(command_argument(_COMMAND, m.text), now, timedelta(hours=settings(c).poll_default_hours))
    except SpecError as err:
        return Said(str(err))
    pid = "poll_" + hashlib.sha1(f"{c.rk}\n{m.message_id}".encode()).hexdigest()[:16]
    polls = _polls(c)
    polls.create(Poll(id=pid, question=spec.question, options=spec.options, closes_at=spec.closes_at.timestamp(),
                      route_key=c.rk, chat_id=m.chat_id, source_message_id=m.message_id, created_by=m.sender_id,
                      state="open"), now.timestamp())
    poll = polls.get(pid)
    if poll is None:
        raise RuntimeError(f"poll {pid} vanished right after it was created")
    card_id = c.rt.outbox.card(c.destination, f"poll-{pid}", poll_card(poll, polls.tally(poll), c.rt.settings.tz))
    polls.set_card(pid, card_id)
    timers_of(c.rt).add(Timer(id=f"poll_{pid}", kind=TIMER_KIND, route_key=c.rk, due=poll.closes_at,
                              chat_id=m.chat_id, thread_id=m.thread_id or "", what=pid, created_by=m.sender_id,
                              created_at=now.timestamp(), source_message_id=m.message_id), now=now.timestamp())
    return None


def vote(c: Context) -> str:
    """One click: the voter's vote (a new one replaces theirs), the card redrawn; closed, full or gone: told so."""
    _name, value = click_of(c.message)
    polls, pid = _polls(c), str(value.get("p") or "")
    option = str(value.get("o") or "")
    most = settings(c).poll_max_voters
    outcome = polls.vote(pid, c.message.sender_id, int(option), most) if option.isdigit() else BAD
    poll = polls.get(pid)
    if outcome == SAME:
        return outcome
    if outcome in (CLOSED, BAD, FULL) or poll is None:
        told = TOLD.get(outcome) or f"投票人数已满（最多 {settings(c).poll_max_voters} 人），这一票没有计入。"
        c.rt.outbox.reply(c.destination, c.batch_id, told)
        return outcome
    _redraw(c, poll, polls)
    return outcome


def close(c: Context) -> str:
    """Its timer: the poll closes once; the card shows the result and the result is posted under the command (a
    rerun after a crash in between redraws and posts the same, once: the outbox keys both)."""
    t = c.timer
    polls = _polls(c)
    poll = polls.get(t.what) if t is not None else None
    if t is None or poll is None:
        return "gone"
    polls.close(poll.id, c.rt.clock.now())
    poll = polls.get(poll.id) or poll
    counts = _redraw(c, poll, polls)
    c.rt.outbox.reply(_in_chat(c, poll, poll.source_message_id), c.batch_id, result_text(poll, counts))
    return "closed"


def _redraw(c: Context, poll: Poll, polls: Polls) -> list[int]:
    counts = polls.tally(poll)
    if poll.card_message_id:
        c.rt.outbox.patch(_in_chat(c, poll), poll.card_message_id, poll_card(poll, counts, c.rt.settings.tz))
    return counts


def _in_chat(c: Context, poll: Poll, target: str = "") -> Destination:
    """The poll's chat (its closing timer's run answers no message of it), under `target` when given."""
    return replace(c.destination, chat_id=poll.chat_id, target=target)


_COMMAND = Command("poll", start, pattern=COMMAND)
FEATURE = Feature(NAME, order=70, commands=(_COMMAND,), actions=(Action("vote", vote),),
                  timer_kinds=(TimerKind(TIMER_KIND, close),), settings=PollSettings)
