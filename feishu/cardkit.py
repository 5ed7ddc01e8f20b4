"""CardKit card entities for streaming answers: create one, stream an element's text, update it, change settings.

Every call goes through the app's FeishuApi (`_call`: token cache, retry of a rejected token, error mapping) and
serves the optional `streaming` capability: without `cardkit:card:write` (99991672) only streaming turns off,
and callers fall back to plain replies. Failures keep Feishu's code as a string (`exc.code`) so callers branch.

Sources (open.feishu.cn server docs, cardkit-v1; same tables on open.larksuite.com):
- card/create (POST /open-apis/cardkit/v1/cards), card-element/content (PUT …/cards/:card_id/elements/:element_id/
  content), card/update (PUT …/cards/:card_id), card/settings (PATCH …/cards/:card_id/settings);
  streaming-updates-openapi-overview (the flow, the 10 ops/s per card, the 10-minute streaming timeout).
- JSON 2.0 only; `update_multi` false is refused (300302); data ≤ 30 KB per card (200860); content 1..100,000
  characters; `sequence` an int32 ≥ 1, strictly increasing per card across all of these calls (300317);
  `uuid` 1..64 characters makes a retried call apply once. A card entity lives 14 days (200750).
- Streaming text needs `streaming_mode` on (300309 when off, 200850 when it closed by itself 10 minutes after it
  was last turned on: "流式更新模式将在距上次开启 10 分钟后自动关闭"; 200850's remedy, card-element/content 错误码:
  settings with streaming_mode true); a full update and settings work with streaming on or off; settings with
  {"config": {"streaming_mode": false}} ends streaming.
- The chat list shows config.summary; while streaming, an empty one shows Feishu's "[生成中...]", and a custom
  one survives the end of streaming ("关闭流式更新模式并不会改变开发者自定义的摘要文本", the overview's FAQ): so
  streaming cards send it empty (as lark_oapi's channel/card/builder.py does) and a finished card plain text.
- Card and element ops on a card in streaming mode do not count against the API's rate limit ("在流式更新模式下，
  开发者可调用卡片和组件接口对卡片持续进行全量更新、局部更新、文本流式更新，且不会触发接口的频率限制（QPS）",
  the overview's streaming_mode field); every op counts against the card's 10 a second ("对于单个卡片实体，使用
  卡片和组件级 OpenAPI 操作卡片的频率上限为 10 次/秒").
"""

from __future__ import annotations

import json
from typing import Any

from lark_oapi.api.cardkit.v1 import (
    Card,
    ContentCardElementRequest,
    ContentCardElementRequestBody,
    CreateCardRequest,
    CreateCardRequestBody,
    SettingsCardRequest,
    SettingsCardRequestBody,
    UpdateCardRequest,
    UpdateCardRequestBody,
)
from lark_oapi.channel.card import new_card

from core.errors import AdapterError, Permanent, Retryable
from feishu.cardmd import MARKDOWN_TABLES_MAX, plain_summary, split_tables
from feishu.client import FeishuApi

CAPABILITY = "streaming"
SCOPE = "cardkit:card:write"
# Error codes (each API's 错误码 table)
INVALID = "10002"  # a parameter is wrong (empty or too long content, bad sequence value)
NOT_FOUND = "200740"  # no such card entity
EXPIRED = "200750"  # the entity is more than 14 days old
UUID_CONFLICT = "200770"  # the uuid was used for another operation
INTERACTING = "200810"  # a user's card callback is being handled: try again after it
STREAM_TIMEOUT = "200850"  # streaming closed by itself (10 minutes after it was turned on)
TOO_LARGE = "200860"  # the card is over 30 KB
BAD_CARD = "200220"  # card content could not be generated (bad JSON)
DUPLICATE_ELEMENT = "300301"
UPDATE_MULTI_FALSE = "300302"
SCHEMA_1 = "300303"  # only schema 2.0
TOO_MANY_ELEMENTS = "300305"  # over 200 elements
STREAM_CLOSED = "300309"  # streaming_mode is off
ONLY_TEXT = "300310"  # content is only for plain_text and markdown elements
NOT_OWNER = "300311"  # another app created the card
SEQUENCE = "300317"  # sequence not strictly increasing
SERVER_ERROR = "300120"  # docs: make sure sequence increases, then retry later
RETRY_CODES = frozenset({INTERACTING, SERVER_ERROR})
# The entity cannot take text any more: finish the answer another way (a plain reply).
STREAM_OVER = frozenset({NOT_FOUND, EXPIRED, STREAM_TIMEOUT, STREAM_CLOSED, NOT_OWNER})
CONTENT_MAX_CHARS = 100_000
SEQUENCE_MAX = 2**31 - 1
PRINT_FREQUENCY_MS = 70  # the documented defaults: one step every 70 ms, one character a step
PRINT_STEP = 1
SUMMARY_STREAMING = ""  # empty: the chat list shows Feishu's own "[生成中...]" only while the card streams
OPS_PER_SECOND = 10  # card and element ops on one card entity
STREAMING_CONFIG = {"print_frequency_ms": {"default": PRINT_FREQUENCY_MS}, "print_step": {"default": PRINT_STEP},
                    "print_strategy": "fast"}


def stream_over(exc: BaseException) -> bool:
    """True when the card cannot be streamed into any more (closed, timed out, expired, gone)."""
    return isinstance(exc, AdapterError) and exc.code in STREAM_OVER


def streaming_card(text: str, *, element_id: str = "answer", streaming: bool = True,
                   summary: str | None = None) -> dict[str, Any]:
    """A JSON 2.0 card whose first markdown element is `element_id` (the one `stream_text` writes to).

    `streaming`: streaming_mode on, with the documented print defaults and an empty summary; off: the final
    card, whose summary (unless given) is the start of the text as plain text. The text is placed as given:
    defuse what people or the model wrote before (feishu.render.card_markdown), as for any reply. Text with
    more than four tables is spread over several elements (`element_id`, `element_id`_2, …): one element shows
    four at most.
    """
    shown = summary if summary is not None else (SUMMARY_STREAMING if streaming else plain_summary(text))
    config: dict[str, Any] = {"update_multi": True, "width_mode": "fill", "streaming_mode": streaming,
                              "summary": {"content": shown}}
    if streaming:
        config["streaming_config"] = STREAMING_CONFIG
    card = new_card().config(**config)
    for i, part in enumerate(split_tables(text, MARKDOWN_TABLES_MAX)):
        card = card.raw({"tag": "markdown", "element_id": element_id if i == 0 else f"{element_id}_{i + 1}",
                         "content": part})
    return card.to_dict()


class CardKit:
    """Card entities through the app's FeishuApi; every call serves the `streaming` capability."""

    def __init__(self, api: FeishuApi) -> None:
        self.api = api
        self.client = api.client

    def _call(self, fn: Any, req: Any) -> Any:
        try:
            return self.api._call(fn, req, CAPABILITY)
        except Permanent as exc:
            if exc.code in RETRY_CODES:
                raise Retryable(str(exc), source="feishu", code=exc.code) from exc
            raise

    def create(self, card: dict[str, Any]) -> str:
        """POST /cardkit/v1/cards → the card_id (send it with FeishuApi.reply_card_entity)."""
        body = CreateCardRequestBody.builder().type("card_json").data(json.dumps(card, ensure_ascii=False)).build()
        resp = self._call(self.client.cardkit.v1.card.create, CreateCardRequest.builder().request_body(body).build())
        card_id = getattr(resp.data, "card_id", None)
        if not card_id:
            raise Permanent("cardkit create returned no card_id", source="feishu", code="no_card_id")
        return str(card_id)

    def stream_text(self, card_id: str, element_id: str, content: str, *, sequence: int, uuid: str) -> None:
        """The element's whole text so far (1..100,000 characters); a prefix of the last one prints on."""
        _check_sequence(sequence)
        body = ContentCardElementRequestBody.builder().content(content).sequence(sequence).uuid(uuid).build()
        req = (ContentCardElementRequest.builder().card_id(card_id).element_id(element_id)
               .request_body(body).build())
        self._call(self.client.cardkit.v1.card_element.content, req)

    def update(self, card_id: str, card: dict[str, Any], *, sequence: int, uuid: str) -> None:
        """Replace the whole card (allowed with streaming on or off; its config.streaming_mode is the new state)."""
        _check_sequence(sequence)
        data = Card.builder().type("card_json").data(json.dumps(card, ensure_ascii=False)).build()
        body = UpdateCardRequestBody.builder().card(data).sequence(sequence).uuid(uuid).build()
        self._call(self.client.cardkit.v1.card.update,
                   UpdateCardRequest.builder().card_id(card_id).request_body(body).build())

    def settings(self, card_id: str, settings: dict[str, Any], *, sequence: int, uuid: str) -> None:
        """PATCH the card's `config` / `card_link`, e.g. {"config": {"streaming_mode": False, "summary": {…}}}."""
        _check_sequence(sequence)
        body = (SettingsCardRequestBody.builder().settings(json.dumps(settings, ensure_ascii=False))
                .sequence(sequence).uuid(uuid).build())
        self._call(self.client.cardkit.v1.card.settings,
                   SettingsCardRequest.builder().card_id(card_id).request_body(body).build())

    def reopen(self, card_id: str, *, sequence: int, uuid: str) -> None:
        """Turn streaming back on after it closed by itself (200850); its print settings as when it was made."""
        self.settings(card_id, {"config": {"streaming_mode": True, "streaming_config": STREAMING_CONFIG}},
                      sequence=sequence, uuid=uuid)

    def finish(self, card_id: str, summary: str, *, sequence: int, uuid: str) -> None:
        """End streaming and set what the chat list shows (settings: streaming_mode off, summary)."""
        self.settings(card_id, {"config": {"streaming_mode": False, "summary": {"content": summary}}},
                      sequence=sequence, uuid=uuid)


def _check_sequence(sequence: int) -> None:
    if isinstance(sequence, bool) or not isinstance(sequence, int) or not 1 <= sequence <= SEQUENCE_MAX:
        raise ValueError(f"sequence must be an int in 1..{SEQUENCE_MAX}, got {sequence!r}")
