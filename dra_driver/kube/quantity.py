"""Kubernetes resource quantities: one `Quantity` to parse, compare and print.

Device capacities (`memory`, `multiprocessors`, counters), claim requests,
CEL's `quantity()` and the slice publisher all deal in quantity strings, and
all of them use this module:

* `parse_quantity`, the one parser, reads a string to a `Quantity`: an exact
  value (a Fraction, `.value`) and the format apimachinery gives it (BinarySI for `Gi`-style
  suffixes, DecimalSI for `k`/`m`/plain numbers, DecimalExponent for `1e3`).
  The syntax is checked here (apimachinery's grammar is stricter than the
  Python client's), the number is computed exactly as a Fraction (digits
  times the suffix's power of 1024 or 10) and rounded like `ParseQuantity`
  (away from zero to whole nano units; BinarySI capped at 2^63-1). Errors
  are `QuantityError`, whose `problem` says which rule broke.
* `Quantity` compares by value (`80Gi == 85899345920`, as resource.Quantity's
  `Cmp`), and prints apimachinery's canonical `Quantity.String()` in its format,
  so a consumed capacity of "1024" stays "1024" and "1Gi" stays "1Gi".
* `format_quantity` prints an integer the way the apiserver stores it after a
  round trip: a non-zero multiple of 1024 in BinarySI with the largest suffix
  that keeps the mantissa whole (85899345920 -> "80Gi", 1024000 -> "1000Ki"),
  anything else in DecimalSI (5 -> "5", 1000 -> "1k"). Go's
  `NewQuantity(2000, BinarySI).String()` prints "2000", but the apiserver
  parses that as DecimalSI and stores "2k"; we write "2k" so what the
  publisher sends is what it reads back.

The canonical printing is written here: the Python client has none (its
`format_quantity` prints a value in a suffix the caller picks). So is the
multiplication: the client's `parse_quantity` computes the same value (a
test checks the two agree), but importing it loads the whole kubernetes
client, half a second of CPU at every start of the plugin and the CLI.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Final, Literal

from dra_driver.errors import ConfigError, QuantityError
from dra_driver.memo import memoized

Format = Literal["BinarySI", "DecimalSI", "DecimalExponent"]

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1
MAX_DECIMAL_EXPONENT: Final = 1000

_BINARY_SUFFIXES: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES: Final = frozenset(("n", "u", "m", "", "k", "M", "G", "T", "P", "E"))
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

# sign, whole digits, optional fraction, suffix (letters from apimachinery's
# scanner set, then an optional signed exponent).
_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<suffix>[eEinumkKMGTP]*[-+]?[0-9]*)"
)
_EXPONENT_RE: Final = re.compile(r"[eE](?P<exp>[-+]?[0-9]+)")
_NANO: Final = Fraction(1, 10**9)
_BINARY_POWER: Final = {"K": 1, "M": 2, "G": 3, "T": 4, "P": 5, "E": 6}
_DECIMAL_POWER: Final = {
    suffix: exponent for exponent, suffix in _DECIMAL_SUFFIX_BY_EXPONENT.items()
}
_ZERO: Final = Fraction(0)


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact quantity value plus the format Kubernetes prints it in.

    Equal and ordered by value only, like resource.Quantity's `Cmp`.
    """

    value: Fraction
    fmt: Format = field(default="DecimalSI", compare=False)

    def compare(self, other: Quantity) -> int:
        """-1, 0 or 1, as `Quantity.Cmp`."""
        return (self.value > other.value) - (self.value < other.value)

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

    def ceil_int(self) -> int:
        """apimachinery `Quantity.Value()`: the value rounded up to an integer."""
        return math.ceil(self.value)

    def as_int64(self) -> int | None:
        """The value as int64 if it is a whole number in range (`AsInt64`), else None."""
        if self.value.denominator != 1:
            return None
        number = self.value.numerator
        return number if INT64_MIN <= number <= INT64_MAX else None

    def as_float(self) -> float:
        try:
            return float(self.value)
        except OverflowError:
            return math.inf if self.value > 0 else -math.inf

    def __str__(self) -> str:
        return format_canonical(self.value, self.fmt)


def parse_quantity(text: str) -> Quantity:
    """The quantity a Kubernetes quantity string means (its exact value is `.value`).

    Accepts what apimachinery's `ParseQuantity` accepts: an optional sign,
    digits with an optional fraction, and one suffix out of Ki Mi Gi Ti Pi Ei
    (powers of 1024), n u m k M G T P E (powers of 1000), or a decimal exponent
    (`1e3`, `5E-2`, |exponent| <= 1000: the exact value of 1e999999999 would
    take gigabytes). Stricter than apimachinery in one way: a number needs at
    least one digit ("", "-", "." are errors, not zero).

    Raises QuantityError (a ConfigError) naming the string when it is not a
    quantity; its `problem` says which rule broke.
    """
    if not isinstance(text, str):
        raise QuantityError(f"quantity {text!r}: must be a string", problem="format")
    return _parse(text)


def quantity_format(text: str) -> Format:
    """The format apimachinery assigns to a quantity string, from its suffix."""
    stripped = text.rstrip("0123456789+-")
    if stripped.endswith("i"):
        return "BinarySI"
    if stripped.endswith(("e", "E")):
        return "DecimalExponent"
    return "DecimalSI"


@memoized(4096)
def _parse(text: str) -> Quantity:
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise QuantityError(
            f"quantity {text!r}: not a number with an optional unit suffix", problem="format"
        )
    if not match["whole"] and not match["frac"]:
        raise QuantityError(f"quantity {text!r}: has no digits", problem="format")
    suffix = match["suffix"]
    fmt: Format
    if suffix[:-1] in _BINARY_POWER and suffix.endswith("i"):
        fmt = "BinarySI"
        multiplier = Fraction(1024 ** _BINARY_POWER[suffix[:-1]])
    elif suffix in _DECIMAL_SUFFIXES:
        fmt = "DecimalSI"
        multiplier = Fraction(10) ** _DECIMAL_POWER[suffix]
    else:
        exponent = _EXPONENT_RE.fullmatch(suffix)
        if exponent is None:
            raise QuantityError(f"quantity {text!r}: unknown suffix {suffix!r}", problem="suffix")
        if abs(int(exponent["exp"])) > MAX_DECIMAL_EXPONENT:
            raise QuantityError(
                f"quantity {text!r}: exponent out of range (|exponent| <= {MAX_DECIMAL_EXPONENT})",
                problem="exponent",
            )
        fmt = "DecimalExponent"
        multiplier = Fraction(10) ** int(exponent["exp"])
    magnitude = Fraction(f"{match['whole'] or '0'}.{match['frac'] or '0'}") * multiplier
    if magnitude:
        # Round away from zero to whole nanos, as ParseQuantity does.
        magnitude = -((-magnitude) // _NANO) * _NANO
    if fmt == "BinarySI" and magnitude > INT64_MAX:
        magnitude = Fraction(INT64_MAX)
    return Quantity(-magnitude if match["sign"] == "-" else magnitude, fmt)


def format_quantity(n: int) -> str:
    """The canonical quantity string for an integer, as the apiserver prints it.

    Raises ConfigError for non-integers and for values outside int64, which a
    BinarySI quantity cannot hold.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise ConfigError(f"quantity {n!r}: must be an integer")
    if abs(n) > INT64_MAX:
        raise ConfigError(f"quantity {n}: outside the int64 range a quantity can hold")
    return format_canonical(Fraction(n), "BinarySI" if n % 1024 == 0 else "DecimalSI")


def readable(value: Fraction) -> str:
    """A quantity string for messages: integers like the apiserver prints them
    (`80Gi`, `2k`), other values in DecimalSI (`500m`)."""
    if value.denominator != 1:
        return format_canonical(value, "DecimalSI")
    return format_quantity(int(value)) if abs(value) <= INT64_MAX else str(int(value))


def format_canonical(value: Fraction, fmt: Format) -> str:
    """apimachinery's canonical `Quantity.String()` for a value in a format."""
    if value == _ZERO:
        return "0"
    if fmt == "BinarySI" and value.denominator == 1 and abs(value) >= 1024:
        return _binary(int(value))
    return _decimal(value, "DecimalExponent" if fmt == "DecimalExponent" else "DecimalSI")


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
    # Quantities hold at most nano precision; round up like the apiserver does.
    nanos = -((-abs(value) * 10**9) // 1)
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
