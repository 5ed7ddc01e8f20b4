"""Delivery to another chat as a feature (`FEATURE`): the `/share` and `同步到…` commands, the `share_to_chat` tool
and what posts it after the reply, its settings, its stand-in model. The rest of the service knows it only through
the App."""

from __future__ import annotations

from collections.abc import Mapping

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from claude.client import Completion
from items import own_item
from share import part, spec, standin
from share.access import Ask, Refused, decide
from share.post import deliver, last_answer
from share.texts import TEXTS
from turn.registry import Command, Context, Feature, Part, Said

ROUTES = ("p2p", "group", "topic")  # where people ask; internal routes (an item's analysis, a digest) never do


class ShareSettings(BaseSettings):
    """SHARE_PER_PERSON_HOUR: deliveries one person may ask for in any hour (0 turns delivery off);
    SHARE_MAX_CHARS: the most of a result one delivery posts (a card holds 30 KB)."""

    model_config = SettingsConfigDict(env_ignore_empty=True, extra="ignore")
    share_per_person_hour: int = Field(10, ge=0, le=1000)
    share_max_chars: int = Field(3000, ge=200, le=8000)


def settings(c: Context) -> ShareSettings:
    return c.settings.feature(ShareSettings)


def command(c: Context) -> Said:
    """`/share [首答] <chat>`, `同步[首答]到 <chat>`: what this route has, posted there for the sender."""
    m = c.message
    try:
        asked = spec.read_command(m.text)
        body, also_in = content(c, asked.what)
        ask = Ask(asker=m.sender_id, message_id=m.message_id, origin_chat=m.chat_id, origin_kind=c.kind,
                  origin_thread=m.thread_id or "", target=asked.target, sample=m.text,
                  key=part.delivery_id(c.rk, m.message_id), also_in=also_in)
        granted = decide(c.rt, ask, settings(c).share_per_person_hour)
    except (spec.SpecError, Refused) as refused:
        return Said(str(refused))
    return Said(deliver(c, ask, granted, body, settings(c).share_max_chars))


def content(c: Context, what: str) -> tuple[str, tuple[str, ...]]:
    """The result a command delivers and the chats it comes from: the route's last answer (since its last reset), or
    — asked for, or when the route has none yet — its item's latest complete first answer (from the item's home)."""
    if what == spec.ANSWER and (text := last_answer(c.rt, c.rk)):
        return text, ()
    item = own_item(c.rt, c.kind, c.batch) if c.rt.bitable is not None else None
    if item is None:
        raise Refused(TEXTS.say("nothing" if what == spec.ANSWER else "no_item", c.message.text))
    latest = c.rt.items.latest_complete(item.item_id)
    if latest is None:
        raise Refused(TEXTS.say("pending", c.message.text))
    return latest.body, (item.chat_id,)


def start(turn: Context, _parts: Mapping[str, Part]) -> Part | None:
    if turn.kind not in ROUTES:
        return None
    return part.SharePart(turn, settings(turn).share_per_person_hour, settings(turn).share_max_chars)


def replied(turn: Context, completion: Completion) -> None:
    part.replied(turn, completion, settings(turn).share_max_chars)


FEATURE = Feature(
    "share", order=80, start=start, replied=replied,
    tools=lambda kind: [part.TOOL] if kind in ROUTES else [],  # in the stable list; its part answers the calls
    commands=(Command("share", command, pattern=spec.COMMAND), Command("share_words", command, pattern=spec.WORDS)),
    standin=standin.reply, settings=ShareSettings,
)
