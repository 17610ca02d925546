"""Evaluating CEL device selectors, with the caching the allocator relies on.

Selectors are pure functions of a device, so their results are cached: within
one `allocate` call per (device, request) like upstream, and across calls per
(expression, device) so a simulator placing thousands of claims with the same
selector evaluates each device once. The evaluator itself is injectable
(`SelectorEvaluator`); the default compiles with `dra_driver.scheduling.cel` and caches
compiled programs per expression.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from dra_driver.errors import CelError
from dra_driver.scheduling.allocator.pools import DeviceRecord

if TYPE_CHECKING:
    from dra_driver.scheduling.cel import CompiledSelector, DeviceView

#: evaluate(expression, device) -> matches; raises CelError for bad expressions
SelectorEvaluator = Callable[[str, "DeviceView"], bool]


class CelSelectorEvaluator:
    """The default evaluator: `dra_driver.scheduling.cel.compile_selector`, compiled once per
    expression, as the scheduler of `release` compiles it (None: the newest)."""

    def __init__(self, *, consumable_capacity: bool, release: str | None = None) -> None:
        self._consumable_capacity = consumable_capacity
        self._release = release
        self._compiled: dict[str, CompiledSelector | CelError] = {}

    def __call__(self, expression: str, device: DeviceView) -> bool:
        compiled = self._compile(expression)
        if isinstance(compiled, CelError):
            raise compiled
        return compiled.matches(device)

    def compile_error(self, expression: str) -> CelError | None:
        """The compile error of an expression, or None if it compiles."""
        compiled = self._compile(expression)
        return compiled if isinstance(compiled, CelError) else None

    def _compile(self, expression: str) -> CompiledSelector | CelError:
        compiled = self._compiled.get(expression)
        if compiled is None:
            from dra_driver.scheduling.cel import compile_selector

            try:
                compiled = compile_selector(
                    expression,
                    consumable_capacity=self._consumable_capacity,
                    release=self._release,
                )
            except CelError as exc:
                compiled = exc
            self._compiled[expression] = compiled
        return compiled


def device_view(device: DeviceRecord) -> DeviceView:
    """The CEL view of a device, built once per device record."""
    view = device.view
    if view is None:
        from dra_driver.scheduling.cel import DeviceView

        view = DeviceView(
            driver=device.slice.driver,
            attributes=device.attributes,
            capacity=device.capacity,
            allow_multiple_allocations=device.allow_multiple,
        )
        device.view = view
    return view


class SelectorMemo:
    """Results of (expression, device) evaluations, errors included, across calls.

    The one cache of selector results: the allocator keeps one, and so do the
    simulator's diagnosis and its explanation of selector parts.
    """

    def __init__(self, evaluate: SelectorEvaluator) -> None:
        self._evaluate = evaluate
        self._results: dict[tuple[str, DeviceRecord], bool | CelError] = {}

    def compile_error(self, expression: str) -> CelError | None:
        """The compile error of an expression, if the evaluator can tell (the default can)."""
        check = getattr(self._evaluate, "compile_error", None)
        if check is None:
            return None
        error = check(expression)
        return error if isinstance(error, CelError) else None

    def check(self, expression: str, device: DeviceRecord) -> bool | CelError:
        """Whether the selector matches, or the CelError of a failing selector."""
        key = (expression, device)
        result = self._results.get(key)
        if result is None:
            try:
                result = bool(self._evaluate(expression, device_view(device)))
            except CelError as exc:
                result = exc
            self._results[key] = result
        return result

    def matches(self, expression: str, device: DeviceRecord) -> bool:
        """Whether the selector matches; re-raises the CelError of a failing selector."""
        result = self.check(expression, device)
        if isinstance(result, CelError):
            raise result
        return result
