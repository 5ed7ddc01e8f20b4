"""What `/poll …` asks: the question, its options and when it closes. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

MAX_OPTIONS, MAX_TEXT = 10, 100
MAX_AHEAD = timedelta(days=30)
_CLOSE = re.compile(r"^(?:截止|截至|until)\s*(.+)$", re.IGNORECASE)
_CLOCK = re.compile(r"^(今天|明天|后天)?\s*(\d{1,2})[:：点](\d{2})?分?$")
_IN = re.compile(r"^(\d{1,3})\s*(分钟|小时|天|min|h|d)后?$", re.IGNORECASE)
_UNIT = {"分钟": "minutes", "min": "minutes", "小时": "hours", "h": "hours", "天": "days", "d": "days"}
_DAYS = {"今天": 0, "明天": 1, "后天": 2}


@dataclass(frozen=True)
class PollSpec:
    question: str
    options: tuple[str, ...]
    closes_at: datetime  # aware, in the bot's zone


class SpecError(ValueError):
    """The command cannot be a poll; str(err) is the short reply that says why (Chinese)."""


def read_spec(text: str, now: datetime, default: timedelta) -> PollSpec:
    """`text`: what follows `/poll`, split on `|`; a last part `截止 <time>` says when it closes (else now+default)."""
    parts = [p.strip() for p in re.split(r"[|｜]", text or "")]
    closes_at = now + default
    if parts and (close := _CLOSE.match(parts[-1])):
        closes_at = read_close(close.group(1).strip(), now)
        parts = parts[:-1]
    parts = [p for p in parts if p]
    if len(parts) < 3:
        raise SpecError("用法：/poll 问题 | 选项A | 选项B（可加 | 截止 18:00）")
    options = tuple(dict.fromkeys(parts[1:]))
    if len(options) < 2 or len(options) > MAX_OPTIONS:
        raise SpecError(f"选项要有 2 到 {MAX_OPTIONS} 个，且不重复")
    if any(len(p) > MAX_TEXT for p in parts):
        raise SpecError(f"问题和每个选项都不超过 {MAX_TEXT} 个字")
    return PollSpec(parts[0], options, closes_at)


def read_close(text: str, now: datetime) -> datetime:
    """"18:00" (today, or tomorrow when past), "明天 9点", "2小时", "30分钟后", or an ISO date-time."""
    at = _clock(text, now) or _after(text, now) or _iso(text, now)
    if at is None:
        raise SpecError(f"看不懂截止时间「{text[:20]}」，可以写 18:00、明天 9点、2小时 或 2026-12-05T18:00+08:00")
    if at <= now or at - now > MAX_AHEAD:
        raise SpecError(f"截止时间要在现在之后的 {MAX_AHEAD.days} 天内")
    return at


def _clock(text: str, now: datetime) -> datetime | None:
    m = _CLOCK.match(text)
    if not m or int(m.group(2)) > 23 or int(m.group(3) or 0) > 59:
        return None
    day = now + timedelta(days=_DAYS.get(m.group(1) or "", 0))
    at = day.replace(hour=int(m.group(2)), minute=int(m.group(3) or 0), second=0, microsecond=0)
    return at + timedelta(days=1) if m.group(1) is None and at <= now else at


def _after(text: str, now: datetime) -> datetime | None:
    m = _IN.match(text)
    return now + timedelta(**{_UNIT[m.group(2).lower()]: int(m.group(1))}) if m else None


def _iso(text: str, now: datetime) -> datetime | None:
    try:
        at = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (at if at.tzinfo else at.replace(tzinfo=now.tzinfo)).astimezone(now.tzinfo)
