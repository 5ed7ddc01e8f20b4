"""Issue-7 parts of the emulator's tenant: card PATCH and versions, users, chat members, drive subscriptions."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from sandbox.feishu.events import TENANT_KEY, user_ids

if TYPE_CHECKING:
    from sandbox.feishu.card_render import DefectLog
from sandbox.feishu.rules import RICH_LIMIT_BYTES, FeishuError, check_card, decode_page, encode_page

PATCH_WINDOW_SECONDS = 14 * 86400  # cards older than 14 days cannot be updated (230031)


class CardsAndPeople:
    """Mixed into FeishuStore: state lives there (see FeishuStore.reset), under its lock."""

    if TYPE_CHECKING:
        lock: threading.RLock
        clock: Callable[[], float]
        chats: dict[str, dict[str, Any]]
        by_id: dict[str, dict[str, Any]]
        user_names: dict[str, str]
        users: dict[str, dict[str, str]]
        members: dict[str, list[str]]
        bot_out: set[str]
        card_history: dict[str, list[str]]
        render_defects: DefectLog
        subscriptions: list[dict[str, str]]

        def add_chat(self, chat_id: str, chat_mode: str = ..., group_message_type: str = ...,
                     name: str = ...) -> dict[str, Any]: ...

        def _now_ms(self) -> str: ...

    # -- people ---------------------------------------------------------------------------------------


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

    def set_bot_in(self, chat_id: str, present: bool) -> None:
        """The bot joins or leaves a chat: out of it, sends and replies answer 230002, its members listing 232011,
        is_in_chat false, and only a public chat stays in its search."""
        with self.lock:
            if chat_id not in self.chats:
                self.add_chat(chat_id)
            (self.bot_out.discard if present else self.bot_out.add)(chat_id)

    def is_in_chat(self, chat_id: str) -> dict[str, Any]:
        """GET …/members/is_in_chat with the tenant token: is the bot in the chat (im-v1 chat-members is_in_chat)."""
        with self.lock:
            if chat_id not in self.chats:
                raise FeishuError(232011)  # the page documents no code for an unknown chat: as the members listing
            return {"is_in_chat": chat_id not in self.bot_out}

    def search_chats(self, query: dict[str, str]) -> dict[str, Any]:
        """GET chats/search: group chats the bot is in and public ones ("当前身份所在的群、对当前身份公开的群"), p2p
        never; the keyword matches names (case-insensitively; Feishu also matches members and pinyin)."""
        raw = query.get("page_size") or "20"
        if not raw.isdigit() or not 1 <= int(raw) <= 100:
            raise FeishuError(99992402, "field validation failed: page_size must be between 1 and 100")
        size, (offset, _) = int(raw), decode_page(query.get("page_token"), "ByCreateTimeAsc")
        word = (query.get("query") or "").casefold()
        with self.lock:
            seen = [c for c in self.chats.values() if c.get("chat_mode") != "p2p" and word in c["name"].casefold()
                    and (c["chat_id"] not in self.bot_out or c.get("chat_type") == "public")]
            items = [{k: c.get(k, "") for k in ("chat_id", "name", "description", "avatar", "owner_id",
                                                 "owner_id_type", "tenant_key", "chat_status")}
                     | {"external": False} for c in seen[offset:offset + size]]
        more = offset + size < len(seen)
        return {"items": items, "page_token": encode_page(offset + size, "ByCreateTimeAsc") if more else "",
                "has_more": more}

    def chat_members(self, chat_id: str, query: dict[str, str]) -> dict[str, Any]:
        """GET chat members: people only (bots are never listed), page_size 1..100 (default 20); the bot must be in
        the chat ("机器人或授权用户必须在群组中": 232011 otherwise)."""
        id_type = query.get("member_id_type") or "open_id"
        if id_type not in ("open_id", "union_id", "user_id"):
            raise FeishuError(99992402, "field validation failed: member_id_type")
        raw = query.get("page_size") or "20"
        if not raw.isdigit() or not 1 <= int(raw) <= 100:
            raise FeishuError(99992402, "field validation failed: page_size must be between 1 and 100")
        size = int(raw)
        offset, _ = decode_page(query.get("page_token"), "ByCreateTimeAsc")
        with self.lock:
            if chat_id not in self.chats or chat_id in self.bot_out:
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

    # -- cards ----------------------------------------------------------------------------------------

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
            check_card(new_card)
            if not (_shared(_card(msg["body"]["content"])) and _shared(new_card)):
                raise FeishuError(230001, "invalid request parameter, ext=card must set config.update_multi true")
            msg["body"]["content"] = content
            msg["update_time"] = self._now_ms()
            self.card_history.setdefault(message_id, []).append(str(content))
            self.render_defects.note(f"message {message_id}", new_card)

    def card_versions(self, message_id: str) -> list[Any]:
        with self.lock:
            return [json.loads(c) for c in self.card_history.get(message_id, [])]



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
