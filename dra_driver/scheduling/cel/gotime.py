"""Durations and timestamps parsed like Go's `time` package.

cel-go converts strings with `time.ParseDuration` (`duration('1h30m')`) and
`time.Parse(time.RFC3339, s)` (`timestamp('2024-01-02T03:04:05Z')`), and
Kubernetes' `format.date()` / `format.datetime()` use `time.Parse` with
`2006-01-02`. cel-python's and `datetime`'s parsers accept other syntax
(`1d`, `2024-01-02 03:04:05`, `+0100` offsets, dates alone) and
`datetime` has no year 0, so Go's rules are written here:

* a duration is `[-+]` then one or more `<number>[.<fraction>]<unit>` with
  units ns, us, µs, μs, ms, s, m, h (or exactly `0`), within ±2^63 ns;
* RFC 3339 is `YYYY-MM-DDThh:mm:ss[.frac](Z|±hh:mm)`, month and day
  checked against the calendar (leap years included), hours 0-23 (Go's
  general parser also takes a one-digit hour and a comma before the
  fraction), offsets up to 24:60 in the general parser.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Final

_UNITS: Final = {
    "ns": 1,
    "us": 1_000,
    "\u00b5s": 1_000,  # MICRO SIGN
    "\u03bcs": 1_000,  # GREEK SMALL LETTER MU
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_U63: Final = 1 << 63


class TimeError(ValueError):
    """The text is not a Go duration or timestamp; the message is Go's."""


def _time_quote(text: str) -> str:
    """The time package's own `quote`: bytes outside printable ASCII as \\x escapes."""
    out = ['"']
    for ch in text:
        if ch < " " or ord(ch) >= 0x80:
            out.extend(f"\\x{b:02x}" for b in ch.encode("utf-8", "surrogatepass"))
        else:
            if ch in '"\\':
                out.append("\\")
            out.append(ch)
    out.append('"')
    return "".join(out)


def parse_duration(text: str) -> int:
    """`time.ParseDuration`: the duration in nanoseconds; raises TimeError."""
    invalid = TimeError("time: invalid duration " + _time_quote(text))
    s = text.encode("utf-8", "surrogatepass")
    negative = False
    if s[:1] in (b"-", b"+"):
        negative = s[:1] == b"-"
        s = s[1:]
    if s == b"0":
        return 0
    if not s:
        raise invalid
    total = 0
    while s:
        if not (s[0] == 0x2E or 0x30 <= s[0] <= 0x39):
            raise invalid
        i = 0
        whole = 0
        while i < len(s) and 0x30 <= s[i] <= 0x39:
            if whole > _U63 // 10:
                raise invalid
            whole = whole * 10 + s[i] - 0x30
            if whole > _U63:
                raise invalid
            i += 1
        before_point = i > 0
        s = s[i:]
        fraction, scale, after_point = 0, 1.0, False
        if s[:1] == b".":
            s = s[1:]
            i = 0
            overflow = False
            while i < len(s) and 0x30 <= s[i] <= 0x39:
                if not overflow:
                    if fraction > (_U63 - 1) // 10:
                        overflow = True
                    else:
                        bigger = fraction * 10 + s[i] - 0x30
                        if bigger > _U63:
                            overflow = True
                        else:
                            fraction = bigger
                            scale *= 10
                i += 1
            after_point = i > 0
            s = s[i:]
        if not before_point and not after_point:
            raise invalid
        i = 0
        while i < len(s) and not (s[i] == 0x2E or 0x30 <= s[i] <= 0x39):
            i += 1
        if i == 0:
            raise TimeError("time: missing unit in duration " + _time_quote(text))
        unit_text = s[:i].decode("utf-8", "surrogatepass")
        s = s[i:]
        unit = _UNITS.get(unit_text)
        if unit is None:
            raise TimeError(
                f"time: unknown unit {_time_quote(unit_text)} in duration {_time_quote(text)}"
            )
        if whole > _U63 // unit:
            raise invalid
        whole *= unit
        if fraction > 0:
            whole += int(float(fraction) * (float(unit) / scale))
            if whole > _U63:
                raise invalid
        total += whole
        if total > _U63:
            raise invalid
    if negative:
        return -total
    if total > _U63 - 1:
        raise invalid
    return total


# -- dates and times ---------------------------------------------------------------


def _is_leap(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def _days_in(month: int, year: int) -> int:
    if month == 2:
        return 29 if _is_leap(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def _days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year, 0 included)."""
    y = year - (month <= 2)
    era = (y if y >= 0 else y - 399) // 400
    yoe = y - era * 400
    doy = (153 * (month + (-3 if month > 2 else 9)) + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146097 + doe - 719468


@dataclass(frozen=True, slots=True)
class GoTime:
    """A parsed time: the wall clock fields, nanoseconds, and the UTC offset in seconds."""

    year: int
    month: int
    day: int
    hour: int
    minute: int
    second: int
    nanosecond: int
    offset: int  # seconds east of UTC

    def unix(self) -> int:
        """Seconds since the epoch (`Time.Unix`)."""
        days = _days_from_civil(self.year, self.month, self.day)
        return days * 86400 + self.hour * 3600 + self.minute * 60 + self.second - self.offset

    def as_datetime(self) -> datetime.datetime:
        """The time as an aware datetime (its year must be 1-9999)."""
        zone = datetime.timezone(datetime.timedelta(seconds=self.offset))
        return datetime.datetime(
            self.year,
            self.month,
            self.day,
            self.hour,
            self.minute,
            self.second,
            self.nanosecond // 1000,
            tzinfo=zone,
        )


def _digits(text: str, start: int, count: int) -> int | None:
    part = text[start : start + count]
    if len(part) != count or not all("0" <= c <= "9" for c in part):
        return None
    return int(part)


def _parse_error(layout: str, value: str, detail: str = "") -> TimeError:
    # Go's ParseError text, without the element names (nothing here prints them).
    return TimeError(f"parsing time {_time_quote(value)} as {_time_quote(layout)}{detail}")


RFC3339: Final = "2006-01-02T15:04:05Z07:00"
RFC3339_FULL_DATE: Final = "2006-01-02"


def _parse_date(value: str, layout: str) -> tuple[int, int, int, int]:
    """`YYYY-MM-DD` at the start of `value`: year, month, day and the length read."""
    year = _digits(value, 0, 4)
    month = _digits(value, 5, 2)
    day = _digits(value, 8, 2)
    if year is None or month is None or day is None or value[4:5] != "-" or value[7:8] != "-":
        raise _parse_error(layout, value)
    if not 1 <= month <= 12:
        raise _parse_error(layout, value, ": month out of range")
    return year, month, day, 10


def parse_date(value: str) -> GoTime:
    """`time.Parse("2006-01-02", value)`."""
    year, month, day, end = _parse_date(value, RFC3339_FULL_DATE)
    if end != len(value):
        raise _parse_error(RFC3339_FULL_DATE, value, ": extra text: " + _time_quote(value[end:]))
    if not 1 <= day <= _days_in(month, year):
        raise _parse_error(RFC3339_FULL_DATE, value, ": day out of range")
    return GoTime(year, month, day, 0, 0, 0, 0, 0)


def parse_rfc3339(value: str) -> GoTime:
    """`time.Parse(time.RFC3339, value)`, Go's fast path and general parser together."""
    year, month, day, i = _parse_date(value, RFC3339)
    if value[i : i + 1] != "T":
        raise _parse_error(RFC3339, value)
    i += 1
    # The hour: one or two digits (Go's general parser), 0-23.
    if _digits(value, i, 1) is None:
        raise _parse_error(RFC3339, value)
    width = 2 if _digits(value, i + 1, 1) is not None else 1
    hour = int(value[i : i + width])
    i += width
    minute = _digits(value, i + 1, 2)
    second = _digits(value, i + 4, 2)
    if value[i : i + 1] != ":" or minute is None or value[i + 3 : i + 4] != ":" or second is None:
        raise _parse_error(RFC3339, value)
    if hour >= 24:
        raise _parse_error(RFC3339, value, ": hour out of range")
    if minute >= 60:
        raise _parse_error(RFC3339, value, ": minute out of range")
    if second >= 60:
        raise _parse_error(RFC3339, value, ": second out of range")
    i += 6
    nanos = 0
    if value[i : i + 1] in (".", ",") and _digits(value, i + 1, 1) is not None:
        end = i + 1
        while end < len(value) and "0" <= value[end] <= "9":
            end += 1
        nanos = int(value[i + 1 : min(end, i + 10)].ljust(9, "0"))
        i = end
    zone = value[i:]
    if zone.startswith("Z"):
        offset = 0
        rest = zone[1:]
    else:
        hours = _digits(zone, 1, 2)
        minutes = _digits(zone, 4, 2)
        if len(zone) < 6 or zone[3] != ":" or hours is None or minutes is None:
            raise _parse_error(RFC3339, value)
        if zone[0] not in "+-":
            raise _parse_error(RFC3339, value)
        if hours > 24:
            raise _parse_error(RFC3339, value, ": time zone offset hour out of range")
        if minutes > 60:
            raise _parse_error(RFC3339, value, ": time zone offset minute out of range")
        offset = (hours * 60 + minutes) * 60 * (-1 if zone[0] == "-" else 1)
        rest = zone[6:]
    if rest:
        raise _parse_error(RFC3339, value, ": extra text: " + _time_quote(rest))
    if not 1 <= day <= _days_in(month, year):
        raise _parse_error(RFC3339, value, ": day out of range")
    return GoTime(year, month, day, hour, minute, second, nanos, offset)
