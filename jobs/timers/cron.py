"""Five-field cron expressions (minute hour day-of-month month day-of-week) as Vixie cron reads them. Pure.

Supported: `*`, numbers, ranges `a-b`, steps `*/n` and `a-b/n`, lists `a,b,c`, names JAN-DEC and SUN-SAT
(case-insensitive; `MON-SUN` reads as 1-7), day-of-week 0-7 with 0 and 7 both Sunday. As in Vixie cron, a
field that starts with `*` (also `*/n`) counts as unrestricted: when both day fields are restricted a day
matches if EITHER matches, otherwise both must match. Times are wall-clock times in the zone of the moment
given: a local time that does not exist (a DST gap) is skipped, an ambiguous one fires at its first occurrence.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, time, timedelta, tzinfo

# A valid expression's rarest match (the AND rule with a Feb 29 on one weekday) recurs within 40 years:
# the search stops well after that, so it always ends (parse already refuses expressions that never match).
SEARCH_YEARS = 50

MONTH_NAMES = {name: n for n, name in enumerate(
    ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"), start=1)}
WEEKDAY_NAMES = {name: n for n, name in enumerate(("sun", "mon", "tue", "wed", "thu", "fri", "sat"))}
# The most days each month can have (February: in a leap year).
MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)


@dataclass(frozen=True)
class _Field:
    name: str
    low: int
    high: int
    names: dict[str, int]


FIELDS = (
    _Field("minute", 0, 59, {}),
    _Field("hour", 0, 23, {}),
    _Field("day-of-month", 1, 31, {}),
    _Field("month", 1, 12, MONTH_NAMES),
    _Field("day-of-week", 0, 7, WEEKDAY_NAMES),
)


@dataclass(frozen=True)
class Cron:
    """A parsed expression: the allowed values of each field, sorted (day-of-week 0-6, Sunday 0)."""

    expr: str
    minutes: tuple[int, ...] = field(repr=False)
    hours: tuple[int, ...] = field(repr=False)
    days: tuple[int, ...] = field(repr=False)
    months: tuple[int, ...] = field(repr=False)
    weekdays: tuple[int, ...] = field(repr=False)
    days_star: bool = field(repr=False)  # the day-of-month field starts with `*` (Vixie's DOM_STAR)
    weekdays_star: bool = field(repr=False)  # the day-of-week field starts with `*` (Vixie's DOW_STAR)

    @classmethod
    def parse(cls, expr: str, *, name: str = "") -> Cron:
        """Parse `expr`; a ValueError names the bad field (prefixed with `name`, e.g. "DIGEST_CRON: ...")."""
        try:
            return cls._parse(expr)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}" if name else str(exc)) from None

    @classmethod
    def _parse(cls, expr: str) -> Cron:
        parts = expr.split()
        if len(parts) != 5:
            raise ValueError(f"expected 5 fields (minute hour day-of-month month day-of-week), "
                             f"got {len(parts)} in '{expr}'")
        values = [_parse_field(text, spec) for text, spec in zip(parts, FIELDS, strict=True)]
        weekdays = tuple(sorted({v % 7 for v in values[4]}))
        cron = cls(expr=expr, minutes=values[0], hours=values[1], days=values[2], months=values[3],
                   weekdays=weekdays, days_star=parts[2].startswith("*"), weekdays_star=parts[4].startswith("*"))
        cron._check_possible(parts[2], parts[3])
        return cron

    def _check_possible(self, day_field: str, month_field: str) -> None:
        """Refuse an expression no date can match (e.g. Feb 31), instead of searching for it forever.

        With the OR rule every month has each weekday, so a match exists. With the AND rule a match exists
        iff some allowed day exists in some allowed month: every such date falls on each weekday in some year.
        """
        if self._either_day():
            return
        if not any(d <= MONTH_DAYS[m - 1] for m in self.months for d in self.days):
            raise ValueError(f"day-of-month field '{day_field}' never occurs in month field '{month_field}'")

    def _either_day(self) -> bool:
        """Vixie's rule: both day fields restricted → a day matches if either field matches."""
        return not self.days_star and not self.weekdays_star

    def day_matches(self, day: date) -> bool:
        """Whether the date matches the month and the two day fields."""
        if day.month not in self.months:
            return False
        by_day = day.day in self.days
        by_weekday = (day.weekday() + 1) % 7 in self.weekdays
        return (by_day or by_weekday) if self._either_day() else (by_day and by_weekday)

    def matches(self, local: datetime) -> bool:
        """Whether the wall-clock minute of `local` matches (its timezone and seconds are ignored)."""
        return local.minute in self.minutes and local.hour in self.hours and self.day_matches(local.date())

    def next_after(self, moment: datetime) -> datetime:
        """The first matching minute strictly after `moment` (aware), in its timezone, seconds 0.

        Wall-clock semantics: nonexistent local times are skipped, ambiguous ones are taken with fold=0.
        """
        tz = moment.tzinfo
        if tz is None or moment.utcoffset() is None:
            raise ValueError("next_after needs a timezone-aware datetime")
        start = moment.replace(tzinfo=None, second=0, microsecond=0) + timedelta(minutes=1)
        while True:
            wall = self._next_wall(start)
            aware = _attach(wall, tz)
            # Compared in UTC: with one tzinfo Python compares wall times and ignores fold.
            if aware is not None and aware.astimezone(UTC) > moment.astimezone(UTC):
                return aware
            start = wall + timedelta(minutes=1)

    def _next_wall(self, start: datetime) -> datetime:
        """The first matching naive wall-clock minute at or after `start`, stepping over whole days and months."""
        day: date | None = start.date()
        last = date(min(start.year + SEARCH_YEARS, date.max.year), 12, 31)
        earliest = (start.hour, start.minute)
        while day is not None and day <= last:
            if day.month not in self.months:
                day = _next_month(day)
                continue
            if self.day_matches(day):
                found = self._first_time(earliest if day == start.date() else (0, 0))
                if found is not None:
                    return datetime.combine(day, found)
            day = _next_day(day)
        raise ValueError(f"cron '{self.expr}' has no match within {SEARCH_YEARS} years after {start:%Y-%m-%d %H:%M}")

    def _first_time(self, earliest: tuple[int, int]) -> time | None:
        """The first matching time of day at or after `earliest` (hour, minute), if any."""
        hour, minute = earliest
        for h in self.hours[bisect.bisect_left(self.hours, hour):]:
            i = bisect.bisect_left(self.minutes, minute) if h == hour else 0
            if i < len(self.minutes):
                return time(h, self.minutes[i])
        return None


def _parse_field(text: str, spec: _Field) -> tuple[int, ...]:
    """All values one field allows, sorted."""
    values: set[int] = set()
    for item in text.split(","):
        values.update(_parse_item(item, text, spec))
    return tuple(sorted(values))


def _parse_item(item: str, text: str, spec: _Field) -> range:
    """One list item: `*`, `n`, `a-b`, `*/n` or `a-b/n`."""
    where = f"{spec.name} field '{item}'" + (f" (in '{text}')" if item != text else "")
    base, slash, step_text = item.partition("/")
    step = _parse_step(step_text, where) if slash else 1
    if base == "*":
        return range(spec.low, spec.high + 1, step)
    first_text, dash, last_text = base.partition("-")
    if slash and not dash:
        raise ValueError(f"{where}: a step needs a range or '*' before it, e.g. '*/{step_text}'")
    first = _parse_value(first_text, where, spec)
    last = _parse_value(last_text, where, spec) if dash else first
    if dash and spec.names is WEEKDAY_NAMES and last_text.lower() == "sun" and first > 0:
        last = 7  # MON-SUN: Sunday at the end of a range is day 7
    if first > last:
        raise ValueError(f"{where}: range start {first} is after its end {last}")
    return range(first, last + 1, step)


def _parse_step(text: str, where: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise ValueError(f"{where}: step must be a whole number of at least 1")
    return int(text)


def _parse_value(text: str, where: str, spec: _Field) -> int:
    """A number in the field's range, or one of its names (case-insensitive)."""
    if text.lower() in spec.names:
        return spec.names[text.lower()]
    if not text.isascii() or not text.isdigit():
        kinds = "a number or a name" if spec.names else "a number"
        raise ValueError(f"{where}: '{text}' is not {kinds}")
    value = int(text)
    if not spec.low <= value <= spec.high:
        raise ValueError(f"{where} out of range {spec.low}-{spec.high}")
    return value


def _attach(wall: datetime, tz: tzinfo) -> datetime | None:
    """`wall` as an aware time in `tz` (fold=0), or None when that local time does not exist (a DST gap)."""
    aware = wall.replace(tzinfo=tz, fold=0)
    back = aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None)
    return aware if back == wall else None


def _next_day(day: date) -> date | None:
    return None if day == date.max else day + timedelta(days=1)


def _next_month(day: date) -> date | None:
    if day.month < 12:
        return date(day.year, day.month + 1, 1)
    return None if day.year == date.max.year else date(day.year + 1, 1, 1)
