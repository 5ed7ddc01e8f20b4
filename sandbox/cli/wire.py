"""What the sandbox CLI commands share: settings, the emulator's control API, signed event delivery, rendering."""

from __future__ import annotations

import json
import sys
from typing import Any
from urllib.parse import urlparse

import requests

from core.settings import Settings, load_settings
from feishu.cards import elements_of, footer_of
from sandbox.feishu.events import signed_request

HTTP_TIMEOUT = 10.0
# The table `python -m sandbox serve` creates; `BITABLE_APP_TOKEN=… BITABLE_TABLE_ID=… make run` turns items on.
SANDBOX_APP_TOKEN = "bascnSandbox0001"
SANDBOX_TABLE_ID = "tblSandbox0001"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1"})


def emulator_settings(command: str) -> Settings | None:
    """The service's settings, when its Feishu is the local emulator (sandbox mode or a loopback domain).

    Fake events must never be pushed while the service talks to the real Feishu.
    """
    settings = load_settings()
    if settings.sandbox or urlparse(settings.feishu_domain).hostname in LOOPBACK_HOSTS:
        return settings
    print(f"{command} needs the sandbox emulator; FEISHU_APP_ID is set (real Feishu).", file=sys.stderr)
    return None


def table_ids(settings: Settings) -> tuple[str, str]:
    """The service's table when it has one, else the sandbox's fixed one."""
    if settings.bitable_app_token and settings.bitable_table_id:
        return settings.bitable_app_token, settings.bitable_table_id
    return SANDBOX_APP_TOKEN, SANDBOX_TABLE_ID


class Emulator:
    """The Feishu emulator's /_sandbox/ control API (unauthenticated, loopback only)."""

    def __init__(self, base: str) -> None:
        self.base = base.rstrip("/")

    def get(self, path: str, **params: Any) -> Any:
        resp = requests.get(f"{self.base}/_sandbox/{path}", params=params, timeout=HTTP_TIMEOUT)
        return _answer(resp)

    def post(self, path: str, body: dict[str, Any]) -> Any:
        resp = requests.post(f"{self.base}/_sandbox/{path}", json=body, timeout=HTTP_TIMEOUT)
        return _answer(resp)

    def message(self, message_id: str) -> dict[str, Any] | None:
        return next((m for m in self.get("messages") if m["message_id"] == message_id), None)

    def thread_messages(self, thread_id: str) -> list[dict[str, Any]]:
        return [m for m in self.get("messages") if m.get("thread_id") == thread_id]


class ControlError(Exception):
    """The control API refused a request (its message says why)."""


def _answer(resp: requests.Response) -> Any:
    if resp.status_code != 200:
        raise ControlError(f"{resp.request.method} {resp.url} → {resp.status_code}: {resp.text[:300]}")
    return resp.json()


def bot_open_id(base: str, settings: Settings) -> str:
    """Ask the emulator who the bot is, as the service would; fall back to the emulator default."""
    creds = {"app_id": settings.app_id, "app_secret": settings.secret("feishu_app_secret")}
    try:
        token = requests.post(
            f"{base}/open-apis/auth/v3/tenant_access_token/internal", json=creds, timeout=HTTP_TIMEOUT
        ).json()["tenant_access_token"]
        auth = {"Authorization": f"Bearer {token}"}
        info = requests.get(f"{base}/open-apis/bot/v3/info", headers=auth, timeout=HTTP_TIMEOUT).json()
        return str(info["bot"]["open_id"])
    except (requests.RequestException, ValueError, KeyError):
        return "ou_bot"


def events_url(settings: Settings, url: str | None) -> str:
    return url or f"http://127.0.0.1:{settings.port}/feishu/events"


def deliver(settings: Settings, event: dict[str, Any], url_arg: str | None, what: str) -> int | None:
    """POST the event to the service and print the outcome; the HTTP status, or None when it did not arrive."""
    url = events_url(settings, url_arg)
    try:
        status = post_event(settings, event, url).status_code
    except requests.RequestException as exc:
        print(f"POST {url} failed: {exc}")
        return None
    print(f"POST {url} → HTTP {status} ({what})", flush=True)
    return status


def post_event(settings: Settings, event: dict[str, Any], url: str) -> requests.Response:
    """POST an event signed (and encrypted when a key is set) exactly as Feishu would."""
    key = settings.secret("feishu_encrypt_key")
    body, headers = signed_request(event, encrypt_key=key, encrypt=bool(key))
    return requests.post(url, data=body, headers=headers, timeout=HTTP_TIMEOUT)


def message_text(message: dict[str, Any]) -> str:
    """Readable text of a sent message: text as is, post flattened, anything else as raw JSON."""
    raw = message.get("body", {}).get("content", "")
    try:
        content = json.loads(raw)
    except ValueError:
        return raw
    if message.get("msg_type") == "text" and isinstance(content, dict):
        return str(content.get("text", ""))
    if message.get("msg_type") == "post" and isinstance(content, dict):
        post: dict[str, Any] = next(iter(content.values()), {})
        lines = [" ".join(str(el.get("text", "")) for el in para) for para in post.get("content", [])]
        return "\n".join(filter(None, [post.get("title", ""), *lines]))
    return raw


def card_lines(card: dict[str, Any]) -> list[str]:
    """A card JSON (2.0 or 1.0) as lines of text: title, markdown and div text, buttons (with their action)."""
    title = (card.get("header") or {}).get("title") or {}
    lines = [f"【{title.get('content', '')}】"] if title.get("content") else []
    for element in elements_of(card):
        tag = element.get("tag")
        if element.get("element_id") == "footer" or tag == "note":
            lines.append("— " + footer_of({"elements": [element]}))
        elif tag == "markdown":
            lines += str(element.get("content", "")).splitlines()
        elif tag == "div":
            lines.append(str((element.get("text") or {}).get("content", "")))
        elif tag == "button":
            action = str((element.get("value") or {}).get("action", "?")).partition(":")[2] or "?"
            lines.append(f"[{_plain(element.get('text'))} → {action}]")
    return lines


def card_footer(card: dict[str, Any]) -> str:
    return footer_of(card)


def _plain(node: Any) -> str:
    return str(node.get("content", "")) if isinstance(node, dict) else str(node or "")
