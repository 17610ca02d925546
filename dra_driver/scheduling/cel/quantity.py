"""CEL's `quantity()`: the one parser (`parse_quantity`) with apimachinery's error messages.

The CEL `kubernetes.Quantity` type is `dra_driver.kube.quantity.Quantity` (exact,
so `80Gi` compares equal to `85899345920` and `0.2G` to `200M`, as
resource.Quantity's `Cmp` does). Parse errors here use apimachinery's
wording, because selectors that print them were written against it; the core
error's `problem` picks the message.
"""

from __future__ import annotations

from typing import Final

from dra_driver.errors import QuantityError
from dra_driver.kube.quantity import MAX_DECIMAL_EXPONENT, Quantity, parse_quantity

# apimachinery's ErrFormatWrong and ErrSuffix; the exponent limit is ours
# (apimachinery would accept 1e999999999, which cannot be built exactly).
_MESSAGES: Final = {
    "format": "quantities must match the regular expression "
    "'^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'",
    "suffix": "unable to parse quantity's suffix",
    "exponent": f"quantity exponent out of the supported range (±{MAX_DECIMAL_EXPONENT})",
}


def cel_quantity(text: str) -> Quantity:
    """`parse_quantity`, raising QuantityError with apimachinery's message."""
    try:
        return parse_quantity(text)
    except QuantityError as exc:
        raise QuantityError(_MESSAGES[exc.problem], problem=exc.problem) from exc
