"""`python -m sandbox clock [+2d | 90m | reset]`: move the service clock (sandbox mode only).

Every process of the service reads the offset from Redis (bot/clock.py), so advancing it makes due
follow-ups, digests and triage quiet periods fire as if that time had passed. Without an argument it
prints the service time.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import Any

from bot.clock import Clock, parse_span
from bot.settings import load_settings
from memory.keys import Keys
from memory.store import resolve_url, state_client


def clock(args: argparse.Namespace) -> int:
    settings = load_settings()
    if not settings.adjustable_clock:
        print("the clock can only be moved in sandbox mode (FEISHU_APP_ID unset) or with CLOCK_ADJUSTABLE=1")
        return 2
    c = Clock(state_client(resolve_url(settings)), Keys(settings.bot_profile), adjustable=True)
    if args.span == "reset":
        c.reset()
    elif args.span:
        try:
            c.advance(parse_span(args.span))
        except ValueError as exc:
            print(exc)
            return 2
    now = datetime.fromtimestamp(c.now(), settings.tz)
    print(f"service time: {now:%Y-%m-%d %H:%M:%S %Z} ({now:%a}), offset {c.offset():+.0f} s")
    return 0


def add_commands(sub: Any) -> None:
    p = sub.add_parser("clock", help="show or move the service clock (e.g. +2d, 90m, reset)")
    p.add_argument("span", nargs="?", default="", help="+2d, 3h, 90m, 45s, or reset")
    p.set_defaults(func=clock)
