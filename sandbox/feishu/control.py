"""The emulator's unauthenticated /_sandbox/ control API, so other processes (CLI, bench) can drive it."""

from __future__ import annotations

import base64
from collections.abc import Callable
from datetime import datetime
from typing import Any

from flask import Flask, request

from sandbox.server import control_body, guarded

FAULT_OPTION_FIELDS = ("reset_seconds", "timeout_seconds", "gateway_status")
MESSAGE_FIELDS = (
    "message_id", "chat_id", "text", "sender_open_id", "thread_id", "root_id", "parent_id", "msg_type",
    "content", "chat_mode",
)


def parse_after(value: str | None) -> int | None:
    """`after=`: epoch milliseconds (or seconds) or an ISO-8601 timestamp → epoch milliseconds."""
    if not value:
        return None
    try:
        number = float(value)
    except ValueError:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    return int(number * 1000) if number < 1e11 else int(number)


# `sandbox.feishu.emulator.FeishuEmulator` is typed Any here: that module imports this one
# (no import cycles: tests/test_layout.py).
def register_control(app: Flask, emu: Any) -> None:
    def add_message() -> dict[str, Any]:
        body = control_body()
        fields = {k: body[k] for k in MESSAGE_FIELDS if k in body}
        return emu.add_message(fields.pop("message_id", None), fields.pop("chat_id"), **fields)

    def bot_messages() -> list[dict[str, Any]]:
        args = request.args
        after = parse_after(args.get("after"))
        chat_id, thread_id = args.get("chat_id") or None, args.get("thread_id") or None
        if args.get("parent_id"):  # indexed by the replied-to message
            items = [
                m for m in emu.replies_to(args["parent_id"])
                if chat_id in (None, m["chat_id"]) and thread_id in (None, m.get("thread_id"))
            ]
        else:
            items = emu.bot_messages(chat_id=chat_id, thread_id=thread_id)
        if after is not None:
            items = [m for m in items if int(m["create_time"]) > after]
        return items

    def add_forward() -> dict[str, Any]:
        body = control_body()
        return emu.add_forward(body.get("message_id"), body["chat_id"], list(body["children"]),
                               sender_open_id=body.get("sender_open_id", "ou_user"),
                               chat_mode=body.get("chat_mode", "group"), thread_id=body.get("thread_id"))

    def add_resource() -> dict[str, Any]:
        body = control_body()
        emu.add_resource(body["message_id"], body["file_key"], base64.b64decode(body["data_base64"]),
                         kind=body.get("kind", "image"),
                         content_type=body.get("content_type", "application/octet-stream"),
                         file_name=body.get("file_name"))
        return {"ok": True}

    def add_chat() -> dict[str, Any]:
        body = control_body()
        return emu.add_chat(
            body["chat_id"], body.get("chat_mode", "group"), body.get("group_message_type", "chat"),
            body.get("name", ""), members=body.get("members"), owner=body.get("owner", ""),
            chat_type=body.get("chat_type", "private"), bot_in=bool(body.get("bot_in", True)),
        )

    def set_members() -> dict[str, Any]:
        body = control_body()
        emu.set_members(body["chat_id"], [str(m) for m in body["members"]])
        return {"ok": True}

    def add_user() -> dict[str, Any]:
        body = control_body()
        return emu.add_user(body["open_id"], body["name"], en_name=body.get("en_name", ""),
                            email=body.get("email", ""))

    def add_table() -> list[dict[str, Any]]:
        body = control_body()
        fields = body.get("fields")  # [[name, type], …] or [{"field_name", "type"}, …]; absent = the default table
        specs = None if fields is None else [
            (f["field_name"], int(f["type"])) if isinstance(f, dict) else (str(f[0]), int(f[1])) for f in fields]
        return emu.add_table(body["app_token"], body["table_id"], specs)

    def table_args() -> tuple[str, str]:
        return request.args["app_token"], request.args["table_id"]

    def add_record() -> dict[str, Any]:
        body = control_body()
        return emu.add_record(body["app_token"], body["table_id"], dict(body["fields"]),
                              operator_open_id=body.get("operator_open_id", "ou_user"))

    def edit_record() -> dict[str, Any]:
        body = control_body()
        return emu.edit_record(body["app_token"], body["table_id"], body["record_id"], dict(body["fields"]),
                               operator_open_id=body.get("operator_open_id", "ou_user"))

    def write_time() -> dict[str, Any]:
        emu.set_bitable_write_time(float(control_body()["seconds"]))
        return {"ok": True}

    def faults() -> dict[str, Any]:
        body = control_body()
        if "kind" in body:
            options = {k: float(body[k]) for k in FAULT_OPTION_FIELDS if k in body}
            emu.inject_fault(body["op"], str(body["kind"]), times=int(body.get("times", 1)), **options)
            return {"ok": True}
        emu.inject(
            body["op"], code=int(body["code"]), http_status=int(body.get("http_status", 400)),
            times=int(body.get("times", 1)), headers=body.get("headers"), msg=body.get("msg", ""),
        )
        return {"ok": True}

    def delay() -> dict[str, Any]:
        body = control_body()
        emu.set_delay(body["op"], float(body["seconds"]))
        return {"ok": True}

    def reset() -> dict[str, Any]:
        emu.reset(keep_tokens=bool(control_body().get("keep_tokens")))
        return {"ok": True}

    def expire_tokens() -> dict[str, Any]:
        emu.expire_tokens()
        return {"ok": True}

    def set_profile() -> dict[str, Any]:
        body = control_body()
        options = {k: float(body[k]) for k in FAULT_OPTION_FIELDS if k in body}
        seed = body.get("seed")
        emu.set_profile(body["ops"], float(body["rate"]), body.get("mix"),
                        seed=None if seed is None else int(seed), **options)
        return emu.profiles

    def clear_profile() -> dict[str, Any]:
        ops = request.args.getlist("op")
        emu.clear_profile(ops or None)
        return emu.profiles

    def chat_qps() -> dict[str, Any]:
        qps = control_body().get("qps")
        emu.set_chat_qps(None if qps is None else int(qps))
        return {"qps": emu.chat_qps}

    def feed() -> dict[str, Any]:
        bot_only = request.args.get("bot_only", "1") not in ("0", "false")
        items, cursor = emu.feed(int(request.args.get("cursor", 0)), bot_only=bot_only)
        return {"items": items, "cursor": cursor}

    def sends() -> dict[str, Any]:
        return {"sends": emu.sends(request.args.get("chat_id") or None),
                "peak": emu.peak_sends(float(request.args.get("window", 1.0)))}

    def cardkit_limits() -> dict[str, Any]:
        body = control_body()  # per_card_qps, app_qps, streaming_timeout_s (a long turn without the wait)
        emu.set_cardkit_limits(**{k: body[k] for k in ("per_card_qps", "app_qps", "streaming_timeout_s") if k in body})
        return {"ok": True}

    def health() -> dict[str, Any]:
        return {"ok": True, "app_id": emu.app_id, "bot_open_id": emu.bot_open_id}

    routes: list[tuple[str, str, Callable[[], Any]]] = [
        ("/_sandbox/messages", "POST", add_message),
        ("/_sandbox/messages", "GET", lambda: emu.messages),
        ("/_sandbox/bot_messages", "GET", bot_messages),
        ("/_sandbox/chats", "POST", add_chat),
        ("/_sandbox/forwards", "POST", add_forward),
        ("/_sandbox/resources", "POST", add_resource),
        ("/_sandbox/faults", "POST", faults),
        ("/_sandbox/delay", "POST", delay),
        ("/_sandbox/reset", "POST", reset),
        ("/_sandbox/expire_tokens", "POST", expire_tokens),
        ("/_sandbox/requests", "GET", lambda: emu.requests_since(int(request.args.get("since", 0)))),
        ("/_sandbox/profile", "POST", set_profile),
        ("/_sandbox/profile", "GET", lambda: emu.profiles),
        ("/_sandbox/profile", "DELETE", clear_profile),
        ("/_sandbox/chat_qps", "POST", chat_qps),
        ("/_sandbox/stats", "GET", lambda: emu.stats),
        ("/_sandbox/sends", "GET", sends),
        ("/_sandbox/feed", "GET", feed),
        ("/_sandbox/health", "GET", health),
        ("/_sandbox/members", "POST", set_members),
        ("/_sandbox/users", "POST", add_user),
        ("/_sandbox/card_versions", "GET", lambda: emu.card_versions(request.args["message_id"])),
        ("/_sandbox/cardkit_limits", "POST", cardkit_limits),
        ("/_sandbox/render_defects", "GET", lambda: emu.render_defects()),
        ("/_sandbox/subscriptions", "GET", emu.subscriptions),
        ("/_sandbox/bitable/tables", "POST", add_table),
        ("/_sandbox/bitable/fields", "GET", lambda: emu.table_fields(*table_args())),
        ("/_sandbox/bitable/records", "GET", lambda: emu.records(*table_args())),
        ("/_sandbox/bitable/change_values", "GET", lambda: emu.record_change_values(
            *table_args(), request.args["record_id"])),
        ("/_sandbox/bitable/records", "POST", add_record),
        ("/_sandbox/bitable/records/edit", "POST", edit_record),
        ("/_sandbox/bitable/writes", "GET", lambda: emu.bitable_writes(*table_args())),
        ("/_sandbox/bitable/write_time", "POST", write_time),
        *_docs_routes(emu),
    ]
    for path, method, action in routes:
        endpoint = f"sandbox_{method}_{path}"
        app.add_url_rule(path, endpoint=endpoint, view_func=guarded(action), methods=[method])


ACCESS_FIELDS = ("token", "link_share", "members", "app_access", "owner")


def _docs_routes(emu: Any) -> list[tuple[str, str, Callable[[], Any]]]:
    """Documents as people make them (FeishuEmulator.add_doc & co.): the CLI's `doc` and `sheet` commands."""

    def access(body: dict[str, Any]) -> dict[str, Any]:
        return {k: body[k] for k in ACCESS_FIELDS if k in body}

    def add_doc() -> dict[str, Any]:
        body = control_body()
        return emu.doc_info(emu.add_doc(str(body["title"]), str(body.get("markdown", "")), **access(body)))

    def edit_doc() -> dict[str, Any]:
        body = control_body()
        return {"revision": emu.edit_doc(body["token"], str(body["markdown"]), editor=body.get("editor"))}

    def set_access() -> dict[str, Any]:
        body = control_body()
        return emu.set_doc_access(body["token"], **{k: body[k] for k in ("link_share", "members", "app_access")
                                                    if k in body})

    def add_node() -> dict[str, Any]:
        body = control_body()
        node = emu.add_wiki_node(body["obj_token"], body.get("obj_type", "docx"), node_token=body.get("node_token"),
                                 title=body.get("title"))
        return {"node_token": node, "link": emu.doc_link("wiki", node)}

    def add_sheet() -> dict[str, Any]:
        body = control_body()
        return emu.doc_info(emu.add_sheet(str(body["title"]), dict(body["sheets"]), **access(body)))

    def edit_sheet() -> dict[str, Any]:
        body = control_body()
        return {"revision": emu.edit_sheet(body["token"], str(body["sheet_title"]), list(body["rows"]),
                                           editor=body.get("editor"))}

    def add_file() -> dict[str, Any]:
        body = control_body()
        return emu.doc_info(emu.add_drive_file(str(body["name"]), str(body["type"]), int(body["size"]),
                                               **access(body)))

    def web_origin() -> dict[str, Any]:
        emu.set_web_origin(str(control_body()["origin"]))
        return {"ok": True}

    return [
        ("/_sandbox/docs", "POST", add_doc),
        ("/_sandbox/docs", "GET", lambda: emu.doc_info(request.args["token"])),
        ("/_sandbox/docs/edit", "POST", edit_doc),
        ("/_sandbox/docs/access", "POST", set_access),
        ("/_sandbox/wiki", "POST", add_node),
        ("/_sandbox/sheets", "POST", add_sheet),
        ("/_sandbox/sheets/edit", "POST", edit_sheet),
        ("/_sandbox/files", "POST", add_file),
        ("/_sandbox/web_origin", "POST", web_origin),
    ]
