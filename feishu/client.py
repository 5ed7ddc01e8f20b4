"""Feishu Open API adapter over lark-oapi: replies, reactions, bot identity, a Redis-backed token cache."""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import lark_oapi as lark
import redis
import requests
from lark_oapi.api.im.v1 import (
    CreateMessageReactionRequest,
    CreateMessageReactionRequestBody,
    CreateMessageRequest,
    CreateMessageRequestBody,
    DeleteMessageReactionRequest,
    Emoji,
    GetChatMembersRequest,
    GetChatRequest,
    GetMessageRequest,
    IsInChatChatMembersRequest,
    PatchMessageRequest,
    PatchMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
    SearchChatRequest,
)
from lark_oapi.core.cache import ICache
from lark_oapi.core.exception import ObtainAccessTokenException
from lark_oapi.core.token.manager import TokenManager

from core.errors import CapabilityOff, Paused, Permanent, Retryable
from core.keys import Keys
from core.settings import Settings
from feishu.capabilities import SCOPE_MISSING, turn_off

log = logging.getLogger(__name__)

TOKEN_INVALID = {99991663, 99991664, 99991665}
RATE_LIMITED = {99991400, 230020, 11232}
RESOURCE_RETRY = {234019}  # docs: "scope CheckAppTenant fail ... please retry"
ERROR_BODY_MAX = 64 * 1024  # an error answer of the resource API is small JSON; never read more
CHUNK = 64 * 1024  # docs: both 99991400 and 230020 are frequency limits
MESSAGE_BUSY = {230049}
# The app itself cannot work (wrong credentials, disabled app, IP allowlist, missing scope, quota,
# bot ability off): an operator must fix it, so work pauses instead of failing users' messages.
APP_FAULTS = {10003, 10014, 99991401, 99991403, 99991662, 99991672, 230006}


class RedisTokenCache(ICache):
    """lark-oapi's token cache in Redis, so forked work-horses share one tenant token."""

    def __init__(self, r: redis.Redis, keys: Keys) -> None:
        self.r, self.keys = r, keys

    def get(self, key: str) -> str:
        return str(self.r.get(self.keys.lark_cache(key)) or "")

    def set(self, key: str, value: str, expire: int) -> None:
        self.r.set(self.keys.lark_cache(key), value, exat=int(expire))

    def drop(self, key: str) -> None:
        self.r.delete(self.keys.lark_cache(key))


def _reset_after(headers: dict[str, str]) -> float | None:
    lowered = {k.lower(): v for k, v in headers.items()}
    try:
        return float(lowered["x-ogw-ratelimit-reset"])
    except (KeyError, ValueError):
        return None


def _classify(code: int, http_status: int, msg: str, headers: dict[str, str]) -> Exception:
    text = f"feishu error {code} (HTTP {http_status}): {msg}"
    tag = str(code)
    if code in APP_FAULTS:
        return Paused(text, source="feishu", code=tag)
    if code in RATE_LIMITED or http_status == 429:
        return Retryable(text, retry_after=_reset_after(headers), source="feishu", code=tag)
    if code in MESSAGE_BUSY or code in RESOURCE_RETRY or http_status >= 500 or code in TOKEN_INVALID or code < 0:
        return Retryable(text, source="feishu", code=tag)
    return Permanent(text, source="feishu", code=tag)


@dataclass(frozen=True)
class Sent:
    """A message the bot sent: its id, and the AppLink Feishu answered with (`message_app_link` of the send or
    reply response, lark-oapi 1.7.5 Create/ReplyMessageResponseBody; "" when the answer has none)."""

    message_id: str
    app_link: str = ""


@dataclass(frozen=True)
class Resource:
    """A message resource's first bytes: `complete` False when it holds more than was read."""

    data: bytes
    complete: bool
    size: int | None  # Content-Length, or len(data) when complete; None if neither is known
    content_type: str | None


def _error_of(resp: requests.Response) -> tuple[int, str]:
    """The `{code, msg}` of a failed resource answer; -1 when it is not JSON (a gateway page)."""
    raw = resp.raw.read(ERROR_BODY_MAX, decode_content=True) or b""
    try:
        body = json.loads(raw)
        return int(body.get("code", -1)), str(body.get("msg", ""))
    except (ValueError, TypeError, AttributeError):
        return -1, f"non-JSON answer ({len(raw)} bytes)"


class FeishuApi:
    def __init__(self, settings: Settings, r: redis.Redis, keys: Keys) -> None:
        self.cache = RedisTokenCache(r, keys)
        self.app_id = settings.app_id
        self.domain = settings.feishu_domain.rstrip("/")
        self.timeout = settings.feishu_timeout_seconds
        self.client = (
            lark.Client.builder().app_id(settings.app_id).app_secret(settings.secret("feishu_app_secret"))
            .domain(settings.feishu_domain).timeout(settings.feishu_timeout_seconds)
            .cache(self.cache).log_level(lark.LogLevel.WARNING).build()
        )

    def _call(self, fn: Any, request: Any, capability: str | None = None) -> Any:
        """One SDK call; a rejected token is dropped from the cache and the call tried once more. A call that
        serves an optional `capability` turns only that off when the app lacks its scope (see capabilities)."""
        for attempt in (1, 2):
            try:
                resp = fn(request)
            except ObtainAccessTokenException as exc:  # lark-oapi raises when the token call fails
                raise _classify(int(exc.code or -1), 0, str(exc.msg), {}) from exc
            except Exception as exc:  # transport failures and non-JSON bodies surface as exceptions
                raise Retryable(f"feishu transport error: {exc.__class__.__name__}", source="feishu",
                                code="transport") from exc
            if resp.success():
                return resp
            if resp.code in TOKEN_INVALID and attempt == 1:
                self.cache.drop(f"self_tenant_token:{self.app_id}")
                continue
            raw = resp.raw
            code = resp.code if isinstance(resp.code, int) else -1  # a non-JSON error body leaves code unset
            raise self._failure(code, raw.status_code if raw else 0, resp.msg or "", dict(raw.headers or {}),
                                capability)
        raise AssertionError("unreachable")

    def _failure(self, code: int, status: int, msg: str, headers: dict[str, str], capability: str | None) -> Exception:
        if code == SCOPE_MISSING and capability:
            turn_off(self.cache.r, self.cache.keys, capability, msg)
            return CapabilityOff(f"feishu error {code}: {msg}", source="feishu", code=str(code), capability=capability)
        return _classify(code, status, msg, headers)

    def reply_text(self, message_id: str, text: str, *, uuid: str, in_thread: bool) -> str:
        body = (ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": text}))
                .reply_in_thread(in_thread).uuid(uuid).build())
        req = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        resp = self._call(self.client.im.v1.message.reply, req)
        return str(resp.data.message_id)

    def reply_card(self, message_id: str, card: dict[str, Any], *, uuid: str, in_thread: bool) -> Sent:
        """An interactive card as a reply; `uuid` makes a retried post land once (Feishu keeps it an hour)."""
        return self.reply_sent(message_id, "interactive", card, uuid=uuid, in_thread=in_thread)

    def reply_card_entity(self, message_id: str, card_id: str, *, uuid: str, in_thread: bool) -> str:
        """A CardKit card entity (feishu/cardkit.py) as a reply; an entity can be sent once. The content must
        be {"type": "card", "data": {"card_id": …}} (a bare {"card_id": …} fails with 200621)."""
        return self.reply(message_id, "interactive", {"type": "card", "data": {"card_id": card_id}}, uuid=uuid,
                          in_thread=in_thread)

    def reply_post(self, message_id: str, post: dict[str, Any], *, uuid: str, in_thread: bool) -> str:
        """A rich-text `post` ({"zh_cn": {"title", "content": [[…]]}}, locale wrapper required) as a reply."""
        return self.reply(message_id, "post", post, uuid=uuid, in_thread=in_thread)

    def reply(self, message_id: str, msg_type: str, content: dict[str, Any], *, uuid: str, in_thread: bool) -> str:
        return self.reply_sent(message_id, msg_type, content, uuid=uuid, in_thread=in_thread).message_id

    def reply_sent(self, message_id: str, msg_type: str, content: dict[str, Any], *, uuid: str,
                   in_thread: bool) -> Sent:
        body = (ReplyMessageRequestBody.builder().msg_type(msg_type)
                .content(json.dumps(content, ensure_ascii=False)).reply_in_thread(in_thread).uuid(uuid).build())
        req = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        resp = self._call(self.client.im.v1.message.reply, req)
        return Sent(str(resp.data.message_id), str(resp.data.message_app_link or ""))

    def add_reaction(self, message_id: str, emoji_type: str) -> str:
        """POST …/messages/:message_id/reactions → the reaction_id (needed to take it back)."""
        body = CreateMessageReactionRequestBody.builder().reaction_type(
            Emoji.builder().emoji_type(emoji_type).build()).build()
        req = CreateMessageReactionRequest.builder().message_id(message_id).request_body(body).build()
        resp = self._call(self.client.im.v1.message_reaction.create, req, "reactions")
        return str(resp.data.reaction_id)

    def remove_reaction(self, message_id: str, reaction_id: str) -> None:
        """DELETE …/messages/:message_id/reactions/:reaction_id (only the bot's own reactions)."""
        req = DeleteMessageReactionRequest.builder().message_id(message_id).reaction_id(reaction_id).build()
        self._call(self.client.im.v1.message_reaction.delete, req, "reactions")

    def patch_card(self, message_id: str, card: dict[str, Any]) -> None:
        """Replace a card the bot sent (it must declare config.update_multi)."""
        body = PatchMessageRequestBody.builder().content(json.dumps(card, ensure_ascii=False)).build()
        req = PatchMessageRequest.builder().message_id(message_id).request_body(body).build()
        self._call(self.client.im.v1.message.patch, req)

    def chat_member_ids(self, chat_id: str, *, max_pages: int = 50) -> set[str]:
        """Every member's open_id (GET /im/v1/chats/:chat_id/members, 100 per page)."""
        members: set[str] = set()
        token: str | None = None
        for _ in range(max_pages):
            builder = GetChatMembersRequest.builder().chat_id(chat_id).member_id_type("open_id").page_size(100)
            if token:
                builder = builder.page_token(token)
            resp = self._call(self.client.im.v1.chat_members.get, builder.build(), "chat_members")
            data = resp.data
            members.update(str(m.member_id) for m in (data.items or []) if m.member_id)
            token = data.page_token if data.has_more else None
            if not token:
                break
        return members

    def bot_in_chat(self, chat_id: str) -> bool:
        """Whether the bot is in the chat now (GET /im/v1/chats/:chat_id/members/is_in_chat with the tenant token:
        "根据使用的 access_token 判断对应的用户或者机器人是否在指定的群里", im-v1 chat-members is_in_chat)."""
        req = IsInChatChatMembersRequest.builder().chat_id(chat_id).build()
        resp = self._call(self.client.im.v1.chat_members.is_in_chat, req, "chat_members")
        return bool(getattr(resp.data, "is_in_chat", False))

    def search_chats(self, query: str, *, max_pages: int = 5) -> list[tuple[str, str]]:
        """(chat_id, name) of the group chats visible to the bot whose name or members match `query` (GET
        /im/v1/chats/search: the chats it is in and public ones, keyword match; 20 a page, the documented default)."""
        found: list[tuple[str, str]] = []
        token: str | None = None
        for _ in range(max_pages):
            builder = SearchChatRequest.builder().query(query[:64]).page_size(20)
            if token:
                builder = builder.page_token(token)
            resp = self._call(self.client.im.v1.chat.search, builder.build(), "chat_search")
            data = resp.data
            found += [(str(c.chat_id), str(c.name or "")) for c in (data.items or []) if c.chat_id]
            token = data.page_token if data.has_more else None
            if not token:
                break
        return found

    def chat_name(self, chat_id: str) -> str:
        """The group's name (GET /im/v1/chats/:chat_id); "" when Feishu names none."""
        req = GetChatRequest.builder().chat_id(chat_id).build()
        resp = self._call(self.client.im.v1.chat.get, req, "chat_info")
        return str(getattr(resp.data, "name", "") or "")

    def chat_owner(self, chat_id: str) -> str:
        """The group's owner as an open_id (GET /im/v1/chats/:chat_id, owner_id with user_id_type=open_id); "" when
        Feishu names none (a chat the bot created has the bot as owner: no person)."""
        req = GetChatRequest.builder().chat_id(chat_id).user_id_type("open_id").build()
        resp = self._call(self.client.im.v1.chat.get, req, "chat_info")
        data = resp.data
        owner = str(getattr(data, "owner_id", "") or "")
        return owner if getattr(data, "owner_id_type", "open_id") in ("open_id", None, "") else ""

    def send_text(self, chat_id: str, text: str, *, uuid: str) -> str:
        """A new message in a chat (admin alerts); `uuid` makes a retried send post at most once."""
        return self.send(chat_id, "text", {"text": text}, uuid=uuid)

    def send_card(self, chat_id: str, card: dict[str, Any], *, uuid: str) -> str:
        """A new interactive card in a chat (a digest); `uuid` as for send_text."""
        return self.send(chat_id, "interactive", card, uuid=uuid)

    def send(self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str) -> str:
        return self.send_sent(chat_id, msg_type, content, uuid=uuid).message_id

    def send_sent(self, chat_id: str, msg_type: str, content: dict[str, Any], *, uuid: str) -> Sent:
        """A new message in a chat, with the AppLink Feishu answered the send with (`message_app_link`)."""
        body = (CreateMessageRequestBody.builder().receive_id(chat_id).msg_type(msg_type)
                .content(json.dumps(content, ensure_ascii=False)).uuid(uuid).build())
        req = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
        resp = self._call(self.client.im.v1.message.create, req)
        return Sent(str(resp.data.message_id), str(resp.data.message_app_link or ""))

    def bot_open_id(self) -> str:
        return self.bot_info()["open_id"]

    def bot_info(self) -> dict[str, str]:
        """The bot's open_id and its app name (GET bot/v3/info: the bot object is top level, not under data)."""
        req = (lark.BaseRequest.builder().http_method(lark.HttpMethod.GET).uri("/open-apis/bot/v3/info")
               .token_types({lark.AccessTokenType.TENANT}).build())
        resp = self._call(self.client.request, req)
        bot = json.loads(resp.raw.content).get("bot") or {}
        if not bot.get("open_id"):
            raise Permanent("bot/v3/info returned no open_id", source="feishu", code="no_open_id")
        return {"open_id": str(bot["open_id"]), "app_name": str(bot.get("app_name") or "")}

    def message_items(self, message_id: str) -> list[dict[str, Any]]:
        """GET one message: `data.items` as JSON objects; for a merge_forward the bundle and all its descendants.

        Each descendant carries `upper_message_id` (the bundle it sits in). Sender names are asked for
        (`with_sender_name`); mentions' `id` is a string here, unlike in events.
        """
        req = GetMessageRequest.builder().message_id(message_id).build()
        req.add_query("with_sender_name", "true")  # the SDK would send Python's "True"
        resp = self._call(self.client.im.v1.message.get, req, "message_read")
        items = ((json.loads(resp.raw.content) or {}).get("data") or {}).get("items") or []
        return [i for i in items if isinstance(i, dict)]

    def resource(self, message_id: str, file_key: str, kind: str, *, max_bytes: int) -> Resource:
        """GET a message resource (`kind` image|file), reading at most `max_bytes` of it (0: headers only).

        Streamed on purpose: lark-oapi's GetMessageResourceRequest buffers whole bodies (up to Feishu's
        100 MB) before we could look at the size. Same token cache, retry and error mapping as `_call`.
        """
        url = (f"{self.domain}/open-apis/im/v1/messages/{quote(message_id, safe='')}"
               f"/resources/{quote(file_key, safe='')}")
        for attempt in (1, 2):
            try:
                token = TokenManager.get_self_tenant_token(self.client.config)
            except ObtainAccessTokenException as exc:
                raise _classify(int(exc.code or -1), 0, str(exc.msg), {}) from exc
            try:
                with requests.get(url, params={"type": kind}, headers={"Authorization": f"Bearer {token}"},
                                  stream=True, timeout=self.timeout) as resp:
                    if 200 <= resp.status_code < 300:
                        return _read_capped(resp, max_bytes)
                    code, msg = _error_of(resp)
            except requests.RequestException as exc:
                raise Retryable(f"feishu transport error: {exc.__class__.__name__}", source="feishu",
                                code="transport") from exc
            if code in TOKEN_INVALID and attempt == 1:
                self.cache.drop(f"self_tenant_token:{self.app_id}")
                continue
            raise self._failure(code, resp.status_code, msg, dict(resp.headers), "resources")
        raise AssertionError("unreachable")


def _read_capped(resp: requests.Response, max_bytes: int) -> Resource:
    length = resp.headers.get("Content-Length")
    size = int(length) if length and length.isdigit() else None
    data = bytearray()
    if max_bytes > 0:
        for chunk in resp.iter_content(CHUNK):
            data += chunk
            if len(data) > max_bytes:
                break
    complete = len(data) <= max_bytes and (size is None or size <= max_bytes) and (max_bytes > 0 or size == 0)
    if complete and size is None:
        size = len(data)
    return Resource(bytes(data[:max_bytes]), complete, size, resp.headers.get("Content-Type"))
