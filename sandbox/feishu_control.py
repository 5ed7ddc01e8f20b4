"""The emulator's unauthenticated /_sandbox/ control API, so other processes (CLI, bench) can drive it."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from flask import Flask, Response, request

from sandbox.server import json_response, parse_json_body

if TYPE_CHECKING:
    from sandbox.feishu_emulator import FeishuEmulator

LOOPBACK = frozenset({"127.0.0.1", "::1", "localhost"})
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


def _body() -> dict[str, Any]:
    body = parse_json_body(request)
    if body is None:
        return {}
    if not isinstance(body, dict):
        raise ValueError("body must be a JSON object")
    return body


def _guarded(action: Callable[[], Any]) -> Callable[[], Response]:
    """Wrap a control action: loopback callers only; bad arguments → 400 with the reason."""

    def view() -> Response:
        if request.remote_addr not in LOOPBACK:
            return json_response({"code": 403, "msg": "the sandbox control API is loopback-only"}, 403)
        try:
            return json_response(action())
        except (ValueError, TypeError, KeyError) as exc:
            return json_response({"code": 400, "msg": f"bad request: {exc}"}, 400)

    view.__name__ = action.__name__
    return view


def register_control(app: Flask, emu: FeishuEmulator) -> None:
    def add_message() -> dict[str, Any]:
        body = _body()
        fields = {k: body[k] for k in MESSAGE_FIELDS if k in body}
        return emu.add_message(fields.pop("message_id", None), fields.pop("chat_id"), **fields)

    def bot_messages() -> list[dict[str, Any]]:
        args = request.args
        after = parse_after(args.get("after"))
        items = emu.bot_messages(chat_id=args.get("chat_id") or None, thread_id=args.get("thread_id") or None)
        if after is not None:
            items = [m for m in items if int(m["create_time"]) > after]
        if args.get("parent_id"):
            items = [m for m in items if m.get("parent_id") == args["parent_id"]]
        return items

    def add_chat() -> dict[str, Any]:
        body = _body()
        return emu.add_chat(
            body["chat_id"], body.get("chat_mode", "group"), body.get("group_message_type", "chat"),
            body.get("name", ""),
        )

    def faults() -> dict[str, Any]:
        body = _body()
        emu.inject(
            body["op"], code=int(body["code"]), http_status=int(body.get("http_status", 400)),
            times=int(body.get("times", 1)), headers=body.get("headers"), msg=body.get("msg", ""),
        )
        return {"ok": True}

    def delay() -> dict[str, Any]:
        body = _body()
        emu.set_delay(body["op"], float(body["seconds"]))
        return {"ok": True}

    def reset() -> dict[str, Any]:
        emu.reset(keep_tokens=bool(_body().get("keep_tokens")))
        return {"ok": True}

    def expire_tokens() -> dict[str, Any]:
        emu.expire_tokens()
        return {"ok": True}

    def health() -> dict[str, Any]:
        return {"ok": True, "app_id": emu.app_id, "bot_open_id": emu.bot_open_id}

    routes: list[tuple[str, str, Callable[[], Any]]] = [
        ("/_sandbox/messages", "POST", add_message),
        ("/_sandbox/messages", "GET", lambda: emu.messages),
        ("/_sandbox/bot_messages", "GET", bot_messages),
        ("/_sandbox/chats", "POST", add_chat),
        ("/_sandbox/faults", "POST", faults),
        ("/_sandbox/delay", "POST", delay),
        ("/_sandbox/reset", "POST", reset),
        ("/_sandbox/expire_tokens", "POST", expire_tokens),
        ("/_sandbox/requests", "GET", lambda: emu.requests),
        ("/_sandbox/health", "GET", health),
    ]
    for path, method, action in routes:
        endpoint = f"sandbox_{method}_{path}"
        app.add_url_rule(path, endpoint=endpoint, view_func=_guarded(action), methods=[method])
