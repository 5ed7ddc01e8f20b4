"""CardKit card entities in the emulator: create, stream an element's text, full update, settings, and the
IM side (a message that shows an entity shows its current content).

As documented (cardkit-v1 card/create, card-element/content, card/update, card/settings and their 错误码
tables; streaming-updates-openapi-overview): JSON 2.0 only (300303), unique element ids (300301), at most 200
elements (300305), `update_multi` false refused (300302), a card ≤ 30 KB (200860), content 1..100,000
characters, `sequence` an int32 ≥ 1 strictly increasing per card across every op (300317), text only into
markdown / plain_text elements (300310) and only with streaming on (300309; 200850 once it closed by itself
10 minutes after it was last turned on: "流式更新模式将在距上次开启 10 分钟后自动关闭"; settings turning it on
again is 200850's documented remedy), entities live 14 days (200750), unknown ids 200740, at most 10 operations
a second per card ("对于单个卡片实体，使用卡片和组件级 OpenAPI 操作卡片的频率上限为 10 次/秒"), and the API tier of
50/s and 1000/min per app, which does not count ops on a card in streaming mode (the overview's streaming_mode
field: "在流式更新模式下，开发者可调用卡片和组件接口对卡片持续进行全量更新、局部更新、文本流式更新，且不会触发接口
的频率限制（QPS）"; card create counts). A card showing more than five tables is refused with 230099 (11310), as
IM sends are (rules.check_tables); what a client renders badly without an error is logged (card_render.py).
The auto-close runs on the store's clock: `streaming_timeout_s` (set_cardkit_limits) or `age` move it in tests.

Emulator choices where the docs say nothing: the per-card limit answers like every Open API frequency limit
(HTTP 429, 99991400, x-ogw-ratelimit-* headers); a repeated `uuid` with the same request succeeds without
applying twice, with another request 200770; an IM send naming an unknown, expired or already-sent entity
answers 230099 (an entity can be sent once).
"""

from __future__ import annotations

import copy
import json
import os
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from sandbox.feishu.card_render import DefectLog, chat_preview
from sandbox.feishu.rules import FeishuError, check_card, check_tables

TTL_S = 14 * 86400
STREAMING_TIMEOUT_S = 600.0
PER_CARD_QPS = 10
APP_QPS, APP_QPM = 50, 1000
CARD_MAX_BYTES = 30 * 1024
CONTENT_MAX = 100_000
SETTINGS_MAX = 100_000
DATA_MAX = {"card_create": 3_000_000, "card_update": 1_000_000}
ELEMENTS_MAX = 200
UUID_MAX = 64
SEQUENCE_MAX = 2**31 - 1
ELEMENT_ID = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,63}")
TEXT_TAGS = ("markdown", "plain_text")


@dataclass
class Entity:
    card_id: str
    card: dict[str, Any]
    created: float  # clock()
    streaming: bool
    opened: float | None  # clock() when streaming_mode was last turned on
    timed_out: bool = False
    sequence: int = 0
    message: dict[str, Any] | None = None  # the IM message showing it (the store's own dict)
    uuids: dict[str, str] = field(default_factory=dict)  # uuid → the request it was used for
    calls: deque[float] = field(default_factory=deque)  # monotonic times, for the per-card limit
    history: list[dict[str, Any]] = field(default_factory=list)


class CardKitStore:
    """Card entities under the tenant's lock; handlers take the emulator's request record."""

    def __init__(self, lock: threading.RLock, clock: Callable[[], float] = time.time) -> None:
        self.lock, self.clock = lock, clock
        self.reset()

    def reset(self) -> None:
        with self.lock:
            self.entities: dict[str, Entity] = {}
            self.app_calls: dict[str, deque[float]] = {}
            self.per_card_qps, self.streaming_timeout_s, self.ttl_s = PER_CARD_QPS, STREAMING_TIMEOUT_S, TTL_S
            self.app_qps, self.app_qpm, self.minute_s = APP_QPS, APP_QPM, 60.0
            self.rejections: dict[str, int] = {}
            self.defects = DefectLog()

    # -- Open API ops --------------------------------------------------------------------------------

    def create(self, record: dict[str, Any]) -> dict[str, Any]:
        body = _body(record)
        if body.get("type") != "card_json":
            raise FeishuError(10002, "invalid request parameter, ext=type must be card_json")
        card = _parse_card(body.get("data"), DATA_MAX["card_create"])
        with self.lock:
            self._app_tier("card_create")
            card_id = "7" + str(int.from_bytes(os.urandom(8), "big"))[:18].rjust(18, "0")
            streaming = _streaming(card)
            now = self.clock()
            entity = Entity(card_id, card, now, streaming, now if streaming else None)
            self.entities[card_id] = entity
            self._log(entity, "card_create", 0)
            self.defects.note(f"card {card_id}", card)
        return {"card_id": card_id}

    def content(self, record: dict[str, Any]) -> dict[str, Any]:
        body, params = _body(record), record["params"]
        text = body.get("content")
        if not isinstance(text, str) or not 1 <= len(text) <= CONTENT_MAX:
            raise FeishuError(10002, f"invalid request parameter, ext=content must be 1..{CONTENT_MAX} characters")
        with self.lock:
            entity, seq = self._begin("card_content", params["card_id"], body)
            if entity is None:  # a repeated uuid: applied once already
                return {}
            if not entity.streaming:
                raise FeishuError(200850 if entity.timed_out else 300309)
            found = [e for e in _elements(entity.card) if e.get("element_id") == params["element_id"]]
            if not found:
                raise FeishuError(300313, f"Failed to update element properties, ext=not find elementID: "
                                          f"{params['element_id']}")
            if found[0].get("tag") not in TEXT_TAGS:
                raise FeishuError(300310)
            new = copy.deepcopy(entity.card)
            next(e for e in _elements(new) if e.get("element_id") == params["element_id"])["content"] = text
            self._commit(entity, new, "card_content", seq, body)
        return {}

    def update(self, record: dict[str, Any]) -> dict[str, Any]:
        body, params = _body(record), record["params"]
        wrapped = body.get("card")
        if not isinstance(wrapped, dict) or wrapped.get("type") != "card_json":
            raise FeishuError(10002, "invalid request parameter, ext=card.type must be card_json")
        card = _parse_card(wrapped.get("data"), DATA_MAX["card_update"])
        with self.lock:
            entity, seq = self._begin("card_update", params["card_id"], body)
            if entity is None:
                return {}
            tags = {e["element_id"]: e.get("tag") for e in _elements(entity.card) if "element_id" in e}
            if any(tags.get(e["element_id"], e.get("tag")) != e.get("tag") for e in _elements(card)
                   if "element_id" in e):
                raise FeishuError(300312)
            self._commit(entity, card, "card_update", seq, body)
        return {}

    def settings(self, record: dict[str, Any]) -> dict[str, Any]:
        body, params = _body(record), record["params"]
        raw = body.get("settings")
        if not isinstance(raw, str) or not 1 <= len(raw) <= SETTINGS_MAX:
            raise FeishuError(10002, "invalid request parameter, ext=settings must be a JSON string")
        try:
            settings = json.loads(raw)
        except ValueError:
            raise FeishuError(10002, "invalid request parameter, ext=settings is not valid JSON") from None
        if not isinstance(settings, dict) or not settings or set(settings) - {"config", "card_link"} or \
                not isinstance(settings.get("config", {}), dict):
            raise FeishuError(300122, "Failed to update card configuration, ext=settings holds config and card_link")
        if settings.get("config", {}).get("update_multi") is False:
            raise FeishuError(300302)
        with self.lock:
            entity, seq = self._begin("card_settings", params["card_id"], body)
            if entity is None:
                return {}
            new = copy.deepcopy(entity.card)
            new.setdefault("config", {}).update(settings.get("config", {}))
            if "card_link" in settings:
                new["card_link"] = settings["card_link"]
            self._commit(entity, new, "card_settings", seq, body)
        return {}

    # -- IM: sending an entity -----------------------------------------------------------------------

    def sendable(self, content: str) -> str | None:
        """The card_id an interactive message's content names ({"type": "card", "data": {"card_id"}}), checked
        (it exists, is fresh and was never sent); None for any other card."""
        try:
            parsed = json.loads(content)
        except ValueError:
            return None
        if not isinstance(parsed, dict) or parsed.get("type") != "card":
            return None
        card_id = (parsed.get("data") or {}).get("card_id") if isinstance(parsed.get("data"), dict) else None
        with self.lock:
            entity = self.entities.get(str(card_id))
            if entity is None:
                raise FeishuError(230099, f"Failed to create card content, ext=card entity {card_id} not found")
            if self.clock() - entity.created >= self.ttl_s:
                raise FeishuError(230099, "Failed to create card content, ext=card entity expired (14 days)")
            if entity.message is not None:
                raise FeishuError(230099, "Failed to create card content, ext=a card entity can be sent once")
            return entity.card_id

    def shown(self, card_id: str) -> str:
        with self.lock:
            return json.dumps(self.entities[card_id].card, ensure_ascii=False)

    def bind(self, card_id: str, message: dict[str, Any]) -> None:
        with self.lock:
            entity = self.entities[card_id]
            entity.message = message
            self._log(entity, "send", entity.sequence)

    # -- inspection and controls ---------------------------------------------------------------------

    def by_message(self, message_id: str) -> Entity | None:
        with self.lock:
            return next((e for e in self.entities.values()
                         if e.message is not None and e.message["message_id"] == message_id), None)

    def history(self, card_id: str) -> list[dict[str, Any]]:
        with self.lock:
            entity = self.entities[card_id]
            self._expire(entity)
            return copy.deepcopy(entity.history)

    def listing(self) -> list[dict[str, Any]]:
        with self.lock:
            out = []
            for e in self.entities.values():
                self._expire(e)
                out.append({"card_id": e.card_id, "message_id": e.message["message_id"] if e.message else None,
                            "streaming": e.streaming, "timed_out": e.timed_out, "sequence": e.sequence,
                            "created": e.created, "text": card_text(e.card), "card": copy.deepcopy(e.card),
                            "preview": chat_preview(e.card)})
            return out

    def age(self, card_id: str, seconds: float) -> None:
        """Pretend the entity was created (and streaming opened) `seconds` earlier."""
        with self.lock:
            entity = self.entities[card_id]
            entity.created -= seconds
            if entity.opened is not None:
                entity.opened -= seconds

    # -- internals -------------------------------------------------------------------------------------

    def _begin(self, op: str, card_id: str, body: dict[str, Any]) -> tuple[Entity | None, int]:
        """The checks every card-scoped op shares; (None, _) when a repeated uuid makes it a no-op success."""
        seq = body.get("sequence")
        if isinstance(seq, bool) or not isinstance(seq, int) or not 1 <= seq <= SEQUENCE_MAX:
            raise FeishuError(10002, "invalid request parameter, ext=sequence must be an int in 1..2147483647")
        uuid = body.get("uuid")
        if uuid is not None and (not isinstance(uuid, str) or not 1 <= len(uuid) <= UUID_MAX):
            raise FeishuError(10002, f"invalid request parameter, ext=uuid must be 1..{UUID_MAX} characters")
        entity = self.entities.get(card_id)
        if entity is None:
            raise FeishuError(200740)
        if self.clock() - entity.created >= self.ttl_s:
            raise FeishuError(200750)
        self._expire(entity)
        self._per_card(entity)
        if not entity.streaming:  # documented: ops on a card in streaming mode do not hit the API's QPS limit
            self._app_tier(op)
        if uuid is not None:
            seen = entity.uuids.get(uuid)
            if seen == _fingerprint(op, body):
                return None, seq
            if seen is not None:
                raise FeishuError(200770)
        if seq <= entity.sequence:
            raise FeishuError(300317, f"{_MSG_300317}, ext=sequence {seq} <= last {entity.sequence}")
        return entity, seq

    def _commit(self, entity: Entity, card: dict[str, Any], op: str, seq: int, body: dict[str, Any]) -> None:
        _check_limits(card)
        now = self.clock()
        was, entity.streaming = entity.streaming, _streaming(card)
        if entity.streaming and not was:
            entity.opened, entity.timed_out = now, False
        elif not entity.streaming:
            entity.timed_out = False
        entity.card, entity.sequence = card, seq
        if isinstance(body.get("uuid"), str):
            entity.uuids[body["uuid"]] = _fingerprint(op, body)
        self._show(entity)
        self._log(entity, op, seq)
        self.defects.note(f"card {entity.card_id}", card)

    def _show(self, entity: Entity) -> None:
        """The message showing the entity shows its current card (what the chat renders now)."""
        if entity.message is not None:
            entity.message["body"]["content"] = json.dumps(entity.card, ensure_ascii=False)
            now_ms = int(self.clock() * 1000)
            entity.message["update_time"] = str(max(now_ms, int(entity.message["update_time"])))

    def _expire(self, entity: Entity) -> None:
        """Streaming closes by itself `streaming_timeout_s` after it was last turned on."""
        if entity.streaming and entity.opened is not None and \
                self.clock() - entity.opened >= self.streaming_timeout_s:
            entity.streaming, entity.timed_out = False, True
            entity.card.setdefault("config", {})["streaming_mode"] = False
            self._show(entity)
            self._log(entity, "streaming_timeout", entity.sequence)
            self.defects.note(f"card {entity.card_id}", entity.card)  # a custom summary outlives streaming

    def _per_card(self, entity: Entity) -> None:
        _admit(entity.calls, ((self.per_card_qps, 1.0),), self.rejections, "per_card")

    def _app_tier(self, op: str) -> None:
        calls = self.app_calls.setdefault(op, deque())
        _admit(calls, ((self.app_qps, 1.0), (self.app_qpm, self.minute_s)), self.rejections, op)

    def _log(self, entity: Entity, op: str, seq: int) -> None:
        text = card_text(entity.card)
        entity.history.append({"at": time.time(), "mono": time.monotonic(), "op": op, "sequence": seq,
                               "length": len(text), "text": text, "streaming": entity.streaming})


_MSG_300317 = "The sequence number for operating on the card did not increment consecutively"


def _admit(calls: deque[float], limits: tuple[tuple[int, float], ...], rejections: dict[str, int],
           name: str) -> None:
    """At most `limit` calls within each `span` seconds (monotonic); a call that passes is recorded."""
    now = time.monotonic()
    longest = max(span for _, span in limits)
    while calls and now - calls[0] >= longest:
        calls.popleft()
    for limit, span in limits:
        inside = [t for t in calls if now - t < span]
        if len(inside) >= limit:
            rejections[name] = rejections.get(name, 0) + 1
            raise _limited(limit, span - (now - inside[0]))
    calls.append(now)


def _fingerprint(op: str, body: dict[str, Any]) -> str:
    return json.dumps([op, {k: v for k, v in body.items() if k != "uuid"}], sort_keys=True, ensure_ascii=False)


def _limited(limit: int, reset: float) -> FeishuError:
    headers = {"x-ogw-ratelimit-limit": str(limit), "x-ogw-ratelimit-reset": str(max(1, int(reset) + 1))}
    return FeishuError(99991400, "request trigger frequency limit", http_status=429, headers=headers)


def _body(record: dict[str, Any]) -> dict[str, Any]:
    body = record.get("json")
    if not isinstance(body, dict):
        raise FeishuError(10002, "invalid request parameter, ext=body must be a JSON object")
    return body


def _parse_card(data: Any, max_chars: int) -> dict[str, Any]:
    if not isinstance(data, str) or not data.strip():
        raise FeishuError(300307)
    if len(data) > max_chars:
        raise FeishuError(10002, f"invalid request parameter, ext=data is over {max_chars} characters")
    try:
        card = json.loads(data)
    except ValueError:
        raise FeishuError(200220, "Failed to generate card content, ext=data is not valid JSON") from None
    if not isinstance(card, dict) or not card:
        raise FeishuError(300307)
    if card.get("schema") != "2.0":
        raise FeishuError(300303)
    try:
        check_card(card)
    except FeishuError as exc:
        if exc.code == 230099:  # too many tables: the same answer as an IM send's
            raise
        raise FeishuError(200220, f"Failed to generate card content, ext={exc.msg}") from None
    _check_limits(card)
    return card


def _check_limits(card: dict[str, Any]) -> None:
    config = card.get("config")
    if isinstance(config, dict) and config.get("update_multi") is False:
        raise FeishuError(300302)
    elements = list(_elements(card))
    if len(elements) > ELEMENTS_MAX:
        raise FeishuError(300305)
    ids = [e["element_id"] for e in elements if "element_id" in e]
    bad = [i for i in ids if not isinstance(i, str) or not ELEMENT_ID.fullmatch(i)]
    if bad:
        raise FeishuError(10002, f"invalid request parameter, ext=element_id {bad[0]!r}: letters, digits and _, "
                                 "starting with a letter")
    if len(ids) != len(set(ids)):
        raise FeishuError(300301)
    size = len(json.dumps(card, ensure_ascii=False).encode())
    if size > CARD_MAX_BYTES:
        raise FeishuError(200860, f"Card content exceeds limit. ({size} bytes > {CARD_MAX_BYTES})")
    check_tables(card)  # streamed text can bring a card past five tables too


def _streaming(card: dict[str, Any]) -> bool:
    config = card.get("config")
    return isinstance(config, dict) and config.get("streaming_mode") is True


def _elements(card: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """Every component or element (a dict with a `tag`) of the body, nested ones included, in order."""
    stack: list[Any] = [card.get("body") or {}]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if "tag" in node:
                yield node
            stack.extend(reversed(list(node.values())))
        elif isinstance(node, list):
            stack.extend(reversed(node))


def card_text(card: dict[str, Any]) -> str:
    """The text a card's body shows: its markdown and plain_text contents, in order."""
    return "\n".join(str(e["content"]) for e in _elements(card)
                     if e.get("tag") in TEXT_TAGS and isinstance(e.get("content"), str))
