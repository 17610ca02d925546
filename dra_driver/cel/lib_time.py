"""CEL's standard `duration` and `timestamp` functions, on cel-python's time types.

Device selectors have no clock to compare against, so these matter little;
they are here because every Kubernetes CEL environment has them and a
selector that uses them should compile. Values are cel-python's
`DurationType`/`TimestampType` (microsecond precision); getters take an
optional time zone as in CEL.
"""

from __future__ import annotations

import datetime
from typing import Any

from celpy.celtypes import DurationType, TimestampType

from dra_driver.cel.diagnostics import FunctionError
from dra_driver.cel.functions import glob, member, register
from dra_driver.cel.types import DURATION, INT, STRING, TIMESTAMP


def _duration(value: Any) -> DurationType:
    if isinstance(value, DurationType):
        return value
    try:
        return DurationType(value)
    except (ValueError, TypeError, OverflowError) as exc:
        raise FunctionError(f"invalid duration {value!r}: {exc}") from exc


def _timestamp(value: Any) -> TimestampType:
    if isinstance(value, TimestampType):
        return value
    try:
        if isinstance(value, int):
            return TimestampType(datetime.datetime.fromtimestamp(value, tz=datetime.UTC))
        return TimestampType(value)
    except Exception as exc:  # pendulum raises its own parser errors
        raise FunctionError(f"invalid timestamp {value!r}: {exc}") from exc


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
