"""Events besides new messages: card button clicks, Bitable record changes, recalled and edited messages.

Like messages, they are verified by the ingress before they get here, and cost one Redis round trip:
a click or a record change is pushed into an inbox (the proposal's route, the record's item route), so
it runs under the same lease, dedupe, retry and dead-letter rules as any message; a recall or an edit
is noted for later turns.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import redis
from pydantic import BaseModel

from bot.envelope import Envelope
from core.inbound import CARD_ACTION_TYPE, RECORD_CHANGED_TYPE, Inbound, dumps
from core.keys import Keys
from core.settings import Settings
from memory import keys as memory_keys
from routing.admission import admit, listed
from routing.keys import item_route
from routing.policy import Policy
from runs.inbox import Inbox
from timers.model import CANCELLED, PENDING
from timers.store import Timers
from turn.registry import App

log = logging.getLogger(__name__)

CARD_ACTION = "card.action.trigger"
RECORD_CHANGED = "drive.file.bitable_record_changed_v1"
MESSAGE_RECALLED = "im.message.recalled_v1"
MESSAGE_UPDATED = "im.message.updated_v1"
SIDE_EVENTS = (CARD_ACTION, RECORD_CHANGED, MESSAGE_RECALLED, MESSAGE_UPDATED)
RECORD_ID = re.compile(r"^rec[A-Za-z0-9]{3,40}$")
WITHDRAWN_TTL_S = 35 * 86400  # longer than sessions are kept by default

# KEYS: withdrawn hash, its order zset   ARGV: message id, JSON, version (ms), ttl, now, cap. An older edit never
# replaces a newer one; a recall (version +inf) wins over every edit. A chat keeps the newest `cap` notes.
_NOTE = """
local old = redis.call('HGET', KEYS[1], ARGV[1])
if old then
  local v = cjson.decode(old)['v']
  if tonumber(v) >= tonumber(ARGV[3]) then return 0 end
end
redis.call('HSET', KEYS[1], ARGV[1], ARGV[2])
redis.call('ZADD', KEYS[2], ARGV[5], ARGV[1])
local over = redis.call('ZCARD', KEYS[2]) - tonumber(ARGV[6])
if over > 0 then
  for _, gone in ipairs(redis.call('ZPOPMIN', KEYS[2], over)) do redis.call('HDEL', KEYS[1], gone) end
end
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('EXPIRE', KEYS[2], ARGV[4])
return 1
"""
WITHDRAWN_PER_CHAT = 2000
# Admission reasons of messages the bot could still have seen: kept as related discussion (memory/related.py).
SEEN_UNADDRESSED = ("not mentioned", "mention-all only")
RECALLED_VERSION = 2**53


def _value_of(raw: Any) -> dict[str, Any] | None:
    """A button's callback value: an object (JSON 2.0 cards), or its JSON text."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            return None
    return raw if isinstance(raw, dict) else None


def _toast(kind: str, zh: str, en: str) -> dict[str, Any]:
    return {"toast": {"type": kind, "content": zh, "i18n": {"zh_cn": zh, "en_us": en}}}


class Bad(ValueError):
    """The event is authentic but not one we can act on (400, kept)."""


class _Card(BaseModel):
    operator: dict[str, Any]
    action: dict[str, Any]
    context: dict[str, Any] = {}


class SideEvents:
    def __init__(self, settings: Settings, state: redis.Redis, keys: Keys, inbox: Inbox, policy: Policy,
                 app: App) -> None:
        self.settings, self.state, self.keys, self.inbox, self.policy = settings, state, keys, inbox, policy
        self.app = app
        self._note = state.register_script(_NOTE)
        self.handlers: dict[str, Callable[[Envelope, dict[str, Any]], dict[str, Any] | None]] = {
            CARD_ACTION: self.card_action, RECORD_CHANGED: self.record_changed,
            MESSAGE_RECALLED: self.recalled, MESSAGE_UPDATED: self.updated,
        }

    def handle(self, envelope: Envelope, ctx: dict[str, Any]) -> dict[str, Any] | None:
        """The response body (None: the default), or raises `Bad`."""
        event = envelope.event if isinstance(envelope.event, dict) else {}
        return self.handlers[envelope.header.event_type](envelope, event | {"_ctx": ctx})

    # -- a card button: pushed into the route the card was posted for ---------------------------------

    def card_action(self, envelope: Envelope, event: dict[str, Any]) -> dict[str, Any] | None:
        """A button: pushed into the route its card was posted for, named by the action its value carries (a feature
        of this App's, `items:approve`); a button no feature claims is answered with a polite toast."""
        ctx = event.pop("_ctx")
        card = _Card.model_validate(event)
        value = _value_of(card.action.get("value"))
        name = self.app.action_for(value) if value is not None else None
        if value is None or name is None:
            ctx["outcome"] = "ignored"
            log.warning("card action no feature claims", extra={**ctx, "event_id": envelope.header.event_id,
                                                               "reason": str((value or {}).get("action", ""))[:80]})
            return _toast("warning", "这个按钮已失效，无需再点", "This button is no longer active")
        rk = str(value.get("rk", ""))
        if not self._our_route(rk):
            raise Bad("card action names no route of ours")
        operator = str(card.operator.get("open_id") or "")
        if not operator:
            raise Bad("card action without an operator open_id")
        message_id = str(card.context.get("open_message_id") or "")
        inbound = Inbound(
            event_id=envelope.header.event_id, message_id=message_id,
            chat_id=str(card.context.get("open_chat_id") or ""),
            chat_type="p2p" if rk.split(":")[2] == "p2p" else "group", sender_open_id=operator,
            sender_type="user", message_type=CARD_ACTION_TYPE, text="",
            content=json.dumps({"action": name, "value": {k: v for k, v in value.items() if k != "rk"}}),
            create_time=str(int(time.time() * 1000)),
        )
        dedupe = f"card:{envelope.header.event_id}"
        pushed = self.inbox.push(rk, dumps(inbound), message_id=dedupe, content_key=dedupe,
                                 queue=self.policy.queues[rk.split(":")[2]])
        ctx.update(route_key=rk, outcome="duplicate" if pushed.duplicate else "queued")
        return _toast("info", "已收到，正在处理", "Received, processing")

    def _our_route(self, rk: str) -> bool:
        parts = rk.split(":")
        return (len(parts) >= 4 and parts[0] == "feishu" and parts[1] == self.settings.bot_profile
                and parts[2] in ("p2p", "group", "topic"))

    # -- a Bitable record changed: pushed into the record's item route --------------------------------

    def record_changed(self, envelope: Envelope, event: dict[str, Any]) -> dict[str, Any] | None:
        ctx = event.pop("_ctx")
        s = self.settings
        ours = event.get("file_token") == s.bitable_app_token and event.get("table_id") == s.bitable_table_id
        if not s.items_enabled or not ours:
            ctx["outcome"] = "ignored"
            return None
        actions = event.get("action_list")
        if not isinstance(actions, list):
            raise Bad("record change without an action_list")
        raw_operator = event.get("operator_id")
        operator: dict[str, Any] = raw_operator if isinstance(raw_operator, dict) else {}
        pushed = 0
        for action in actions:
            if not isinstance(action, dict) or action.get("action") not in ("record_added", "record_edited"):
                continue
            record_id = str(action.get("record_id") or "")
            if not RECORD_ID.match(record_id):
                raise Bad("record change with a malformed record_id")
            self._push_record(envelope, record_id, str(action["action"]), str(operator.get("open_id") or ""))
            pushed += 1
        ctx["outcome"] = "queued" if pushed else "ignored"
        return None

    def _push_record(self, envelope: Envelope, record_id: str, action: str, operator: str) -> None:
        inbound = Inbound(
            event_id=envelope.header.event_id, message_id=record_id, chat_id="", chat_type="bitable",
            sender_open_id=operator, sender_type="user", message_type=RECORD_CHANGED_TYPE, text="",
            content=json.dumps({"record_id": record_id, "action": action}),
            create_time=str(int(time.time() * 1000)),
        )
        dedupe = f"rec:{envelope.header.event_id}:{record_id}"
        self.inbox.push(item_route(self.settings.bot_profile, record_id), dumps(inbound), message_id=dedupe,
                        content_key=dedupe, queue=self.policy.queues["item"])

    # -- recalled and edited messages: noted for later turns ------------------------------------------

    def recalled(self, envelope: Envelope, event: dict[str, Any]) -> dict[str, Any] | None:
        ctx = event.pop("_ctx")
        message_id, chat_id = event.get("message_id"), event.get("chat_id")
        if not isinstance(message_id, str) or not isinstance(chat_id, str) or not message_id or not chat_id:
            raise Bad("recall without message_id and chat_id")
        if not self._chat_allowed(chat_id):
            ctx.update(message_id=message_id, outcome="recall in a chat the bot does not serve")
            return None
        note = {"recalled": True, "v": RECALLED_VERSION, "at": time.time()}
        self._save_note(chat_id, message_id, json.dumps(note), RECALLED_VERSION)
        cancelled = self._cancel_followups(message_id)
        ctx.update(message_id=message_id, outcome="recalled")
        if cancelled:
            log.info("recalled request: its follow-ups cancelled", extra={**ctx, "reason": ",".join(cancelled)})
        return None

    def _cancel_followups(self, message_id: str) -> list[str]:
        """A recalled request takes back the follow-ups it set (the fire run checks the recall again)."""
        timers = Timers(self.state, self.keys)
        done = [t.id for t in timers.of_source(message_id)
                if t.state == PENDING and timers.end(t, CANCELLED, "recalled", time.time())]
        if done:
            self.state.hincrby(self.keys.metrics, "timers_cancelled|recalled", len(done))
        return done

    def _chat_allowed(self, chat_id: str) -> bool:
        return listed(chat_id, self.policy.allow_chats, self.policy.deny_chats)

    def _save_note(self, chat_id: str, message_id: str, note: str, version: int) -> None:
        keys = [memory_keys.withdrawn(self.keys, chat_id), memory_keys.withdrawn_order(self.keys, chat_id)]
        self._note(keys, [message_id, note, version, WITHDRAWN_TTL_S, time.time(), WITHDRAWN_PER_CHAT])

    def updated(self, envelope: Envelope, event: dict[str, Any]) -> dict[str, Any] | None:
        from bot.envelope import MessageEvent, to_inbound  # the parsers of receive_v1
        from feishu.message import ContentError

        ctx = event.pop("_ctx")
        try:
            parsed = MessageEvent.model_validate(event)
            bot = self.state.get(self.keys.bot_open_id)
            inbound = to_inbound(envelope, parsed, str(bot) if bot else None)
        except (ValueError, ContentError) as exc:
            raise Bad(f"malformed im.message.updated_v1 ({exc.__class__.__name__})") from None
        message = event.get("message")
        raw_message: dict[str, Any] = message if isinstance(message, dict) else {}
        version = str(raw_message.get("update_time") or inbound.create_time or int(time.time() * 1000))
        if not version.isdigit():
            raise Bad("edit with a non-numeric update_time")
        seen = admit(inbound, self.policy, str(bot) if bot else None)
        if not (seen.admit or seen.reason in SEEN_UNADDRESSED):  # denied chat or sender, a bot, ourselves
            ctx.update(message_id=inbound.message_id, outcome=f"edit not kept: {seen.reason}")
            return None
        note = {"text": inbound.text, "v": int(version), "at": time.time()}
        self._save_note(inbound.chat_id, inbound.message_id, json.dumps(note, ensure_ascii=False), int(version))
        ctx.update(message_id=inbound.message_id, outcome="edited")
        return None

