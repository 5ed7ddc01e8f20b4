"""A loopback Feishu Open API emulator speaking the real wire format, with fault injection and inspection."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from typing import Any, TypeVar

from flask import Flask, Response, request

from sandbox.faults import Fault, FaultBook, FaultProfile
from sandbox.feishu_bitable import BitableStore
from sandbox.feishu_control import register_control
from sandbox.feishu_rules import (
    FeishuError,
    Resource,
    check_ops,
    error_body,
    fault_kinds_for,
    fault_options,
    make_fault,
)
from sandbox.feishu_store import FeishuStore
from sandbox.server import (
    LoopbackServer,
    drop_connection,
    install_json_errors,
    json_response,
    parse_json_body,
)

OPS = (
    "token", "bot_info", "reply", "create", "get", "list", "chat", "resource", "message_patch", "chat_members",
    "drive_subscribe", "bitable_fields", "bitable_search", "bitable_batch_get", "bitable_create", "bitable_update",
)
BITABLE = "/open-apis/bitable/v1/apps/<app_token>/tables/<table_id>"
T = TypeVar("T")
Hook = Callable[[dict[str, Any]], object]
Handler = Callable[[dict[str, Any]], "dict[str, Any] | Response"]


class FeishuEmulator(LoopbackServer):
    """Feishu IM + auth endpoints at the root path, state in memory, driven from Python or /_sandbox/."""

    def __init__(
        self, app_id: str = "cli_test", app_secret: str = "test-secret", bot_open_id: str = "ou_bot",
        bot_name: str = "助手", host: str = "127.0.0.1", port: int = 0, *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.app_id = app_id
        self.bot_open_id = bot_open_id
        self.bot_name = bot_name
        self.store = FeishuStore(app_id, app_secret, clock)
        self.bitable = BitableStore(self.store.lock, self.store.person, self.store.chat_name, self.sleep, clock)
        self._lock = threading.RLock()
        self._faults = FaultBook(make_fault)
        self._delays: dict[str, float] = {}
        self._hooks: dict[str, list[tuple[str, Hook]]] = {}
        self._requests: list[dict[str, Any]] = []
        app = Flask(f"feishu_emulator_{id(self)}")
        install_json_errors(app, _render_http_error)
        self._routes(app)
        super().__init__(app, host, port)

    # -- controls -----------------------------------------------------------------------------------

    def reset(self, *, keep_tokens: bool = False) -> None:
        """Forget messages, chats, tokens, faults, profiles, stats, delays, hooks and recorded requests.

        keep_tokens=True spares issued tokens, for long-lived clients whose cached token should survive.
        """
        self.store.reset(keep_tokens=keep_tokens)
        self.bitable.reset()
        self._faults.clear()
        with self._lock:
            self._delays.clear()
            self._hooks.clear()
            self._requests.clear()
        self.store.chat_qps = None

    def clear_faults(self) -> None:
        """Drop queued faults and profiles, keeping messages and tokens (an operator fixed the cause)."""
        self._faults.clear()

    def inject(
        self, op: str, *, code: int, http_status: int = 400, times: int = 1,
        headers: dict[str, str] | None = None, msg: str = "",
    ) -> None:
        """Make the next `times` calls of `op` fail with this JSON error (code 0 + 5xx → gateway error)."""
        _check_op(op)
        self._faults.add(op, Fault(http_status, error_body(code, msg), dict(headers or {}), times))

    def inject_fault(self, op: str, kind: str, *, times: int = 1, **options: float) -> None:
        """Make the next `times` calls of `op` fail with one fault kind (see feishu_rules.FAULT_KINDS).

        options: reset_seconds (x-ogw-ratelimit-reset), timeout_seconds (how long a timeout holds the
        response; set it past the client's timeout), gateway_status (5xx for gateway kinds).
        """
        _check_op(op)
        fault_kinds_for(op, {kind: 1.0})
        self._faults.add(op, make_fault(kind, fault_options(options), times))

    def set_profile(
        self, ops: str | Iterable[str], rate: float, mix: Mapping[str, float] | None = None, *,
        seed: int | None = None, **options: float,
    ) -> None:
        """Fail a random `rate` of each op's calls with a weighted `mix` of fault kinds.

        Each op draws from its own generator seeded with (seed, op), so a seed replays the same sequence
        of faults per op. Queued inject/inject_fault faults still come first. Options as inject_fault.
        """
        settings = fault_options(options)
        profiles = {
            op: FaultProfile(rate, fault_kinds_for(op, mix), None if seed is None else f"{seed}:{op}", **settings)
            for op in check_ops(ops, OPS)
        }
        for op, profile in profiles.items():
            self._faults.set_profile(op, profile)

    def clear_profile(self, ops: str | Iterable[str] | None = None) -> None:
        self._faults.clear_profiles(None if ops is None else check_ops(ops, OPS))

    @property
    def profiles(self) -> dict[str, dict[str, Any]]:
        return self._faults.profiles()

    def set_delay(self, op: str, seconds: float) -> None:
        _check_op(op)
        with self._lock:
            self._delays[op] = float(seconds)

    def on(self, op: str, callback: Hook, *, when: str = "after") -> None:
        """Call `callback(record)` on each `op` call.

        when="after": the effect is applied but the response is not sent yet (kill a worker "mid-reply");
        when="before": before delay, auth and handling. After-hooks also see "status" and "response";
        with an injected timeout or reset they run before the wait or the reset.
        """
        _check_op(op)
        if when not in ("before", "after"):
            raise ValueError("when must be 'before' or 'after'")
        with self._lock:
            self._hooks.setdefault(op, []).append((when, callback))

    def set_chat_qps(self, n: int | None) -> None:
        """Per-chat anti-spam limit (Feishu: 5/s) → 230020; None or 0 turns it off."""
        self.store.chat_qps = n or None

    @property
    def chat_qps(self) -> int | None:
        return self.store.chat_qps

    def expire_tokens(self) -> None:
        self.store.expire_tokens()

    def add_chat(
        self, chat_id: str, chat_mode: str = "group", group_message_type: str = "chat", name: str = "",
        members: list[str] | None = None,
    ) -> dict[str, Any]:
        """Register a chat; `members` (open_ids) are what GET chat members lists."""
        chat = self.store.add_chat(chat_id, chat_mode, group_message_type, name)
        if members is not None:
            self.store.set_members(chat_id, members)
        return chat

    def set_members(self, chat_id: str, open_ids: list[str]) -> None:
        """Replace a chat's people (auto-adding the chat); the bot is never listed, as in Feishu."""
        self.store.set_members(chat_id, open_ids)

    def add_user(self, open_id: str, name: str, *, en_name: str = "", email: str = "") -> dict[str, str]:
        """A directory entry: names in Bitable user cells, chat member lists and with_sender_name."""
        return self.store.add_user(open_id, name, en_name, email)

    # -- Bitable (acting as the Bitable UI: not API calls, never refused as write conflicts) -------------

    def add_table(
        self, app_token: str, table_id: str, fields: list[tuple[str, int]] | None = None
    ) -> list[dict[str, Any]]:
        """Create a table (and its app) on demand; fields=None → feishu_bitable.DEFAULT_FIELDS. Returns its fields."""
        table = self.bitable.add_table(app_token, table_id, fields)
        with self.store.lock:
            return copy.deepcopy(table.fields)

    def records(self, app_token: str, table_id: str) -> list[dict[str, Any]]:
        """Every record as {record_id, fields} with cells in the read format, in creation order."""
        with self.store.lock:
            table = _ui(lambda: self.bitable.table(app_token, table_id))
            return [self.bitable.view(table, r) for r in table.records.values()]

    def add_record(self, app_token: str, table_id: str, fields: dict[str, Any], *,
                   operator_open_id: str = "ou_user") -> dict[str, Any]:
        """A person adds a row in the UI (fields in the write format); returns {record_id, fields} as read."""
        return self._ui_write(app_token, table_id, None, fields, operator_open_id)

    def edit_record(self, app_token: str, table_id: str, record_id: str, fields: dict[str, Any], *,
                    operator_open_id: str = "ou_user") -> dict[str, Any]:
        """A person edits cells in the UI (partial, write format; None clears a cell); returns the record."""
        return self._ui_write(app_token, table_id, record_id, fields, operator_open_id)

    def _ui_write(self, app_token: str, table_id: str, record_id: str | None, fields: dict[str, Any],
                  operator: str) -> dict[str, Any]:
        with self.store.lock:
            table = _ui(lambda: self.bitable.table(app_token, table_id))
            if record_id is not None and record_id not in table.records:
                raise ValueError(f"1254043: RecordIdNotFound: {record_id}")
            cells = _ui(lambda: self.bitable.cells(table, fields))
            return self.bitable.view(table, self.bitable.apply(table, record_id, cells, operator))

    def record_change_values(self, app_token: str, table_id: str, record_id: str) -> list[dict[str, str]]:
        """A record's cells as drive.file.bitable_record_changed_v1 after_value lists them (field_id, JSON)."""
        with self.store.lock:
            table = _ui(lambda: self.bitable.table(app_token, table_id))
            values = self.bitable.read(table, table.records[record_id])
            ids = {f["field_name"]: f["field_id"] for f in table.fields}
            return [{"field_id": ids[name], "field_value": json.dumps(value, ensure_ascii=False)}
                    for name, value in values.items()]

    def bitable_writes(self, app_token: str, table_id: str) -> list[dict[str, Any]]:
        """Accepted API writes, in order: {op: create|update, record_id, fields (as sent), client_token, time}."""
        with self.store.lock:
            return copy.deepcopy(_ui(lambda: self.bitable.table(app_token, table_id)).writes)

    def set_bitable_write_time(self, seconds: float) -> None:
        """How long each accepted write keeps its table busy (a concurrent write meanwhile gets 1254291)."""
        with self.store.lock:
            self.bitable.write_time = max(float(seconds), 0.0)

    def subscriptions(self) -> list[dict[str, str]]:
        """drive/v1 file subscriptions: [{file_token, file_type}] in order (repeats recorded once)."""
        with self.store.lock:
            return copy.deepcopy(self.store.subscriptions)

    def card_versions(self, message_id: str) -> list[Any]:
        """A bot card's JSON as sent, then after each accepted PATCH ([] for other messages)."""
        return self.store.card_versions(message_id)

    def add_message(
        self, message_id: str | None, chat_id: str, text: str = "", sender_open_id: str = "ou_user",
        thread_id: str | None = None, root_id: str | None = None, parent_id: str | None = None,
        msg_type: str = "text", content: str | None = None, *, chat_mode: str = "group",
    ) -> dict[str, Any]:
        """Register a user message (auto-adding the chat as `chat_mode`) so the bot can reply to it."""
        if content is None:
            content = json.dumps({"text": text}, ensure_ascii=False)
        return self.store.add_user_message(
            message_id, chat_id, content=content, sender_open_id=sender_open_id, msg_type=msg_type,
            thread_id=thread_id, root_id=root_id, parent_id=parent_id, chat_mode=chat_mode,
        )

    def add_forward(
        self, message_id: str | None, chat_id: str, children: list[dict[str, Any]], *,
        sender_open_id: str = "ou_user", chat_mode: str = "group", thread_id: str | None = None,
    ) -> dict[str, Any]:
        """Register a merge_forward message and its bundle; GET message then answers it with its children.

        children: dicts with msg_type (default text), text or content (received format), sender_open_id,
        sender_name (answered with `with_sender_name=true`), sender_type, create_time (ms), message_id,
        mentions [{key, id, name}], deleted, and children for a nested merge_forward. Returns the bundle
        message plus "children" (the flat items as GET lists them).
        """
        return self.store.add_forward(message_id, chat_id, children, sender_open_id=sender_open_id,
                                      chat_mode=chat_mode, thread_id=thread_id)

    def add_resource(
        self, message_id: str, file_key: str, data: bytes, *, kind: str = "image",
        content_type: str = "application/octet-stream", file_name: str | None = None,
    ) -> None:
        """Seed the bytes GET /messages/:message_id/resources/:file_key?type=`kind` returns."""
        self.store.add_resource(message_id, file_key, Resource(data, kind, content_type, file_name))

    # -- inspection ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return copy.deepcopy(self._requests)

    @property
    def messages(self) -> list[dict[str, Any]]:
        with self.store.lock:
            return copy.deepcopy(self.store.messages)

    @property
    def token_requests(self) -> int:
        return self.store.token_requests

    @property
    def dedupe_hits(self) -> int:
        return self.store.dedupe_hits

    @property
    def stats(self) -> dict[str, Any]:
        """Calls per op, faults per op and kind, uuid dedupe hits, 230020 rejections, tokens and sends."""
        with self.store.lock:
            store = {
                "dedupe_hits": self.store.dedupe_hits,
                "chat_limit_rejections": dict(self.store.chat_limit_rejections),
                "token_requests": self.store.token_requests,
                "tokens_revoked": self.store.tokens_revoked,
                "messages": len(self.store.messages),
                "bot_messages": len(self.store.bot_sent),
            }
        return {**self._faults.counters.snapshot(), **store, "peak_sends_per_second": self.store.peak_sends(1.0)}

    def sends(self, chat_id: str | None = None) -> dict[str, list[float]]:
        """Per chat, the time.time() of every message the bot sent (dedupe hits excluded), in order."""
        return self.store.send_log(chat_id)

    def peak_sends(self, window: float = 1.0) -> dict[str, int]:
        """Per chat, the most bot sends within any `window` seconds: check pacing against Feishu's 5/s."""
        return self.store.peak_sends(window)

    def bot_messages(self, chat_id: str | None = None, thread_id: str | None = None) -> list[dict[str, Any]]:
        """Messages the bot sent, in creation order, optionally narrowed to a chat and/or topic."""
        return self.store.bot_messages(chat_id, thread_id)

    def replies_to(self, message_id: str) -> list[dict[str, Any]]:
        """The bot's replies to one message, in creation order."""
        return self.store.replies_to(message_id)

    def feed(self, cursor: int = 0, *, bot_only: bool = True) -> tuple[list[dict[str, Any]], int]:
        """Messages stored since `cursor` (0 = all) and the cursor for the next call: cheap polling."""
        return self.store.feed(cursor, bot_only)

    def requests_since(self, cursor: int = 0) -> list[dict[str, Any]]:
        """Recorded requests from position `cursor` on (the next cursor is cursor + len(result))."""
        with self._lock:
            return copy.deepcopy(self._requests[max(cursor, 0):])

    def describe(self) -> str:
        with self._lock:
            last = [f"{r['method']} {r['path']}" for r in self._requests[-5:]]
        with self.store.lock:
            counts = len(self.store.messages), len(self.store.bot_sent)
        return f"emulator: {counts[0]} messages ({counts[1]} from the bot); last requests: {last}"

    # -- request plumbing ---------------------------------------------------------------------------

    def _record(self, op: str) -> dict[str, Any]:
        record = {
            "op": op, "method": request.method, "path": request.path, "query": request.args.to_dict(),
            "headers": dict(request.headers), "json": parse_json_body(request), "time": time.time(),
            "params": dict(request.view_args or {}), "size": len(request.get_data(cache=True)),
        }
        with self._lock:
            self._requests.append(record)
        self._faults.counters.call(op)
        return copy.deepcopy(record)

    def _run_hooks(self, op: str, when: str, record: dict[str, Any]) -> None:
        with self._lock:
            hooks = [cb for w, cb in self._hooks.get(op, []) if w == when]
        for callback in hooks:
            callback(record)

    def _serve(self, op: str, handler: Handler) -> Response:
        record = self._record(op)
        self._run_hooks(op, "before", record)
        with self._lock:
            delay = self._delays.get(op, 0.0)
        self.sleep(delay)
        fault: Fault | None = None
        body: dict[str, Any] | Response = {}
        status, headers = 0, {}
        try:
            if op != "token":  # every Open API except the token endpoint wants a tenant token
                self.store.check_token(request.headers.get("Authorization"))
            fault = self._faults.take(op)
            if fault is None or fault.after:  # an "after" fault applies the request first
                body, status = handler(record), 200
        except FeishuError as exc:
            body, status, headers = exc.body(), exc.http_status, exc.headers
        if fault is not None and fault.kind == "token_invalid":
            self.store.revoke_token(request.headers.get("Authorization"))  # the holder must fetch a new one
        if fault is not None and fault.body is not None:
            body, status, headers = fault.body, fault.status, fault.headers
        shown = {"bytes": len(body.get_data())} if isinstance(body, Response) else copy.deepcopy(body)
        self._run_hooks(op, "after", {**record, "status": status, "response": shown})
        if fault is not None:
            self.sleep(fault.delay)  # past the client's timeout: it never sees this answer
            if fault.drop:
                drop_connection()
        return body if isinstance(body, Response) else json_response(body, status, headers)

    def _routes(self, app: Flask) -> None:
        routes: list[tuple[str, str, str, Handler]] = [
            ("/open-apis/auth/v3/tenant_access_token/internal", "POST", "token", self._token),
            ("/open-apis/bot/v3/info", "GET", "bot_info", self._bot_info),
            ("/open-apis/im/v1/messages/<message_id>/reply", "POST", "reply", self._reply),
            ("/open-apis/im/v1/messages", "POST", "create", self._create),
            ("/open-apis/im/v1/messages/<message_id>", "GET", "get", self._get),
            ("/open-apis/im/v1/messages", "GET", "list", self._list),
            ("/open-apis/im/v1/chats/<chat_id>", "GET", "chat", self._chat),
            ("/open-apis/im/v1/messages/<message_id>/resources/<file_key>", "GET", "resource", self._resource),
            ("/open-apis/im/v1/messages/<message_id>", "PATCH", "message_patch", self._patch),
            ("/open-apis/im/v1/chats/<chat_id>/members", "GET", "chat_members", self._members),
            ("/open-apis/drive/v1/files/<file_token>/subscribe", "POST", "drive_subscribe", self._subscribe),
            (f"{BITABLE}/fields", "GET", "bitable_fields", self._bitable_fields),
            (f"{BITABLE}/records/search", "POST", "bitable_search", self._bitable_search),
            (f"{BITABLE}/records/batch_get", "POST", "bitable_batch_get", self._bitable_batch_get),
            (f"{BITABLE}/records", "POST", "bitable_create", self._bitable_create),
            (f"{BITABLE}/records/<record_id>", "PUT", "bitable_update", self._bitable_update),
        ]
        for path, method, op, handler in routes:
            app.add_url_rule(path, endpoint=op, view_func=_bind(self._serve, op, handler), methods=[method])
        register_control(app, self)

    # -- Open API handlers (get the request record, return the JSON body or raise FeishuError) -----------

    def _token(self, record: dict[str, Any]) -> dict[str, Any]:
        return self.store.issue_token(record["json"])

    def _bot_info(self, record: dict[str, Any]) -> dict[str, Any]:
        # Unlike most Open APIs the bot object is top-level, not under "data" (feishu.md §2.4).
        bot = {"activate_status": 2, "app_name": self.bot_name, "avatar_url": "", "ip_white_list": [],
               "open_id": self.bot_open_id}
        return {"code": 0, "msg": "ok", "bot": bot}

    def _reply(self, record: dict[str, Any]) -> dict[str, Any]:
        return _ok(self.store.reply(record["params"]["message_id"], record["json"], record["size"]))

    def _create(self, record: dict[str, Any]) -> dict[str, Any]:
        return _ok(self.store.create(record["query"].get("receive_id_type"), record["json"], record["size"]))

    def _get(self, record: dict[str, Any]) -> dict[str, Any]:
        with_names = record["query"].get("with_sender_name") == "true"
        return _ok(self.store.get(record["params"]["message_id"], with_sender_name=with_names))

    def _list(self, record: dict[str, Any]) -> dict[str, Any]:
        return _ok(self.store.list(record["query"]))

    def _chat(self, record: dict[str, Any]) -> dict[str, Any]:
        return _ok(self.store.chat(record["params"]["chat_id"]))

    def _patch(self, record: dict[str, Any]) -> dict[str, Any]:
        self.store.patch(record["params"]["message_id"], record["json"], record["size"])
        return _ok({})

    def _members(self, record: dict[str, Any]) -> dict[str, Any]:
        return _ok(self.store.chat_members(record["params"]["chat_id"], record["query"]))

    def _subscribe(self, record: dict[str, Any]) -> dict[str, Any]:
        self.store.subscribe(record["params"]["file_token"], record["query"].get("file_type"))
        return _ok({})

    def _bitable_fields(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return _ok(self.bitable.list_fields(p["app_token"], p["table_id"], record["query"]))

    def _bitable_search(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return _ok(self.bitable.search(p["app_token"], p["table_id"], record["query"], record["json"]))

    def _bitable_batch_get(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return _ok(self.bitable.batch_get(p["app_token"], p["table_id"], record["json"]))

    def _bitable_create(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return _ok(self.bitable.create(p["app_token"], p["table_id"], record["query"], record["json"]))

    def _bitable_update(self, record: dict[str, Any]) -> dict[str, Any]:
        p = record["params"]
        return _ok(self.bitable.update(p["app_token"], p["table_id"], p["record_id"], record["json"]))

    def _resource(self, record: dict[str, Any]) -> Response:
        """The resource's bytes with its Content-Type (feishu.md §3.1; errors stay JSON)."""
        params = record["params"]
        found = self.store.resource(params["message_id"], params["file_key"], record["query"].get("type"))
        resp = Response(found.data, status=200, mimetype=found.content_type)
        if found.file_name:
            resp.headers["Content-Disposition"] = f"attachment; filename=\"{found.file_name}\""
        return resp


def _ok(data: dict[str, Any]) -> dict[str, Any]:
    return {"code": 0, "msg": "success", "data": data}


def _bind(serve: Callable[..., Response], op: str, handler: Handler) -> Callable[..., Response]:
    def view(**_: Any) -> Response:
        return serve(op, handler)

    return view


def _ui(action: Callable[[], T]) -> T:
    """Python/control API calls report Feishu refusals as ValueError (the control API answers them 400)."""
    try:
        return action()
    except FeishuError as exc:
        raise ValueError(str(exc)) from None


def _check_op(op: str) -> None:
    check_ops(op, OPS)


def _render_http_error(status: int, message: str) -> tuple[dict[str, Any], int]:
    code = {404: 99991201, 405: 99991301}.get(status, -1)
    return {"code": code, "msg": message}, status
