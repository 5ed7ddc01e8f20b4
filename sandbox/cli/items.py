"""`python -m sandbox topic|reply-topic|click`: open a topic, follow up in it, click a card button, as a person."""

from __future__ import annotations

import argparse
import time
import uuid
from typing import Any

import requests

from core.settings import Settings
from feishu.cards import buttons_of
from sandbox.cli.wire import (
    ControlError,
    Emulator,
    bot_open_id,
    card_footer,
    card_lines,
    deliver,
    emulator_settings,
    events_url,
    message_text,
    post_event,
)
from sandbox.feishu.events import card_action_event, mention, message_event

POLL_SECONDS = 0.2
SETTLE_SECONDS = 1.5  # after the last change: a turn may post a text and then a card
FINAL_FOOTERS = ("完整分析", "分析失败")  # the first answer's last version: `topic` stops early once it shows


class Watch:
    """Prints the bot's messages in a topic (after a time) once each, and every new version of its cards."""

    def __init__(self, emu: Emulator, thread_id: str, after: str) -> None:
        self.emu, self.thread_id, self.after = emu, thread_id, after
        self.seen: set[str] = set()
        self.versions: dict[str, int] = {}
        self.footers: list[str] = []

    def poll(self) -> bool:
        """Print what is new; True when something was."""
        changed = False
        for msg in self.emu.get("bot_messages", thread_id=self.thread_id, after=self.after):
            mid = msg["message_id"]
            if msg["msg_type"] == "interactive":
                changed |= self.card(mid)
            elif mid not in self.seen:
                self.seen.add(mid)
                print(f"bot ({mid}): {message_text(msg)}", flush=True)
                changed = True
        return changed

    def card(self, mid: str) -> bool:
        """Print the card's versions not shown yet; True when there were any."""
        versions = self.emu.get("card_versions", message_id=mid)
        shown = self.versions.get(mid, 0)
        for number, card in enumerate(versions[shown:], start=shown + 1):
            print(f"bot card {mid} · v{number}:", flush=True)
            for line in card_lines(card):
                print(f"    {line}", flush=True)
            self.footers.append(card_footer(card))
        self.versions[mid] = len(versions)
        return len(versions) > shown

    def final(self) -> bool:
        return any(f.endswith(FINAL_FOOTERS) for f in self.footers)


def _watch(watch: Watch, wait: float, *, until_final: bool) -> None:
    """Poll until `wait` passes; stop earlier once quiet for SETTLE_SECONDS after what we waited for."""
    deadline = time.monotonic() + wait
    settled_at: float | None = None
    while time.monotonic() < deadline:
        if watch.poll():
            settled_at = None
        done = watch.final() if until_final else bool(watch.seen or watch.versions)
        if done and settled_at is None:
            settled_at = time.monotonic() + SETTLE_SECONDS
        if settled_at is not None and time.monotonic() >= settled_at:
            return
        time.sleep(POLL_SECONDS)


def _deliver_message(settings: Settings, args: argparse.Namespace, msg: dict[str, Any], text: str,
                     mentions: list[dict[str, Any]]) -> bool:
    event = message_event(
        chat_id=msg["chat_id"], text=text, chat_type="group", sender_open_id=args.user, mentions=mentions,
        thread_id=msg.get("thread_id"), root_id=msg.get("root_id"), parent_id=msg.get("parent_id"),
        message_id=msg["message_id"], create_time_ms=int(msg["create_time"]),
        token=settings.secret("feishu_verification_token"), app_id=settings.app_id,
    )
    what = f"message {msg['message_id']} in {msg['chat_id']}, topic {msg.get('thread_id')}"
    return deliver(settings, event, args.url, what) == 200


def _say_in_topic(args: argparse.Namespace, thread_id: str, chat_id: str, root_id: str | None) -> int:
    settings = emulator_settings(args.command)
    if settings is None:
        return 2
    emu = Emulator(settings.feishu_domain)
    text = f"@_user_1 {args.text}"  # in groups the bot only hears @mentions
    fields = {"chat_id": chat_id, "text": text, "sender_open_id": args.user, "thread_id": thread_id,
              "root_id": root_id, "parent_id": root_id, "chat_mode": "group"}
    try:
        msg = emu.post("messages", {k: v for k, v in fields.items() if v is not None})
    except (requests.RequestException, ControlError) as exc:
        print(f"cannot reach the Feishu emulator at {emu.base} (is `python -m sandbox serve` running?): {exc}")
        return 1
    if not _deliver_message(settings, args, msg, text, [mention(bot_open_id(emu.base, settings), "助手")]):
        return 1
    watch = Watch(emu, thread_id, msg["create_time"])
    _watch(watch, args.wait, until_final=root_id is None)
    if not (watch.seen or watch.versions):
        print(f"no bot message in the topic within {args.wait:g}s")
        return 1
    return 0


def topic(args: argparse.Namespace) -> int:
    thread_id = args.thread or "omt_" + uuid.uuid4().hex[:16]
    print(f"topic {thread_id} in {args.chat}", flush=True)
    return _say_in_topic(args, thread_id, args.chat, None)


def reply_topic(args: argparse.Namespace) -> int:
    settings = emulator_settings(args.command)
    if settings is None:
        return 2
    try:
        messages = Emulator(settings.feishu_domain).thread_messages(args.thread_id)
    except (requests.RequestException, ControlError) as exc:
        print(f"cannot reach the Feishu emulator: {exc}")
        return 1
    if not messages:
        print(f"no topic {args.thread_id} in the emulator (open one with `python -m sandbox topic`)")
        return 1
    root = messages[0]
    return _say_in_topic(args, args.thread_id, root["chat_id"], root["message_id"])


def _button_value(card: dict[str, Any], decision: str) -> dict[str, Any] | None:
    return next((value for _label, value in buttons_of(card) if value.get("action") == f"items:{decision}"), None)


def click(args: argparse.Namespace) -> int:
    settings = emulator_settings("click")
    if settings is None:
        return 2
    emu = Emulator(settings.feishu_domain)
    try:
        versions = emu.get("card_versions", message_id=args.card_message_id)
        message = emu.message(args.card_message_id)
    except (requests.RequestException, ControlError) as exc:
        print(f"cannot reach the Feishu emulator: {exc}")
        return 1
    value = _button_value(versions[-1], args.decision) if versions and message else None
    if value is None or message is None:
        print(f"no {args.decision} button on the latest version of card {args.card_message_id}")
        return 1
    event = card_action_event(args.user, value, message_id=args.card_message_id, chat_id=message["chat_id"],
                              token=settings.secret("feishu_verification_token"), app_id=settings.app_id)
    url = events_url(settings, args.url)
    try:
        resp = post_event(settings, event, url)
    except requests.RequestException as exc:
        print(f"POST {url} failed: {exc}")
        return 1
    toast = _toast(resp)
    print(f"POST {url} → HTTP {resp.status_code}; toast: {toast or resp.text[:200]}", flush=True)
    if resp.status_code != 200:
        return 1
    return _await_card_change(emu, args.card_message_id, len(versions), message.get("thread_id") or "", args.wait)


def _toast(resp: requests.Response) -> str:
    try:
        toast = resp.json().get("toast") or {}
    except ValueError:
        return ""
    return str(toast.get("content", "")) if isinstance(toast, dict) else ""


def _await_card_change(emu: Emulator, mid: str, known: int, thread_id: str, wait: float) -> int:
    """Print the card's next version, and any reply to the card (a refusal), as they appear."""
    watch = Watch(emu, thread_id, "0")
    watch.versions[mid] = known
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        for reply in emu.get("bot_messages", parent_id=mid):
            if reply["message_id"] not in watch.seen:
                watch.seen.add(reply["message_id"])
                print(f"bot ({reply['message_id']}): {message_text(reply)}", flush=True)
        if watch.card(mid) or watch.seen:
            return 0
        time.sleep(POLL_SECONDS)
    print(f"the card did not change within {wait:g}s")
    return 1


def add_commands(sub: Any) -> None:
    """Register topic, reply-topic and click on the `python -m sandbox` parser."""
    p = sub.add_parser("topic", help="open a new topic with an @bot message; print the bot's messages in it")
    p.add_argument("text", help="the topic's first message (the report)")
    p.add_argument("--chat", default="oc_sandbox_group", help="group chat_id")
    p.add_argument("--thread", default=None, help="thread_id for the new topic (default: a fresh omt_…)")
    p.set_defaults(func=topic)
    p = sub.add_parser("reply-topic", help="an @bot follow-up inside a topic; print the bot's answer")
    p.add_argument("thread_id", help="the topic's thread_id (omt_…)")
    p.add_argument("text", help="what the user says")
    p.set_defaults(func=reply_topic)
    p = sub.add_parser("click", help="click a card's approve/reject button; print the toast and the new card")
    p.add_argument("card_message_id", help="the card's message_id (om_…)")
    p.add_argument("decision", choices=("approve", "reject"))
    p.set_defaults(func=click)
    for name in ("topic", "reply-topic", "click"):
        p = sub.choices[name]
        p.add_argument("--as", dest="user", default="ou_sandbox_user", help="the person's open_id")
        p.add_argument("--url", default=None, help="webhook URL (default http://127.0.0.1:$PORT/feishu/events)")
        p.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the bot")

