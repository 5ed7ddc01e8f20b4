"""Five-field cron expressions (minute hour day-of-month month day-of-week), read by croniter. Pure.

croniter (a dependency of RQ already) does the reading and the arithmetic; this module only pins what we
accept and mean: exactly five fields; the day fields as Vixie cron reads them (both restricted: a day
matches if EITHER matches; a field starting with `*`, also `*/n`, counts as unrestricted, then both must; as
croniter adds, so does a field that lists its whole range);
an expression that can never fire is refused at start-up, naming the setting. Times are wall-clock times in
the zone of the moment given. Around DST changes croniter's rules apply: a time in a skipped hour fires at
the first minute after the change, a time in a repeated hour may come twice (digests are deduplicated per
local slot, so a repeated slot posts once). croniter reads a written equal range ("5-5", "Sun-Sun") as the
whole cycle; as Vixie does, we mean the one value, so such ranges are rewritten before croniter sees them.
Wrapping ranges ("FRI-MON") are croniter's extension and read as it reads them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime, timedelta

from croniter import CroniterBadCronError, CroniterBadDateError, CroniterNotAlphaError, croniter

FIELDS = "minute hour day-of-month month day-of-week"
PROBE_FROM = datetime(2000, 1, 1)  # refused if nothing matches within croniter's search from here
_EQUAL_RANGE = re.compile(r"^(\w+)-(\w+)(?:/\d+)?$")


FULL = ("0-59", "0-23", "1-31", "1-12", "0-6")  # each field's whole range, written out


def vixie_items(field: str, index: int) -> str:
    """A field as Vixie reads it, written so croniter reads it alike: each equal range ("5-5", "sun-SUN/2") as its
    one value, and a `*` inside a list ("0,*") as the field's whole range (croniter would read the list as `*`).
    Pure."""
    items = field.split(",")
    out = []
    for item in items:
        if item == "*" and len(items) > 1:
            out.append(FULL[index])
            continue
        m = _EQUAL_RANGE.match(item)
        same = m is not None and (m.group(1).lower() == m.group(2).lower()
                                  or (m.group(1).isdigit() and m.group(2).isdigit()
                                      and int(m.group(1)) == int(m.group(2))))
        out.append(m.group(1) if m is not None and same else item)
    return ",".join(out)


@dataclass(frozen=True)
class Cron:
    expr: str
    day_or: bool  # Vixie: both day fields restricted → either matches

    @classmethod
    def parse(cls, expr: str, *, name: str = "") -> Cron:
        """Parse `expr`; a ValueError says what is wrong (prefixed with `name`, e.g. "DIGEST_CRON: ...")."""
        try:
            return cls._parse(expr)
        except ValueError as exc:
            raise ValueError(f"{name}: {exc}" if name else str(exc)) from None

    @classmethod
    def _parse(cls, expr: str) -> Cron:
        parts = expr.split()
        if len(parts) != 5:
            raise ValueError(f"expected 5 fields ({FIELDS}), got {len(parts)} in {expr!r}")
        if not all(p.isascii() for p in parts):
            raise ValueError(f"not a cron expression: {expr!r}")
        starred = [p.startswith("*") for p in parts]
        parts = [vixie_items(p, i) for i, p in enumerate(parts)]
        try:
            expanded = croniter(" ".join(parts), PROBE_FROM).expanded
            for i in (2, 4):  # a day field covering its whole range is unrestricted (croniter's reading, too)
                if expanded[i] == ["*"] or set(expanded[i]) >= set(range(1, 32) if i == 2 else range(7)):
                    parts[i], starred[i] = "*", True
            cron = cls(expr=" ".join(parts), day_or=not (starred[2] or starred[4]))
            croniter(cron.expr, PROBE_FROM, day_or=cron.day_or).get_next(datetime)
        except (CroniterBadCronError, CroniterNotAlphaError) as exc:
            raise ValueError(f"not a valid cron expression {expr!r}: {exc}") from None
        except CroniterBadDateError:
            raise ValueError(f"{expr!r} never fires (no such day)") from None
        return cron

    def next_after(self, moment: datetime) -> datetime:
        """The first time after `moment` (aware) that the expression fires, in moment's zone."""
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError("next_after needs a timezone-aware datetime")
        got: datetime = croniter(self.expr, moment, day_or=self.day_or).get_next(datetime)
        return got

    def previous_at_or_before(self, moment: datetime) -> datetime:
        """The last time at or before `moment` (aware) that the expression fires, in moment's zone."""
        if moment.tzinfo is None or moment.utcoffset() is None:
            raise ValueError("previous_at_or_before needs a timezone-aware datetime")
        got: datetime = croniter(self.expr, moment + timedelta(seconds=1), day_or=self.day_or).get_prev(datetime)
        return got

    def matches(self, local: datetime) -> bool:
        """Whether the expression fires at `local`'s minute (its wall clock)."""
        return bool(croniter.match(self.expr, local.replace(tzinfo=None, second=0, microsecond=0),
                                   day_or=self.day_or))
