"""core.cron (croniter with Vixie's day rule): refusals, next_after against an independent minute scan, DST."""

from __future__ import annotations

import time as clock
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone, tzinfo
from zoneinfo import ZoneInfo

import pytest
from hypothesis import event, given, settings
from hypothesis import strategies as st

from core.cron import Cron

SH = ZoneInfo("Asia/Shanghai")
NY = ZoneInfo("America/New_York")
LORD_HOWE = ZoneInfo("Australia/Lord_Howe")  # a 30-minute DST shift
NO_DST = [SH, UTC, timezone(timedelta(hours=-3, minutes=-30))]


# --- parsing -----------------------------------------------------------------------------------------------

BAD = [
    ("", "expected 5 fields (minute hour day-of-month month day-of-week), got 0 in ''"),
    ("* * * *", "got 4"),
    ("* * * * * *", "got 6"),  # croniter would read seconds: we take five fields only
    ("0 25 * * *", "not a valid cron expression '0 25 * * *'"),
    ("60 * * * *", "out of range"),
    ("1,60 * * * *", "out of range"),
    ("* * 0 * *", "out of range"),
    ("* * 32 * *", "out of range"),
    ("* * * 0 *", "out of range"),
    ("* * * 13 *", "out of range"),
    ("* * * * 8", "out of range"),
    ("*/0 * * * *", "not a valid cron expression"),
    ("*/x * * * *", "not a valid cron expression"),
    ("* * * * 1-", "not a valid cron expression"),
    ("* * * * MONDAY", "not a valid cron expression"),
    ("* * * FOO *", "not a valid cron expression"),
    ("* * * * JAN", "not a valid cron expression"),
    ("* MON * * *", "not a valid cron expression"),
    ("1,,2 * * * *", "not a valid cron expression"),
    ("-1 * * * *", "not a valid cron expression"),
    ("１ * * * *", "not a cron expression"),
    ("0 0 31 2 *", "never fires"),
    ("0 0 30,31 2 *", "never fires"),
    ("0 0 31 4,6,9,11 *", "never fires"),
    ("0 0 31 feb */2", "never fires"),  # day-of-week '*/2' counts as unrestricted: AND rule, still impossible
]


@pytest.mark.parametrize(("expr", "message"), BAD)
def test_parse_refuses_with_a_precise_message(expr: str, message: str) -> None:
    with pytest.raises(ValueError) as err:
        Cron.parse(expr)
    assert message in str(err.value)


def test_parse_prefixes_the_setting_name() -> None:
    with pytest.raises(ValueError) as err:
        Cron.parse("0 25 * * *", name="DIGEST_CRON")
    assert str(err.value).startswith("DIGEST_CRON: not a valid cron expression '0 25 * * *'")


@pytest.mark.parametrize("expr", ["0 0 31 2 MON", "0 0 30 2 1-5", "0 0 29 2 *", "0 0 29 2 */7"])
def test_rare_but_possible_expressions_parse(expr: str) -> None:
    Cron.parse(expr)


# --- matching ----------------------------------------------------------------------------------------------

MATCHES = [
    # Vixie: both day fields restricted → either matches
    ("0 0 1 * MON", datetime(2026, 12, 1), True),  # the 1st, a Tuesday
    ("0 0 1 * MON", datetime(2026, 11, 30), True),  # a Monday, the 30th
    ("0 0 1 * MON", datetime(2026, 12, 2), False),
    # one of them '*' (or '*/n') → both must match
    ("0 0 */2 * MON", datetime(2026, 11, 30), False),  # a Monday but an even day
    ("0 0 */2 * MON", datetime(2026, 12, 7), True),  # Monday the 7th
    ("0 0 */2 * MON", datetime(2026, 12, 9), False),  # odd day, Wednesday
    ("0 0 1 * *", datetime(2026, 12, 1), True),
    ("0 0 1 * *", datetime(2026, 12, 2), False),
    ("0 0 * * 0", datetime(2026, 12, 6), True),  # Sunday
    ("0 0 * * 7", datetime(2026, 12, 6), True),
    ("0 0 * * 7", datetime(2026, 12, 7), False),
    ("0 0 1-31 * 0", datetime(2026, 12, 7), False),  # '1-31' covers the month: unrestricted (croniter), AND
    ("30 9 * * 1-5", datetime(2026, 11, 30, 9, 30, 59), True),  # seconds ignored
    ("30 9 * * 1-5", datetime(2026, 11, 30, 9, 31), False),
    ("30 9 * * 1-5", datetime(2026, 11, 29, 9, 30), False),  # Sunday
    ("0 0 * jan *", datetime(2027, 1, 15), True),
    ("0 0 * jan *", datetime(2026, 12, 15), False),
    ("0 0 1 * MON", datetime(2026, 12, 1, tzinfo=NY), True),  # tz ignored: wall clock
]


@pytest.mark.parametrize(("expr", "local", "expected"), MATCHES)
def test_matches(expr: str, local: datetime, expected: bool) -> None:
    assert Cron.parse(expr).matches(local) is expected


# --- next_after ----------------------------------------------------------------------------------------------

NEXT = [
    ("30 9 * * 1-5", datetime(2026, 11, 27, 9, 30, tzinfo=SH), datetime(2026, 11, 30, 9, 30, tzinfo=SH)),  # Fri→Mon
    ("30 9 * * 1-5", datetime(2026, 11, 30, 9, 29, 59, 999999, tzinfo=SH), datetime(2026, 11, 30, 9, 30, tzinfo=SH)),
    ("30 9 * * 1-5", datetime(2026, 11, 30, 9, 30, 0, 1, tzinfo=SH), datetime(2026, 12, 1, 9, 30, tzinfo=SH)),
    ("* * * * *", datetime(2026, 11, 30, 9, 0, tzinfo=SH), datetime(2026, 11, 30, 9, 1, tzinfo=SH)),  # strictly after
    ("* * * * *", datetime(2026, 11, 30, 9, 0, 30, tzinfo=SH), datetime(2026, 11, 30, 9, 1, tzinfo=SH)),
    ("0 0 29 2 *", datetime(2026, 3, 1, tzinfo=SH), datetime(2028, 2, 29, tzinfo=SH)),
    ("0 0 29 2 *", datetime(2028, 2, 29, tzinfo=SH), datetime(2032, 2, 29, tzinfo=SH)),
    ("0 0 29 2 */7", datetime(2026, 3, 1, tzinfo=SH), datetime(2032, 2, 29, tzinfo=SH)),  # Feb 29 on a Sunday
    ("0 0 31 2 MON", datetime(2026, 11, 30, tzinfo=SH), datetime(2027, 2, 1, tzinfo=SH)),  # OR: a Monday in Feb
    ("59 23 31 12 *", datetime(2026, 12, 31, 23, 59, tzinfo=SH), datetime(2027, 12, 31, 23, 59, tzinfo=SH)),
    ("0 0 1 1 *", datetime(2026, 12, 31, 23, 59, 59, tzinfo=SH), datetime(2027, 1, 1, tzinfo=SH)),
    ("0 12 1 * MON", datetime(2026, 11, 30, 12, 0, tzinfo=SH), datetime(2026, 12, 1, 12, 0, tzinfo=SH)),
    ("15,45 */2 * * *", datetime(2026, 11, 30, 9, 50, tzinfo=SH), datetime(2026, 11, 30, 10, 15, tzinfo=SH)),
    ("0 9 31 * *", datetime(2026, 11, 1, tzinfo=SH), datetime(2026, 12, 31, 9, 0, tzinfo=SH)),  # November has no 31st
    ("0 0 13 * FRI", datetime(2026, 11, 14, tzinfo=SH), datetime(2026, 11, 20, tzinfo=SH)),  # OR: Friday the 20th
    ("0 0 */31 2 MON", datetime(2026, 1, 1, tzinfo=SH), datetime(2027, 2, 1, tzinfo=SH)),  # AND: Feb 1 on a Monday
    # DST in New York: 2026-03-08 02:00 → 03:00, 2026-11-01 02:00 → 01:00
    # croniter: a time in the skipped hour fires at the first minute after the change
    ("30 2 * * *", datetime(2026, 3, 8, 0, 0, tzinfo=NY), datetime(2026, 3, 8, 3, 0, tzinfo=NY)),
    ("0 3 * * *", datetime(2026, 3, 8, 0, 0, tzinfo=NY), datetime(2026, 3, 8, 3, 0, tzinfo=NY)),
    ("30 1 * * *", datetime(2026, 11, 1, 0, 0, tzinfo=NY), datetime(2026, 11, 1, 1, 30, tzinfo=NY)),
    # croniter: a time in the repeated hour comes again in its second occurrence (a digest slot id is its local
    # wall time, so the second one finds the first one's timer and posts nothing more)
    ("30 1 * * *", datetime(2026, 11, 1, 1, 30, tzinfo=NY), datetime(2026, 11, 1, 1, 30, fold=1, tzinfo=NY)),
    ("*/20 * * * *", datetime(2026, 11, 1, 1, 50, fold=1, tzinfo=NY), datetime(2026, 11, 1, 2, 0, tzinfo=NY)),
    ("0 10 * * *", datetime(2026, 11, 30, 9, 0, tzinfo=timezone(timedelta(hours=-5))),
     datetime(2026, 11, 30, 10, 0, tzinfo=timezone(timedelta(hours=-5)))),
]


@pytest.mark.parametrize(("expr", "moment", "expected"), NEXT)
def test_next_after(expr: str, moment: datetime, expected: datetime) -> None:
    got = Cron.parse(expr).next_after(moment)
    assert got.astimezone(UTC) == expected.astimezone(UTC)  # (a fold=1 time never equals another zone's)
    assert got.utcoffset() == expected.utcoffset()  # the same instant, not just the same wall time
    assert got.tzinfo is moment.tzinfo
    assert (got.second, got.microsecond) == (0, 0)


def test_next_after_needs_an_aware_moment() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        Cron.parse("* * * * *").next_after(datetime(2026, 11, 30, 9, 0))


def test_next_after_skips_days_not_minutes() -> None:
    cron = Cron.parse("59 23 29 2 *")
    started = clock.perf_counter()
    for year in range(2001, 2100, 4):
        assert cron.next_after(datetime(year, 3, 1, tzinfo=SH)).year == year + 3 + (year + 3 == 2100) * 4
    assert clock.perf_counter() - started < 1.0


# --- properties ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldSpec:
    text: str
    values: frozenset[int]


def _item(low: int, high: int, names: list[str] | None) -> st.SearchStrategy[FieldSpec]:
    """One list item and the values it stands for, computed without the parser."""

    def show(v: int) -> str:
        if names and v < len(names) and v % 2:  # names for some values, in mixed case
            return names[v].lower() if v % 3 else names[v].upper()
        return str(v)

    def make(kind: int, a: int, b: int, step: int) -> FieldSpec:
        a, b = min(a, b), max(a, b)
        if kind == 0:
            return FieldSpec("*", frozenset(range(low, high + 1)))
        if kind == 1:
            return FieldSpec(f"*/{step}", frozenset(range(low, high + 1, step)))
        if kind == 2:
            return FieldSpec(show(a), frozenset({a}))
        if kind == 3:
            return FieldSpec(f"{show(a)}-{show(b)}", frozenset(range(a, b + 1)))
        return FieldSpec(f"{show(a)}-{show(b)}/{step}", frozenset(range(a, b + 1, step)))

    span = st.integers(low, high)
    return st.builds(make, st.integers(0, 4), span, span, st.integers(1, high - low + 1))


def field_specs(low: int, high: int, names: list[str] | None = None,
                max_items: int = 3) -> st.SearchStrategy[FieldSpec]:
    def join(items: list[FieldSpec]) -> FieldSpec:
        return FieldSpec(",".join(i.text for i in items), frozenset().union(*(i.values for i in items)))

    return st.lists(_item(low, high, names), min_size=1, max_size=max_items).map(join)


MONTH_NAMES = ["", "JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"]
WEEKDAY_NAMES = ["SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"]


@dataclass(frozen=True)
class Expr:
    fields: tuple[FieldSpec, ...]

    @property
    def text(self) -> str:
        return " ".join(f.text for f in self.fields)

    def day_matches(self, day: date) -> bool:
        """Vixie's rule, from the generated value sets."""
        _minute, _hour, dom, month, dow = self.fields
        weekdays = {v % 7 for v in dow.values}
        by_dom, by_dow = day.day in dom.values, (day.weekday() + 1) % 7 in weekdays
        # Vixie's rule as croniter keeps it: a field is unrestricted when it starts with `*` or covers its whole range
        either = not (dom.text.startswith("*") or dom.values >= set(range(1, 32))) \
            and not (dow.text.startswith("*") or weekdays >= set(range(7)))
        day_ok = (by_dom or by_dow) if either else (by_dom and by_dow)
        return day.month in month.values and day_ok

    def matches(self, wall: datetime) -> bool:
        minute, hour = self.fields[:2]
        return wall.minute in minute.values and wall.hour in hour.values and self.day_matches(wall.date())


exprs = st.builds(lambda *f: Expr(tuple(f)), field_specs(0, 59), field_specs(0, 23), field_specs(1, 31),
                  field_specs(1, 12, MONTH_NAMES), field_specs(0, 7, WEEKDAY_NAMES))


# Frequent expressions, so that a few days' brute-force scan usually finds the next match.
frequent_exprs = st.builds(lambda *f: Expr(tuple(f)), field_specs(0, 59), field_specs(0, 23, max_items=4),
                           st.one_of(st.just(FieldSpec("*", frozenset(range(1, 32)))), field_specs(1, 31, max_items=8)),
                           st.one_of(st.just(FieldSpec("*", frozenset(range(1, 13)))), field_specs(1, 12, MONTH_NAMES)),
                           st.one_of(st.just(FieldSpec("*", frozenset(range(8)))), field_specs(0, 7, WEEKDAY_NAMES)))
# Include the New York and Lord Howe DST changes of 2026 (Mar 8 / Nov 1; Apr 5 / Oct 4).
BEFORE_CHANGES = [datetime(2026, 3, 6), datetime(2026, 10, 30), datetime(2026, 4, 2), datetime(2026, 10, 1)]
moments = st.one_of(
    st.datetimes(min_value=datetime(2026, 3, 1), max_value=datetime(2026, 11, 5)),
    st.builds(lambda start, minutes: start + timedelta(minutes=minutes),  # the days just before a change
              st.sampled_from(BEFORE_CHANGES), st.integers(0, 3 * 24 * 60)),
)
SCAN_DAYS = 3


def brute_force(expr: Expr, moment: datetime) -> datetime | None:
    """The first wall-clock minute after `moment` that matches and exists, fold=0, scanning minute by minute."""
    tz = moment.tzinfo
    assert tz is not None
    wall = moment.replace(tzinfo=None, second=0, microsecond=0)
    for _ in range(SCAN_DAYS * 24 * 60):
        wall += timedelta(minutes=1)
        if not expr.matches(wall):
            continue
        aware = wall.replace(tzinfo=tz, fold=0)
        exists = aware.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
        if exists and aware.astimezone(UTC) > moment.astimezone(UTC):
            return aware
    return None


@settings(max_examples=150, deadline=None)
@given(frequent_exprs, moments, st.sampled_from(NO_DST), st.booleans())  # DST changes: the NEXT table
def test_next_after_agrees_with_a_minute_scan(expr: Expr, naive: datetime, tz: tzinfo, fold: bool) -> None:
    try:
        cron = Cron.parse(expr.text)
    except ValueError:
        return  # never matches
    moment = naive.replace(tzinfo=tz, fold=int(fold))
    got = cron.next_after(moment)
    expected = brute_force(expr, moment)
    event("found by the scan" if expected is not None else "beyond the scan")
    if expected is not None:
        assert got == expected and got.utcoffset() == expected.utcoffset()
    else:
        scanned_to = moment.replace(tzinfo=None, second=0, microsecond=0) + timedelta(days=SCAN_DAYS)
        assert got.replace(tzinfo=None) > scanned_to
        assert expr.matches(got)
    assert cron.matches(got) and got.tzinfo is tz and (got.second, got.microsecond, got.fold) == (0, 0, 0)


@settings(max_examples=100, deadline=None)
@given(exprs, st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1)),
       st.sampled_from([SH, UTC, timezone(timedelta(hours=-3, minutes=-30))]))  # no DST: every wall time exists
def test_next_after_is_a_later_match_with_nothing_matching_between(expr: Expr, naive: datetime, tz: tzinfo) -> None:
    try:
        cron = Cron.parse(expr.text)
    except ValueError:
        return
    moment = naive.replace(tzinfo=tz)
    got = cron.next_after(moment)
    assert got.astimezone(UTC) > moment.astimezone(UTC)
    assert expr.matches(got)
    # No matching day lies between: each day from the moment's to the result's has no match before `got`.
    day = moment.date()
    while day < got.date():
        if day > moment.date():
            assert not expr.day_matches(day)
        day += timedelta(days=1)


