"""The CEL `kubernetes.Quantity` type: device capacities and `quantity()` results.

The value is kept exact (a Fraction from `dra_driver.quantity.parse_quantity`,
which implements apimachinery's `ParseQuantity`), so `80Gi` compares equal to
`85899345920` and `0.2G` to `200M`, as resource.Quantity's `Cmp` does.
Parse errors use apimachinery's wording because selectors that print them
were written against it.
"""

from __future__ import annotations

import functools
import math
import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

from dra_driver.errors import ConfigError
from dra_driver.quantity import parse_quantity as _parse_exact

INT64_MIN: Final = -(2**63)
INT64_MAX: Final = 2**63 - 1

# apimachinery's splitRE; a string that does not match it gets ErrFormatWrong.
_FORMAT_RE: Final = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_FORMAT_ERROR: Final = (
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
)
_EXPONENT_RE: Final = re.compile(r"[eE]([-+]?[0-9]+)$")
# Decimal exponents beyond this are refused: an exact value of 10**(10**9)
# cannot be built in memory. apimachinery would accept them; no device
# capacity or sensible selector comes anywhere near.
_MAX_EXPONENT: Final = 1000


class QuantityError(ValueError):
    """The string is not a Kubernetes quantity."""


@dataclass(frozen=True, slots=True)
class Quantity:
    """An exact Kubernetes resource quantity."""

    value: Fraction

    def compare(self, other: Quantity) -> int:
        if self.value == other.value:
            return 0
        return 1 if self.value > other.value else -1

    def sign(self) -> int:
        return (self.value > 0) - (self.value < 0)

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
        if self.value.denominator == 1:
            return str(self.value.numerator)
        return str(float(self.value))


@functools.lru_cache(maxsize=4096)
def parse_quantity(text: str) -> Quantity:
    """Parses a quantity string; raises QuantityError with apimachinery's message."""
    if not _FORMAT_RE.match(text):
        raise QuantityError(_FORMAT_ERROR)
    exponent = _EXPONENT_RE.search(text)
    if exponent is not None and abs(int(exponent.group(1))) > _MAX_EXPONENT:
        raise QuantityError(f"quantity exponent out of the supported range (±{_MAX_EXPONENT})")
    try:
        return Quantity(_parse_exact(text))
    except ConfigError as exc:
        message = str(exc)
        if "suffix" in message:
            raise QuantityError("unable to parse quantity's suffix") from exc
        raise QuantityError(_FORMAT_ERROR) from exc
