"""The function registry: every CEL function and operator, with its overloads.

An overload pairs a declaration (parameter and result types, receiver style
or global, as cel-go declares it) with a Python implementation and a cost.
The checker resolves calls against the declarations; the interpreter picks
the overload whose parameter kinds match the run-time argument kinds. Library
modules (`lib_*.py`) register their functions here when imported; `library.py`
imports them all.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.scheduling.cel.types import CelType

CostFunction = Callable[[Sequence[Any], Any], int]


def _param_kind(t: CelType) -> str | None:
    """The run-time kind a parameter requires; None when any value is accepted."""
    if t.is_dynamic or t.is_param:
        return None
    return t.kind


@dataclass(frozen=True)
class Overload:
    """One signature of a function, with its implementation.

    For receiver-style overloads `params[0]` is the receiver's type and the
    implementation receives the receiver as its first argument. `cost` is a
    constant or a function of the evaluated arguments and the result.
    """

    id: str
    params: tuple[CelType, ...]
    result: CelType
    impl: Callable[..., Any]
    member: bool = False
    cost: int | CostFunction = 1
    kinds: tuple[str | None, ...] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "kinds", tuple(_param_kind(p) for p in self.params))

    def accepts_kinds(self, kinds: Sequence[str]) -> bool:
        return len(kinds) == len(self.kinds) and all(
            want is None or want == have for want, have in zip(self.kinds, kinds, strict=True)
        )


@dataclass
class Function:
    """A named function and all its overloads."""

    name: str
    overloads: list[Overload] = field(default_factory=list)

    def has_style(self, member: bool) -> bool:
        return any(o.member == member for o in self.overloads)


FUNCTIONS: dict[str, Function] = {}


def register(name: str, *overloads: Overload) -> None:
    """Adds overloads to function `name` (creating it on first use)."""
    function = FUNCTIONS.setdefault(name, Function(name))
    function.overloads.extend(overloads)


def member(
    id_: str,
    params: Sequence[CelType],
    result: CelType,
    impl: Callable[..., Any],
    cost: int | CostFunction = 1,
) -> Overload:
    """A receiver-style overload (`recv.f(args)`); `params[0]` is the receiver."""
    return Overload(id_, tuple(params), result, impl, member=True, cost=cost)


def glob(
    id_: str,
    params: Sequence[CelType],
    result: CelType,
    impl: Callable[..., Any],
    cost: int | CostFunction = 1,
) -> Overload:
    """A global overload (`f(args)`)."""
    return Overload(id_, tuple(params), result, impl, member=False, cost=cost)
