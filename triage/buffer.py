"""Where quiet triage starts: an unaddressed message in a topic of an opted-in chat (the web's side).

The cheap deterministic filter runs first (triage/filter.py): greetings, acknowledgements and
stickers cost nothing. A message worth a look is kept in the topic's bounded buffer, and — when the topic
is linked to an item — the topic's route gets a triage timer for the end of the quiet period, one per
period (the timer id names it), so a busy topic costs one small-model call per period, not one per message.
Never for p2p, never for chats that did not opt in.
"""

from __future__ import annotations

import json
import logging

import redis

from bitable.index import Items
from core.inbound import Inbound
from core.keys import Keys
from core.settings import Settings
from timers import TRIAGE, Timer, Timers, triage_id
from triage import keys as triage_keys
from triage.filter import worth_triage
from triage.settings import triage_settings

log = logging.getLogger(__name__)
KEEP, TTL_S, TEXT_CHARS = 100, 3 * 86400, 1000


def topic_route(profile: str, chat_id: str, thread_id: str) -> str:
    """Triage works per topic, whatever the topic scope: the shared topic route."""
    return f"feishu:{profile}:topic:{chat_id}:{thread_id}"


def keep(settings: Settings, r: redis.Redis, keys: Keys, m: Inbound, now: float) -> str:
    """Buffer one unaddressed topic message and make sure a triage timer is pending; returns what happened."""
    if m.chat_type == "p2p" or not m.thread_id or m.chat_id not in triage_settings(settings).triage_chats:
        return "not triaged"
    if not worth_triage(m.text):
        return "filtered"
    item = Items(r, keys).by_thread(m.thread_id)
    if item is None:
        return "no item"
    ct = m.create_time or ""
    at = int(ct) / 1000 if ct.isdigit() and int(ct) > 0 else now
    member = json.dumps({"message_id": m.message_id, "sender": m.sender_id, "text": m.text[:TEXT_CHARS], "at": at},
                        ensure_ascii=False, sort_keys=True)
    key = triage_keys.triage_buffer(keys, m.chat_id, m.thread_id)
    pipe = r.pipeline(transaction=True)  # the set with its expiry
    pipe.zadd(key, {member: at})
    pipe.zremrangebyrank(key, 0, -KEEP - 1)
    pipe.expire(key, TTL_S)
    pipe.execute()
    rk = topic_route(settings.bot_profile, m.chat_id, m.thread_id)
    quiet = triage_settings(settings).triage_quiet_seconds
    period = int(now // quiet)
    t = Timer(id=triage_id(rk, period), kind=TRIAGE, route_key=rk, due=now + quiet, chat_id=m.chat_id,
              thread_id=m.thread_id, item_id=item.item_id, what="quiet triage", created_at=now)
    added = Timers(r, keys).add(t, now=now)
    if added == 1:
        r.hincrby(keys.metrics, f"timers_set|{TRIAGE}", 1)
    return "triage scheduled" if added == 1 else "triage pending"
