"""The time a follow-up is set for: an ISO 8601 instant with offset that the model resolved, checked. Pure.

The model sees the current time and zone (the request's `<now>` line) and the person's words; it resolves
"3点提醒我" said at 09:00 to 15:00 today as a colleague would, and passes the instant. The service does not
guess from the words: it only checks the instant (an offset is required, it must lie ahead, within the
horizon) and states it back in BOT_TIMEZONE, so a misreading shows at once in the reply.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

MAX_AHEAD = timedelta(days=366)
MIN_AHEAD = timedelta(seconds=30)  # "now" in the model's words is already past when the tool runs
WEEKDAY_LABELS = ("周一", "周二", "周三", "周四", "周五", "周六", "周日")


@dataclass(frozen=True)
class Instant:
    at: datetime  # aware, in the bot's zone
    understood: str  # "12月2日（周三）15:00": how the reply states it


class InstantError(ValueError):
    """Not a usable time; str(err) is a short reason the model can pass on (in English, for the model)."""


def read_instant(text: str, now: datetime, horizon: timedelta = MAX_AHEAD) -> Instant:
    """`text` must be an ISO 8601 date-time with an offset (or Z), ahead of `now` (aware) and within `horizon`."""
    if now.tzinfo is None:
        raise ValueError("read_instant needs a timezone-aware now")
    raw = (text or "").strip()
    try:
        at = datetime.fromisoformat(raw.replace("z", "Z"))
    except ValueError:
        raise InstantError(f"`at` must be an ISO 8601 date-time with offset, e.g. {example(now)}; got {raw[:40]!r}") \
            from None
    if at.tzinfo is None or at.utcoffset() is None:
        raise InstantError(f"`at` needs a UTC offset, e.g. {example(now)} (the current zone is {zone_name(now)})")
    local = at.astimezone(now.tzinfo)
    ahead = at.astimezone(UTC) - now.astimezone(UTC)
    if ahead < MIN_AHEAD:
        raise InstantError(f"{describe(local, now)} is not in the future (now is {describe(now, now)})")
    if ahead > horizon:
        raise InstantError(f"{describe(local, now)} is too far ahead: at most {horizon.days} days")
    return Instant(at=local, understood=describe(local, now))


def describe(at: datetime, now: datetime) -> str:
    """"12月2日（周三）10:00" in now's zone, with the year only when it is not now's year."""
    local = at.astimezone(now.tzinfo)
    year = f"{local.year}年" if local.year != now.year else ""
    return f"{year}{local.month}月{local.day}日（{WEEKDAY_LABELS[local.weekday()]}）{local:%H:%M}"


def example(now: datetime) -> str:
    return (now + timedelta(days=1)).replace(hour=15, minute=0, second=0, microsecond=0).isoformat()


def zone_name(now: datetime) -> str:
    tz: tzinfo | None = now.tzinfo
    return str(getattr(tz, "key", None) or now.tzname() or "UTC")


def now_line(now: datetime) -> str:
    """The request's clock for the model (what it resolves people's times against): the current minute with its
    offset and the weekday. Short: it is in every request."""
    return f"<now>{now.replace(second=0, microsecond=0).isoformat(timespec='minutes')} {now:%a}</now>"
