"""The one authorised path of both entry points: may this person have this result posted into that chat, now?

Read fresh at decision time, never from a cache (items' `is_member` caches a listing for ITEM_MEMBER_CACHE_SECONDS;
a delivery posts into a chat for everyone in it, so it asks Feishu each time — the rate limit bounds how often):
1. the person's slot of the hour (share/limit.py), taken before Feishu is asked anything;
2. the target: its id, or the one chat Feishu's chat search shows the bot under exactly that name;
3. the bot is in it (chat-members is_in_chat);
4. the person is in it (the members listing, every page);
5. the person is still in the origin chat, and in every chat whose content the result carries (an item's home):
   what they deliver is only what they may see there.
A missing scope refuses with a reason naming it and gives the slot back; a Feishu hiccup raises (the run retries).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from core.errors import CapabilityOff, Permanent
from runs.runtime import Runtime
from share.limit import Slots
from share.spec import Target, inert, same_name
from share.texts import TEXTS

log = logging.getLogger(__name__)
MAX_NAMESAKES = 5  # chats of one name whose membership of the bot is asked; more are ambiguous at once
SCOPE_OF = {"chat_members": "im:chat.members:read", "chat_search": "im:chat:readonly"}


@dataclass(frozen=True)
class Ask:
    """One delivery asked for, from one message."""

    asker: str  # who asked (open_id): the one checked, attributed and counted
    message_id: str  # the asking message (the origin's note replies to it)
    origin_chat: str
    origin_kind: str  # p2p | group | topic
    origin_thread: str  # the topic asked from ("" outside one)
    target: Target
    key: str  # the delivery's id: one slot, one post, one note, however often it is run
    sample: str  # the asking text (the replies' language)
    also_in: tuple[str, ...] = ()  # chats the delivered content comes from (an item's home): the asker must be in each


@dataclass(frozen=True)
class Granted:
    chat_id: str
    shown: str  # the target as the origin's reply names it (the name asked for, or Feishu's name once allowed)


class Refused(Exception):
    """The delivery may not be made; str(err) is the short reply that says why."""


def decide(rt: Runtime, ask: Ask, limit: int) -> Granted:
    if limit <= 0:
        raise Refused(TEXTS.say("off", ask.sample))
    if not ask.asker.startswith("ou_"):
        raise Refused(TEXTS.say("who", ask.sample))
    slots = Slots(rt.state, rt.keys)
    slot = slots.take(ask.asker, ask.key, limit, rt.clock.now())
    if not slot.taken:
        minutes = max(1, round(slot.free_in_s / 60))
        raise Refused(TEXTS.say("limit", ask.sample, n=limit, minutes=minutes))
    try:
        granted = _check(rt, ask)
    except CapabilityOff as exc:
        slots.release(ask.asker, ask.key)
        scope = SCOPE_OF.get(exc.capability, exc.capability)
        name = "no_search" if exc.capability == "chat_search" else "no_scope"
        raise Refused(TEXTS.say(name, ask.sample, scope=scope)) from exc
    except Refused as refused:
        log.info("delivery refused", extra={"status": "refused", "reason": str(refused)[:80],
                                             "message_id": ask.message_id})
        raise
    log.info("delivery granted", extra={"status": "granted", "reason": granted.chat_id, "message_id": ask.message_id})
    return granted


def _check(rt: Runtime, ask: Ask) -> Granted:
    shown = inert(ask.target.shown)
    chat_id = resolve(rt, ask.target, ask.sample)
    if chat_id == ask.origin_chat:
        raise Refused(TEXTS.say("same_chat", ask.sample, chat=shown))
    if not _bot_in(rt, chat_id):
        raise Refused(TEXTS.say("bot_out", ask.sample, chat=shown))
    if not member_now(rt, chat_id, ask.asker):
        raise Refused(TEXTS.say("not_member", ask.sample, chat=shown))
    origin = () if ask.origin_kind == "p2p" else (ask.origin_chat,)
    for chat in dict.fromkeys((*origin, *ask.also_in)):
        if chat and not member_now(rt, chat, ask.asker):
            raise Refused(TEXTS.say("left_origin", ask.sample))
    return Granted(chat_id, inert(ask.target.name or name_of(rt, chat_id) or chat_id))


def resolve(rt: Runtime, target: Target, sample: str) -> str:
    """The chat's id: as named, or the one chat the bot is in that its search shows under exactly that name (strict:
    no near-match, a public chat without the bot does not count, and two chats of that name are a question back, not
    a guess)."""
    if target.chat_id:
        return target.chat_id
    seen = rt.feishu.search_chats(target.name)
    found = list(dict.fromkeys(cid for cid, name in seen if same_name(name, target.name)))
    if len(found) <= MAX_NAMESAKES:
        found = [cid for cid in found if _bot_in(rt, cid)]
    if not found:
        raise Refused(TEXTS.say("not_found", sample, chat=inert(target.name)))
    if len(found) > 1:
        raise Refused(TEXTS.say("ambiguous", sample, n=len(found), chat=inert(target.name)))
    return found[0]


def _bot_in(rt: Runtime, chat_id: str) -> bool:
    try:
        return rt.feishu.bot_in_chat(chat_id)
    except CapabilityOff:
        raise
    except Permanent:  # no such chat, another tenant's: nothing the bot can post into
        return False


def member_now(rt: Runtime, chat_id: str, open_id: str) -> bool:
    """Is `open_id` in `chat_id` right now: the members listing read fresh (no cache), every page of it."""
    try:
        return open_id in rt.feishu.chat_member_ids(chat_id)
    except CapabilityOff:
        raise
    except Permanent:  # 232011: the bot is not in that chat (any more): nobody counts as a member
        return False


def name_of(rt: Runtime, chat_id: str) -> str:
    """A chat's name for the texts, best effort (without the chat-info scope: "")."""
    try:
        return rt.feishu.chat_name(chat_id)
    except Permanent:
        return ""
