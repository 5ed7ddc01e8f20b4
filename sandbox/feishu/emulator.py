"""A loopback Feishu Open API emulator speaking the real wire format, with fault injection and inspection."""

from __future__ import annotations

import copy
import json
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from flask import Flask, Response, request

from sandbox.bitable.items_api import ItemsApi, ok
from sandbox.bitable.tables import BitableStore
from sandbox.documents.api import DocsStore
from sandbox.documents.limits import DocLimits
from sandbox.faults import FAULT_FIELD, Fault, FaultBook
from sandbox.feishu.cardkit import CardKitStore
from sandbox.feishu.control import register_control
from sandbox.feishu.emulator_controls import OPS, CardKitControls, Controls, DocControls, Hook
from sandbox.feishu.oauth import OAuthStore, register_oauth
from sandbox.feishu.rules import ALL_SCOPES, GROUP_HISTORY, FeishuError, Resource, make_fault, scope_error
from sandbox.feishu.store import FeishuStore
from sandbox.feishu.ws import WsEndpoint, register_ws
from sandbox.server import (
    LoopbackServer,
    drop_connection,
    install_json_errors,
    json_response,
    parse_json_body,
)

__all__ = ["OPS", "FeishuEmulator"]
BITABLE = "/open-apis/bitable/v1/apps/<app_token>/tables/<table_id>"
SHEETS = "/open-apis/sheets/v2/spreadsheets/<token>"
API_QPM = 1000  # reply, create, PATCH and reactions: calls per minute per app, each API counted apart
MINUTE_CAPPED = frozenset({"reply", "create", "message_patch", "reaction_add", "reaction_remove"})
Handler = Callable[[dict[str, Any]], "dict[str, Any] | Response"]


class FeishuEmulator(Controls, DocControls, CardKitControls, ItemsApi, LoopbackServer):
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
        self.docs = DocsStore(self.store.lock, self._name_of, clock)
        self.doc_limits = DocLimits()  # the docx reads' and the download's own per-app limits
        self.cardkit = CardKitStore(self.store.lock, clock)
        self.store.entities = self.cardkit
        self._lock = threading.RLock()
        self._faults = FaultBook(make_fault)
        self._delays: dict[str, float] = {}
        self._hooks: dict[str, list[tuple[str, Hook]]] = {}
        self._requests: list[dict[str, Any]] = []
        self.denied_scopes: frozenset[str] = frozenset()  # deny_scopes(): a tenant that granted less
        self.api_qpm, self.minute_s = API_QPM, 60.0  # per-minute caps of the message APIs (set_api_qpm)
        self._minute: dict[str, deque[float]] = {}
        self.minute_rejections: dict[str, int] = {}
        self.ws = WsEndpoint(app_id, app_secret)  # the long-connection endpoint (sandbox/feishu/ws.py)
        self.oauth = OAuthStore(app_id, app_secret, self.store.person, clock)  # web sign-in (sandbox/feishu/oauth.py)
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
        self.docs.reset()
        self.doc_limits.reset()
        self.cardkit.reset()
        self._faults.clear()
        with self._lock:
            self._delays.clear()
            self._hooks.clear()
            self._requests.clear()
        self.store.chat_qps = None
        self.denied_scopes = frozenset()
        self.set_api_qpm(API_QPM)
        self.ws.reset()
        self.oauth.reset()

    def stop(self) -> None:
        self.ws.stop()
        super().stop()

    # -- long connection (feishu.md §1.9) -------------------------------------------------------------

    def ws_push(self, payload: dict[str, Any], *, frames: int = 1, to: str | None = None) -> str:
        """Deliver an event over the long connection to ONE connected client (split into `frames`)."""
        return self.ws.push(payload, frames=frames, to=to)

    def ws_acks(self) -> list[dict[str, Any]]:
        """Each client's answer frames: event_id, client, code (200 = handled), attempt."""
        return self.ws.acks()

    def ws_clients(self) -> list[str]:
        return self.ws.clients()

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
        members: list[str] | None = None, owner: str = "", *, chat_type: str = "private", bot_in: bool = True,
    ) -> dict[str, Any]:
        """Register a chat; `members` (open_ids) are what GET chat members lists, `owner` what GET chat names,
        `chat_type` public or private (a public one is found by chat search even without the bot), `bot_in`
        whether the bot is a member (set_bot_in)."""
        chat = self.store.add_chat(chat_id, chat_mode, group_message_type, name, owner, chat_type)
        if members is not None:
            self.store.set_members(chat_id, members)
        self.store.set_bot_in(chat_id, bot_in)
        return chat

    def set_bot_in(self, chat_id: str, present: bool) -> None:
        """The bot is added to (or removed from) a chat: out of it, sends and replies answer 230002, the members
        listing 232011, is_in_chat false."""
        self.store.set_bot_in(chat_id, present)

    def add_message(
        self, message_id: str | None, chat_id: str, text: str = "", sender_open_id: str = "ou_user",
        thread_id: str | None = None, root_id: str | None = None, parent_id: str | None = None,
        msg_type: str = "text", content: str | None = None, *, chat_mode: str = "group",
        mentions: list[dict[str, Any]] | None = None,
    ) -> dict[str, Any]:
        """Register a user message (auto-adding the chat as `chat_mode`) so the bot can reply to it.
        `mentions` as the event carries them; GET/list show them in their own shape."""
        if content is None:
            content = json.dumps({"text": text}, ensure_ascii=False)
        return self.store.add_user_message(
            message_id, chat_id, content=content, sender_open_id=sender_open_id, msg_type=msg_type,
            thread_id=thread_id, root_id=root_id, parent_id=parent_id, chat_mode=chat_mode, mentions=mentions,
        )

    def recall_message(self, message_id: str) -> None:
        """The sender recalls a message: GET shows it deleted, a reply to it fails with 230011."""
        self.store.recall(message_id)

    def dissolve_chat(self, chat_id: str) -> None:
        """The group is dissolved: sends and replies into it fail with 232009."""
        self.store.dissolve_chat(chat_id)

    def remove_topic(self, thread_id: str) -> None:
        """The topic is gone: replies inside it fail with 230019."""
        self.store.remove_topic(thread_id)

    def forbid_thread_replies(self, chat_id: str) -> None:
        """Replies with reply_in_thread=true into this chat fail with 230071."""
        self.store.forbid_thread_replies(chat_id)

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
            missing = scope_error(op, self.denied_scopes)
            if missing is not None:
                raise missing
            self._per_minute(op)
            self.doc_limits.check(op)
            fault = self._faults.take(op, record.pop(FAULT_FIELD, None))  # one bound to this request first
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

    def set_api_qpm(self, limit: int, window_s: float = 60.0) -> None:
        """The message APIs' per-minute cap (a shorter `window_s` lets a test see it without waiting a minute)."""
        with self._lock:
            self.api_qpm, self.minute_s = limit, window_s
            self._minute.clear()
            self.minute_rejections = {}
        with self.cardkit.lock:  # CardKit's tier: the same per-minute cap (its 50/s: set_cardkit_limits)
            self.cardkit.app_qpm, self.cardkit.minute_s = limit, window_s
            self.cardkit.app_calls.clear()

    def _per_minute(self, op: str) -> None:
        """Reply, create, PATCH and reactions: each at most `api_qpm` calls a minute (HTTP 429, 99991400)."""
        if op not in MINUTE_CAPPED:
            return
        with self._lock:
            now, calls = time.monotonic(), self._minute.setdefault(op, deque())
            while calls and now - calls[0] >= self.minute_s:
                calls.popleft()
            if len(calls) >= self.api_qpm:
                self.minute_rejections[op] = self.minute_rejections.get(op, 0) + 1
                reset = max(1, int(self.minute_s - (now - calls[0])) + 1)
                raise FeishuError(99991400, "request trigger frequency limit", http_status=429,
                                  headers={"x-ogw-ratelimit-limit": str(self.api_qpm),
                                           "x-ogw-ratelimit-reset": str(reset)})
            calls.append(now)

    def _routes(self, app: Flask) -> None:
        routes: list[tuple[str, str, str, Handler]] = [
            ("/open-apis/auth/v3/tenant_access_token/internal", "POST", "token", self._token),
            ("/open-apis/bot/v3/info", "GET", "bot_info", self._bot_info),
            ("/open-apis/application/v6/scopes", "GET", "scopes", self._scopes),
            ("/open-apis/im/v1/messages/<message_id>/reply", "POST", "reply", self._reply),
            ("/open-apis/im/v1/messages", "POST", "create", self._create),
            ("/open-apis/im/v1/messages/<message_id>", "GET", "get", self._get),
            ("/open-apis/im/v1/messages", "GET", "list", self._list),
            ("/open-apis/im/v1/chats/<chat_id>", "GET", "chat", self._chat),
            ("/open-apis/contact/v3/users/<user_id>", "GET", "contact_user", self._contact_user),
            ("/open-apis/im/v1/messages/<message_id>/resources/<file_key>", "GET", "resource", self._resource),
            ("/open-apis/im/v1/messages/<message_id>", "PATCH", "message_patch", self._patch),
            ("/open-apis/im/v1/chats/<chat_id>/members", "GET", "chat_members", self._members),
            ("/open-apis/im/v1/chats/<chat_id>/members/is_in_chat", "GET", "chat_is_in", self._is_in_chat),
            ("/open-apis/im/v1/chats/search", "GET", "chat_search", self._search_chats),
            ("/open-apis/im/v1/messages/<message_id>/reactions", "POST", "reaction_add", self._react),
            ("/open-apis/im/v1/messages/<message_id>/reactions/<reaction_id>", "DELETE", "reaction_remove",
             self._unreact),
            ("/open-apis/im/v1/messages/<message_id>/reactions", "GET", "reaction_list", self._reactions),
            ("/open-apis/drive/v1/files/<file_token>/subscribe", "POST", "drive_subscribe", self._subscribe),
            (f"{BITABLE}/fields", "GET", "bitable_fields", self._bitable_fields),
            (f"{BITABLE}/records/search", "POST", "bitable_search", self._bitable_search),
            (f"{BITABLE}/records/batch_get", "POST", "bitable_batch_get", self._bitable_batch_get),
            (f"{BITABLE}/records", "POST", "bitable_create", self._bitable_create),
            (f"{BITABLE}/records/<record_id>", "PUT", "bitable_update", self._bitable_update),
            ("/open-apis/docx/v1/documents/<document_id>", "GET", "doc_meta", self.docs.doc_meta),
            ("/open-apis/docx/v1/documents/<document_id>/blocks", "GET", "doc_blocks", self.docs.doc_blocks),
            ("/open-apis/docx/v1/documents/<document_id>/blocks/<block_id>/children", "GET", "doc_children",
             self.docs.doc_children),
            ("/open-apis/wiki/v2/spaces/get_node", "GET", "wiki_node", self.docs.wiki_node),
            (f"{SHEETS}/metainfo", "GET", "sheet_meta", self.docs.sheet_meta),
            (f"{SHEETS}/values/<path:range>", "GET", "sheet_values", self.docs.sheet_values),
            ("/open-apis/drive/v2/permissions/<token>/public", "GET", "perm_public", self.docs.perm_public),
            ("/open-apis/drive/v1/permissions/<token>/members", "GET", "perm_members", self.docs.perm_members),
            ("/open-apis/drive/v1/metas/batch_query", "POST", "drive_metas", self.docs.drive_metas),
            ("/open-apis/drive/v1/files/<file_token>/download", "GET", "drive_download", self.docs.download),
            ("/open-apis/cardkit/v1/cards", "POST", "card_create", _ok(self.cardkit.create)),
            ("/open-apis/cardkit/v1/cards/<card_id>/elements/<element_id>/content", "PUT", "card_content",
             _ok(self.cardkit.content)),
            ("/open-apis/cardkit/v1/cards/<card_id>", "PUT", "card_update", _ok(self.cardkit.update)),
            ("/open-apis/cardkit/v1/cards/<card_id>/settings", "PATCH", "card_settings", _ok(self.cardkit.settings)),
        ]
        for path, method, op, handler in routes:
            app.add_url_rule(path, endpoint=op, view_func=_bind(self._serve, op, handler), methods=[method])
        register_control(app, self)
        register_ws(app, self.ws)
        register_oauth(app, self.oauth)

    # -- Open API handlers (get the request record, return the JSON body or raise FeishuError) -----------

    def _name_of(self, kind: str, member_id: str) -> str:
        """A collaborator's name as the members list shows it (users and chats the emulator knows)."""
        if kind == "user":
            return self.store.person(member_id)["name"]
        return self.store.chat_name(member_id) if kind == "chat" else ""

    def _token(self, record: dict[str, Any]) -> dict[str, Any]:
        return self.store.issue_token(record["json"])

    def _bot_info(self, record: dict[str, Any]) -> dict[str, Any]:
        # Unlike most Open APIs the bot object is top-level, not under "data" (feishu.md §2.4).
        bot = {"activate_status": 2, "app_name": self.bot_name, "avatar_url": "", "ip_white_list": [],
               "open_id": self.bot_open_id}
        return {"code": 0, "msg": "ok", "bot": bot}

    def _scopes(self, record: dict[str, Any]) -> dict[str, Any]:
        """GET application/v6/scopes (application-v6/scope/list): grant_status 1 granted / 2 not (deny_scopes);
        lark-oapi 1.7.5's Scope also has `scope_type`: the tenant's grants, and user-identity grants listed beside
        them (granted here even where the tenant's is not: they never let the app's own calls through)."""
        scopes = [{"scope_name": s, "grant_status": 2 if s in self.denied_scopes else 1, "scope_type": "tenant"}
                  for s in sorted(ALL_SCOPES)]
        scopes += [{"scope_name": s, "grant_status": 1, "scope_type": "user"} for s in sorted(ALL_SCOPES)]
        return ok({"scopes": scopes})

    def _reply(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.reply(record["params"]["message_id"], record["json"], record["size"]))

    def _create(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.create(record["query"].get("receive_id_type"), record["json"], record["size"]))

    def _get(self, record: dict[str, Any]) -> dict[str, Any]:
        with_names = record["query"].get("with_sender_name") == "true"
        return ok(self.store.get(record["params"]["message_id"], with_sender_name=with_names))

    def _list(self, record: dict[str, Any]) -> dict[str, Any]:
        query = record["query"]
        with self.store.lock:
            mode = self.store.chats.get(query.get("container_id", ""), {}).get("chat_mode", "p2p")
        if query.get("container_id_type") == "thread" or mode != "p2p":
            missing = scope_error("list", self.denied_scopes, GROUP_HISTORY)  # a group's history: both grants
            if missing is not None:
                raise missing
        return ok(self.store.list(query))

    def _chat(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.chat(record["params"]["chat_id"]))

    def _is_in_chat(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.is_in_chat(record["params"]["chat_id"]))

    def _search_chats(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.search_chats(record["query"]))

    def _contact_user(self, record: dict[str, Any]) -> dict[str, Any]:
        """GET contact/v3/users/:user_id (contact-v3/user/get): `data.user` with open_id, name, en_name; a person the
        app's contact range does not cover (here: one never added with add_user) is refused with 41050."""
        kind = record["query"].get("user_id_type") or "open_id"
        if kind != "open_id":
            raise FeishuError(99992402, "field validation failed: user_id_type (the emulator knows open_id only)")
        user = self.store.users.get(record["params"]["user_id"])
        if user is None:
            raise FeishuError(41050, "no user authority error")
        return ok({"user": {"open_id": user["id"], "union_id": "on_" + user["id"][3:], "name": user["name"],
                            "en_name": user["en_name"], "email": user["email"]}})

    def _react(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.add_reaction(record["params"]["message_id"], record["json"]))

    def _unreact(self, record: dict[str, Any]) -> dict[str, Any]:
        params = record["params"]
        return ok(self.store.remove_reaction(params["message_id"], params["reaction_id"]))

    def _reactions(self, record: dict[str, Any]) -> dict[str, Any]:
        return ok(self.store.list_reactions(record["params"]["message_id"], record["query"]))

    def reactions(self, message_id: str | None = None) -> list[dict[str, Any]]:
        """Reactions ever added (to `message_id`, or all), in order, each with `added_at`/`removed_at` (epoch s)."""
        return self.store.reaction_log(message_id)

    def _resource(self, record: dict[str, Any]) -> Response:
        """The resource's bytes with its Content-Type (feishu.md §3.1; errors stay JSON)."""
        params = record["params"]
        found = self.store.resource(params["message_id"], params["file_key"], record["query"].get("type"))
        resp = Response(found.data, status=200, mimetype=found.content_type)
        if found.file_name:
            resp.headers["Content-Disposition"] = f"attachment; filename=\"{found.file_name}\""
        return resp


def _bind(serve: Callable[..., Response], op: str, handler: Handler) -> Callable[..., Response]:
    def view(**_: Any) -> Response:
        return serve(op, handler)

    return view



def _ok(handler: Callable[[dict[str, Any]], dict[str, Any]]) -> Handler:
    """A handler returning `data` → the full success body."""
    return lambda record: ok(handler(record))


def _render_http_error(status: int, message: str) -> tuple[dict[str, Any], int]:
    code = {404: 99991201, 405: 99991301}.get(status, -1)
    return {"code": code, "msg": message}, status
