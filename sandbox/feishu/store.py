"""In-memory Feishu tenant for the emulator: tokens, chats, messages, threads, reactions and uuid idempotency."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from sandbox.feishu.card_render import DefectLog
from sandbox.feishu.cardkit import CardKitStore
from sandbox.feishu.cards import CardsAndPeople
from sandbox.feishu.events import TENANT_KEY
from sandbox.feishu.reactions import Reactions
from sandbox.feishu.reads import MessageReads
from sandbox.feishu.rules import UUID_WINDOW_SECONDS, FeishuError, Resource, validate_send
from sandbox.server import new_id

APPLINK = "https://applink.feishu.cn"
TOKEN_TTL_SECONDS = 7200
TOKEN_REUSE_MIN_SECONDS = 1800  # Feishu hands back the same token while ≥30 min remain (§4.1)
USER_ID_TYPES = frozenset({"open_id", "union_id", "user_id", "email"})


class FeishuStore(CardsAndPeople, MessageReads, Reactions):
    """All emulator state behind one re-entrant lock; public methods return deep copies.

    Messages are indexed by chat, thread and replied-to message so lookups stay cheap with thousands.
    """

    def __init__(self, app_id: str, app_secret: str, clock: Callable[[], float] = time.time) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.clock = clock
        self.lock = threading.RLock()
        self.chat_qps: int | None = None
        self.entities: CardKitStore | None = None  # CardKit card entities that messages may show
        self.reset()

    def reset(self, *, keep_tokens: bool = False) -> None:
        with self.lock:
            if not keep_tokens or not hasattr(self, "tokens"):
                self.tokens: dict[str, float] = {}
            self.token_requests = 0
            self.tokens_revoked = 0
            self.dedupe_hits = 0
            self.chat_limit_rejections: Counter[str] = Counter()
            self.send_times: dict[str, list[float]] = {}
            self.chats: dict[str, dict[str, Any]] = {}
            self.messages: list[dict[str, Any]] = []
            self.by_id: dict[str, dict[str, Any]] = {}
            self.by_chat: dict[str, list[dict[str, Any]]] = {}
            self.by_thread: dict[str, list[dict[str, Any]]] = {}
            self.bot_sent: list[dict[str, Any]] = []
            self.bot_replies: dict[str, list[dict[str, Any]]] = {}
            self.thread_roots: dict[str, str] = {}
            self.p2p_by_user: dict[str, str] = {}
            self.uuids: dict[str, tuple[str, float]] = {}
            self.sends: dict[str, deque[float]] = {}
            self.forwarded: dict[str, list[dict[str, Any]]] = {}  # bundle id → all descendants, flat
            self.forward_child: dict[str, dict[str, Any]] = {}  # descendant id → its item
            self.resources: dict[tuple[str, str], Resource] = {}
            self.user_names: dict[str, str] = {}
            self.users: dict[str, dict[str, str]] = {}
            self.members: dict[str, list[str]] = {}
            self.card_history: dict[str, list[str]] = {}  # message_id → card JSON strings, as sent then patched
            self.render_defects = DefectLog()  # raw cards sent or patched (entities: CardKitStore.defects)
            self.subscriptions: list[dict[str, str]] = []
            self.reactions: dict[str, list[dict[str, Any]]] = {}  # message_id → reactions, removed ones kept
            self.gone_threads: set[str] = set()  # topics removed (230019)
            self.app_links: dict[str, str] = {}  # message_id → message_app_link minted when the bot sent it
            self.bot_out: set[str] = set()  # chats the bot is not in (never added, or removed): 230002 / 232011
            self._last_ms = 0

    # -- tokens -------------------------------------------------------------------------------------

    def issue_token(self, body: Any) -> dict[str, Any]:
        body = body if isinstance(body, dict) else {}
        with self.lock:
            self.token_requests += 1
            if body.get("app_id") != self.app_id:
                raise FeishuError(10003)
            if body.get("app_secret") != self.app_secret:
                raise FeishuError(10014)
            now = self.clock()
            live = [(exp, tok) for tok, exp in self.tokens.items() if exp - now >= TOKEN_REUSE_MIN_SECONDS]
            if live:
                expiry, token = max(live)
            else:
                token, expiry = "t-" + new_id("", 16), now + TOKEN_TTL_SECONDS
                self.tokens[token] = expiry
            return {"code": 0, "msg": "ok", "tenant_access_token": token, "expire": int(expiry - now)}

    def check_token(self, authorization: str | None) -> None:
        if not authorization or not authorization.startswith("Bearer "):
            raise FeishuError(99991661)
        with self.lock:
            expiry = self.tokens.get(authorization[len("Bearer "):].strip())
            if expiry is None or expiry <= self.clock():
                raise FeishuError(99991663)

    def expire_tokens(self) -> None:
        with self.lock:
            self.tokens.clear()

    def revoke_token(self, authorization: str | None) -> None:
        """Invalidate the presented token, so its holder gets 99991663 until it fetches a new one."""
        token = (authorization or "")[len("Bearer "):].strip()
        with self.lock:
            if self.tokens.pop(token, None) is not None:
                self.tokens_revoked += 1

    # -- chats --------------------------------------------------------------------------------------

    def add_chat(
        self, chat_id: str, chat_mode: str = "group", group_message_type: str = "chat", name: str = "",
        owner: str = "", chat_type: str = "private",
    ) -> dict[str, Any]:
        chat: dict[str, Any] = {"chat_id": chat_id, "name": name or chat_id, "chat_mode": chat_mode}
        if owner and chat_mode != "p2p":  # GET chat answers owner_id in the user_id_type asked (open_id here)
            chat.update(owner_id=owner, owner_id_type="open_id")
        if chat_mode == "group":
            chat.update(group_message_type=group_message_type, chat_type=chat_type)
        chat.update(tenant_key=TENANT_KEY, external=False, description="", avatar="", chat_status="normal")
        with self.lock:
            self.chats[chat_id] = chat
            return copy.deepcopy(chat)

    def chat(self, chat_id: str) -> dict[str, Any]:
        with self.lock:
            if chat_id not in self.chats:
                raise FeishuError(230002)
            return copy.deepcopy(self.chats[chat_id])

    def _threaded_chat(self, chat_id: str) -> bool:
        """Topic groups and thread-mode groups put every top-level message into its own topic."""
        chat = self.chats.get(chat_id, {})
        return chat.get("chat_mode") == "topic" or chat.get("group_message_type") == "thread"

    # -- messages -----------------------------------------------------------------------------------

    def _now_ms(self) -> str:
        # Strictly increasing so create_time order equals creation order, even within one millisecond.
        self._last_ms = max(int(self.clock() * 1000), self._last_ms + 1)
        return str(self._last_ms)

    def _store(
        self, chat_id: str, sender: dict[str, Any], msg_type: str, content: str,
        message_id: str | None = None, **links: str | None,
    ) -> dict[str, Any]:
        now = self._now_ms()
        msg: dict[str, Any] = {"message_id": message_id or new_id("om_")}
        msg.update({k: v for k, v in links.items() if v is not None})
        msg.update({
            "msg_type": msg_type, "create_time": now, "update_time": now, "deleted": False, "updated": False,
            "chat_id": chat_id, "sender": sender, "body": {"content": content}, "mentions": [],
        })
        self.messages.append(msg)
        self.by_id[msg["message_id"]] = msg
        self.by_chat.setdefault(chat_id, []).append(msg)
        thread_id = msg.get("thread_id")
        if thread_id:
            self.by_thread.setdefault(thread_id, []).append(msg)
            self.thread_roots.setdefault(thread_id, msg["message_id"])
        if sender["sender_type"] == "app":
            self.bot_sent.append(msg)
            if msg.get("parent_id"):
                self.bot_replies.setdefault(msg["parent_id"], []).append(msg)
        return msg

    def add_user_message(
        self, message_id: str | None, chat_id: str, *, content: str, sender_open_id: str,
        msg_type: str = "text", thread_id: str | None = None, root_id: str | None = None,
        parent_id: str | None = None, chat_mode: str = "group", mentions: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """`mentions` in the event's shape; list/get show them as Feishu does (`id` a string open_id)."""
        with self.lock:
            if message_id and message_id in self.by_id:
                return copy.deepcopy(self.by_id[message_id])  # registering twice is harmless
            if chat_id not in self.chats:
                self.add_chat(chat_id, chat_mode=chat_mode)
            if self.chats[chat_id]["chat_mode"] == "p2p":
                self.p2p_by_user.setdefault(sender_open_id, chat_id)
            if thread_id and root_id is None and thread_id in self.thread_roots:
                root_id = self.thread_roots[thread_id]  # inside a topic every message replies to the root
            sender = {
                "id": sender_open_id, "id_type": "open_id", "sender_type": "user", "tenant_key": TENANT_KEY,
            }
            msg = self._store(
                chat_id, sender, msg_type, content, message_id,
                root_id=root_id, parent_id=parent_id or root_id, thread_id=thread_id,
            )
            msg["mentions"] = [_listed_mention(m) for m in mentions or []]
            return copy.deepcopy(msg)

    def recall(self, message_id: str) -> None:
        """A person recalls their message: it reads as deleted, and replies to it fail with 230011."""
        with self.lock:
            msg = self.by_id[message_id]
            msg["deleted"] = True
            msg["body"] = {"content": ""}

    def _bot_sender(self) -> dict[str, Any]:
        return {"id": self.app_id, "id_type": "app_id", "sender_type": "app", "tenant_key": TENANT_KEY}

    def _dedupe(self, uuid: str | None) -> dict[str, Any] | None:
        if not uuid:
            return None
        seen = self.uuids.get(uuid)
        if seen is None or self.clock() - seen[1] > UUID_WINDOW_SECONDS:
            return None
        self.dedupe_hits += 1
        return self._sent(self.by_id[seen[0]])  # the message first sent, as its send answered

    def _sent(self, msg: dict[str, Any]) -> dict[str, Any]:
        """A send's or reply's answer: the message with its message_app_link (lark-oapi 1.7.5 models the field
        on Create/ReplyMessageResponseBody). Only these answers carry it here: list and get leave it out."""
        return {**copy.deepcopy(msg), "message_app_link": self.app_links[msg["message_id"]]}

    def _mint_link(self, msg: dict[str, Any]) -> None:
        """The link's form as seen in the wild (lark-oapi 1.7.5 names the field, not its form; larksuite/cli
        assembles the same ones in shortcuts/im/convert_lib/app_link.go): a message in a topic opens the topic at
        its position (`client/thread/open`, both spellings of the ids), any other its chat (`client/chat/open`)."""
        chat_id, thread_id = msg["chat_id"], msg.get("thread_id")
        if thread_id:
            query = {"open_chat_id": chat_id, "open_thread_id": thread_id, "openchatid": chat_id,
                     "openthreadid": thread_id, "thread_position": len(self.by_thread[thread_id]) - 1}
            self.app_links[msg["message_id"]] = f"{APPLINK}/client/thread/open?{urlencode(query)}"
        else:
            query = {"openChatId": chat_id, "position": len(self.by_chat[chat_id]) - 1}
            self.app_links[msg["message_id"]] = f"{APPLINK}/client/chat/open?{urlencode(query)}"

    def app_link(self, message_id: str) -> str:
        """The message_app_link the bot's send or reply of `message_id` was answered with ("" if none)."""
        with self.lock:
            return self.app_links.get(message_id, "")

    def _throttle(self, chat_id: str) -> None:
        if not self.chat_qps:
            return
        now = time.monotonic()
        window = self.sends.setdefault(chat_id, deque())
        while window and now - window[0] >= 1.0:
            window.popleft()
        if len(window) >= self.chat_qps:
            self.chat_limit_rejections[chat_id] += 1
            raise FeishuError(230020)
        window.append(now)

    def _send(self, chat_id: str, body: dict[str, Any], **links: str | None) -> dict[str, Any]:
        content = body["content"]
        entity = self.entities.sendable(content) if self.entities and body["msg_type"] == "interactive" else None
        self._throttle(chat_id)
        if entity is not None and self.entities:  # the message shows the entity's current card from now on
            content = self.entities.shown(entity)
        msg = self._store(chat_id, self._bot_sender(), body["msg_type"], content, **links)
        self._mint_link(msg)
        if entity is not None and self.entities:
            self.entities.bind(entity, msg)
        if body["msg_type"] == "interactive":
            self.card_history[msg["message_id"]] = [content]
            if entity is None:
                self.render_defects.note(f"message {msg['message_id']}", json.loads(content))
        self.send_times.setdefault(chat_id, []).append(self.clock())
        if body.get("uuid"):
            self.uuids[body["uuid"]] = (msg["message_id"], self.clock())
        return self._sent(msg)

    def reply(self, target_id: str, body: Any, raw_size: int) -> dict[str, Any]:
        with self.lock:
            target = self.by_id.get(target_id)
            if target is None:
                raise FeishuError(231003)
            if target.get("deleted"):
                raise FeishuError(230011)  # replying to a recalled message (feishu.md §3.5)
            self._reachable(target["chat_id"], target.get("thread_id"),
                            in_thread=isinstance(body, dict) and body.get("reply_in_thread") is True)
            validate_send(body, raw_size)
            original = self._dedupe(body.get("uuid"))
            if original is not None:
                return original
            chat_id = target["chat_id"]
            thread_id = target.get("thread_id")
            if not thread_id and (body.get("reply_in_thread") is True or self._threaded_chat(chat_id)):
                thread_id = new_id("omt_", 8)
                target["thread_id"] = thread_id  # the replied-to message becomes the topic's root
                self.thread_roots[thread_id] = target_id
                self.by_thread[thread_id] = [target]
            root_id = target.get("root_id") or target_id
            return self._send(chat_id, body, root_id=root_id, parent_id=target_id, thread_id=thread_id)

    def create(self, receive_id_type: str | None, body: Any, raw_size: int) -> dict[str, Any]:
        with self.lock:
            if receive_id_type != "chat_id" and receive_id_type not in USER_ID_TYPES:
                raise FeishuError(99992402, "field validation failed: receive_id_type")
            validate_send(body, raw_size)
            chat_id = self._resolve_chat(receive_id_type, body.get("receive_id"))
            self._reachable(chat_id, None, in_thread=False)
            original = self._dedupe(body.get("uuid"))
            if original is not None:
                return original
            # A top-level post in a topic group or thread-mode group opens a new topic.
            thread_id = new_id("omt_", 8) if self._threaded_chat(chat_id) else None
            return self._send(chat_id, body, thread_id=thread_id)

    def dissolve_chat(self, chat_id: str) -> None:
        """The group is dissolved: sends and replies into it fail with 232009 (feishu.md §3.5)."""
        with self.lock:
            self.chats.setdefault(chat_id, {"chat_id": chat_id})["chat_status"] = "dissolved"

    def remove_topic(self, thread_id: str) -> None:
        """The topic is gone (its root deleted without trace): replies inside it fail with 230019."""
        with self.lock:
            self.gone_threads.add(thread_id)

    def forbid_thread_replies(self, chat_id: str) -> None:
        """A chat that does not take replies in a thread: reply_in_thread=true fails with 230071."""
        with self.lock:
            self.chats.setdefault(chat_id, {"chat_id": chat_id})["no_thread_replies"] = True

    def _reachable(self, chat_id: str, thread_id: str | None, *, in_thread: bool) -> None:
        chat = self.chats.get(chat_id) or {}
        if chat.get("chat_status") == "dissolved":
            raise FeishuError(232009)
        if chat_id in self.bot_out:
            raise FeishuError(230002)  # send/reply: "Bot/User can NOT be out of the chat"
        if thread_id and thread_id in self.gone_threads:
            raise FeishuError(230019)
        if in_thread and chat.get("no_thread_replies"):
            raise FeishuError(230071)

    def _resolve_chat(self, receive_id_type: str, receive_id: Any) -> str:
        if not isinstance(receive_id, str) or not receive_id:
            raise FeishuError(99992402, "field validation failed: receive_id")
        if receive_id_type == "chat_id":
            if receive_id not in self.chats:
                raise FeishuError(230002)
            return receive_id
        if receive_id not in self.p2p_by_user:
            chat_id = new_id("oc_", 16)
            self.add_chat(chat_id, chat_mode="p2p")
            self.p2p_by_user[receive_id] = chat_id
        return self.p2p_by_user[receive_id]


def _listed_mention(m: dict[str, Any]) -> dict[str, Any]:
    """An event mention ({key, id: {open_id…}, name}) as list/get return it ({key, id: "ou_…", id_type, name})."""
    raw = m.get("id")
    ids: dict[str, Any] = raw if isinstance(raw, dict) else {}
    return {"key": m.get("key", ""), "id": ids.get("open_id", ""), "id_type": "open_id", "name": m.get("name", ""),
            "tenant_key": TENANT_KEY}
