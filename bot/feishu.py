"""Feishu Open API adapter over lark-oapi: replies, bot identity, a Redis-backed token cache."""

from __future__ import annotations

import json
import logging
from typing import Any

import lark_oapi as lark
import redis
from lark_oapi.api.im.v1 import (
    CreateMessageRequest,
    CreateMessageRequestBody,
    ReplyMessageRequest,
    ReplyMessageRequestBody,
)
from lark_oapi.core.cache import ICache
from lark_oapi.core.exception import ObtainAccessTokenException

from bot.errors import Paused, Permanent, Retryable
from bot.settings import Settings
from memory.keys import Keys

log = logging.getLogger(__name__)

TOKEN_INVALID = {99991663, 99991664, 99991665}
RATE_LIMITED = {99991400, 230020, 11232}  # docs: both 99991400 and 230020 are frequency limits
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
    if code in MESSAGE_BUSY or http_status >= 500 or code in TOKEN_INVALID or code < 0:
        return Retryable(text, source="feishu", code=tag)
    return Permanent(text, source="feishu", code=tag)


class FeishuApi:
    def __init__(self, settings: Settings, r: redis.Redis, keys: Keys) -> None:
        self.cache = RedisTokenCache(r, keys)
        self.app_id = settings.app_id
        self.client = (
            lark.Client.builder().app_id(settings.app_id).app_secret(settings.secret("feishu_app_secret"))
            .domain(settings.feishu_domain).timeout(settings.feishu_timeout_seconds)
            .cache(self.cache).log_level(lark.LogLevel.WARNING).build()
        )

    def _call(self, fn: Any, request: Any) -> Any:
        """One SDK call; a rejected token is dropped from the cache and the call tried once more."""
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
            raise _classify(resp.code, raw.status_code if raw else 0, resp.msg or "", dict(raw.headers or {}))
        raise AssertionError("unreachable")

    def reply_text(self, message_id: str, text: str, *, uuid: str, in_thread: bool) -> str:
        body = (ReplyMessageRequestBody.builder().msg_type("text").content(json.dumps({"text": text}))
                .reply_in_thread(in_thread).uuid(uuid).build())
        req = ReplyMessageRequest.builder().message_id(message_id).request_body(body).build()
        resp = self._call(self.client.im.v1.message.reply, req)
        return str(resp.data.message_id)

    def send_text(self, chat_id: str, text: str, *, uuid: str) -> str:
        """A new message in a chat (admin alerts); `uuid` makes a retried send post at most once."""
        body = (CreateMessageRequestBody.builder().receive_id(chat_id).msg_type("text")
                .content(json.dumps({"text": text}, ensure_ascii=False)).uuid(uuid).build())
        req = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(body).build()
        resp = self._call(self.client.im.v1.message.create, req)
        return str(resp.data.message_id)

    def bot_open_id(self) -> str:
        req = (lark.BaseRequest.builder().http_method(lark.HttpMethod.GET).uri("/open-apis/bot/v3/info")
               .token_types({lark.AccessTokenType.TENANT}).build())
        resp = self._call(self.client.request, req)
        body = json.loads(resp.raw.content)
        open_id = (body.get("bot") or {}).get("open_id")  # top level, not under data
        if not open_id:
            raise Permanent("bot/v3/info returned no open_id", source="feishu", code="no_open_id")
        return str(open_id)
