"""`python -m sandbox clock [2026-11-30T09:00 | +2d | 90m | reset]`: set or move the service clock (sandbox only).

Every process of the service reads the offset from Redis (core/clock.py), so advancing it makes due
follow-ups, digests and triage quiet periods fire as if that time had passed. A date-time (BOT_TIMEZONE when it
has no offset) sets the clock to it, so a walk-through reads the same whatever the real hour. Without an
argument it prints the service time.
"""

from __future__ import annotations

import argparse
import time
from datetime import datetime
from typing import Any

import requests

from core.clock import Clock, parse_span
from core.keys import Keys
from core.settings import load_settings
from sandbox.cli.wire import HTTP_TIMEOUT, message_text
from state.store import resolve_url, state_client


def clock(args: argparse.Namespace) -> int:
    settings = load_settings()
    if not settings.adjustable_clock:
        print("the clock can only be moved in sandbox mode (FEISHU_APP_ID unset) or with CLOCK_ADJUSTABLE=1")
        return 2
    c = Clock(state_client(resolve_url(settings)), Keys(settings.bot_profile), adjustable=True)
    since_ms = int(time.time() * 1000)
    if args.span == "reset":
        c.reset()
    elif args.span:
        try:
            at = _instant(args.span, settings.tz)
            c.advance(at - c.now() if at is not None else parse_span(args.span))
        except ValueError as exc:
            print(exc)
            return 2
    now = datetime.fromtimestamp(c.now(), settings.tz)
    print(f"service time: {now:%Y-%m-%d %H:%M:%S %Z} ({now:%a}), offset {c.offset():+.0f} s")
    if args.span and args.span != "reset" and args.wait > 0:
        _watch(settings.feishu_domain, since_ms, args.wait)
    return 0


def _instant(text: str, tz: Any) -> float | None:
    """An ISO date-time ("2026-11-30T09:00", "2026-11-30 09:00+08:00") as epoch seconds; None for a span."""
    if "-" not in text[1:] or ":" not in text:
        return None
    at = datetime.fromisoformat(text)
    return (at if at.tzinfo else at.replace(tzinfo=tz)).timestamp()


def _watch(base: str, since_ms: int, wait: float) -> None:
    """Print what the bot posts in the next `wait` seconds (follow-ups, digests, triage notes that fell due);
    done 2 s after the last new message."""
    seen: set[str] = set()
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            items = requests.get(f"{base}/_sandbox/bot_messages", params={"after": since_ms},
                                 timeout=HTTP_TIMEOUT).json()
        except requests.RequestException:
            print("the sandbox emulator does not answer (is `make run` up?)")
            return
        for m in items:
            if m["message_id"] not in seen:
                seen.add(m["message_id"])
                deadline = min(deadline, time.monotonic() + 2.0)
                print(f"bot [{m['chat_id']}{' · ' + m['thread_id'] if m.get('thread_id') else ''}]: "
                      f"{message_text(m)}")
        time.sleep(0.5)
    if not seen:
        print(f"nothing posted within {wait:g}s")


def add_commands(sub: Any) -> None:
    p = sub.add_parser("clock", help="show, set or move the service clock (e.g. 2026-11-30T09:00, +2d, 90m, reset)")
    p.add_argument("span", nargs="?", default="", help="a date-time to set it to, +2d, 3h, 90m, 45s, or reset")
    p.add_argument("--wait", type=float, default=8.0, help="seconds to print what the bot posts (0: don't wait)")
    p.set_defaults(func=clock)
