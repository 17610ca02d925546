"""Run-time cost accounting, modelled on cel-go's `CostTracker`.

Kubernetes evaluates every selector with a runtime cost limit of
`CELSelectorExpressionMaxCost` (1,000,000) and aborts with "actual cost limit
exceeded". cel-python has no cost tracking, so the interpreter charges units
the way cel-go's tracker does:

* constants 0; each variable reference, field selection and index 1;
* `&&`, `||` and `?:` nothing of their own; other operators and functions 1,
  except those whose work grows with their input: string equality, ordering
  and concatenation `ceil(0.1 * size)`, `matches`/`find`/`findAll`
  `ceil(0.1 * (1 + len(string))) * ceil(0.25 * len(regex))`, `contains` the
  product of both string traversals, `@in` on a list its size, the
  Kubernetes list functions one traversal of the list, `lowerAscii`/`trim`/...
  one traversal of the string, `split`/`replace`/`join` two;
* list literals 10 and map literals 30 (cel-go's create costs);
* comprehensions charge what cel-go's macro expansion would: per iteration
  the loop condition (`all` 2, `exists` 3) plus the step (1 for the
  accumulator, 10 + 2 more for each element `map`/`filter` append) plus the
  body, and 10 for `cel.bind`'s empty range.

Differences, all conservative or negligible: list concatenation is charged
`1 + ceil(0.1 * result size)` instead of 1 because Python lists are copied,
not chained; functions cel-go's tracker knows nothing special about cost 1
here too. The limit is checked after every comprehension iteration and
after every size-dependent call, so a runaway expression stops within a few
steps of crossing it instead of at the next 100-iteration interrupt check.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Final

# k8s.io/api/resource/v1 CELSelectorExpressionMaxCost
CEL_SELECTOR_EXPRESSION_MAX_COST: Final = 1_000_000

# cel-go common/cost.go
STRING_TRAVERSAL_FACTOR: Final = 0.1
REGEX_LENGTH_FACTOR: Final = 0.25
LIST_CREATE_COST: Final = 10
MAP_CREATE_COST: Final = 30

COST_LIMIT_MESSAGE: Final = "operation cancelled: actual cost limit exceeded"


class CostLimitExceeded(Exception):
    """Raised by the interpreter when an evaluation goes over its budget."""


_SIZED: Final = frozenset({str, bytes, list, tuple, dict})
_UNSIZED: Final = frozenset({int, float, bool, type(None)})


def size_of(value: Any) -> int:
    """cel-go's `actualSize`: length of strings, bytes, lists and maps; 1 otherwise."""
    kind = type(value)
    if kind in _SIZED:
        return len(value)
    if kind in _UNSIZED:
        return 1
    if isinstance(value, str | bytes | list | tuple | Mapping):
        return len(value)
    return 1


def traversal(size: int, factor: float = STRING_TRAVERSAL_FACTOR) -> int:
    return math.ceil(size * factor)


def string_traversal(value: Any) -> int:
    t = type(value)
    if t is str or t is bytes:
        return math.ceil(len(value) * STRING_TRAVERSAL_FACTOR)
    return traversal(size_of(value))


def regex_cost(text: Any, pattern: Any) -> int:
    text_cost = math.ceil((1 + size_of(text)) * STRING_TRAVERSAL_FACTOR)
    return text_cost * math.ceil(size_of(pattern) * REGEX_LENGTH_FACTOR)


def data_traversal(value: Any) -> int:
    """Kubernetes' `traversalCost` (charged by isSorted/sum/min/max/indexOf): strings
    `floor(0.1 * len)`, lists and maps the sum over their items, anything else 1."""
    if isinstance(value, str | bytes):
        return int(len(value) * STRING_TRAVERSAL_FACTOR)
    if isinstance(value, list | tuple):
        return sum(data_traversal(item) for item in value)
    if isinstance(value, Mapping):
        return sum(data_traversal(k) + data_traversal(v) for k, v in value.items())
    return 1
