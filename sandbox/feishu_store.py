"""In-memory Feishu tenant for the emulator: tokens, chats, messages, threads and uuid idempotency."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import Counter, deque
from collections.abc import Callable
from typing import Any

from sandbox.events import FORWARDED_CONTENT, TENANT_KEY, user_ids
from sandbox.feishu_rules import (
    RICH_LIMIT_BYTES,
    UUID_WINDOW_SECONDS,
    FeishuError,
    Resource,
    decode_page,
    encode_page,
    forward_item,
    page_size,
    time_filter,
    validate_send,
)
from sandbox.server import new_id

TOKEN_TTL_SECONDS = 7200
TOKEN_REUSE_MIN_SECONDS = 1800  # Feishu hands back the same token while ≥30 min remain (§4.1)
USER_ID_TYPES = frozenset({"open_id", "union_id", "user_id", "email"})
PATCH_WINDOW_SECONDS = 14 * 86400  # cards older than 14 days cannot be updated (230031)


class FeishuStore:
    """All emulator state behind one re-entrant lock; public methods return deep copies.

    Messages are indexed by chat, thread and replied-to message so lookups stay cheap with thousands.
    """

    def __init__(self, app_id: str, app_secret: str, clock: Callable[[], float] = time.time) -> None:
        self.app_id = app_id
        self.app_secret = app_secret
        self.clock = clock
        self.lock = threading.RLock()
        self.chat_qps: int | None = None
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
            self.subscriptions: list[dict[str, str]] = []
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
        self, chat_id: str, chat_mode: str = "group", group_message_type: str = "chat", name: str = ""
    ) -> dict[str, Any]:
        chat: dict[str, Any] = {"chat_id": chat_id, "name": name or chat_id, "chat_mode": chat_mode}
        if chat_mode == "group":
            chat.update(group_message_type=group_message_type, chat_type="private")
        chat.update(tenant_key=TENANT_KEY, external=False, description="", avatar="", chat_status="normal")
        with self.lock:
            self.chats[chat_id] = chat
            return copy.deepcopy(chat)

    def set_members(self, chat_id: str, open_ids: list[str]) -> None:
        with self.lock:
            if chat_id not in self.chats:
                self.add_chat(chat_id)
            self.members[chat_id] = list(dict.fromkeys(open_ids))

    def add_user(self, open_id: str, name: str, en_name: str = "", email: str = "") -> dict[str, str]:
        with self.lock:
            self.user_names[open_id] = name
            self.users[open_id] = {"id": open_id, "name": name, "en_name": en_name or name, "email": email,
                                   "avatar_url": f"https://s1-imfile.feishucdn.com/static-resource/v1/{open_id}"}
            return dict(self.users[open_id])

    def person(self, open_id: str) -> dict[str, str]:
        """A user as Bitable user cells read it; unknown users get empty names."""
        with self.lock:
            known = self.users.get(open_id)
            return dict(known) if known else {"id": open_id, "name": "", "en_name": "", "email": "",
                                              "avatar_url": ""}

    def chat_name(self, chat_id: str) -> str:
        with self.lock:
            return str(self.chats.get(chat_id, {}).get("name", ""))

    def chat_members(self, chat_id: str, query: dict[str, str]) -> dict[str, Any]:
        """GET chat members: people only (bots are never listed), page_size 1..100 (default 20)."""
        id_type = query.get("member_id_type") or "open_id"
        if id_type not in ("open_id", "union_id", "user_id"):
            raise FeishuError(99992402, "field validation failed: member_id_type")
        raw = query.get("page_size") or "20"
        if not raw.isdigit() or not 1 <= int(raw) <= 100:
            raise FeishuError(99992402, "field validation failed: page_size must be between 1 and 100")
        size = int(raw)
        offset, _ = decode_page(query.get("page_token"), "ByCreateTimeAsc")
        with self.lock:
            if chat_id not in self.chats:
                raise FeishuError(232011)
            everyone = list(self.members.get(chat_id, []))
            items = [{"member_id_type": id_type, "member_id": user_ids(m)[id_type],
                      "name": self.user_names.get(m, ""), "tenant_key": TENANT_KEY}
                     for m in everyone[offset:offset + size]]
        more = offset + size < len(everyone)
        return {"items": items, "page_token": encode_page(offset + size, "ByCreateTimeAsc") if more else "",
                "has_more": more, "member_total": len(everyone)}

    def subscribe(self, file_token: str, file_type: str | None) -> None:
        if file_type not in ("doc", "docx", "sheet", "bitable", "file", "folder", "slides"):
            raise FeishuError(99992402, "field validation failed: file_type")
        with self.lock:
            entry = {"file_token": file_token, "file_type": file_type}
            if entry not in self.subscriptions:
                self.subscriptions.append(entry)

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
        parent_id: str | None = None, chat_mode: str = "group",
    ) -> dict[str, Any]:
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
            return copy.deepcopy(msg)

    def _bot_sender(self) -> dict[str, Any]:
        return {"id": self.app_id, "id_type": "app_id", "sender_type": "app", "tenant_key": TENANT_KEY}

    def _dedupe(self, uuid: str | None) -> dict[str, Any] | None:
        if not uuid:
            return None
        seen = self.uuids.get(uuid)
        if seen is None or self.clock() - seen[1] > UUID_WINDOW_SECONDS:
            return None
        self.dedupe_hits += 1
        return copy.deepcopy(self.by_id[seen[0]])

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
        self._throttle(chat_id)
        msg = self._store(chat_id, self._bot_sender(), body["msg_type"], body["content"], **links)
        if body["msg_type"] == "interactive":
            self.card_history[msg["message_id"]] = [body["content"]]
        self.send_times.setdefault(chat_id, []).append(self.clock())
        if body.get("uuid"):
            self.uuids[body["uuid"]] = (msg["message_id"], self.clock())
        return copy.deepcopy(msg)

    def reply(self, target_id: str, body: Any, raw_size: int) -> dict[str, Any]:
        with self.lock:
            target = self.by_id.get(target_id)
            if target is None:
                raise FeishuError(231003)
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
            original = self._dedupe(body.get("uuid"))
            if original is not None:
                return original
            # A top-level post in a topic group or thread-mode group opens a new topic.
            thread_id = new_id("omt_", 8) if self._threaded_chat(chat_id) else None
            return self._send(chat_id, body, thread_id=thread_id)

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

    def patch(self, message_id: str, body: Any, raw_size: int) -> None:
        """PATCH a card the bot sent; both the old and the new card must declare config.update_multi (§3.4)."""
        content = body.get("content") if isinstance(body, dict) else None
        with self.lock:
            msg = self.by_id.get(message_id)
            if msg is None or msg.get("deleted"):
                raise FeishuError(231003)
            if msg["sender"]["sender_type"] != "app" or msg["msg_type"] != "interactive":
                raise FeishuError(230001, "invalid request parameter, ext=only cards the bot sent can be patched")
            if raw_size > RICH_LIMIT_BYTES:
                raise FeishuError(230025, f"{raw_size} bytes > {RICH_LIMIT_BYTES}")
            if self.clock() * 1000 - int(msg["create_time"]) > PATCH_WINDOW_SECONDS * 1000:
                raise FeishuError(230031)
            new_card = _card(content)
            if not (_shared(_card(msg["body"]["content"])) and _shared(new_card)):
                raise FeishuError(230001, "invalid request parameter, ext=card must set config.update_multi true")
            msg["body"]["content"] = content
            msg["update_time"] = self._now_ms()
            self.card_history.setdefault(message_id, []).append(str(content))

    def card_versions(self, message_id: str) -> list[Any]:
        with self.lock:
            return [json.loads(c) for c in self.card_history.get(message_id, [])]

    # -- inspection (indexed; copies only what is returned) ------------------------------------------

    def bot_messages(self, chat_id: str | None = None, thread_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock:
            if thread_id is not None:
                pool = self.by_thread.get(thread_id, [])
            elif chat_id is not None:
                pool = self.by_chat.get(chat_id, [])
            else:
                pool = self.bot_sent
            picked = [
                m for m in pool
                if m["sender"]["sender_type"] == "app" and (chat_id is None or m["chat_id"] == chat_id)
            ]
            return copy.deepcopy(picked)

    def replies_to(self, message_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return copy.deepcopy(self.bot_replies.get(message_id, []))

    def feed(self, cursor: int, bot_only: bool) -> tuple[list[dict[str, Any]], int]:
        """Messages stored at or after position `cursor` (the next cursor is returned with them)."""
        with self.lock:
            fresh = self.messages[max(cursor, 0):]
            if bot_only:
                fresh = [m for m in fresh if m["sender"]["sender_type"] == "app"]
            return copy.deepcopy(fresh), len(self.messages)

    def send_log(self, chat_id: str | None = None) -> dict[str, list[float]]:
        with self.lock:
            chats = [chat_id] if chat_id is not None else list(self.send_times)
            return {c: list(self.send_times.get(c, [])) for c in chats}

    def peak_sends(self, window: float = 1.0) -> dict[str, int]:
        """Per chat, the most bot sends that fell within any `window` seconds (Feishu allows 5 per second)."""
        with self.lock:
            return {chat: _peak(times, window) for chat, times in self.send_times.items()}

    def get(self, message_id: str, with_sender_name: bool = False) -> dict[str, Any]:
        """GET message: a merge_forward answers itself plus every descendant (`upper_message_id` links them)."""
        with self.lock:
            msg = self.by_id.get(message_id) or self.forward_child.get(message_id)
            if msg is None:
                raise FeishuError(231003)
            items = copy.deepcopy([msg, *self.forwarded.get(message_id, [])])
        if with_sender_name:
            for item in items:
                name = self.user_names.get(item["sender"]["id"])
                if name:
                    item["sender"]["sender_name"] = name
        return {"items": items}

    # -- merge_forward bundles and message resources (seeded by tests) --------------------------------

    def add_forward(
        self, message_id: str | None, chat_id: str, children: list[dict[str, Any]], *, sender_open_id: str,
        chat_mode: str = "group", thread_id: str | None = None,
    ) -> dict[str, Any]:
        """A merge_forward message whose bundle holds `children` (see `forward_item` for their fields)."""
        with self.lock:
            bundle = self.add_user_message(
                message_id, chat_id, content=json.dumps({"content": FORWARDED_CONTENT}),
                sender_open_id=sender_open_id, msg_type="merge_forward", thread_id=thread_id, chat_mode=chat_mode,
            )
            flat: list[dict[str, Any]] = []
            self._forward_level(bundle["message_id"], children, chat_id, flat)
            self.forwarded[bundle["message_id"]] = flat
            return {**bundle, "children": copy.deepcopy(flat)}

    def _forward_level(
        self, upper_id: str, children: list[dict[str, Any]], chat_id: str, flat: list[dict[str, Any]]
    ) -> None:
        for spec in children:
            item = forward_item(spec, upper_id, chat_id, self._now_ms())
            if spec.get("sender_name"):
                self.user_names[item["sender"]["id"]] = spec["sender_name"]
            flat.append(item)
            self.forward_child[item["message_id"]] = item
            if item["msg_type"] == "merge_forward":
                start = len(flat)
                self._forward_level(item["message_id"], spec.get("children") or [], chat_id, flat)
                self.forwarded[item["message_id"]] = flat[start:]

    def add_resource(self, message_id: str, file_key: str, resource: Resource) -> None:
        with self.lock:
            self.resources[(message_id, file_key)] = resource

    def resource(self, message_id: str, file_key: str, kind: str | None) -> Resource:
        """GET message resource, with the documented refusals (get-message-resource: 234001/234003/234043)."""
        with self.lock:
            if kind not in ("image", "file"):
                raise FeishuError(234001)
            msg = self.by_id.get(message_id)
            if message_id in self.forward_child or (msg and msg["msg_type"] in ("merge_forward", "interactive")):
                raise FeishuError(234043)  # the docs: not for bundles, their children, or cards
            if msg is None:
                raise FeishuError(231003)
            found = self.resources.get((message_id, file_key))
            if found is None or found.kind != kind:
                raise FeishuError(234003)
            return found

    def list(self, query: dict[str, str]) -> dict[str, Any]:
        container_type, container_id = query.get("container_id_type"), query.get("container_id", "")
        size = page_size(query.get("page_size"))
        offset, sort = decode_page(query.get("page_token"), query.get("sort_type") or "ByCreateTimeAsc")
        with self.lock:
            if container_type == "chat":
                if container_id not in self.chats:
                    raise FeishuError(230002)
                items = [m for m in self.by_chat.get(container_id, []) if self._top_level(m)]
                items = time_filter(items, query.get("start_time"), query.get("end_time"))
            elif container_type == "thread":
                items = list(self.by_thread.get(container_id, []))
            else:
                raise FeishuError(99992402, "field validation failed: container_id_type is chat|thread")
            if sort == "ByCreateTimeDesc":
                items = items[::-1]
            page = copy.deepcopy(items[offset:offset + size])
        data: dict[str, Any] = {"has_more": offset + size < len(items), "items": page}
        if data["has_more"]:
            data["page_token"] = encode_page(offset + size, sort)
        return data

    def _top_level(self, msg: dict[str, Any]) -> bool:
        """A chat listing shows plain messages and topic roots, not the replies inside topics."""
        thread_id = msg.get("thread_id")
        return not thread_id or self.thread_roots.get(thread_id) == msg["message_id"]



def _card(content: Any) -> dict[str, Any]:
    try:
        card = json.loads(content) if isinstance(content, str) else None
    except ValueError:
        card = None
    if not isinstance(card, dict):
        raise FeishuError(230001, "invalid request parameter, ext=content must be a card JSON string")
    return card


def _shared(card: dict[str, Any]) -> bool:
    """Template and CardKit cards carry their config elsewhere; raw card JSON must say update_multi: true."""
    if card.get("type") in ("template", "card"):
        return True
    config = card.get("config")
    return isinstance(config, dict) and config.get("update_multi") is True


def _peak(times: list[float], window: float) -> int:
    best = start = 0
    for end, t in enumerate(times):
        while t - times[start] >= window:
            start += 1
        best = max(best, end - start + 1)
    return best
