"""`python -m sandbox serve|say|…`: run the local emulators, or talk to the running bot as a Feishu user."""

from __future__ import annotations

import argparse
import os
import re
import signal
import sys
import time
from typing import Any

import requests

from core.settings import SANDBOX_CONSOLE_ADMIN, Settings, load_settings
from feishu.render import plain_of
from sandbox.claude.standin import ClaudeStandin
from sandbox.cli import clock as cli_clock
from sandbox.cli import docs as cli_docs
from sandbox.cli import items as cli_items
from sandbox.cli import memory as cli_memory
from sandbox.cli import records as cli_records
from sandbox.cli.wire import (
    HTTP_TIMEOUT,
    SANDBOX_APP_TOKEN,
    SANDBOX_TABLE_ID,
    bot_open_id,
    deliver,
    emulator_settings,
    message_text,
    table_ids,
)
from sandbox.feishu.emulator import FeishuEmulator
from sandbox.feishu.events import mention, message_event

SANDBOX_USERS = {"ou_sandbox_user": "沙盒用户", "ou_sandbox_owner": "沙盒负责人", SANDBOX_CONSOLE_ADMIN: "沙盒运维"}
SANDBOX_CHATS = {"oc_sandbox_group": "沙盒群", "oc_sandbox_ops": "运维群"}
SETTLE_SECONDS = 1.0  # after the first reply, wait this long for further chunks of a long answer


class _Stop(Exception):
    """Raised by the signal handler to unwind the main thread's idle loop."""


def _raise_stop(signum: int, _frame: object) -> None:
    signal.signal(signum, signal.SIG_DFL)  # a second signal during cleanup ends the process outright
    raise _Stop


def _wait_for_signal() -> None:
    """Block until SIGTERM/SIGINT; honcho stops every process when one exits, so never exit early.

    The handler raises rather than setting a threading.Event: Event.set() inside a handler can deadlock
    on the Condition lock the interrupted Event.wait() holds.
    """
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _raise_stop)
    try:
        while True:
            time.sleep(3600)
    except _Stop:
        return


def _feature_standins(settings: Any) -> list[Any]:
    """The offline-model behaviour the App's features declare (`Feature.standin`), asked before the stand-in's own."""
    from turn.registry import load_app

    return [f.standin for f in load_app(settings).features if f.standin is not None]


def serve(_: argparse.Namespace) -> int:
    settings = load_settings()
    if not settings.sandbox:
        print("sandbox: FEISHU_APP_ID is set, so the real Feishu is used; emulators not started.", flush=True)
        _wait_for_signal()
        return 0
    feishu = FeishuEmulator(
        app_id=settings.app_id, app_secret=settings.secret("feishu_app_secret"),
        port=settings.sandbox_feishu_port,
    )
    claude = ClaudeStandin(port=settings.sandbox_model_port)
    for standin in _feature_standins(settings):
        claude.add_responder(standin)
    _seed_items(feishu, settings)  # before it listens: the sweeper's table check never sees a missing table
    feishu.set_web_origin(settings.feishu_web_origin)  # document links look like the tenant's
    feishu.start()  # a busy port makes werkzeug print the reason and exit(1)
    claude.start()
    print(f"sandbox: Feishu emulator at {feishu.url} (app_id {settings.app_id}, bot {feishu.bot_open_id})")
    print(f"sandbox: Claude stand-in at {claude.url}")
    python = os.path.relpath(sys.executable) if sys.executable.startswith(os.getcwd()) else sys.executable
    print(f'sandbox: try  {python} -m sandbox say "你好"   (or --group, --thread omt_demo)', flush=True)
    _print_items_hint(settings, python)
    print(f'sandbox: documents: {python} -m sandbox doc new "标题" "# 正文"  (paste the link it prints into say)',
          flush=True)
    print(f'sandbox: delivery: after a --group answer, {python} -m sandbox say --group "把结论同步到运维群"  (the card '
          "lands in 运维群, oc_sandbox_ops)", flush=True)
    print("sandbox: operator console: the web line 'console: http://…/console/' — sign in with Feishu as "
          f"{SANDBOX_CONSOLE_ADMIN} on the emulator's authorize page", flush=True)
    try:
        _wait_for_signal()
    finally:
        feishu.stop()
        claude.stop()
    return 0


def _seed_items(feishu: FeishuEmulator, settings: Settings) -> None:
    """The sandbox table (fixed ids, and the configured ones if they differ), named sandbox users, and the group
    `say --group` talks in beside a second one to deliver results into (`把结论同步到运维群`)."""
    for app, table in {(SANDBOX_APP_TOKEN, SANDBOX_TABLE_ID), table_ids(settings)}:
        feishu.add_table(app, table)
    for open_id, name in SANDBOX_USERS.items():
        feishu.add_user(open_id, name)
    for chat_id, name in SANDBOX_CHATS.items():
        feishu.add_chat(chat_id, name=name, members=list(SANDBOX_USERS))


def _print_items_hint(settings: Settings, python: str) -> None:
    app, table = table_ids(settings)
    if not settings.items_enabled:
        print(f"sandbox: items are off; try them with  BITABLE_APP_TOKEN={SANDBOX_APP_TOKEN} "
              f"BITABLE_TABLE_ID={SANDBOX_TABLE_ID} make run", flush=True)
        return
    print(f"sandbox: items on, Bitable table {app}/{table}; try  {python} -m sandbox topic \"报表导出一直是空的\"  "
          f"(then reply-topic, click, records, edit-record)", flush=True)


def _register(base: str, args: argparse.Namespace, chat_id: str, text: str) -> dict[str, Any]:
    fields = {
        "chat_id": chat_id, "text": text, "sender_open_id": args.user, "thread_id": args.thread,
        "chat_mode": "group" if args.group else "p2p",
    }
    resp = requests.post(f"{base}/_sandbox/messages", json=fields, timeout=HTTP_TIMEOUT)
    resp.raise_for_status()
    return dict(resp.json())


def _replies(base: str, message: dict[str, Any]) -> list[dict[str, Any]]:
    params = {"chat_id": message["chat_id"], "after": message["create_time"]}
    items = requests.get(f"{base}/_sandbox/bot_messages", params=params, timeout=HTTP_TIMEOUT).json()
    # A reply either answers this message or (p2p via create) stands alone in the chat.
    return [m for m in items if m.get("parent_id") in (None, "", message["message_id"])]


def _await_replies(base: str, message: dict[str, Any], wait: float,
                   watch: _Reactions | None = None) -> list[dict[str, Any]]:
    deadline = time.monotonic() + wait
    found: list[dict[str, Any]] = []
    settled_at = None
    while time.monotonic() < deadline:
        if watch is not None:
            watch.poll()
        current = _replies(base, message)
        if len(current) > len(found):
            found, settled_at = current, time.monotonic() + SETTLE_SECONDS
        if settled_at is not None and time.monotonic() >= settled_at:
            break
        time.sleep(0.2)
    if watch is not None:
        watch.poll()
    return found


class _Reactions:
    """Prints the bot's reactions on one message as they come and go (GET …/reactions, as a client would)."""

    def __init__(self, base: str, settings: Settings, message_id: str) -> None:
        creds = {"app_id": settings.app_id, "app_secret": settings.secret("feishu_app_secret")}
        token = requests.post(f"{base}/open-apis/auth/v3/tenant_access_token/internal", json=creds,
                              timeout=HTTP_TIMEOUT).json().get("tenant_access_token", "")
        self.url = f"{base}/open-apis/im/v1/messages/{message_id}/reactions"
        self.auth = {"Authorization": f"Bearer {token}"}
        self.shown: dict[str, str] = {}

    def poll(self) -> None:
        try:
            items = requests.get(self.url, headers=self.auth, timeout=HTTP_TIMEOUT).json()["data"]["items"]
        except (requests.RequestException, ValueError, KeyError, TypeError):
            return
        now = {i["reaction_id"]: i["reaction_type"]["emoji_type"] for i in items}
        for rid, emoji in now.items():
            if rid not in self.shown:
                print(f"  [{REACTION_LABELS.get(emoji, emoji)} on your message]", flush=True)
        for rid, emoji in self.shown.items():
            if rid not in now:
                print(f"  [{REACTION_LABELS.get(emoji, emoji)} removed]", flush=True)
        self.shown = now


REACTION_LABELS = {"OnIt": "⏳ OnIt (working)", "CrossMark": "❌ CrossMark (failed)"}
_TERM = re.compile(r"\*\*(.+?)\*\*|\[([^\]\n]+)\]\(([^)\s]+)\)|<at (?:user_id=\"|id=)([\w-]+)\"?>([^<]*)</at>")


def shown(message: dict[str, Any]) -> str:
    """A reply as Feishu would show it, for a terminal: Markdown applied (headings, bold, links, lists, code)."""
    kind = message.get("msg_type", "")
    if kind not in ("post", "interactive"):
        return message_text(message)
    text = plain_of(kind, message.get("body", {}).get("content", "{}"))
    out, in_code = [], False
    for line in text.replace("\u200b", "").split("\n"):
        if line.lstrip().startswith(("```", "~~~")):
            in_code = not in_code
            out.append("  ┌──" if in_code else "  └──")
            continue
        out.append("  │ " + line if in_code else _styled(line))
    return f"[{kind}]\n" + "\n".join(out)


def _styled(line: str) -> str:
    bold, plain = ("\033[1m", "\033[0m") if sys.stdout.isatty() else ("", "")
    heading = re.match(r"^(#{1,6})\s+(.*)", line)
    if heading:
        return f"{bold}{heading.group(2)}{plain}" + ("\n" + "═" * 20 if len(heading.group(1)) == 1 else "")
    line = re.sub(r"^(\s*)[-*+]\s+", r"\1• ", line)

    def one(m: re.Match[str]) -> str:
        if m.group(1) is not None:
            return f"{bold}{m.group(1)}{plain}"
        if m.group(2) is not None:
            return f"{m.group(2)} <{m.group(3)}>"
        return f"@{m.group(5) or m.group(4)}"

    return _TERM.sub(one, line)


def say(args: argparse.Namespace) -> int:
    settings = emulator_settings("say")
    if settings is None:
        return 2
    base = settings.feishu_domain
    chat_id = args.chat or ("oc_sandbox_group" if args.group else "oc_sandbox_p2p")
    text, mentions = args.text, []
    if args.group:  # in groups the bot only hears @mentions
        text, mentions = f"@_user_1 {args.text}", [mention(bot_open_id(base, settings), "助手")]
    try:
        message = _register(base, args, chat_id, text)
    except requests.RequestException as exc:
        print(f"cannot reach the Feishu emulator at {base} (is `python -m sandbox serve` running?): {exc}")
        return 1
    event = message_event(
        chat_id=chat_id, text=text, chat_type="group" if args.group else "p2p", sender_open_id=args.user,
        mentions=mentions, thread_id=message.get("thread_id"), root_id=message.get("root_id"),
        parent_id=message.get("parent_id"), message_id=message["message_id"],
        create_time_ms=int(message["create_time"]), token=settings.secret("feishu_verification_token"),
        app_id=settings.app_id,
    )
    if args.ws:
        return _say_over_ws(base, event, message, chat_id, args.wait)
    if deliver(settings, event, args.url, f"message {message['message_id']} in {chat_id}") is None:
        return 1
    replies = _await_replies(base, message, args.wait, _Reactions(base, settings, message["message_id"]))
    for reply in replies:
        print(f"bot: {shown(reply)}")
    if not replies:
        print(f"no bot reply within {args.wait:g}s")
    return 0 if replies else 1


def _say_over_ws(base: str, event: dict[str, Any], message: dict[str, Any], chat_id: str, wait: float) -> int:
    """Push the event over the emulated long connection (the `ws` process must run in websocket mode)."""
    try:
        state = requests.get(f"{base}/_sandbox/ws", timeout=HTTP_TIMEOUT).json()
        requests.post(f"{base}/_sandbox/ws/push", json={"payload": event}, timeout=HTTP_TIMEOUT).raise_for_status()
    except requests.RequestException as exc:
        print(f"cannot reach the Feishu emulator at {base}: {exc}")
        return 1
    if not state.get("clients"):
        print("no long-connection client yet (FEISHU_CONNECTION_MODE=websocket make run); held until one connects")
    print(f"pushed over the long connection (message {message['message_id']} in {chat_id})", flush=True)
    replies = _await_replies(base, message, wait)
    for reply in replies:
        print(f"bot: {message_text(reply)}")
    if not replies:
        print(f"no bot reply within {wait:g}s")
    return 0 if replies else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m sandbox", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("serve", help="run the Feishu emulator and the Claude stand-in").set_defaults(func=serve)
    p = sub.add_parser("say", help="send a message to the bot as a Feishu user and print its reply")
    p.add_argument("text", help="what the user says")
    p.add_argument("--chat", default=None, help="chat_id (oc_sandbox_p2p, or oc_sandbox_group with --group)")
    p.add_argument("--group", action="store_true", help="group chat: the message @mentions the bot")
    p.add_argument("--thread", default=None, help="thread_id (omt_…) to post inside a topic")
    p.add_argument("--user", default="ou_sandbox_user", help="sender open_id")
    p.add_argument("--url", default=None, help="webhook URL (default http://127.0.0.1:$PORT/feishu/events)")
    p.add_argument("--wait", type=float, default=30.0, help="seconds to wait for the reply")
    p.add_argument("--ws", action="store_true", help="deliver over the emulated long connection, not the webhook")
    p.set_defaults(func=say)
    cli_items.add_commands(sub)
    cli_records.add_commands(sub)
    cli_docs.add_commands(sub)
    cli_clock.add_commands(sub)
    cli_memory.add_commands(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args))
