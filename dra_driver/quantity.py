"""Kubernetes resource quantities, written and read the way the apiserver does.

Device capacities (`memory`, `multiprocessors`, counters) travel as quantity
strings. The publisher compares the slices it wants with the slices the
apiserver returns, so the strings we write must already be in the apiserver's
canonical form, or every comparison would see a change that is not there.
CEL's `quantity()` and the allocator need the reverse: a string to an exact
number. Both directions live here, pure and without third-party code.

Canonical form (apimachinery `Quantity.String()` after a parse round trip):

* a non-zero multiple of 1024 is written in BinarySI with the largest binary
  suffix that keeps the mantissa whole: 85899345920 -> "80Gi",
  85520809984 -> "81559Mi", 1024000 -> "1000Ki";
* anything else is written in DecimalSI: 5 -> "5", 1000 -> "1k", 1500 -> "1500".

Go's `NewQuantity(2000, BinarySI).String()` prints "2000", but the apiserver
parses that string as DecimalSI and stores "2k"; we write "2k" so what we send
is what we read back. For byte counts (always multiples of 1 MiB here) the two
agree.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Final

from dra_driver.errors import ConfigError

INT64_MAX: Final = 2**63 - 1

_BINARY_SUFFIXES: Final = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_DECIMAL_SUFFIXES: Final = ("", "k", "M", "G", "T", "P", "E")

# suffix -> (base, exponent); what apimachinery's quantitySuffixer.interpret accepts
_BINARY_EXPONENTS: Final[dict[str, int]] = {
    "Ki": 10,
    "Mi": 20,
    "Gi": 30,
    "Ti": 40,
    "Pi": 50,
    "Ei": 60,
}
_DECIMAL_EXPONENTS: Final[dict[str, int]] = {
    "n": -9,
    "u": -6,
    "m": -3,
    "": 0,
    "k": 3,
    "M": 6,
    "G": 9,
    "T": 12,
    "P": 15,
    "E": 18,
}

# sign, whole digits, optional fraction, suffix (letters from apimachinery's
# scanner set, then an optional signed exponent).
_QUANTITY_RE: Final = re.compile(
    r"(?P<sign>[+-]?)(?P<whole>[0-9]*)(?:\.(?P<frac>[0-9]*))?(?P<suffix>[eEinumkKMGTP]*[-+]?[0-9]*)"
)
_EXPONENT_RE: Final = re.compile(r"[eE](?P<exp>[-+]?[0-9]+)")
_NANO: Final = Fraction(1, 10**9)
MAX_DECIMAL_EXPONENT: Final = 1000


def format_quantity(n: int) -> str:
    """The canonical quantity string for an integer, as the apiserver prints it.

    Raises ConfigError for non-integers and for values outside int64, which a
    BinarySI quantity cannot hold.
    """
    if isinstance(n, bool) or not isinstance(n, int):
        raise ConfigError(f"quantity {n!r}: must be an integer")
    if abs(n) > INT64_MAX:
        raise ConfigError(f"quantity {n}: outside the int64 range a quantity can hold")
    if n == 0:
        return "0"
    sign = "-" if n < 0 else ""
    mantissa = abs(n)
    if mantissa % 1024 == 0:
        power = 0
        while mantissa % 1024 == 0 and power < len(_BINARY_SUFFIXES) - 1:
            mantissa //= 1024
            power += 1
        return f"{sign}{mantissa}{_BINARY_SUFFIXES[power]}"
    power = 0
    while mantissa % 1000 == 0 and power < len(_DECIMAL_SUFFIXES) - 1:
        mantissa //= 1000
        power += 1
    return f"{sign}{mantissa}{_DECIMAL_SUFFIXES[power]}"


def parse_quantity(text: str) -> Fraction:
    """The exact value of a Kubernetes quantity string.

    Accepts what apimachinery's `ParseQuantity` accepts: an optional sign,
    digits with an optional fraction, and one suffix out of Ki Mi Gi Ti Pi Ei
    (powers of 1024), n u m k M G T P E (powers of 1000), or a decimal exponent
    (`1e3`, `5E-2`). Like the apiserver, non-zero values are rounded away from
    zero to a whole number of nano units, and BinarySI values are capped at
    2^63-1. Stricter than apimachinery in one way: a number needs at least one
    digit ("", "-", "." are errors, not zero).

    Raises ConfigError naming the string when it is not a quantity.
    """
    if not isinstance(text, str):
        raise ConfigError(f"quantity {text!r}: must be a string")
    match = _QUANTITY_RE.fullmatch(text)
    if match is None:
        raise ConfigError(f"quantity {text!r}: not a number with an optional unit suffix")
    whole = match["whole"]
    frac = match["frac"] or ""
    if not whole and not frac:
        raise ConfigError(f"quantity {text!r}: has no digits")
    suffix = match["suffix"]
    binary = suffix in _BINARY_EXPONENTS
    if binary:
        multiplier = Fraction(2) ** _BINARY_EXPONENTS[suffix]
    elif suffix in _DECIMAL_EXPONENTS:
        multiplier = Fraction(10) ** _DECIMAL_EXPONENTS[suffix]
    else:
        exponent = _EXPONENT_RE.fullmatch(suffix)
        if exponent is None:
            raise ConfigError(f"quantity {text!r}: unknown suffix {suffix!r}")
        power = int(exponent["exp"])
        if abs(power) > MAX_DECIMAL_EXPONENT:
            # The exact value of 1e999999999 would take gigabytes to build; no
            # device or request needs more than a few hundred decimal digits.
            raise ConfigError(
                f"quantity {text!r}: exponent out of range (|exponent| <= {MAX_DECIMAL_EXPONENT})"
            )
        multiplier = Fraction(10) ** power
    magnitude = (Fraction(int(whole or "0")) + _fraction_digits(frac)) * multiplier
    if magnitude:
        # Round away from zero to whole nanos, as ParseQuantity does.
        nanos = -((-magnitude) // _NANO)
        magnitude = nanos * _NANO
    if binary and magnitude > INT64_MAX:
        magnitude = Fraction(INT64_MAX)
    return -magnitude if match["sign"] == "-" else magnitude


def _fraction_digits(digits: str) -> Fraction:
    return Fraction(int(digits), 10 ** len(digits)) if digits else Fraction(0)
