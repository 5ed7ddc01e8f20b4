"""A granted delivery, posted once: the card into the target chat, and the text the origin's reply carries (the link
to what was posted, or why it could not be). Also what the command delivers: the route's last answer, or an item
topic's first answer.

Once: the card's uuid and the ledger entry come from the delivery's id (share/access.py `Ask.key`), so a rerun, a
redelivered command or a crash between the two posts finds the card posted the first time and links that one.
"""

from __future__ import annotations

import logging
from urllib.parse import urlencode

from bitable.refs import SAFE_LINK, applink_origin, topic_link
from core.errors import Permanent
from runs.outbox import Destination
from runs.runtime import Runtime
from share.access import Ask, Granted, name_of
from share.card import share_card
from share.spec import inert
from share.texts import TEXTS
from turn.registry import Context

log = logging.getLogger(__name__)
GONE = {"230002": "why_out", "232011": "why_out", "232009": "why_gone"}


def deliver(c: Context, ask: Ask, granted: Granted, body: str, max_chars: int) -> str:
    """Post `body` into the granted chat (once per delivery id, fenced by the run); the origin reply's text."""
    rt = c.rt
    card = share_card(body=body, asker=ask.asker, origin=_label(rt, ask), link=back_link(rt, ask),
                      max_chars=max_chars, sample=ask.sample)
    to = Destination(c.rk, granted.chat_id, fence=c.fence)
    try:
        sent = rt.outbox.post_card_sent(to, f"share-{ask.key}", card)
    except Permanent as exc:  # the bot was removed meanwhile, the chat dissolved: said, not retried
        log.warning("delivery not posted", extra={"route_key": c.rk, "message_id": ask.message_id,
                                                  "error": f"{exc.code}: {exc}"[:200]})
        why = TEXTS.say(GONE.get(exc.code, "why_other"), ask.sample, code=exc.code)
        return TEXTS.say("failed", ask.sample, chat=granted.shown, why=why)
    link = sent.app_link if SAFE_LINK.fullmatch(sent.app_link or "") else chat_link(rt, granted.chat_id)
    return TEXTS.say("done", ask.sample, chat=granted.shown, link=link)


def back_link(rt: Runtime, ask: Ask) -> str:
    """The AppLink back to where the result was asked for: the topic itself (`client/thread/open`), else the chat
    (`client/chat/open?openChatId=`, Feishu's 打开聊天页面: it opens only for people in that chat); none for a
    private chat with the bot (nobody else can open it)."""
    if ask.origin_kind == "p2p":
        return ""
    if ask.origin_thread:
        return topic_link(rt.settings.feishu_web_origin, ask.origin_chat, ask.origin_thread)
    return chat_link(rt, ask.origin_chat)


def chat_link(rt: Runtime, chat_id: str) -> str:
    return f"{applink_origin(rt.settings.feishu_web_origin)}/client/chat/open?{urlencode({'openChatId': chat_id})}"


def _label(rt: Runtime, ask: Ask) -> str:
    """Where it came from, as the card says it: "「研发群」的话题", "「研发群」", "与助手的私聊"."""
    if ask.origin_kind == "p2p":
        return TEXTS.say("origin_p2p", ask.sample)
    name = inert(name_of(rt, ask.origin_chat))
    if not name:
        return TEXTS.say("a_group", ask.sample)
    return TEXTS.say("origin_topic" if ask.origin_thread else "origin_chat", ask.sample, chat=name)


def last_answer(rt: Runtime, rk: str) -> str:
    """The route's last answer in its current session ("" when none: a reset starts over — nothing from before it)."""
    sid = rt.sessions.state(rk).session_id
    for entry in reversed(rt.sessions.log(rk, sid) if sid else []):
        if entry.get("role") == "assistant" and entry.get("kind", "turn") == "turn" and entry.get("text"):
            return str(entry["text"])
    return ""
