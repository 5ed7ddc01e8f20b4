"""sandbox.claude.when (the stand-in's reading of time phrases): against a fixed now; refusals; properties."""

from __future__ import annotations

import unicodedata
from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from sandbox.claude.when import When, WhenError, describe, parse_when

SH = ZoneInfo("Asia/Shanghai")
NY = ZoneInfo("America/New_York")
NOW = datetime(2026, 11, 30, 9, 0, tzinfo=SH)  # a Monday


def at(month: int, day: int, hour: int, minute: int = 0, year: int = 2026) -> datetime:
    return datetime(year, month, day, hour, minute, tzinfo=SH)


# --- the acceptance examples -----------------------------------------------------------------------------------


def test_acceptance_examples() -> None:
    assert parse_when("周三上午", NOW) == When(at(12, 2, 10), "12月2日（周三）10:00")
    assert parse_when("后天上午十点", NOW) == When(at(12, 2, 10), "12月2日（周三）10:00")
    assert parse_when("in 2 hours", NOW).at == at(11, 30, 11)
    assert parse_when("明天下午3点", NOW).at == at(12, 1, 15)


# --- table: phrase → time, now = Monday 2026-11-30 09:00 Asia/Shanghai ---------------------------------------

CASES = [
    # relative: elapsed time
    ("2小时后", at(11, 30, 11)),
    ("两个小时后", at(11, 30, 11)),
    ("两小时以后", at(11, 30, 11)),
    ("2小时之后", at(11, 30, 11)),
    ("30分钟后", at(11, 30, 9, 30)),
    ("三十分钟后", at(11, 30, 9, 30)),
    ("二十分钟以后", at(11, 30, 9, 20)),
    ("15分后", at(11, 30, 9, 15)),
    ("一刻钟后", at(11, 30, 9, 15)),
    ("半小时后", at(11, 30, 9, 30)),
    ("半个小时后", at(11, 30, 9, 30)),
    ("一个半小时后", at(11, 30, 10, 30)),
    ("1.5小时后", at(11, 30, 10, 30)),
    ("1小时30分钟后", at(11, 30, 10, 30)),
    ("一个小时二十分钟后", at(11, 30, 10, 20)),
    ("一百分钟后", at(11, 30, 10, 40)),
    ("再过两个小时", at(11, 30, 11)),
    ("半天后", at(11, 30, 21)),
    ("两天半后", at(12, 2, 21)),
    ("in 2 hours", at(11, 30, 11)),
    ("in two hours", at(11, 30, 11)),
    ("in 30 minutes", at(11, 30, 9, 30)),
    ("in 90 mins", at(11, 30, 10, 30)),
    ("in 1.5 hours", at(11, 30, 10, 30)),
    ("in an hour", at(11, 30, 10)),
    ("in half an hour", at(11, 30, 9, 30)),
    ("in an hour and a half", at(11, 30, 10, 30)),
    ("2 hours later", at(11, 30, 11)),
    ("2 hours from now", at(11, 30, 11)),
    ("after 45 minutes", at(11, 30, 9, 45)),
    ("remind me in 2 hours", at(11, 30, 11)),
    # relative: calendar days keep now's time of day
    ("3天后", at(12, 3, 9)),
    ("3日后", at(12, 3, 9)),
    ("过两天", at(12, 2, 9)),
    ("2天後", at(12, 2, 9)),
    ("in 3 days", at(12, 3, 9)),
    ("after 3 days", at(12, 3, 9)),
    ("一周后", at(12, 7, 9)),
    ("1个星期后", at(12, 7, 9)),
    ("两周后", at(12, 14, 9)),
    ("in 2 weeks", at(12, 14, 9)),
    ("in a week", at(12, 7, 9)),
    ("下周这个时候", at(12, 7, 9)),
    ("下周", at(12, 7, 9)),
    ("next week", at(12, 7, 9)),
    ("明天这个时候", at(12, 1, 9)),
    ("same time tomorrow", at(12, 1, 9)),
    ("一个月后", at(12, 30, 9)),
    ("半个月后", at(12, 15, 9)),
    ("3天后下午3点", at(12, 3, 15)),
    ("三天后上午", at(12, 3, 10)),
    # days without a time: 10:00
    ("今天", at(11, 30, 10)),
    ("明天", at(12, 1, 10)),
    ("后天", at(12, 2, 10)),
    ("大后天", at(12, 3, 10)),
    ("tomorrow", at(12, 1, 10)),
    ("day after tomorrow", at(12, 2, 10)),
    ("the day after tomorrow at 3pm", at(12, 2, 15)),
    # weekdays: bare = the next one after today; 下周 = next calendar week; 这周/本周 = this one
    ("周一", at(12, 7, 10)),
    ("周三", at(12, 2, 10)),
    ("星期三", at(12, 2, 10)),
    ("礼拜三", at(12, 2, 10)),
    ("周日", at(12, 6, 10)),
    ("星期日", at(12, 6, 10)),
    ("星期天", at(12, 6, 10)),
    ("礼拜天晚上", at(12, 6, 20)),
    ("周7", at(12, 6, 10)),
    ("下周三", at(12, 9, 10)),
    ("下个周三", at(12, 9, 10)),
    ("下星期三", at(12, 9, 10)),
    ("下禮拜三", at(12, 9, 10)),
    ("下周日", at(12, 13, 10)),
    ("下周一早上9点", at(12, 7, 9)),
    ("下下周三", at(12, 16, 10)),
    ("这周五", at(12, 4, 10)),
    ("本周五", at(12, 4, 10)),
    ("这个星期五", at(12, 4, 10)),
    ("这周一", at(11, 30, 10)),  # today, 10:00 still ahead
    ("Wednesday", at(12, 2, 10)),
    ("wed", at(12, 2, 10)),
    ("on Friday", at(12, 4, 10)),
    ("Friday 3pm", at(12, 4, 15)),
    ("next Wednesday", at(12, 9, 10)),
    ("next monday 9am", at(12, 7, 9)),
    ("this friday", at(12, 4, 10)),
    ("monday", at(12, 7, 10)),
    # parts of the day, with and without an hour
    ("早上", at(12, 1, 9)),  # 09:00 today is not ahead
    ("早晨", at(12, 1, 9)),
    ("上午", at(11, 30, 10)),
    ("中午", at(11, 30, 12)),
    ("下午", at(11, 30, 15)),
    ("傍晚", at(11, 30, 18)),
    ("晚上", at(11, 30, 20)),
    ("今晚", at(11, 30, 20)),
    ("明早", at(12, 1, 9)),
    ("明晚", at(12, 1, 20)),
    ("明天下午", at(12, 1, 15)),
    ("下午3点", at(11, 30, 15)),
    ("晚上3点", at(11, 30, 15)),
    ("晚上8点", at(11, 30, 20)),
    ("今晚8点", at(11, 30, 20)),
    ("傍晚6点", at(11, 30, 18)),
    ("下午15点", at(11, 30, 15)),
    ("上午10点", at(11, 30, 10)),
    ("早上8点半", at(12, 1, 8, 30)),
    ("明天早上七点四十五", at(12, 1, 7, 45)),
    ("中午12点", at(11, 30, 12)),
    ("明天中午1点", at(12, 1, 13)),
    ("下午12点", at(11, 30, 12)),
    ("晚上12点", at(12, 1, 0)),
    ("明天晚上12点", at(12, 2, 0)),
    ("明天凌晨5点", at(12, 1, 5)),
    ("凌晨12点", at(12, 1, 0)),
    ("明天夜里2点", at(12, 2, 2)),  # the small hours after that evening
    ("夜里11点", at(11, 30, 23)),
    ("明天午夜", at(12, 2, 0)),
    ("midnight", at(12, 1, 0)),
    ("noon", at(11, 30, 12)),
    ("at noon tomorrow", at(12, 1, 12)),
    ("tomorrow morning", at(12, 1, 9)),
    ("tomorrow afternoon", at(12, 1, 15)),
    ("this evening", at(11, 30, 18)),
    ("tonight", at(11, 30, 20)),
    ("tonight at 9", at(11, 30, 21)),
    ("tomorrow at 10 in the morning", at(12, 1, 10)),
    ("at 10 at night", at(11, 30, 22)),
    # clock times without a day: today if ahead, else tomorrow
    ("十点", at(11, 30, 10)),
    ("10点", at(11, 30, 10)),
    ("10点钟", at(11, 30, 10)),
    ("十点整", at(11, 30, 10)),
    ("10点半", at(11, 30, 10, 30)),
    ("十点半", at(11, 30, 10, 30)),
    ("10:30", at(11, 30, 10, 30)),
    ("10:30:00", at(11, 30, 10, 30)),
    ("10点15分", at(11, 30, 10, 15)),
    ("10点15", at(11, 30, 10, 15)),
    ("十点零五分", at(11, 30, 10, 5)),
    ("下午三点一刻", at(11, 30, 15, 15)),
    ("下午三点三刻", at(11, 30, 15, 45)),
    ("十一点", at(11, 30, 11)),
    ("十二点", at(11, 30, 12)),
    ("二十三点", at(11, 30, 23)),
    ("二十三点五十九分", at(11, 30, 23, 59)),
    ("两点", at(11, 30, 14)),  # said at 09:00: a colleague means this afternoon, not 02:00 tomorrow
    ("8点", at(11, 30, 20)),
    ("9点", at(11, 30, 21)),  # 09:00 is now: not ahead, 21:00 is
    ("3点提醒我", at(11, 30, 15)),
    ("8:00", at(12, 1, 8)),  # a 24-hour time stays what it says
    ("9:01", at(11, 30, 9, 1)),
    ("零点", at(12, 1, 0)),
    ("24点", at(12, 1, 0)),
    ("3pm", at(11, 30, 15)),
    ("3 pm", at(11, 30, 15)),
    ("3 p.m.", at(11, 30, 15)),
    ("10am", at(11, 30, 10)),
    ("10 a.m.", at(11, 30, 10)),
    ("8:30pm", at(11, 30, 20, 30)),
    ("12pm", at(11, 30, 12)),
    ("12am", at(12, 1, 0)),
    ("15:00", at(11, 30, 15)),
    ("at 10", at(11, 30, 10)),
    ("at 10:45", at(11, 30, 10, 45)),
    ("11 o'clock", at(11, 30, 11)),
    # days with times
    ("明天10点", at(12, 1, 10)),
    ("明天上午10点", at(12, 1, 10)),
    ("明天１０：３０", at(12, 1, 10, 30)),
    ("周五下午三点", at(12, 4, 15)),
    ("星期五 15:00", at(12, 4, 15)),
    ("星期三下午4点半", at(12, 2, 16, 30)),
    ("tomorrow 3pm", at(12, 1, 15)),
    ("3 pm tomorrow", at(12, 1, 15)),
    ("tomorrow at 10:30 am", at(12, 1, 10, 30)),
    ("今天下午5点", at(11, 30, 17)),
    # absolute dates
    ("2026-12-03 10:00", at(12, 3, 10)),
    ("2026-12-03T10:00", at(12, 3, 10)),
    ("2026-12-03T10:00:00+00:00", at(12, 3, 18)),
    ("2026-12-03", at(12, 3, 10)),
    ("2026/12/3", at(12, 3, 10)),
    ("2026.12.3 9:15", at(12, 3, 9, 15)),
    ("2026年12月3日", at(12, 3, 10)),
    ("2026年12月3日上午10点", at(12, 3, 10)),
    ("12月3日", at(12, 3, 10)),
    ("12月3号", at(12, 3, 10)),
    ("12月3號上午", at(12, 3, 10)),
    ("12月3号上午", at(12, 3, 10)),
    ("12月3 下午2点", at(12, 3, 14)),
    ("十二月三日下午两点半", at(12, 3, 14, 30)),
    ("12月3日周四", at(12, 3, 10)),  # both say the same day
    ("12/3 14:00", at(12, 3, 14)),
    ("12/3", at(12, 3, 10)),
    ("12/31", at(12, 31, 10)),
    ("12/3/2026", at(12, 3, 10)),
    ("Dec 3 10:00", at(12, 3, 10)),
    ("Dec 3rd", at(12, 3, 10)),
    ("December 3, 2026", at(12, 3, 10)),
    ("3 Dec", at(12, 3, 10)),
    ("3rd of December 4pm", at(12, 3, 16)),
    ("11月30日", at(11, 30, 10)),  # today, still ahead
    ("1月5日", at(1, 5, 10, year=2027)),  # past this year: next year
    ("11/29", at(11, 29, 10, year=2027)),
    ("jan 5", at(1, 5, 10, year=2027)),
    ("明年1月5日", at(1, 5, 10, year=2027)),
    ("下个月3号", at(12, 3, 10)),
    ("下月3号", at(12, 3, 10)),
    ("下下个月3号", at(1, 3, 10, year=2027)),
    ("本月30号", at(11, 30, 10)),
    ("3号", at(12, 3, 10)),
    ("5号下午", at(12, 5, 15)),
    ("30号", at(11, 30, 10)),
    # surrounding words
    ("提醒我明天下午3点", at(12, 1, 15)),
    ("明天上午10点的时候", at(12, 1, 10)),
    ("请在周三上午提醒我", at(12, 2, 10)),
    ("周三的上午", at(12, 2, 10)),
    ("周三，上午10点！", at(12, 2, 10)),
    ("  “明天” ", at(12, 1, 10)),
    ("到时候提醒我：2小时后", at(11, 30, 11)),
    ("remind me tomorrow at 3pm please", at(12, 1, 15)),
    ("ＴＯＭＯＲＲＯＷ ３ＰＭ", at(12, 1, 15)),
    ("明天下午3點", at(12, 1, 15)),
]


@pytest.mark.parametrize(("phrase", "expected"), CASES)
def test_phrase(phrase: str, expected: datetime) -> None:
    when = parse_when(phrase, NOW)
    assert when.at == expected
    assert when.at.utcoffset() == timedelta(hours=8) and when.at.tzinfo is SH
    assert when.understood == describe(expected, NOW)


# --- other nows ----------------------------------------------------------------------------------------------

WEDNESDAY_NOON = datetime(2026, 12, 2, 12, 0, tzinfo=SH)
SATURDAY = datetime(2026, 12, 5, 9, 0, tzinfo=SH)
SUNDAY_NIGHT = datetime(2026, 12, 6, 23, 30, tzinfo=SH)


@pytest.mark.parametrize(("now", "phrase", "expected"), [
    (WEDNESDAY_NOON, "周三", at(12, 9, 10)),  # a bare weekday is never today
    (WEDNESDAY_NOON, "周三下午", at(12, 9, 15)),
    (WEDNESDAY_NOON, "这周三下午", at(12, 2, 15)),  # ... but this week's is
    (WEDNESDAY_NOON, "今天下午", at(12, 2, 15)),
    (WEDNESDAY_NOON, "周四", at(12, 3, 10)),
    (WEDNESDAY_NOON, "下周四", at(12, 10, 10)),
    (WEDNESDAY_NOON, "本周日", at(12, 6, 10)),
    (WEDNESDAY_NOON, "下午", at(12, 2, 15)),
    (WEDNESDAY_NOON, "上午", at(12, 3, 10)),  # today's has passed
    (WEDNESDAY_NOON, "12点", at(12, 3, 12)),  # exactly now: tomorrow
    (WEDNESDAY_NOON, "12:01", at(12, 2, 12, 1)),
    (SATURDAY, "周一", at(12, 7, 10)),
    (SATURDAY, "下周一", at(12, 7, 10)),  # next calendar week: two days away
    (SATURDAY, "这周日", at(12, 6, 10)),
    (SUNDAY_NIGHT, "周一", at(12, 7, 10)),
    (SUNDAY_NIGHT, "下周一", at(12, 7, 10)),  # weeks start on Monday
    (SUNDAY_NIGHT, "这周一", None),  # passed
    (SUNDAY_NIGHT, "晚上12点", at(12, 7, 0)),
    (SUNDAY_NIGHT, "夜里2点", at(12, 7, 2)),
    (SUNDAY_NIGHT, "23:30", at(12, 7, 23, 30)),
    (SUNDAY_NIGHT, "23:31", at(12, 6, 23, 31)),
    (datetime(2027, 2, 20, 9, 0, tzinfo=SH), "2月29日", None),  # 2027 has none
    (datetime(2027, 3, 1, 9, 0, tzinfo=SH), "2月29日", at(2, 29, 10, year=2028)),
    (datetime(2026, 11, 15, 9, 0, tzinfo=SH), "31号", None),  # November has no 31st
    (datetime(2026, 12, 31, 22, 0, tzinfo=SH), "明天", at(1, 1, 10, year=2027)),
    (datetime(2026, 1, 31, 9, 0, tzinfo=SH), "一个月后", at(2, 28, 9)),  # clamped to the month's end
])
def test_phrase_at_other_times(now: datetime, phrase: str, expected: datetime | None) -> None:
    if expected is None:
        with pytest.raises(WhenError):
            parse_when(phrase, now)
    else:
        assert parse_when(phrase, now).at == expected


# --- refusals ------------------------------------------------------------------------------------------------

EXAMPLES = "例如“周三上午10点”或“2小时后”"
REFUSED = [
    ("", f"请告诉我什么时候提醒，{EXAMPLES}。"),
    ("   ", f"请告诉我什么时候提醒，{EXAMPLES}。"),
    ("下下个月圆", f"没看懂“下下个月圆”是什么时候，请说具体日期和时间，{EXAMPLES}。"),
    ("过一会儿", "没看懂“过一会儿”"),
    ("明天上午十点提醒我开会", "没看懂"),  # only the time phrase is read
    ("10", "没看懂"),
    ("明天 10", "没看懂"),
    ("这周", "没看懂"),
    ("周8", "没看懂"),
    ("12.3", "没看懂"),
    ("提醒我", "没看懂"),
    ("二三点", "没看懂"),
    ("1月后", "没看懂"),
    ("soon", "没看懂"),
    ("x" * 50, "没看懂“" + "x" * 30 + "…”"),
    ("昨天", "11月29日（周日）10:00已经过去了，请说一个将来的时间。"),
    ("前天", "已经过去了"),
    ("yesterday", "已经过去了"),
    ("上周三", "11月25日（周三）10:00已经过去了"),
    ("last friday", "已经过去了"),
    ("今天上午8点", "11月30日（周一）08:00已经过去了"),
    ("今天9点", "已经过去了"),  # exactly now
    ("11月30日上午8点", "已经过去了"),  # today's date is not pushed to next year
    ("2020-01-01", "2020年1月1日（周三）10:00已经过去了"),
    ("0分钟后", "已经过去了"),
    ("2027-12-31", "2027年12月31日（周五）10:00太远了：提醒最多只能设在一年（366天）以内。"),
    ("2028年2月29日", "太远了"),
    ("in 400 days", "太远了"),
    ("13个月后", "太远了"),
    ("2月30日", "没有2月30日这一天，请检查日期。"),
    ("4月31号", "没有4月31日这一天"),
    ("13月1日", "没有13月1日这一天"),
    ("2026-02-29", "2026年没有2月29日"),  # not ISO either
    ("2月29日", "2027年没有2月29日，请检查日期。"),
    ("25点", "没有25点，请说0到23点之间的时间。"),
    ("明天25:00", "没有25点"),
    ("24点30分", "没有24点30分"),
    ("10点60分", "没有60分，请说0到59之间的分钟。"),
    ("10:75", "没有75分"),
    ("13pm", "没有“13pm”这个时间"),
    ("上午13点", "“上午”和“13点”对不上"),
    ("3am 下午", "“下午”和“3am”对不上"),
    ("明天2小时后", "“2小时后”和“明天”对不上"),
    ("2小时后 30分钟后", "对不上"),
    ("10点 3pm", "“3pm”和“10点”对不上"),
    ("明天这个时候10点", "对不上"),
    ("12月3日周三", "“周三”和“12月3日”不是同一天，请只说一个日期。"),
    ("明天后天", "不是同一天"),
    ("凌晨", "“凌晨”是几点？请说具体时间，例如“凌晨2点”。"),
    ("半夜", "“半夜”是几点"),
    ("99999999天后", "“99999999天后”太远了"),
    ("9999999个月后", "太远了"),
    ("1" * 400 + "小时后", "太远了"),
]


@pytest.mark.parametrize(("phrase", "message"), REFUSED)
def test_refused(phrase: str, message: str) -> None:
    with pytest.raises(WhenError) as err:
        parse_when(phrase, NOW)
    assert message in str(err.value)
    assert isinstance(err.value, ValueError)


def test_now_must_be_aware() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        parse_when("明天", datetime(2026, 11, 30, 9, 0))


# --- describe ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("moment", "now", "expected"), [
    (at(12, 2, 10), NOW, "12月2日（周三）10:00"),
    (at(12, 2, 10, 5), NOW, "12月2日（周三）10:05"),
    (datetime(2026, 12, 2, 10, 5, 59, tzinfo=SH), NOW, "12月2日（周三）10:05"),
    (at(1, 5, 8, year=2027), NOW, "2027年1月5日（周二）08:00"),
    (at(12, 6, 0), NOW, "12月6日（周日）00:00"),
    (datetime(2026, 12, 2, 2, 0, tzinfo=UTC), NOW, "12月2日（周三）10:00"),  # shown in now's zone
    (datetime(2026, 12, 31, 20, 0, tzinfo=UTC), NOW, "2027年1月1日（周五）04:00"),
    (at(12, 2, 10), datetime(2025, 12, 31, 23, 0, tzinfo=SH), "2026年12月2日（周三）10:00"),
])
def test_describe(moment: datetime, now: datetime, expected: str) -> None:
    assert describe(moment, now) == expected


# --- time zones and DST (America/New_York: 2026-03-08 02:00→03:00, 2026-11-01 02:00→01:00) ------------------


def test_results_are_in_nows_zone() -> None:
    now = datetime(2026, 11, 30, 9, 0, tzinfo=timezone(timedelta(hours=-5)))
    when = parse_when("明天上午10点", now)
    assert when.at == datetime(2026, 12, 1, 10, 0, tzinfo=timezone(timedelta(hours=-5)))
    assert when.at.utcoffset() == timedelta(hours=-5)


@pytest.mark.parametrize(("now", "phrase", "expected_utc"), [
    # a day later keeps the wall time across the change; elapsed hours do not
    (datetime(2026, 3, 7, 9, 0, tzinfo=NY), "明天这个时候", datetime(2026, 3, 8, 13, 0, tzinfo=UTC)),
    (datetime(2026, 3, 7, 9, 0, tzinfo=NY), "1天后", datetime(2026, 3, 8, 13, 0, tzinfo=UTC)),
    (datetime(2026, 3, 7, 9, 0, tzinfo=NY), "in 24 hours", datetime(2026, 3, 8, 14, 0, tzinfo=UTC)),
    (datetime(2026, 3, 7, 9, 0, tzinfo=NY), "明天上午10点", datetime(2026, 3, 8, 14, 0, tzinfo=UTC)),
    # 02:30 does not exist on Mar 8: it moves on to 03:30 EDT
    (datetime(2026, 3, 7, 9, 0, tzinfo=NY), "明天2:30", datetime(2026, 3, 8, 7, 30, tzinfo=UTC)),
    # 01:30 happens twice on Nov 1: the first (EDT)
    (datetime(2026, 10, 31, 9, 0, tzinfo=NY), "明天1:30", datetime(2026, 11, 1, 5, 30, tzinfo=UTC)),
    (datetime(2026, 11, 1, 0, 30, tzinfo=NY), "in 2 hours", datetime(2026, 11, 1, 6, 30, tzinfo=UTC)),
    (datetime(2026, 11, 1, 0, 30, tzinfo=NY), "2:00", datetime(2026, 11, 1, 7, 0, tzinfo=UTC)),
    (datetime(2026, 11, 1, 1, 40, fold=1, tzinfo=NY), "1:45", datetime(2026, 11, 2, 6, 45, tzinfo=UTC)),
])
def test_dst(now: datetime, phrase: str, expected_utc: datetime) -> None:
    got = parse_when(phrase, now).at
    assert got.astimezone(UTC) == expected_utc
    assert got.tzinfo is NY


def test_a_time_in_a_dst_gap_is_given_as_a_time_that_exists() -> None:
    when = parse_when("明天2:30", datetime(2026, 3, 7, 9, 0, tzinfo=NY))
    assert (when.at.hour, when.at.minute, when.at.utcoffset()) == (3, 30, timedelta(hours=-4))
    assert when.understood == "3月8日（周日）03:30"


# --- properties ------------------------------------------------------------------------------------------------

ZONES = [SH, NY, ZoneInfo("Australia/Lord_Howe"), UTC, timezone(timedelta(hours=5, minutes=45))]
naive_nows = st.datetimes(min_value=datetime(2000, 1, 1), max_value=datetime(2090, 1, 1))
sh_nows = naive_nows.map(lambda d: d.replace(tzinfo=SH))
nows = st.builds(lambda naive, tz: naive.replace(tzinfo=tz), naive_nows, st.sampled_from(ZONES))

CN_DIGITS = "零一二三四五六七八九"


def cn(n: int) -> str:
    """0-99 in Chinese numerals, written independently of the parser."""
    if n < 10:
        return CN_DIGITS[n]
    tens, ones = divmod(n, 10)
    return ("" if tens == 1 else CN_DIGITS[tens]) + "十" + (CN_DIGITS[ones] if ones else "")


def test_cn_helper() -> None:
    expected = ["零", "七", "十", "十一", "二十", "二十三", "四十五", "九十九"]
    assert [cn(n) for n in (0, 7, 10, 11, 20, 23, 45, 99)] == expected


def elapsed(now: datetime, delta: timedelta) -> datetime:
    return (now.astimezone(UTC) + delta).astimezone(now.tzinfo)


@settings(max_examples=200, deadline=None)
@given(nows, st.integers(1, 60 * 24 * 30), st.sampled_from(["{n}分钟后", "{cn}分钟后", "in {n} minutes",
                                                             "{n} minutes later", "过{n}分钟", "{n}分后"]))
def test_minutes_from_now_are_elapsed_time(now: datetime, n: int, form: str) -> None:
    assume(n < 100 or "{cn}" not in form)
    phrase = form.format(n=n, cn=cn(n) if n < 100 else "")
    assert parse_when(phrase, now).at == elapsed(now, timedelta(minutes=n))


@settings(max_examples=200, deadline=None)
@given(nows, st.integers(1, 99), st.sampled_from(["{n}小时后", "{cn}个小时后", "{cn}小时以后", "in {n} hours",
                                                  "in {n}h", "{n} hours from now"]), st.booleans())
def test_hours_from_now_are_elapsed_time(now: datetime, n: int, form: str, half: bool) -> None:
    phrase = form.format(n=n, cn=cn(n))
    delta = timedelta(hours=n)
    if half and "{cn}个" in form:
        phrase = phrase.replace("个", "个半")
        delta += timedelta(minutes=30)
    when = parse_when(phrase, now)
    assert when.at == elapsed(now, delta)
    assert when.at.utcoffset() == when.at.astimezone(now.tzinfo).utcoffset()


@settings(max_examples=200, deadline=None)
@given(sh_nows, st.integers(1, 366), st.sampled_from(["{n}天后", "{cn}天后", "in {n} days", "过{n}天"]))
def test_days_from_now_keep_the_time_of_day(now: datetime, n: int, form: str) -> None:
    assume(n < 100 or "{cn}" not in form)
    phrase = form.format(n=n, cn=cn(n) if n < 100 else "")
    assert parse_when(phrase, now).at == now + timedelta(days=n)  # Asia/Shanghai has no DST: wall = elapsed


@settings(max_examples=200, deadline=None)
@given(sh_nows, st.integers(1, 52), st.sampled_from(["{n}周后", "{n}个星期后", "{n}个礼拜后", "in {n} weeks"]))
def test_weeks_from_now(now: datetime, n: int, form: str) -> None:
    assert parse_when(form.format(n=n), now).at == now + timedelta(weeks=n)


@settings(max_examples=200, deadline=None)
@given(nows, st.integers(0, 23), st.integers(0, 59),
       st.sampled_from(["{h}:{m:02d}", "{h}点{m}分", "{ch}点{cm}分", "{h}点{m}", "{ch}点{cm}"]))
def test_a_time_of_day_alone_is_its_next_occurrence(now: datetime, h: int, m: int, form: str) -> None:
    """Its next occurrence — except a bare "3点" whose morning has passed: this afternoon's, if that is ahead
    (a colleague saying "3点" at 09:00 means 15:00, not 03:00 tomorrow)."""
    phrase = form.format(h=h, m=m, ch=cn(h), cm=cn(m))  # "10点0分", "十点零分" included
    got = parse_when(phrase, now).at
    local = got.astimezone(now.tzinfo)
    today = now.date()
    tz = now.tzinfo
    assert tz is not None

    def ahead_of_now(hour: int) -> bool:
        wall = datetime(today.year, today.month, today.day, hour, m, tzinfo=tz)
        return wall.astimezone(UTC) - now.astimezone(UTC) >= timedelta(minutes=1)

    if ":" not in phrase and 1 <= h <= 11 and not ahead_of_now(h) and ahead_of_now(h + 12):
        h += 12  # what a colleague means
    assert local.date() in (today, today + timedelta(days=1))
    wall = datetime(local.year, local.month, local.day, h, m)
    exists = wall.replace(tzinfo=tz).astimezone(UTC).astimezone(tz).replace(tzinfo=None) == wall
    if exists:
        assert (local.hour, local.minute) == (h, m)
    ahead = got.astimezone(UTC) - now.astimezone(UTC)
    assert ahead > timedelta(0)
    if local.date() == today:
        assert ahead >= timedelta(minutes=1)
    else:  # tomorrow only when today's was not a minute ahead
        assert not ahead_of_now(h)


@settings(max_examples=150, deadline=None)
@given(sh_nows, st.integers(1, 11), st.integers(0, 59), st.sampled_from(["下午", "晚上", "傍晚"]))
def test_afternoon_and_evening_hours_are_pm(now: datetime, h: int, m: int, part: str) -> None:
    assert parse_when(f"明天{part}{h}点{m}分", now).at == parse_when(f"明天{h + 12}:{m:02d}", now).at
    assert parse_when(f"明天{part}{cn(h)}点{cn(m)}分", now).at.hour == h + 12


@settings(max_examples=150, deadline=None)
@given(sh_nows, st.integers(1, 12), st.sampled_from(["上午", "早上", "早晨"]))
def test_morning_hours_stay(now: datetime, h: int, part: str) -> None:
    day = now.date() + timedelta(days=2)
    assert parse_when(f"后天{part}{h}点", now).at == datetime(day.year, day.month, day.day, h, tzinfo=SH)


WEEKDAYS_CN = "一二三四五六日"


@settings(max_examples=200, deadline=None)
@given(sh_nows, st.integers(0, 6), st.sampled_from(["周", "星期", "礼拜"]))
def test_weekdays(now: datetime, weekday: int, word: str) -> None:
    d = WEEKDAYS_CN[weekday]
    today = now.date()
    bare = parse_when(f"{word}{d}", now).at
    assert bare.weekday() == weekday and 1 <= (bare.date() - today).days <= 7 and (bare.hour, bare.minute) == (10, 0)
    nxt = parse_when(f"下{word}{d}", now).at
    assert nxt.weekday() == weekday
    assert nxt.isocalendar()[:2] == (today + timedelta(weeks=1)).isocalendar()[:2]
    this_day = today + timedelta(days=weekday - today.weekday())
    this_at = datetime(this_day.year, this_day.month, this_day.day, 10, tzinfo=SH)
    if this_at > now:
        assert parse_when(f"这{word}{d}", now).at == this_at
    else:
        with pytest.raises(WhenError, match="已经过去了"):
            parse_when(f"这{word}{d}", now)


@settings(max_examples=200, deadline=None)
@given(sh_nows, st.dates(min_value=date(2000, 1, 1), max_value=date(2000, 12, 31)),
       st.sampled_from(["{m}月{d}日", "{m}月{d}号", "{cm}月{cd}日", "{m}/{d}"]))
def test_month_and_day_without_a_year(now: datetime, day: date, form: str) -> None:
    m, d = day.month, day.day
    phrase = form.format(m=m, d=d, cm=cn(m), cd=cn(d))
    today = now.date()
    year = today.year + ((m, d) < (today.month, today.day))
    try:
        target = date(year, m, d)
    except ValueError:  # Feb 29 outside a leap year
        with pytest.raises(WhenError, match="没有2月29日"):
            parse_when(phrase, now)
        return
    expected = datetime(target.year, m, d, 10, tzinfo=SH)
    if expected <= now:
        with pytest.raises(WhenError, match="已经过去了"):
            parse_when(phrase, now)
    elif expected - now > timedelta(days=366):
        with pytest.raises(WhenError, match="太远了"):
            parse_when(phrase, now)
    else:
        assert parse_when(phrase, now).at == expected


ASCII_PHRASES = ["in 2 hours", "10:30", "tomorrow 3pm", "12/3 14:00", "2026-12-03 10:00", "Dec 3 10:00",
                 "next Wednesday 9am", "in 30 minutes"]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(ASCII_PHRASES), nows)
def test_full_width_forms_read_the_same(phrase: str, now: datetime) -> None:
    wide = "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else "\u3000" if c == " " else c for c in phrase)
    assert unicodedata.normalize("NFKC", wide) == phrase
    try:
        expected: datetime | str = parse_when(phrase, now).at
    except WhenError as exc:
        expected = str(exc)
    try:
        got: datetime | str = parse_when(wide, now).at
    except WhenError as exc:
        got = str(exc).replace(wide, phrase)
    assert got == expected


PIECES = ["", "明天", "后天", "周三", "下周五", "这周日", "12月3日", "1月5号", "下个月3号", "3天后", "tomorrow",
          "next monday", "今晚", "上午", "下午", "晚上", "中午", "早上", "十点", "3点半", "10:30", "3pm", "八点一刻",
          "2小时后", "半小时后", "in 3 days", "提醒我", "的时候", "，", " "]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=4), nows)
def test_any_answer_is_ahead_within_a_year_or_a_polite_refusal(pieces: list[str], now: datetime) -> None:
    phrase = "".join(pieces)
    try:
        when = parse_when(phrase, now)
    except WhenError as exc:
        message = str(exc)
        assert message.endswith("。") and 10 <= len(message) <= 120
        return
    ahead = when.at.astimezone(UTC) - now.astimezone(UTC)
    assert timedelta(0) < ahead <= timedelta(days=366)
    assert when.at.tzinfo is now.tzinfo
    assert when.understood == describe(when.at, now)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=30), nows)
def test_arbitrary_text_never_crashes(text: str, now: datetime) -> None:
    try:
        when = parse_when(text, now)
    except WhenError:
        return
    assert timedelta(0) < when.at.astimezone(UTC) - now.astimezone(UTC) <= timedelta(days=366)
