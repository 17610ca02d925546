"""CEL's standard `duration` and `timestamp` functions, on cel-python's time types.

Device selectors have no clock to compare against, so these matter little;
they are here because every Kubernetes CEL environment has them and a
selector that uses them should compile. Values are cel-python's
`DurationType`/`TimestampType`, which stop at microseconds; `Timestamp` and
`Duration` add the nanoseconds below that (cel-go's precision) for parsing,
comparison, arithmetic and `string(timestamp)`. Getters take an optional
time zone as in CEL.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any, Final

from celpy.celtypes import DurationType, TimestampType

from dra_driver.scheduling.cel import gotime
from dra_driver.scheduling.cel.diagnostics import FunctionError
from dra_driver.scheduling.cel.functions import glob, member, register
from dra_driver.scheduling.cel.types import DURATION, INT, STRING, TIMESTAMP
from dra_driver.scheduling.cel.values import register_kind


def nanos_of(value: Any) -> int:
    """The nanoseconds below a time value's microseconds (0-999; 0 for cel-python's own)."""
    return int(getattr(value, "nanos", 0))


class _NanoOrder:
    """`==`, `<` and `hash` on `_order_key`, which counts the nanoseconds too."""

    _peer: type = object  # the Python type a value compares with
    # Each subclass gives the key: (the cel-python value, its nanoseconds).
    _order_key: Callable[[Any], Any]

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, self._peer):
            return NotImplemented
        return bool(self._order_key(self) == self._order_key(other))

    def __ne__(self, other: object) -> bool:
        result = self.__eq__(other)
        return result if result is NotImplemented else not result

    def __lt__(self, other: Any) -> bool:
        return bool(self._order_key(self) < self._order_key(other))

    def __le__(self, other: Any) -> bool:
        return bool(self._order_key(self) <= self._order_key(other))

    def __gt__(self, other: Any) -> bool:
        return bool(self._order_key(self) > self._order_key(other))

    def __ge__(self, other: Any) -> bool:
        return bool(self._order_key(self) >= self._order_key(other))

    def __hash__(self) -> int:
        return hash(self._order_key(self))


class Timestamp(_NanoOrder, TimestampType):
    """A cel-python timestamp plus `nanos`, the nanoseconds below its microseconds."""

    nanos: int = 0
    _peer = datetime.datetime

    @staticmethod
    def _order_key(value: Any) -> Any:
        return _timestamp_key(value)

    @classmethod
    def of(cls, value: datetime.datetime, nanos: int = 0) -> Timestamp:
        result = cls(value)
        result.nanos = nanos
        return result

    def __str__(self) -> str:
        """RFC 3339 with as many fraction digits as needed, like Go's RFC3339Nano."""
        base = TimestampType.__str__(self)
        zone = "Z" if base.endswith("Z") else base[-6:]
        text = (
            f"{self.year:04d}-{self.month:02d}-{self.day:02d}"
            f"T{self.hour:02d}:{self.minute:02d}:{self.second:02d}"
        )
        fraction = self.microsecond * 1000 + self.nanos
        if fraction:
            text += "." + f"{fraction:09d}".rstrip("0")
        return text + zone


def _timestamp_key(value: datetime.datetime) -> tuple[datetime.datetime, int]:
    plain = datetime.datetime(
        value.year,
        value.month,
        value.day,
        value.hour,
        value.minute,
        value.second,
        value.microsecond,
        value.tzinfo,
    )
    return plain, nanos_of(value)


class Duration(_NanoOrder, DurationType):
    """A cel-python duration plus `nanos`, the nanoseconds below its microseconds (floored)."""

    nanos: int = 0
    _peer = datetime.timedelta

    @staticmethod
    def _order_key(value: Any) -> Any:
        return duration_nanos(value)

    @classmethod
    def from_nanos(cls, total: int) -> Duration:
        micros, nanos = divmod(total, 1000)
        result = cls(datetime.timedelta(microseconds=micros))
        result.nanos = nanos
        return result

    def __str__(self) -> str:
        """cel-go's `string(duration)`: Go's `Duration.Seconds()` printed in full, then `s`."""
        return format_seconds(duration_nanos(self))


def format_seconds(total_nanos: int) -> str:
    """`strconv.FormatFloat(d.Seconds(), 'f', -1, 64) + "s"` for a duration in nanoseconds."""
    whole = -(-total_nanos // 1_000_000_000) if total_nanos < 0 else total_nanos // 1_000_000_000
    seconds = float(whole) + float(total_nanos - whole * 1_000_000_000) / 1e9
    return format(Decimal(repr(seconds)).normalize(), "f") + "s"


register_kind(Timestamp, "google.protobuf.Timestamp")
register_kind(Duration, "google.protobuf.Duration")

_MICROSECOND: Final = datetime.timedelta(microseconds=1)


def duration_nanos(value: datetime.timedelta) -> int:
    """A duration in whole nanoseconds."""
    return (value // _MICROSECOND) * 1000 + nanos_of(value)


# Seconds since the epoch of 0001-01-01T00:00:00Z and 9999-12-31T23:59:59Z, the range
# of cel-go's timestamps (common/types/timestamp.go minUnixTime/maxUnixTime).
MIN_UNIX_TIME: Final = -62135596800
MAX_UNIX_TIME: Final = 253402300799


def _conversion_error(kind: str) -> FunctionError:
    return FunctionError(f"type conversion error from 'string' to '{kind}'")


def parse_duration_literal(text: str) -> Duration:
    """`duration(text)` as cel-go converts it (Go's `time.ParseDuration`)."""
    try:
        return Duration.from_nanos(gotime.parse_duration(text))
    except gotime.TimeError as exc:
        raise _conversion_error("google.protobuf.Duration") from exc


def _duration(value: Any) -> DurationType:
    if isinstance(value, DurationType):
        return value
    return parse_duration_literal(value)


def parse_timestamp_literal(text: str) -> Timestamp:
    """`timestamp(text)` as cel-go converts it (Go's `time.Parse(time.RFC3339, ...)`)."""
    try:
        parsed = gotime.parse_rfc3339(text)
    except gotime.TimeError as exc:
        raise _conversion_error("google.protobuf.Timestamp") from exc
    if not MIN_UNIX_TIME <= parsed.unix() <= MAX_UNIX_TIME:
        raise FunctionError("timestamp overflow")
    return Timestamp.of(parsed.as_datetime(), parsed.nanosecond % 1000)


def _timestamp(value: Any) -> TimestampType:
    if isinstance(value, TimestampType):
        return value
    if isinstance(value, int):
        if not MIN_UNIX_TIME <= value <= MAX_UNIX_TIME:
            raise FunctionError("timestamp overflow")
        return TimestampType(datetime.datetime.fromtimestamp(value, tz=datetime.UTC))
    return parse_timestamp_literal(value)


def time_arith(a: Any, b: Any, op: str) -> Any:
    """`+`/`-` on timestamps and durations, to the nanosecond; OverflowError out of range."""
    if isinstance(a, datetime.datetime) and isinstance(b, datetime.datetime):
        micros = (a - b) // _MICROSECOND
        return Duration.from_nanos(micros * 1000 + nanos_of(a) - nanos_of(b))
    if isinstance(b, datetime.datetime):  # duration + timestamp
        a, b = b, a
    delta = duration_nanos(b) if op == "+" else -duration_nanos(b)
    if isinstance(a, datetime.datetime):
        micros, nanos = divmod(nanos_of(a) + delta, 1000)
        return Timestamp.of(a + datetime.timedelta(microseconds=micros), nanos)
    return Duration.from_nanos(duration_nanos(a) + delta)


register(
    "duration",
    glob("string_to_duration", (STRING,), DURATION, _duration),
    glob("duration_to_duration", (DURATION,), DURATION, _duration),
)
register(
    "timestamp",
    glob("string_to_timestamp", (STRING,), TIMESTAMP, _timestamp),
    glob("int64_to_timestamp", (INT,), TIMESTAMP, _timestamp),
    glob("timestamp_to_timestamp", (TIMESTAMP,), TIMESTAMP, _timestamp),
)


def _getter(name: str) -> Any:
    def get(value: Any, tz: str | None = None) -> int:
        try:
            method = getattr(value, name)
            return int(method(tz) if tz is not None else method())
        except FunctionError:
            raise
        except Exception as exc:  # unknown time zone names and the like
            raise FunctionError(f"{name}: {exc}") from exc

    return get


for _name in (
    "getFullYear",
    "getMonth",
    "getDate",
    "getDayOfMonth",
    "getDayOfWeek",
    "getDayOfYear",
    "getHours",
    "getMinutes",
    "getSeconds",
    "getMilliseconds",
):
    register(
        _name,
        member(f"timestamp_to_{_name}", (TIMESTAMP,), INT, _getter(_name)),
        member(f"timestamp_to_{_name}_with_tz", (TIMESTAMP, STRING), INT, _getter(_name)),
    )
for _name in ("getHours", "getMinutes", "getSeconds", "getMilliseconds"):
    register(_name, member(f"duration_to_{_name}", (DURATION,), INT, _getter(_name)))
