"""Feishu IM rules the emulator enforces: error codes, content validation, size limits (feishu.md §3)."""

from __future__ import annotations

import base64
import json
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sandbox.faults import Fault

SEND_MSG_TYPES = frozenset({
    "text", "post", "interactive", "image", "file", "audio", "media", "sticker", "share_chat", "share_user",
    "system",
})
TEXT_LIMIT_BYTES = 150 * 1024
RICH_LIMIT_BYTES = 30 * 1024
UUID_MAX_CHARS = 50
UUID_WINDOW_SECONDS = 3600.0

MESSAGES = {
    -1: "bad gateway",
    10003: "invalid param: app_id",
    10014: "app secret invalid",
    99991201: "path not found",
    99991301: "request method not allowed",
    99991400: "request trigger frequency limit",
    99991661: "Missing access token for authorization. Please make a request with token attached.",
    99991663: "Invalid access token for authorization. Please make a request with token attached.",
    99992402: "field validation failed",
    200621: "parse card json err, please check whether the card json is correct",
    230001: "Your request contains an invalid request parameter.",
    230002: "Bot/User can NOT be out of the chat.",
    230019: "The topic does not exist.",
    230011: "The message was recalled.",
    230020: "This operation triggers the frequency limit.",
    230025: "The length of the message content reaches its limit.",
    230031: "The message is more than 14 days old and cannot be updated.",
    231003: "The message is not found, maybe not exist or deleted.",
    230071: "The chat does not support replying in a thread.",
    232009: "The chat has been dissolved.",
    232011: "Operator can NOT be out of the chat.",
    234001: "Invalid request param.",
    234003: "File not in message.",
    234037: "Downloaded file size exceeds limit.",
    234043: "Unsupported message type.",
    1254001: "WrongRequestBody",
    1254002: "Fail",
    1254011: "page_size invalid",
    1254015: "field type and value do not match",
    1254018: "InvalidFilter",
    1254037: "Invalid client token, make sure that it complies with the specification.",
    1254040: "BaseTokenNotFound",
    1254041: "TableIdNotFound",
    1254043: "RecordIdNotFound",
    1254045: "FieldNameNotFound",
    1254060: "TextFieldConvFail",
    1254061: "NumberFieldConvFail",
    1254062: "SingleSelectFieldConvFail",
    1254063: "MultiSelectFieldConvFail",
    1254064: "DatetimeFieldConvFail",
    1254065: "CheckboxFieldConvFail",
    1254066: "UserFieldConvFail",
    1254068: "URLFieldConvFail",
    1254072: "PhoneFieldConvFail",
    1254290: "TooManyRequest",
    1254291: "Write conflict",
    1254607: "Data not ready, please try again later",
    # documents (sandbox/documents/api.py names each table's source)
    131005: "not found",
    131006: "permission denied",
    1061002: "params error.",
    1061003: "not found.",
    1061004: "forbidden.",
    1063001: "Invalid parameter",
    1063002: "Permission denied",
    1310202: "Wrong Range",
    1310213: "Permission Fail",
    1310214: "SpreadSheet Not Found",
    1310215: "Sheet Id Not Found",
    1310221: "Response Too Large",
    1770001: "invalid param",
    1770002: "not found",
    1770022: "invalid page token",
    1770032: "forBidden",
    # CardKit (sandbox/feishu/cardkit.py names the pages)
    10002: "Your request contains an invalid request parameter.",
    200220: "Failed to generate card content",
    200740: "The card entity does not exist",
    200750: "The card entity has expired",
    200770: "UUID conflict",
    200810: "The card is in an ongoing interaction and cannot be updated",
    200850: "Card streaming timeout",
    200860: "Card content exceeds limit.",
    230099: "Failed to create card content.",
    300120: "Server Internal Error",
    300122: "Failed to update card configuration",
    300301: "Duplicate element_id in card component.",
    300302: "update_multi property is false",
    300303: "Only schema 2.0 is supported",
    300305: "The number of card components exceeds 200",
    300307: "The card DSL is empty",
    300309: "Card streaming closed",
    300310: "Only update text",
    300311: "The current application does not have permission to update/use this card",
    300312: "Unable to update element tag",
    300313: "Failed to update element properties",
    300317: "The sequence number for operating on the card did not increment consecutively",
}


class FeishuError(Exception):
    """An Open API failure: HTTP status plus the JSON `{code, msg}` body Feishu sends."""

    def __init__(
        self, code: int, msg: str = "", http_status: int = 400, headers: dict[str, str] | None = None
    ) -> None:
        self.code = code
        self.msg = msg or MESSAGES.get(code, "error")
        self.http_status = http_status
        self.headers = dict(headers or {})
        super().__init__(f"{code}: {self.msg}")

    def body(self) -> dict[str, Any]:
        return {"code": self.code, "msg": self.msg}


def error_body(code: int, msg: str = "") -> dict[str, Any]:
    """The JSON body for an injected fault; code 0 with a 5xx means a gateway failure (code -1)."""
    if code == 0:
        return {"code": -1, "msg": msg or MESSAGES[-1]}
    return {"code": code, "msg": msg or MESSAGES.get(code, "error")}


# Fault kinds for profiles and inject_fault. "_after" kinds apply the request first (the message is stored),
# then fail; "timeout" applies it and answers only after the client has given up. The bitable_* kinds answer
# HTTP 200 with Bitable's own codes (feishu.md §5.4): 1254290, 1254607, 1254002 and 1254291 (writes only).
FAULT_KINDS = (
    "rate_limit", "chat_limit", "token_invalid", "gateway", "gateway_after", "timeout", "timeout_before",
    "reset", "reset_after", "bitable_rate_limit", "bitable_not_ready", "bitable_fail", "bitable_conflict",
)
DEFAULT_MIX = {
    "rate_limit": 4.0, "chat_limit": 1.0, "token_invalid": 1.0, "gateway": 2.0, "timeout": 2.0,
    "bitable_rate_limit": 4.0, "bitable_fail": 1.0,
}
SEND_OPS = frozenset({"reply", "create"})
BITABLE_OPS = frozenset({"bitable_fields", "bitable_search", "bitable_batch_get", "bitable_create", "bitable_update"})
BITABLE_WRITE_OPS = frozenset({"bitable_create", "bitable_update"})
BITABLE_FAULT_CODES = {
    "bitable_rate_limit": 1254290, "bitable_not_ready": 1254607, "bitable_fail": 1254002, "bitable_conflict": 1254291,
}
FAULT_OPTIONS = {"reset_seconds": 1.0, "timeout_seconds": 11.0, "gateway_status": 502.0}


def fault_kinds_for(op: str, mix: Mapping[str, float] | None) -> dict[str, float]:
    """The mix to use for `op`: the default mix narrowed to what applies, or the given one checked."""
    if mix is None:
        return {k: w for k, w in DEFAULT_MIX.items() if _applies(op, k)}
    for kind in mix:
        if kind not in FAULT_KINDS:
            raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
        if not _applies(op, kind):
            raise ValueError(f"fault kind {kind!r} does not apply to op {op!r}")
    return dict(mix)


def _applies(op: str, kind: str) -> bool:
    if kind == "chat_limit":
        return op in SEND_OPS  # the per-chat anti-spam limit only answers sends
    if kind == "bitable_conflict":
        return op in BITABLE_WRITE_OPS
    if kind in BITABLE_FAULT_CODES:
        return op in BITABLE_OPS
    return not (kind == "token_invalid" and op == "token")


def fault_options(options: Mapping[str, Any]) -> dict[str, float]:
    unknown = set(options) - set(FAULT_OPTIONS)
    if unknown:
        raise ValueError(f"unknown fault options {sorted(unknown)}; expected {sorted(FAULT_OPTIONS)}")
    return {**FAULT_OPTIONS, **{k: float(v) for k, v in options.items()}}


def make_fault(kind: str, options: Mapping[str, float], times: int = 1) -> Fault:
    """The Fault for one kind, as Feishu would answer it (feishu.md §3.5)."""
    gateway = int(options["gateway_status"])
    wait = options["timeout_seconds"]
    if kind in BITABLE_FAULT_CODES:  # Bitable answers these with HTTP 200 and a non-zero code
        return Fault(200, error_body(BITABLE_FAULT_CODES[kind]), {}, times, kind)
    if kind == "rate_limit":
        reset = {"x-ogw-ratelimit-limit": "50", "x-ogw-ratelimit-reset": f"{options['reset_seconds']:g}"}
        return Fault(429, error_body(99991400), reset, times, kind)
    simple = {
        "chat_limit": Fault(400, error_body(230020), {}, times, kind),
        "token_invalid": Fault(400, error_body(99991663), {}, times, kind),
        "gateway": Fault(gateway, error_body(-1), {}, times, kind),
        "gateway_after": Fault(gateway, error_body(-1), {}, times, kind, after=True),
        "timeout": Fault(200, None, {}, times, kind, after=True, delay=wait),
        "timeout_before": Fault(504, error_body(-1, "gateway timeout"), {}, times, kind, delay=wait),
        "reset": Fault(0, None, {}, times, kind, drop=True),
        "reset_after": Fault(0, None, {}, times, kind, after=True, drop=True),
    }
    if kind not in simple:
        raise ValueError(f"unknown fault kind {kind!r}; expected one of {FAULT_KINDS}")
    return simple[kind]


def check_ops(ops: str | Iterable[str], known: Iterable[str]) -> list[str]:
    names = [ops] if isinstance(ops, str) else list(ops)
    allowed = tuple(known)
    for op in names:
        if op not in allowed:
            raise ValueError(f"unknown op {op!r}; expected one of {allowed}")
    return names


def _parse_object(content: Any, what: str) -> dict[str, Any]:
    if not isinstance(content, str):
        raise FeishuError(230001, f"invalid message content: {what} content must be a JSON string")
    try:
        parsed = json.loads(content)
    except ValueError:
        raise FeishuError(230001, f"invalid message content: {what} content is not valid JSON") from None
    if not isinstance(parsed, dict):
        raise FeishuError(230001, f"invalid message content: {what} content must be a JSON object")
    return parsed


POST_TAGS = {  # tag → the string fields it needs (feishu.md §3.2 / §2.3)
    "text": ("text",), "a": ("text", "href"), "at": ("user_id",), "img": ("image_key",), "media": ("file_key",),
    "emotion": ("emoji_type",), "hr": (), "code_block": ("text",), "md": ("text",),
}


def _check_post(parsed: dict[str, Any]) -> None:
    # The send format needs a locale wrapper ({"zh_cn": {...}}); the received format has none.
    locales = [v for v in parsed.values() if isinstance(v, dict) and isinstance(v.get("content"), list)]
    if not locales:
        raise FeishuError(230001, "invalid message content: post needs a locale wrapper such as zh_cn")
    for body in locales:
        for row in body["content"]:
            if not isinstance(row, list):
                raise FeishuError(230001, "invalid message content: post content is a list of paragraphs (lists)")
            for element in row:
                _check_post_element(element)


def _check_post_element(element: Any) -> None:
    tag = element.get("tag") if isinstance(element, dict) else None
    if tag not in POST_TAGS:
        raise FeishuError(230001, f"invalid message content: unknown post tag {tag!r}")
    for name in POST_TAGS[tag]:
        if not isinstance(element.get(name), str):
            raise FeishuError(230001, f"invalid message content: post tag {tag!r} needs a {name!r} string")


# The scopes each emulated operation accepts (any one of them), as the Open API reference lists them per API
# ("权限要求": im-v1/message/{reply,create,get-message-resource,list}, message-card/patch, …);
# an app without any of them gets 99991672 with the scopes named in the message, as Feishu answers.
READ_MESSAGES = ("im:message", "im:message:readonly", "im:message.history:readonly")
# Listing a group chat's or a topic's messages needs a read scope above AND this one (获取会话历史消息:
# "获取群聊消息 需先申请单聊场景的任一权限，此外应用还必须开启 获取群组中所有消息（im:message.group_msg）").
GROUP_HISTORY = ("im:message.group_msg",)
OP_SCOPES: dict[str, tuple[str, ...]] = {
    "reply": ("im:message:send_as_bot", "im:message", "im:message:send"),
    "create": ("im:message:send_as_bot", "im:message", "im:message:send"),
    "message_patch": ("im:message:send_as_bot", "im:message", "im:message:update"),
    "reaction_add": ("im:message.reactions:write_only", "im:message"),
    "reaction_remove": ("im:message.reactions:write_only", "im:message"),
    "reaction_list": ("im:message.reactions:read", "im:message"),
    "resource": READ_MESSAGES,
    "get": ("im:message:readonly", "im:message"),
    "list": READ_MESSAGES,
    "chat_members": ("im:chat.members:read", "im:chat:readonly", "im:chat"),
    # 判断用户或机器人是否在群里 (chat-members is_in_chat) and 搜索对用户或机器人可见的群列表 (chat/search)
    "chat_is_in": ("im:chat", "im:chat:readonly", "im:chat.members:read", "im:chat.group_info:readonly"),
    "chat_search": ("im:chat", "im:chat:readonly", "im:chat:read", "im:chat.group_info:readonly"),
    "chat": ("im:chat.group_info:readonly", "im:chat:readonly", "im:chat"),  # 获取群信息
    "drive_subscribe": ("bitable:app", "drive:drive"),
    # documents: each API reference's "权限要求" list (sandbox/documents/api.py names the pages)
    "doc_meta": ("docx:document:readonly", "docx:document"),
    "doc_blocks": ("docx:document:readonly", "docx:document"),
    "doc_children": ("docx:document:readonly", "docx:document"),
    "wiki_node": ("wiki:node:read", "wiki:wiki", "wiki:wiki:readonly"),
    "sheet_meta": ("sheets:spreadsheet:readonly", "sheets:spreadsheet", "drive:drive:readonly", "drive:drive"),
    "sheet_values": ("sheets:spreadsheet:readonly", "sheets:spreadsheet", "drive:drive:readonly", "drive:drive"),
    "perm_public": ("docs:permission.setting:read", "docs:doc", "docx:document", "drive:drive", "drive:drive:readonly",
                    "drive:file", "sheets:spreadsheet", "wiki:wiki", "bitable:bitable"),
    "perm_members": ("docs:permission.member:retrieve", "docs:doc", "drive:drive", "sheets:spreadsheet",
                     "wiki:wiki", "bitable:app", "bitable:bitable"),
    "drive_metas": ("drive:drive.metadata:readonly", "drive:drive"),
    "drive_download": ("drive:file:download", "drive:file:readonly", "drive:file", "drive:drive:readonly",
                       "drive:drive"),
    # CardKit card entities: 创建与更新卡片 (cardkit-v1 card/create, card-element/content, card/update, card/settings)
    "card_create": ("cardkit:card:write",),
    "card_content": ("cardkit:card:write",),
    "card_update": ("cardkit:card:write",),
    "card_settings": ("cardkit:card:write",),
    # 获取单个用户信息 (contact-v3/user/get): any one of these
    "contact_user": ("contact:contact.base:readonly", "contact:contact:access_as_app", "contact:contact:readonly",
                     "contact:contact:readonly_as_app"),
}
# What the emulated app asks for: every scope above plus the event scopes (receiving messages).
ALL_SCOPES = frozenset({s for scopes in OP_SCOPES.values() for s in scopes} | set(GROUP_HISTORY) | {
    "im:message.p2p_msg:readonly", "im:message.group_at_msg:readonly", "im:message.group_msg:readonly"})
OPTIONAL_SCOPES = frozenset({s for op, scopes in OP_SCOPES.items()
                             if op not in ("reply", "create", "message_patch") for s in scopes} | set(GROUP_HISTORY)
                            ) - {"im:message"}


def scope_error(op: str, denied: frozenset[str], accepted: tuple[str, ...] | None = None) -> FeishuError | None:
    """99991672 when every scope `op` accepts (or `accepted`) is denied to the app."""
    accepted = accepted or OP_SCOPES.get(op)
    if not accepted or not set(accepted) <= denied:
        return None
    listed = ", ".join(accepted)
    return FeishuError(99991672, f"Access denied. One of the following scopes is required: [{listed}]."
                                 f"应用尚未开通所需的应用身份权限：[{listed}]", http_status=400)


V1_ONLY_TAGS = {"note", "action"}  # JSON 2.0 dropped these (card-json-v2 breaking changes): a 2.0 card using them fails
# card-json-v2-components/content-components/table: "单张卡片最多支持放置五个表格组件"; a Markdown table in a markdown
# element renders as one, and Feishu refuses a card over the limit with 230099 "ErrCode: 11310; ErrMsg: card table
# number over limit" (seen in production: larksuite/openclaw-lark#46, HKUDS/nanobot#1382, sipeed/picoclaw#1727).
CARD_TABLES_MAX = 5
TABLE_LIMIT_MSG = "Failed to create card content, ext=ErrCode: 11310; ErrMsg: card table number over limit; " \
                  "ErrorValue: table; "
_FENCE_OPEN = re.compile(r"^\s*(`{3,}|~{3,})")
_DELIMITER_ROW = re.compile(r"^\s*\|?(\s*:?-+:?\s*\|)+\s*(:?-+:?\s*)?$")


def check_card(card: dict[str, Any]) -> None:
    """A raw card's structure: JSON 2.0 (`schema: "2.0"`) keeps its elements under `body.elements` and has no
    `note` or `action` module; anything else is a 1.0 card (top-level `elements`). Tables: five a card."""
    if card.get("schema") != "2.0":
        return
    body = card.get("body")
    elements = body.get("elements") if isinstance(body, dict) else None
    if not isinstance(elements, list) or "elements" in card:
        raise FeishuError(200621, MESSAGES[200621] + " (a 2.0 card keeps its elements in body.elements)")
    stack = list(elements)
    while stack:
        element = stack.pop()
        if not isinstance(element, dict) or element.get("tag") in V1_ONLY_TAGS:
            raise FeishuError(200621, MESSAGES[200621] + f" (tag {element!r:.60} is not a 2.0 component)")
        stack.extend(e for col in element.get("columns") or [] for e in col.get("elements") or [])
    check_tables(card)


def check_tables(card: dict[str, Any]) -> None:
    """230099 (11310) for a card showing more than five tables: table components and Markdown tables together."""
    stack: list[Any] = [card.get("body") or {}]
    tables = 0
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            tables += node.get("tag") == "table"
            if node.get("tag") == "markdown" and isinstance(node.get("content"), str):
                tables += count_tables(node["content"])
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
    if tables > CARD_TABLES_MAX:
        raise FeishuError(230099, TABLE_LIMIT_MSG)


def count_tables(md: str) -> int:
    """GFM tables in Markdown (a row with a pipe, then a delimiter row), fenced code left out."""
    fence, tables, previous = "", 0, ""
    for line in md.split("\n"):
        opened = _FENCE_OPEN.match(line)
        if opened and (not fence or opened.group(1)[0] == fence):
            fence = "" if fence else opened.group(1)[0]
        elif not fence and "|" in previous and "-" in line and _DELIMITER_ROW.match(line):
            tables += 1
        previous = "" if fence else line
    return tables


def validate_send(body: Any, raw_size: int) -> dict[str, Any]:
    """Check a create/reply body; returns it, or raises the FeishuError the platform would answer."""
    if not isinstance(body, dict):
        raise FeishuError(99992402, "field validation failed: body must be a JSON object")
    msg_type = body.get("msg_type")
    if msg_type not in SEND_MSG_TYPES:
        raise FeishuError(230001, f"invalid msg_type {msg_type!r}")
    parsed = _parse_object(body.get("content"), str(msg_type))
    if msg_type == "text" and not isinstance(parsed.get("text"), str):
        raise FeishuError(230001, 'invalid message content: text content needs a "text" string')
    if msg_type == "post":
        _check_post(parsed)
    if msg_type == "interactive" and "card_id" in parsed and "type" not in parsed:
        raise FeishuError(200621)
    if msg_type == "interactive":
        check_card(parsed)
    limit = TEXT_LIMIT_BYTES if msg_type == "text" else RICH_LIMIT_BYTES
    if msg_type in ("text", "post", "interactive") and raw_size > limit:
        raise FeishuError(230025, f"{MESSAGES[230025]} ({raw_size} bytes > {limit})")
    uuid = body.get("uuid")
    if uuid is not None and (not isinstance(uuid, str) or len(uuid) > UUID_MAX_CHARS):
        raise FeishuError(230001, f"uuid must be a string of at most {UUID_MAX_CHARS} characters")
    return body


def page_size(raw: str | None) -> int:
    """list's page_size: default 20, range 1..50."""
    if raw in (None, ""):
        return 20
    try:
        size = int(raw)
    except ValueError:
        raise FeishuError(99992402, "field validation failed: page_size must be an integer") from None
    if not 1 <= size <= 50:
        raise FeishuError(99992402, "field validation failed: page_size must be between 1 and 50")
    return size


def encode_page(offset: int, sort: str) -> str:
    return base64.urlsafe_b64encode(json.dumps([offset, sort]).encode()).decode()


def decode_page(token: str | None, sort: str) -> tuple[int, str]:
    if sort not in ("ByCreateTimeAsc", "ByCreateTimeDesc"):
        raise FeishuError(99992402, "field validation failed: sort_type")
    if not token:
        return 0, sort
    try:
        offset, first_sort = json.loads(base64.urlsafe_b64decode(token.encode()))
        return int(offset), str(first_sort)  # a page_token keeps the first request's sort order
    except (ValueError, TypeError):
        raise FeishuError(99992402, "field validation failed: page_token") from None


def time_filter(items: list[dict[str, Any]], start: str | None, end: str | None) -> list[dict[str, Any]]:
    """start_time/end_time are unix seconds (inclusive) while create_time is in milliseconds."""
    try:
        lo = int(start) * 1000 if start else 0
        hi = int(end) * 1000 + 999 if end else None
    except ValueError:
        raise FeishuError(99992402, "field validation failed: start_time/end_time") from None
    return [m for m in items if int(m["create_time"]) >= lo and (hi is None or int(m["create_time"]) <= hi)]


@dataclass(frozen=True)
class Resource:
    """A seeded message resource: what GET .../resources/:file_key?type=`kind` answers."""

    data: bytes
    kind: str = "image"  # image | file
    content_type: str = "application/octet-stream"
    file_name: str | None = None


def forward_item(spec: dict[str, Any], upper_id: str, chat_id: str, now_ms: str) -> dict[str, Any]:
    """One message inside a merge_forward bundle, as GET message lists it (mentions' id is a string there).

    spec: msg_type (text), text or content, sender_open_id, sender_type (user|app), create_time (ms),
    message_id, mentions [{key, id, name}], deleted, children (for a nested merge_forward).
    """
    msg_type = spec.get("msg_type", "text")
    content = spec.get("content")
    if content is None:
        content = json.dumps({"text": spec.get("text", "")} if msg_type == "text" else
                             {"content": "Merged and Forwarded Message"}, ensure_ascii=False)
    sender_type = spec.get("sender_type", "user")
    sender = {"id": spec.get("sender_open_id", "ou_forwarded"), "id_type": "open_id" if sender_type == "user"
              else "app_id", "sender_type": sender_type, "tenant_key": "tenant_sandbox"}
    created = str(spec.get("create_time") or now_ms)
    mentions = [{"key": m["key"], "id": m.get("id", ""), "id_type": "open_id", "name": m.get("name", ""),
                 "tenant_key": "tenant_sandbox"} for m in spec.get("mentions") or []]
    return {
        "message_id": spec.get("message_id") or "om_" + os.urandom(12).hex(),
        "msg_type": msg_type, "create_time": created, "update_time": created, "deleted": bool(spec.get("deleted")),
        "updated": False, "chat_id": spec.get("chat_id", chat_id), "sender": sender,
        "body": {"content": "" if spec.get("deleted") else content}, "mentions": mentions,
        "upper_message_id": upper_id,
    }
