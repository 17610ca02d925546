"""Quantities as the allocator needs them: exact values that remember their format.

The allocator compares capacities and counters exactly (`parse_quantity` from
`dra_driver.quantity` gives a Fraction), but it also writes quantities back into
`status.allocation.devices.results[].consumedCapacity`. Kubernetes prints a
quantity in the format it was parsed with (BinarySI for `Gi`-style suffixes,
DecimalSI for `k`/`m`/plain numbers, DecimalExponent for `1e3`), so a consumed
capacity of "1024" stays "1024" and "1Gi" stays "1Gi". `format_quantity` in
`dra_driver.quantity` only knows integers and always prefers BinarySI, which is
right for the slice publisher but not for echoing a claim's request; this module
adds the format-preserving canonical printing of apimachinery's
`Quantity.String()`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Final, Literal

from dra_driver.errors import AllocationError, ConfigError
from dra_driver.quantity import format_quantity, parse_quantity

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

_BINARY_SUFFIXES: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIX_BY_EXPONENT: Final[dict[int, str]] = {
    -9: "n",
    -6: "u",
    -3: "m",
    0: "",
    3: "k",
    6: "M",
    9: "G",
    12: "T",
    15: "P",
    18: "E",
}
_ZERO: Final = Fraction(0)


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact quantity value plus the format Kubernetes would print it in."""

    value: Fraction
    fmt: Format = "DecimalSI"

    def __str__(self) -> str:
        return format_canonical(self.value, self.fmt)

    def ceil_int(self) -> int:
        """apimachinery `Quantity.Value()`: the value rounded up to an integer."""
        return math.ceil(self.value)


def quantity_format(text: str) -> Format:
    """The format apimachinery assigns to a quantity string, from its suffix."""
    stripped = text.rstrip("0123456789+-")
    if stripped.endswith("i"):
        return "BinarySI"
    if stripped.endswith(("e", "E")):
        return "DecimalExponent"
    return "DecimalSI"


def to_quantity(raw: Any, where: str) -> Quantity:
    """Parse an API quantity (string or number) or raise AllocationError naming `where`."""
    text = str(raw) if isinstance(raw, int | float) and not isinstance(raw, bool) else raw
    try:
        value = parse_quantity(text)
    except ConfigError as exc:
        raise AllocationError(f"{where}: {exc}") from exc
    return Quantity(value, quantity_format(text))


def readable(value: Fraction) -> str:
    """A quantity string for messages: integers like the apiserver prints them
    (`80Gi`, `2k`), other values in DecimalSI (`500m`)."""
    if value.denominator == 1:
        try:
            return format_quantity(int(value))
        except ConfigError:
            return str(int(value))
    return format_canonical(value, "DecimalSI")


def format_canonical(value: Fraction, fmt: Format) -> str:
    """apimachinery's canonical `Quantity.String()` for a value in a format."""
    if value == _ZERO:
        return "0"
    if fmt == "BinarySI":
        if -1024 < value < 1024 or value.denominator != 1:
            fmt = "DecimalSI"
        else:
            return _binary(int(value))
    return _decimal(value, fmt)


def _binary(n: int) -> str:
    sign = "-" if n < 0 else ""
    mantissa = abs(n)
    power = 0
    while mantissa % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
        mantissa //= 1024
        power += 1
    return f"{sign}{mantissa}{_BINARY_SUFFIXES[power]}"


def _decimal(value: Fraction, fmt: Format) -> str:
    sign = "-" if value < 0 else ""
    magnitude = abs(value)
    # Quantities hold at most nano precision; round up like the apiserver does.
    nanos = -((-magnitude * 10**9) // 1)
    mantissa, exponent = int(nanos), -9
    while mantissa % 10 == 0:
        mantissa //= 10
        exponent += 1
    remainder = exponent % 3
    if remainder:
        mantissa *= 10**remainder
        exponent -= remainder
    if fmt == "DecimalSI" and exponent in _DECIMAL_SUFFIX_BY_EXPONENT:
        suffix = _DECIMAL_SUFFIX_BY_EXPONENT[exponent]
    else:
        suffix = "" if exponent == 0 else f"e{exponent}"
    return f"{sign}{mantissa}{suffix}"
