"""Compiling and evaluating DRA device selectors: the package's public entry point.

`compile_selector` does what the scheduler's CEL cache does: length check,
parse, type check against the `device` declaration (with or without
`allowMultipleAllocations`, the DRAConsumableCapacity field), the bool
result check, planning; compiled selectors are kept in an LRU cache keyed by
expression, feature flags and Kubernetes release, failures included.
`CompiledSelector.matches` evaluates against one device under the runtime
cost limit. Every failure is a `dra_driver.errors.CelError` naming the
expression and position.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from dra_driver.errors import CelError
from dra_driver.memo import memoized
from dra_driver.scheduling.cel import library  # noqa: F401 - registers all functions
from dra_driver.scheduling.cel.ast import Node
from dra_driver.scheduling.cel.checker import LIST_ATTRIBUTE_FUNCTIONS, Checker, device_fields
from dra_driver.scheduling.cel.cost import (
    CEL_SELECTOR_EXPRESSION_MAX_COST,
    COST_LIMIT_MESSAGE,
    CostLimitExceeded,
)
from dra_driver.scheduling.cel.device import DeviceView
from dra_driver.scheduling.cel.diagnostics import CompileError, EvalError, to_cel_error
from dra_driver.scheduling.cel.environment import strict_url_colons
from dra_driver.scheduling.cel.goneturl import STRICT_COLONS
from dra_driver.scheduling.cel.interpreter import Activation, Fn, Planner
from dra_driver.scheduling.cel.parser import parse
from dra_driver.scheduling.cel.types import BOOL, DEVICE, CelType
from dra_driver.scheduling.cel.values import kind_of

CACHE_SIZE: Final = 1024
# k8s.io/api/resource/v1 CELSelectorExpressionMaxLength
CEL_SELECTOR_EXPRESSION_MAX_LENGTH: Final = 10 * 1024


class CompiledSelector:
    """A selector ready to evaluate; obtain one from `compile_selector`."""

    __slots__ = (
        "_program",
        "_strict_colons",
        "consumable_capacity",
        "cost_limit",
        "expression",
        "output_type",
        "release",
    )

    def __init__(
        self,
        expression: str,
        program: Fn,
        output_type: CelType,
        *,
        consumable_capacity: bool,
        release: str | None = None,
        cost_limit: int = CEL_SELECTOR_EXPRESSION_MAX_COST,
    ) -> None:
        self.expression = expression
        self.output_type = output_type
        self.consumable_capacity = consumable_capacity
        self.release = release
        self.cost_limit = cost_limit
        self._program = program
        self._strict_colons = strict_url_colons(release)

    def __repr__(self) -> str:
        return f"CompiledSelector({self.expression!r})"

    def matches(self, device: DeviceView) -> bool:
        """Whether `device` satisfies the selector.

        Raises CelError on run-time errors (a missing attribute, a type
        mismatch, the cost limit) and when the result is not a bool.
        """
        return self.matches_with_cost(device)[0]

    def matches_with_cost(self, device: DeviceView) -> tuple[bool, int]:
        """`matches`, plus the cost the evaluation was charged."""
        result, cost = _run(
            self._program,
            self.expression,
            device,
            self.cost_limit,
            None,
            strict_colons=self._strict_colons,
        )
        if result is True or result is False:
            return result, cost
        raise to_cel_error(
            self.expression,
            f"CEL result of type {kind_of(result)} could not be converted to bool",
            None,
        )


class CompiledExpression:
    """An expression of any result type in the selector environment (see `compile_expression`)."""

    __slots__ = ("_program", "_strict_colons", "cost_limit", "expression", "output_type")

    def __init__(
        self,
        expression: str,
        program: Fn,
        output_type: CelType,
        cost_limit: int,
        release: str | None = None,
    ) -> None:
        self.expression = expression
        self.output_type = output_type
        self.cost_limit = cost_limit
        self._program = program
        self._strict_colons = strict_url_colons(release)

    def evaluate(
        self, device: DeviceView, variables: Mapping[str, Any] | None = None
    ) -> tuple[Any, int]:
        """The expression's value for `device` (and the declared variables) and its cost."""
        return _run(
            self._program,
            self.expression,
            device,
            self.cost_limit,
            variables,
            strict_colons=self._strict_colons,
        )


def _run(
    program: Fn,
    expression: str,
    device: DeviceView,
    cost_limit: int,
    variables: Mapping[str, Any] | None,
    *,
    strict_colons: bool,
) -> tuple[Any, int]:
    """Evaluates `program` under the cost limit; failures become CelError."""
    act = Activation(device.cel_value(), cost_limit)
    if variables:
        act.vars.update(variables)
    token = STRICT_COLONS.set(strict_colons)
    try:
        result = program(act)
    except EvalError as exc:
        raise to_cel_error(expression, exc.message, exc.pos) from None
    except CostLimitExceeded:
        raise to_cel_error(expression, COST_LIMIT_MESSAGE, None) from None
    except RecursionError:
        raise to_cel_error(expression, "expression nests too deeply", None) from None
    finally:
        STRICT_COLONS.reset(token)
    if act.cost > cost_limit:
        raise to_cel_error(expression, COST_LIMIT_MESSAGE, None)
    return result, act.cost


def compile_expression(
    expression: str,
    *,
    consumable_capacity: bool = False,
    list_type_attributes: bool = True,
    variables: Mapping[str, CelType] | None = None,
    release: str | None = None,
) -> CompiledExpression:
    """Compiles `expression` like a selector, but for any result type (not cached).

    This is the selector environment (the `device` variable, the same
    libraries and limits) without the bool result check; `variables`
    declares further variables, which Kubernetes' selectors do not have.
    `release` is as for `compile_selector`.
    """
    tree, output_type = _check(
        expression, consumable_capacity, list_type_attributes, dict(variables or {})
    )
    program = _plan(expression, tree, strict_url_colons(release))
    return CompiledExpression(
        expression, program, output_type, CEL_SELECTOR_EXPRESSION_MAX_COST, release
    )


def compile_selector(
    expression: str,
    *,
    consumable_capacity: bool = False,
    list_type_attributes: bool = True,
    release: str | None = None,
) -> CompiledSelector:
    """Compiles a device selector (cached); raises CelError if it is not a valid selector.

    `consumable_capacity` declares `device.allowMultipleAllocations`, as the
    DRAConsumableCapacity feature gate does; without it using that field is
    a compile error ("undefined field"). `list_type_attributes` is
    DRAListTypeAttributes (Kubernetes 1.36+): attribute values are typed
    `dyn` (a list attribute can be iterated) and `includes()` is declared.
    It defaults to on because the 1.37 scheduler compiles stored selectors
    with both regardless of the gate; off, `includes` is an undeclared
    reference, as for a new selector on an apiserver without the gate.
    Attributes with list values are turned into CEL lists either way.

    `release` ("1.34" ... "1.37") is the Kubernetes release whose scheduler
    to follow where the release matters (`environment.py`: how `url()`
    treats a host with several colons); None is the newest.
    """
    if not isinstance(expression, str):
        raise CelError(
            f"selector {expression!r}: expression must be a string, not {type(expression).__name__}"
        )
    return _compile_cached(
        expression, bool(consumable_capacity), bool(list_type_attributes), release
    )


@memoized(CACHE_SIZE, errors=(CelError,))
def _compile_cached(
    expression: str, consumable_capacity: bool, list_type_attributes: bool, release: str | None
) -> CompiledSelector:
    """`_compile`, remembered: a selector, or the CelError it does not compile with."""
    return _compile(
        expression,
        consumable_capacity=consumable_capacity,
        list_type_attributes=list_type_attributes,
        release=release,
    )


def clear_cache() -> None:
    """Forgets all compiled selectors."""
    _compile_cached.cache_clear()  # type: ignore[attr-defined]


def _check(
    expression: str,
    consumable_capacity: bool,
    list_type_attributes: bool,
    variables: dict[str, CelType],
) -> tuple[Node, CelType]:
    """Length check, parse and type check: the syntax tree and the result type."""
    # The apiserver measures Go string length, i.e. UTF-8 bytes.
    length = len(expression.encode("utf-8", errors="surrogatepass"))
    if length > CEL_SELECTOR_EXPRESSION_MAX_LENGTH:
        raise to_cel_error(
            expression,
            f"expression is {length} bytes long, "
            f"longer than the maximum of {CEL_SELECTOR_EXPRESSION_MAX_LENGTH}",
            None,
        )
    try:
        tree = parse(expression)
        checker = Checker(
            DEVICE,
            device_fields(consumable_capacity, list_type_attributes),
            variables,
            hidden_functions=frozenset() if list_type_attributes else LIST_ATTRIBUTE_FUNCTIONS,
        )
        output_type = checker.check(tree)
    except CompileError as exc:
        raise to_cel_error(expression, f"compilation failed: {exc.message}", exc.pos) from None
    except RecursionError:
        raise to_cel_error(
            expression, "compilation failed: expression nests too deeply", None
        ) from None
    return tree, output_type


def _plan(expression: str, tree: Node, strict_colons: bool) -> Fn:
    # Calls on literals are evaluated while planning: with the release's URL rules.
    token = STRICT_COLONS.set(strict_colons)
    try:
        return Planner().plan(tree)
    except CompileError as exc:
        raise to_cel_error(expression, f"compilation failed: {exc.message}", exc.pos) from None
    except RecursionError:
        raise to_cel_error(
            expression, "compilation failed: expression nests too deeply", None
        ) from None
    finally:
        STRICT_COLONS.reset(token)


def _compile(
    expression: str, *, consumable_capacity: bool, list_type_attributes: bool, release: str | None
) -> CompiledSelector:
    tree, output_type = _check(expression, consumable_capacity, list_type_attributes, {})
    program = _plan(expression, tree, strict_url_colons(release))
    if not (output_type == BOOL or output_type.is_dynamic):
        raise to_cel_error(
            expression, f"must evaluate to bool or the unknown type, not {output_type}", None
        )
    return CompiledSelector(
        expression,
        program,
        output_type,
        consumable_capacity=consumable_capacity,
        release=release,
    )
