"""The stand-in model's reading of the times people give ("周三上午", "后天上午十点", "3点", "tomorrow 3pm"). Pure.

The service does not read phrases: the model resolves them into an ISO 8601 instant for schedule_followup
(timers/instant.py). This is how the offline stand-in does that, as a careful colleague would: a bare
"3点" said at 09:00 is 15:00 today, not 03:00 tomorrow.

`parse_when(text, now)` returns an aware datetime in now's timezone and how it was read, or raises WhenError
whose message is a short polite Chinese explanation for the user. Hours and minutes from now are elapsed time;
days, weeks, months and clock times are wall-clock times in now's zone (a time in a DST gap moves forward,
an ambiguous one is its first occurrence). Weeks start on Monday.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta, tzinfo

MAX_AHEAD = timedelta(days=366)
MIN_AHEAD = timedelta(minutes=1)  # a time of day without a day is today only if at least this far ahead
DEFAULT_HOUR = 10  # a day without a time of day: a sensible morning hour
EXAMPLES = "例如“周三上午10点”或“2小时后”"
WEEKDAY_LABELS = ("周一", "周二", "周三", "周四", "周五", "周六", "周日")
MONTH_DAYS = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # the most each month can have


@dataclass(frozen=True)
class When:
    at: datetime  # timezone-aware, in the timezone of `now`
    understood: str  # how it was read, e.g. "12月2日（周三）10:00"


class WhenError(ValueError):
    """The time could not be read; str(err) is a short polite Chinese explanation for the user."""


def parse_when(text: str, now: datetime) -> When:
    """Read a time phrase against `now` (aware). Raises WhenError when it is unclear, past or too far ahead."""
    if now.tzinfo is None or now.utcoffset() is None:
        raise ValueError("parse_when needs a timezone-aware now")
    shown = " ".join(text.split())
    if not shown:
        raise WhenError(f"请告诉我什么时候提醒，{EXAMPLES}。")
    try:
        at = _iso(shown, now) or _Reader(shown, now).read()
    except WhenError:
        raise
    except (OverflowError, ValueError):  # absurd numbers: "99999999天后", a year past 9999
        raise WhenError(f"“{_clip(shown)}”太远了：提醒最多只能设在一年（366天）以内。") from None
    _check_ahead(at, now)
    return When(at=at, understood=describe(at, now))


def describe(at: datetime, now: datetime) -> str:
    """"12月2日（周三）10:00" in now's timezone, with the year only when it is not now's year."""
    local = at.astimezone(now.tzinfo)
    year = f"{local.year}年" if local.year != now.year else ""
    return f"{year}{local.month}月{local.day}日（{WEEKDAY_LABELS[local.weekday()]}）{local:%H:%M}"


def _clip(shown: str) -> str:
    return shown if len(shown) <= 30 else shown[:30] + "…"


def _check_ahead(at: datetime, now: datetime) -> None:
    ahead = _gap(at, now)
    if ahead <= timedelta(0):
        raise WhenError(f"{describe(at, now)}已经过去了，请说一个将来的时间。")
    if ahead > MAX_AHEAD:
        raise WhenError(f"{describe(at, now)}太远了：提醒最多只能设在一年（366天）以内。")


def _gap(later: datetime, earlier: datetime) -> timedelta:
    """Elapsed time between two aware datetimes (in UTC: with one tzinfo Python subtracts wall times)."""
    return later.astimezone(UTC) - earlier.astimezone(UTC)


def _local(day: date, hour: int, minute: int, tz: tzinfo, second: int = 0, micro: int = 0) -> datetime:
    """A wall-clock time in `tz` (hour may be 24 or more: the next day), fold=0; a time in a DST gap moves on."""
    day += timedelta(days=hour // 24)
    wall = datetime(day.year, day.month, day.day, hour % 24, minute, second, micro, tzinfo=tz, fold=0)
    return wall.astimezone(UTC).astimezone(tz)


def _iso(shown: str, now: datetime) -> datetime | None:
    """An ISO 8601 date-time with a time of day ("2026-12-03T10:00", "2026-12-03 10:00:00+08:00"), if that is all."""
    if not re.search(r"\d:\d", shown):
        return None
    try:
        parsed = datetime.fromisoformat(shown)
    except ValueError:
        return None
    if parsed.tzinfo is None:
        return _local(parsed.date(), parsed.hour, parsed.minute, _tz(now), parsed.second, parsed.microsecond)
    return parsed.astimezone(now.tzinfo)


def _tz(now: datetime) -> tzinfo:
    assert now.tzinfo is not None
    return now.tzinfo


# --- numbers ---------------------------------------------------------------------------------------------

CN_DIGITS = {"零": 0, "〇": 0, "一": 1, "二": 2, "两": 2, "俩": 2, "三": 3, "四": 4, "五": 5, "六": 6, "七": 7,
             "八": 8, "九": 9}
CN_UNITS = {"十": 10, "百": 100}
N = r"(?:\d+|[零〇一二两俩三四五六七八九十百]+)"  # a whole number, Arabic or Chinese
D = r"(?:\d+(?:\.\d+)?|[零〇一二两俩三四五六七八九十百]+)"  # ... or a decimal
EN_NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
              "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}


class _Unreadable(Exception):
    """A piece that looks like a number or time but is not one (e.g. "十十")."""


def _number(text: str) -> float:
    """"12", "1.5", "十二", "二十三", "一百零五", "两"."""
    if re.fullmatch(r"\d+(?:\.\d+)?", text):
        return float(text)
    return float(_cn_int(text))


def _int(text: str) -> int:
    value = _number(text)
    if value != int(value):
        raise _Unreadable(text)
    return int(value)


def _cn_int(text: str) -> int:
    """A Chinese numeral below 1000: digits with 十 and 百 ("十一" 11, "二十" 20, "一百零五" 105)."""
    total, digit, last_unit = 0, None, 1000
    for ch in text:
        if ch in CN_UNITS:
            unit = CN_UNITS[ch]
            if unit >= last_unit:
                raise _Unreadable(text)
            total += (1 if digit is None else digit) * unit
            digit, last_unit = None, unit
        elif ch in "零〇" and digit is None:
            continue  # a placeholder zero: 一百零五, 十点零五分
        elif digit is None:
            digit = CN_DIGITS[ch]
        else:
            raise _Unreadable(text)  # two digits in a row: "二三"
    return total + (digit or 0)


# --- parts of the day ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Part:
    default: int | None  # the hour when no time is given (None: ask for one)
    rule: str  # how a 12-hour clock value is read: am, small, noon, pm, evening, night


MORNING = _Part(9, "am")
PARTS = {
    "凌晨": _Part(None, "small"), "清晨": MORNING, "早上": MORNING, "早晨": MORNING, "一早": MORNING, "早": MORNING,
    "上午": _Part(10, "am"), "中午": _Part(12, "noon"), "午间": _Part(12, "noon"), "下午": _Part(15, "pm"),
    "傍晚": _Part(18, "pm"), "黄昏": _Part(18, "pm"), "晚上": _Part(20, "evening"), "晚间": _Part(20, "evening"),
    "夜晚": _Part(20, "evening"), "晚": _Part(20, "evening"), "夜里": _Part(None, "night"),
    "夜间": _Part(None, "night"), "半夜": _Part(None, "night"), "午夜": _Part(24, "night"),
    "morning": MORNING, "noon": _Part(12, "noon"), "midday": _Part(12, "noon"), "afternoon": _Part(15, "pm"),
    "evening": _Part(18, "pm"), "tonight": _Part(20, "evening"), "night": _Part(20, "evening"),
    "midnight": _Part(24, "night"),
}
AM, PM = _Part(None, "a.m."), _Part(None, "p.m.")


def _shift(hour: int, part: _Part) -> int | None:
    """The 24-hour value of `hour` said with a part of the day (24 and more: after midnight); None if they clash."""
    if part.rule in ("a.m.", "p.m."):
        if not 1 <= hour <= 12:
            return None
        return hour % 12 + (12 if part.rule == "p.m." else 0)
    if part.rule == "am":
        return hour if hour <= 12 else None
    if part.rule == "small":  # 凌晨: 0-12, where 12 is midnight
        return hour % 12 if hour <= 12 else None
    if part.rule == "noon":  # 中午1点 is 13:00
        return hour + 12 if 1 <= hour <= 10 else hour
    if part.rule == "pm":  # 下午3点 is 15:00, 下午12点 noon
        return hour + 12 if hour < 12 else hour
    if part.rule == "evening":  # 晚上8点 is 20:00, 晚上12点 (or 0点) midnight
        return 24 if hour in (0, 12) else hour + 12 if hour < 12 else hour
    # night (夜里, 半夜): its small hours are after midnight, 夜里11点 is 23:00
    if hour <= 5:
        return hour + 24
    return hour + 12 if hour <= 12 else hour


# --- reading a phrase ------------------------------------------------------------------------------------

TRADITIONAL = str.maketrans("點號時鐘週後兩個禮間裡", "点号时钟周后两个礼间里")
CN_DAY_WORDS: dict[str, tuple[int, str | None]] = {
    "大后天": (3, None), "大前天": (-3, None), "后天": (2, None), "前天": (-2, None), "明天": (1, None),
    "明日": (1, None), "明儿": (1, None), "今天": (0, None), "今日": (0, None), "今儿": (0, None),
    "昨天": (-1, None), "昨日": (-1, None), "今晚": (0, "晚上"), "今夜": (0, "晚上"), "今早": (0, "早上"),
    "明早": (1, "早上"), "明晨": (1, "早上"), "明晚": (1, "晚上"), "明夜": (1, "晚上"), "昨晚": (-1, "晚上"),
}
CN_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6,
               "1": 0, "2": 1, "3": 2, "4": 3, "5": 4, "6": 5, "7": 6}
CN_WEEKS = {"下下": 2, "下": 1, "这": 0, "本": 0, "上": -1, "上上": -2}
EN_WEEKDAYS = {"mon": 0, "tue": 1, "wed": 2, "thu": 3, "fri": 4, "sat": 5, "sun": 6}
EN_MONTHS = {"jan": 1, "feb": 2, "mar": 3, "apr": 4, "may": 5, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "oct": 10,
             "nov": 11, "dec": 12}
CN_UNIT_MINUTES = {"分钟": 1, "分": 1, "刻钟": 15, "小时": 60, "钟头": 60}
CN_UNIT_DAYS = {"天": 1, "日": 1, "周": 7, "星期": 7, "礼拜": 7}

EN_N = r"\d+(?:\.\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve|half\s+an?"
EN_UNIT = r"hours?|hrs?|h|minutes?|mins?|m|days?|d|weeks?|wks?|w|months?"
EN_MONTH = r"jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?" \
           r"|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?"
EN_WEEKDAY = r"monday|mon|tuesday|tues|tue|wednesday|wed|thursday|thurs|thur|thu|friday|fri|saturday|sat|sunday|sun"
# Words around a time phrase that do not change it ("提醒我", "再", "的时候", "remind me at").
FILLER = re.compile(
    r"提醒我们|提醒我|提醒|通知我|通知|叫我|喊我|告诉我|记得|麻烦|帮我|帮忙|请你|请|一下|我们|我|你|再|到时候|的时候|时候"
    r"|的|在|于|到|大概|大约|左右|那天|当天|就|吧|呢|啊|哦|呀|了|整"
    r"|\b(?:remind|me|us|please|at|on|by|around|about|the|of|and|to)\b|[\s\W_]")


@dataclass
class _Reader:
    """Reads one phrase: each rule consumes the pieces it recognises, whatever is left must be filler."""

    shown: str
    now: datetime
    elapsed: tuple[str, timedelta] | None = None  # hours and minutes from now
    dates: list[tuple[str, date]] = field(default_factory=list)
    relative: bool = False  # a date came from "3天后", "下周": without a time of day it keeps now's
    clock: tuple[str, int, int, _Part | None] | None = None  # (said, hour, minute, a.m./p.m.)
    part: tuple[str, _Part] | None = None
    same_time: str | None = None  # "这个时候"

    @property
    def today(self) -> date:
        return self.now.date()

    def read(self) -> datetime:
        text = unicodedata.normalize("NFKC", self.shown).lower().translate(TRADITIONAL)
        text = text.replace("之后", "后").replace("以后", "后")
        try:
            for pattern, rule in RULES:
                text = self._apply(pattern, rule, text)
        except _Unreadable:
            raise self._unclear() from None
        if FILLER.sub("", text):
            raise self._unclear()
        return self._resolve()

    def _apply(self, pattern: re.Pattern[str], rule: Callable[[_Reader, re.Match[str]], bool], text: str) -> str:
        """`text` with each piece the rule consumed blanked out."""

        def blank(m: re.Match[str]) -> str:
            return " " if rule(self, m) else m.group(0)

        return pattern.sub(blank, text)

    def _unclear(self) -> WhenError:
        return WhenError(f"没看懂“{_clip(self.shown)}”是什么时候，请说具体日期和时间，{EXAMPLES}。")

    def _clash(self, first: str, second: str) -> WhenError:
        return WhenError(f"“{first}”和“{second}”对不上，请只说一个时间，{EXAMPLES}。")

    # --- rules: each returns whether it consumed the match ---

    def _cn_hours_minutes(self, m: re.Match[str]) -> bool:
        self._set_elapsed(m.group(0), timedelta(hours=_number(m["h"]), minutes=_int(m["m"])))
        return True

    def _cn_relative(self, m: re.Match[str]) -> bool:
        unit, half = m["unit"], bool(m["half"]) + bool(m["half2"])
        if not (m["pre"] or m["post"]) or not (m["n"] or half) or half > 1:
            return False
        if unit == "月" and not (m["ge1"] or m["ge2"]):
            return False  # "3月后" is not "3个月后"
        amount = (_number(m["n"]) if m["n"] else 0) + 0.5 * half
        if unit in CN_UNIT_MINUTES:
            self._set_elapsed(m.group(0), timedelta(minutes=amount * CN_UNIT_MINUTES[unit]))
        elif unit == "月":
            self._add_months(m.group(0), amount)
        else:
            self._add_days(m.group(0), amount * CN_UNIT_DAYS[unit])
        return True

    def _en_relative(self, m: re.Match[str]) -> bool:
        said, n, unit = m.group(0), " ".join(m["n"].split()), m["unit"]
        amount = 0.5 if n.startswith("half") else float(EN_NUMBERS.get(n) or _number(n))
        if m.groupdict().get("half"):
            amount += 0.5
        if unit.startswith("h"):
            self._set_elapsed(said, timedelta(hours=amount))
        elif unit.startswith("mi") or unit == "m":
            self._set_elapsed(said, timedelta(minutes=amount))
        elif unit.startswith("mo"):
            self._add_months(said, amount)
        else:
            self._add_days(said, amount * (7 if unit.startswith("w") else 1))
        return True

    def _same_time(self, m: re.Match[str]) -> bool:
        self.same_time = m.group(0)
        return True

    def _cn_day(self, m: re.Match[str]) -> bool:
        offset, part = CN_DAY_WORDS[m.group(0)]
        self._add_date(m.group(0), self.today + timedelta(days=offset))
        if part:
            self._set_part(m.group(0), PARTS[part])
        return True

    def _en_day(self, m: re.Match[str]) -> bool:
        said = " ".join(m.group(0).split())
        offsets = {"today": 0, "tonight": 0, "tomorrow": 1, "tmr": 1, "tmrw": 1, "yesterday": -1,
                   "day after tomorrow": 2, "the day after tomorrow": 2, "day before yesterday": -2,
                   "the day before yesterday": -2}
        self._add_date(said, self.today + timedelta(days=offsets[said]))
        if said == "tonight":
            self._set_part(said, PARTS["tonight"])
        return True

    def _cn_week(self, m: re.Match[str]) -> bool:
        pre, d = m["pre"], m["d"]
        if d is None:
            if pre not in ("下", "下下", "上", "上上"):
                return False  # "周" or "这周" alone says no day
            self._add_days(m.group(0), 7 * CN_WEEKS[pre])  # 下周: a week from now
            return True
        self._add_date(m.group(0), self._weekday(CN_WEEKDAYS[d], None if pre is None else CN_WEEKS[pre]))
        return True

    def _en_weekday(self, m: re.Match[str]) -> bool:
        pre = " ".join((m["pre"] or "").split())
        weeks = {"next": 1, "this": 0, "last": -1}.get(pre)
        self._add_date(" ".join(m.group(0).split()), self._weekday(EN_WEEKDAYS[m["d"][:3]], weeks))
        return True

    def _en_week(self, m: re.Match[str]) -> bool:
        self._add_days(" ".join(m.group(0).split()), 7 if m["pre"] == "next" else -7)
        return True

    def _ymd(self, m: re.Match[str]) -> bool:
        year = int(m["y"]) if m["y"] else None
        if m.groupdict().get("yw"):
            year = self.today.year + {"今年": 0, "明年": 1, "后年": 2}[m["yw"]]
        self._add_date(m.group(0), self._month_day(_int(m["m"]), _int(m["d"]), year))
        return True

    def _en_date(self, m: re.Match[str]) -> bool:
        year = int(m["y"]) if m["y"] else None
        self._add_date(m.group(0), self._month_day(EN_MONTHS[m["mn"][:3]], int(m["d"]), year))
        return True

    def _month_offset_day(self, m: re.Match[str]) -> bool:
        which = m["which"]
        months = 2 if which.startswith("下下") else 1 if which.startswith("下") else 0
        first = _add_months(self.today.replace(day=1), months)
        self._add_date(m.group(0), self._in_month(first.year, first.month, _int(m["d"])))
        return True

    def _day_of_month(self, m: re.Match[str]) -> bool:
        """"3号": this month's 3rd, or next month's if that has passed."""
        day, first = _int(m["d"]), self.today.replace(day=1)
        if day < self.today.day:
            first = _add_months(first, 1)
        self._add_date(m.group(0), self._in_month(first.year, first.month, day))
        return True

    def _clock(self, m: re.Match[str]) -> bool:
        said, groups = m.group(0).strip(), m.groupdict()
        hour, minute = _int(m["h"]), _int(groups["m"]) if groups.get("m") else 0
        if groups.get("half"):
            minute = 30
        elif groups.get("q1") or groups.get("q3"):
            minute = 15 if groups.get("q1") else 45
        ap = groups.get("ap")
        ampm = None if not ap else AM if ap.startswith("a") else PM
        if hour > 24 or (hour == 24 and minute):
            raise WhenError(f"没有{hour}点{f'{minute}分' if minute else ''}，请说0到23点之间的时间。")
        if minute > 59 or int(groups.get("s") or 0) > 59:
            raise WhenError(f"没有{minute}分，请说0到59之间的分钟。")
        if self.clock is not None:
            raise self._clash(self.clock[0], said)
        self.clock = (said, hour, minute, ampm)
        return True

    def _part(self, m: re.Match[str]) -> bool:
        groups = m.groupdict()
        word = groups.get("w") or m.group(0)
        self._set_part(" ".join(m.group(0).split()), PARTS[word])
        if groups.get("this"):
            self._add_date(m.group(0), self.today)
        return True

    # --- collecting ---

    def _set_elapsed(self, said: str, delta: timedelta) -> None:
        if self.elapsed is not None:
            raise self._clash(self.elapsed[0], said)
        self.elapsed = (said, delta)

    def _add_date(self, said: str, day: date) -> None:
        self.dates.append((said.strip(), day))

    def _add_days(self, said: str, days: float) -> None:
        if days != int(days):
            self._set_elapsed(said, timedelta(days=days))  # "半天后", "两天半后": elapsed time
            return
        self.relative = True
        self._add_date(said, self.today + timedelta(days=int(days)))

    def _add_months(self, said: str, months: float) -> None:
        if months != int(months):
            self._add_days(said, months * 30)  # 半个月: 15 days
            return
        self.relative = True
        self._add_date(said, _add_months(self.today, int(months)))

    def _set_part(self, said: str, part: _Part) -> None:
        if self.part is not None and self.part[1] != part:
            raise self._clash(self.part[0], said)
        self.part = (said, part)

    # --- dates ---

    def _weekday(self, weekday: int, weeks: int | None) -> date:
        """The weekday (0 Monday) `weeks` calendar weeks from this one; None: the next one after today."""
        if weeks is None:
            return self.today + timedelta(days=(weekday - self.today.weekday() - 1) % 7 + 1)
        monday = self.today - timedelta(days=self.today.weekday())
        return monday + timedelta(days=7 * weeks + weekday)

    def _month_day(self, month: int, day: int, year: int | None) -> date:
        """A month and day, in `year` or else the next such date that is not before today."""
        if not 1 <= month <= 12 or not 1 <= day <= MONTH_DAYS[month - 1]:
            raise WhenError(f"没有{month}月{day}日这一天，请检查日期。")
        if year is None:
            year = self.today.year + ((month, day) < (self.today.month, self.today.day))
        return self._in_month(year, month, day)

    def _in_month(self, year: int, month: int, day: int) -> date:
        try:
            return date(year, month, day)
        except ValueError:
            raise WhenError(f"{year}年没有{month}月{day}日，请检查日期。") from None

    # --- the answer ---

    def _resolve(self) -> datetime:
        tz = _tz(self.now)
        if self.elapsed is not None:
            others = [said for said, _ in self.dates]
            others += [self.clock[0] if self.clock else "", self.part[0] if self.part else "", self.same_time or ""]
            if any(others):
                raise self._clash(self.elapsed[0], next(s for s in others if s))
            return (self.now.astimezone(UTC) + self.elapsed[1]).astimezone(tz)
        day = self._the_day()
        hour, minute, second, micro = self._time_of_day(day is not None)
        if day is not None:
            return _local(day, hour, minute, tz, second, micro)
        at = _local(self.today, hour, minute, tz, second, micro)
        if _gap(at, self.now) < MIN_AHEAD and self._bare_hour(hour):  # "3点" said at 09:00: a colleague means 15:00
            afternoon = _local(self.today, hour + 12, minute, tz, second, micro)
            if _gap(afternoon, self.now) >= MIN_AHEAD:
                return afternoon
        if _gap(at, self.now) < MIN_AHEAD:
            at = _local(self.today + timedelta(days=1), hour, minute, tz, second, micro)
        return at

    def _bare_hour(self, hour: int) -> bool:
        """A clock hour 1-11 said with no a.m./p.m. and no part of the day: it may mean either half."""
        if self.clock is None or self.clock[3] is not None or self.part is not None or ":" in self.clock[0]:
            return False  # "13:00" and "1:45" are 24-hour times
        return 1 <= hour <= 11

    def _the_day(self) -> date | None:
        if not self.dates:
            return None
        said, day = self.dates[0]
        for other, other_day in self.dates[1:]:
            if other_day != day:
                raise WhenError(f"“{said}”和“{other}”不是同一天，请只说一个日期。")
        return day

    def _time_of_day(self, has_day: bool) -> tuple[int, int, int, int]:
        """(hour, minute, second, microsecond); the hour may be 24 or more (after midnight)."""
        if self.same_time is not None:
            if self.clock is not None:
                raise self._clash(self.same_time, self.clock[0])
            if self.part is not None:
                raise self._clash(self.same_time, self.part[0])
            return self.now.hour, self.now.minute, self.now.second, self.now.microsecond
        if self.clock is not None:
            return self._clock_hour(has_day), self.clock[2], 0, 0
        if self.part is not None:
            if self.part[1].default is None:
                raise WhenError(f"“{self.part[0]}”是几点？请说具体时间，例如“{self.part[0]}2点”。")
            return self.part[1].default, 0, 0, 0
        if self.relative:
            return self.now.hour, self.now.minute, self.now.second, self.now.microsecond
        if has_day:
            return DEFAULT_HOUR, 0, 0, 0
        raise self._unclear()

    def _clock_hour(self, has_day: bool) -> int:
        """The clock's hour read with its a.m./p.m. and the part of the day (both must agree)."""
        assert self.clock is not None
        said, hour, _, ampm = self.clock
        result = hour
        if ampm is not None:
            shifted = _shift(hour, ampm)
            if shifted is None:
                raise WhenError(f"没有“{said}”这个时间，请检查时间。")
            result = shifted
        if self.part is not None:
            part_said, part = self.part
            by_part = _shift(hour, part)
            if by_part is None or (ampm is not None and by_part % 24 != result):
                raise self._clash(part_said, said)
            result = by_part  # with a.m./p.m. too: it may move 夜里2点 past midnight
        return result if has_day else result % 24


# Applied in this order: relative phrases, days, dates, clock times, parts of the day.
RULES: list[tuple[re.Pattern[str], Callable[[_Reader, re.Match[str]], bool]]] = [
    (re.compile(pattern), rule) for pattern, rule in [
        (rf"(?P<h>{D})\s*个?\s*(?:小时|钟头)\s*(?P<m>{N})\s*分钟?\s*后", _Reader._cn_hours_minutes),
        (rf"(?P<pre>过)?\s*(?P<n>{D})?\s*(?P<ge1>个)?\s*(?P<half>半)?\s*(?P<ge2>个)?\s*"
         rf"(?P<unit>小时|钟头|分钟|刻钟|分|天|日|周|星期|礼拜|月)\s*(?P<half2>半)?\s*(?P<post>后)?",
         _Reader._cn_relative),
        (rf"\b(?:in|after)\s+(?P<n>{EN_N})\s*(?P<unit>{EN_UNIT})(?![a-z])(?P<half>\s+and\s+a\s+half)?"
         r"(?:\s+(?:later|from\s+now))?", _Reader._en_relative),
        (rf"\b(?P<n>{EN_N})\s*(?P<unit>{EN_UNIT})\s+(?:later|from\s+now)\b", _Reader._en_relative),
        (r"这个时候|这个时间|这时候|这个点|这会儿|同一时间|同一时刻|同样的时间|相同时间|\b(?:this|same)\s+time\b",
         _Reader._same_time),
        ("|".join(CN_DAY_WORDS), _Reader._cn_day),
        (r"\b(?:the\s+)?day\s+after\s+tomorrow\b|\b(?:the\s+)?day\s+before\s+yesterday\b|\btomorrow\b"
         r"|\btmrw?\b|\btoday\b|\btonight\b|\byesterday\b", _Reader._en_day),
        (r"(?P<pre>下下|上上|下|这|本|上)?\s*(?(pre)个?)\s*(?:周|星期|礼拜)(?P<d>[一二三四五六日天1-7])?",
         _Reader._cn_week),
        (rf"\b(?:(?P<pre>next|this|last|on|coming|this\s+coming)\s+)?(?P<d>{EN_WEEKDAY})\b", _Reader._en_weekday),
        (r"\b(?P<pre>next|last)\s+week\b", _Reader._en_week),
        (r"(?<!\d)(?P<y>\d{4})\s*[-/.]\s*(?P<m>\d{1,2})\s*[-/.]\s*(?P<d>\d{1,2})(?!\d)(?:\s*t(?=\d))?",
         _Reader._ymd),
        (rf"(?P<which>下下个?月|下个?月|这个月|本月)\s*(?P<d>{N})\s*[日号]", _Reader._month_offset_day),
        (rf"(?:(?P<y>\d{{4}})\s*年|(?P<yw>今年|明年|后年))?\s*(?P<m>{N})\s*月\s*(?P<d>{N})\s*"
         r"(?:[日号]|(?![\d零〇一二两俩三四五六七八九十百点时:分]))", _Reader._ymd),
        (r"(?<![\d/])(?P<m>\d{1,2})\s*/\s*(?P<d>\d{1,2})(?:\s*/\s*(?P<y>\d{4}))?(?![\d/])", _Reader._ymd),
        (rf"\b(?P<mn>{EN_MONTH})\.?\s*(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\b(?:\s*,?\s*(?P<y>\d{{4}})\b)?",
         _Reader._en_date),
        (rf"\b(?P<d>\d{{1,2}})(?:st|nd|rd|th)?\s+(?:of\s+)?(?P<mn>{EN_MONTH})\b\.?(?:\s*,?\s*(?P<y>\d{{4}})\b)?",
         _Reader._en_date),
        (rf"(?<![\d月/])(?P<d>{N})\s*[号日]", _Reader._day_of_month),
        (r"(?<![\d:.])(?P<h>\d{1,2})(?:[:.](?P<m>\d{2}))?\s*(?P<ap>a\.?m\.?|p\.?m\.?)(?![a-z])", _Reader._clock),
        (r"(?<![\d:])(?P<h>\d{1,2}):(?P<m>\d{2})(?::(?P<s>\d{2}))?(?![\d:])", _Reader._clock),
        (rf"(?P<h>{N})\s*(?:点钟?|时)\s*(?:(?P<half>半)|(?P<q1>一刻)|(?P<q3>三刻)|(?P<m>{N})\s*分?)?", _Reader._clock),
        (r"\bat\s+(?P<h>\d{1,2})(?:[:.](?P<m>\d{2}))?\b", _Reader._clock),
        (r"\b(?P<h>\d{1,2})\s*o'?clock\b", _Reader._clock),
        ("|".join(p for p in PARTS if not p.isascii()), _Reader._part),
        (r"\b(?:(?P<this>this)\s+|in\s+the\s+|at\s+)?(?P<w>morning|afternoon|evening|night|noon|midday|midnight)\b",
         _Reader._part),
    ]
]


def _add_months(day: date, months: int) -> date:
    """The same day `months` later, or that month's last day (Jan 31 + 1 month: Feb 28 or 29)."""
    index = day.month - 1 + months
    year, month = day.year + index // 12, index % 12 + 1
    last = MONTH_DAYS[month - 1] if month != 2 else 29 if _leap(year) else 28
    return date(year, month, min(day.day, last))


def _leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
