"""Durations and timestamps parsed with Go's rules, as cel-go converts strings."""

from __future__ import annotations

import pytest

from dra_driver.scheduling.cel.gotime import (
    TimeError,
    parse_date,
    parse_duration,
    parse_rfc3339,
)

SECOND = 1_000_000_000


@pytest.mark.parametrize(
    ("text", "nanos"),
    [
        ("0", 0),
        ("-0", 0),
        ("+5s", 5 * SECOND),
        ("1h2m3s4ms5us6ns", 3_723_004_005_006),
        ("1.5h", 5400 * SECOND),
        ("-1.5h", -5400 * SECOND),
        (".5s", SECOND // 2),
        ("5.s", 5 * SECOND),
        ("1\u00b5s", 1000),
        ("1\u03bcs", 1000),
        ("2562047h47m16.854775807s", 2**63 - 1),
        ("-2562047h47m16.854775808s", -(2**63)),
        ("0.000000001s", 1),
        ("0.0000000001s", 0),
    ],
)
def test_go_durations(text: str, nanos: int) -> None:
    assert parse_duration(text) == nanos


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", 'time: invalid duration ""'),
        ("1", 'time: missing unit in duration "1"'),
        ("1d", 'time: unknown unit "d" in duration "1d"'),
        ("1h1d", 'time: unknown unit "d" in duration "1h1d"'),
        (".s", 'time: invalid duration ".s"'),
        ("-", 'time: invalid duration "-"'),
        ("1e3s", 'time: unknown unit "e" in duration "1e3s"'),
        ("2562047h47m16.854775808s", 'time: invalid duration "2562047h47m16.854775808s"'),
        ("3000000h", 'time: invalid duration "3000000h"'),
        ("1nns", 'time: unknown unit "nns" in duration "1nns"'),
    ],
)
def test_invalid_go_durations(text: str, message: str) -> None:
    with pytest.raises(TimeError) as info:
        parse_duration(text)
    assert str(info.value) == message


@pytest.mark.parametrize(
    ("text", "fields"),
    [
        ("2011-08-18T19:03:37.010+01:00", (2011, 8, 18, 19, 3, 37, 10_000_000, 3600)),
        ("2000-02-29T00:00:00Z", (2000, 2, 29, 0, 0, 0, 0, 0)),
        ("2000-01-01T00:00:00.123456789123Z", (2000, 1, 1, 0, 0, 0, 123_456_789, 0)),
        # Go's general parser: a one-digit hour, a comma before the fraction, a 24:00 offset.
        ("2000-01-01T1:00:00Z", (2000, 1, 1, 1, 0, 0, 0, 0)),
        ("2000-01-01T00:00:00,5Z", (2000, 1, 1, 0, 0, 0, 500_000_000, 0)),
        ("2000-01-01T00:00:00-24:00", (2000, 1, 1, 0, 0, 0, 0, -86400)),
        ("0000-01-01T00:00:00Z", (0, 1, 1, 0, 0, 0, 0, 0)),
    ],
)
def test_rfc3339_timestamps(text: str, fields: tuple[int, ...]) -> None:
    parsed = parse_rfc3339(text)
    assert (
        parsed.year,
        parsed.month,
        parsed.day,
        parsed.hour,
        parsed.minute,
        parsed.second,
        parsed.nanosecond,
        parsed.offset,
    ) == fields


@pytest.mark.parametrize(
    "text",
    [
        "2000-01-01 00:00:00Z",
        "2000-01-01t00:00:00z",
        "2000-01-01T00:00:00+0100",
        "2000-01-01T00:00:00",
        "2000-01-01",
        "2000-1-01T00:00:00Z",
        "2000-13-01T00:00:00Z",
        "1900-02-29T00:00:00Z",
        "2000-01-01T24:00:00Z",
        "2000-01-01T00:60:00Z",
        "2000-01-01T00:00:60Z",
        "2000-01-01T00:00:00ZZ",
        "2000-01-01T00:00:00+25:00",
        "+2000-01-01T00:00:00Z",
    ],
)
def test_invalid_rfc3339_timestamps(text: str) -> None:
    with pytest.raises(TimeError):
        parse_rfc3339(text)


def test_unix_seconds_cover_year_zero_and_offsets() -> None:
    assert parse_rfc3339("1970-01-01T00:00:00Z").unix() == 0
    assert parse_rfc3339("0001-01-01T00:00:00Z").unix() == -62135596800
    assert parse_rfc3339("9999-12-31T23:59:59Z").unix() == 253402300799
    assert parse_rfc3339("0001-01-01T00:00:00+01:00").unix() == -62135596800 - 3600
    assert parse_rfc3339("0000-12-31T00:00:00Z").unix() == -62135596800 - 86400


@pytest.mark.parametrize(
    ("text", "valid"),
    [
        ("2020-01-01", True),
        ("2020-02-29", True),
        ("2021-02-29", False),
        ("2020-01-32", False),
        ("2020-1-1", False),
        ("2020-01-01T00:00:00Z", False),
        ("20200101", False),
    ],
)
def test_go_dates(text: str, valid: bool) -> None:
    if valid:
        parse_date(text)
    else:
        with pytest.raises(TimeError):
            parse_date(text)
