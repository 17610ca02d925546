"""Turns a checked selector tree into nested Python closures and runs them.

cel-python's own evaluator walks the Lark tree on every evaluation (hundreds
of microseconds per selector); the allocator evaluates selectors against
thousands of devices per scheduling attempt. Here each node is planned once
into a closure `fn(activation) -> value`, with the overload already chosen
where the checker could choose it, so an evaluation is a handful of Python
calls. Each closure charges its cost (see `cost.py`) to the activation and
raises `EvalError` with its own source offset, so a failure can be reported
at the `.`, `[`, `(` or operator where it happened.

CEL's error rules are kept: `&&` and `||` absorb an error when the other
side decides the result, `all`/`exists` absorb errors when an element
decides, and non-bool operands of logical operators are errors.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, Final

from dra_driver.scheduling.cel import cost as costs
from dra_driver.scheduling.cel import regex
from dra_driver.scheduling.cel.ast import (
    Bind,
    Call,
    Comprehension,
    Const,
    Ident,
    Index,
    ListLit,
    MapLit,
    Node,
    Select,
)
from dra_driver.scheduling.cel.cost import CostLimitExceeded
from dra_driver.scheduling.cel.device import DeviceValue
from dra_driver.scheduling.cel.diagnostics import CompileError, EvalError, FunctionError
from dra_driver.scheduling.cel.functions import Overload
from dra_driver.scheduling.cel.parser import OPTIONAL_INDEX, OPTIONAL_SELECT
from dra_driver.scheduling.cel.types import DEVICE, TYPE_IDENTIFIERS
from dra_driver.scheduling.cel.values import (
    EMPTY_MAP,
    NONE,
    DefaultingMap,
    MixedKeyMap,
    Optional,
    TypeValue,
    cel_equal,
    display,
    go_type_name,
    kind_of,
    map_insert,
    map_lookup,
)

Fn = Callable[["Activation"], Any]

_MISSING: Final = object()
_MAP_TYPES: Final = (dict, DefaultingMap, MixedKeyMap)
_FUNCTION_FAILURES: Final = (ValueError, TypeError, OverflowError, ZeroDivisionError, KeyError)


class Activation:
    """Per-evaluation state: the device, comprehension variables, cost so far."""

    __slots__ = ("cost", "device", "limit", "vars")

    def __init__(self, device: DeviceValue, limit: int) -> None:
        self.device = device
        self.vars: dict[str, Any] = {}
        self.cost = 0
        self.limit = limit


class Planner:
    """Plans one checked tree into closures."""

    def plan(self, node: Node) -> Fn:
        if isinstance(node, Const):
            return self.const(node)
        if isinstance(node, Ident):
            return self.ident(node)
        if isinstance(node, Select):
            return self.select(node)
        if isinstance(node, Index):
            return self.index(node)
        if isinstance(node, Call):
            return self.call(node)
        if isinstance(node, ListLit):
            return self.list_lit(node)
        if isinstance(node, MapLit):
            return self.map_lit(node)
        if isinstance(node, Comprehension):
            return self.comprehension(node)
        if isinstance(node, Bind):
            return self.bind(node)
        raise CompileError(f"unsupported expression {type(node).__name__}", node.pos)

    # -- leaves --------------------------------------------------------------

    @staticmethod
    def const(node: Const) -> Fn:
        value = node.value

        def const(_act: Activation) -> Any:
            return value

        return const

    @staticmethod
    def ident(node: Ident) -> Fn:
        name = node.name
        if node.binding == "device":

            def device(act: Activation) -> Any:
                act.cost += 1
                return act.device

            return device
        if node.binding == "type":
            value = TypeValue(TYPE_IDENTIFIERS[name].kind)

            def type_name(act: Activation) -> Any:
                act.cost += 1
                return value

            return type_name

        def local(act: Activation) -> Any:
            act.cost += 1
            return act.vars[name]

        return local

    # -- selection and indexing ------------------------------------------------

    def select(self, node: Select) -> Fn:
        name = node.field
        pos = node.pos
        operand_node = node.operand
        if operand_node.type == DEVICE and isinstance(operand_node, Ident):
            return self._device_field(operand_node, name, pos, node.test_only)
        operand = self.plan(operand_node)
        if node.test_only:

            def has(act: Activation) -> Any:
                obj = operand(act)
                if type(obj) is Optional:
                    if not obj.has_value:
                        return False
                    obj = obj.value
                if type(obj) in _MAP_TYPES:
                    return name in obj
                if isinstance(obj, DeviceValue):
                    return obj.has_field(name)
                raise EvalError(f"invalid type for field selection: {kind_of(obj)}", pos)

            return has

        def select(act: Activation) -> Any:
            obj = operand(act)
            act.cost += 1
            if type(obj) in _MAP_TYPES:
                try:
                    return obj[name]
                except KeyError:
                    raise EvalError(f"no such key: {name}", pos) from None
            if isinstance(obj, DeviceValue):
                return obj.field(name, pos)
            if type(obj) is Optional:
                return _optional_select(obj, name, pos)
            raise EvalError(f"type '{kind_of(obj)}' does not support field selection", pos)

        return select

    @staticmethod
    def _device_field(ident: Ident, name: str, pos: int, test_only: bool) -> Fn:
        local = ident.binding == "local"
        var = ident.name

        def root(act: Activation) -> DeviceValue:
            device = act.vars[var] if local else act.device
            if not isinstance(device, DeviceValue):  # pragma: no cover - checker guarantees it
                raise EvalError("device is not a device", pos)
            return device

        if test_only:

            def has_device_field(act: Activation) -> Any:
                act.cost += 1
                return root(act).has_field(name)

            return has_device_field
        if name == "driver" and not local:

            def driver(act: Activation) -> Any:
                act.cost += 2
                return act.device.driver

            return driver
        if name == "attributes" and not local:

            def attributes(act: Activation) -> Any:
                act.cost += 2
                return act.device.attributes(pos)

            return attributes
        if name == "capacity" and not local:

            def capacity(act: Activation) -> Any:
                act.cost += 2
                return act.device.capacity(pos)

            return capacity

        def device_field(act: Activation) -> Any:
            act.cost += 2
            return root(act).field(name, pos)

        return device_field

    def index(self, node: Index) -> Fn:
        pos = node.pos
        operand = self.plan(node.operand)
        if isinstance(node.index, Const) and type(node.index.value) is str:
            key = node.index.value

            def index_str(act: Activation) -> Any:
                obj = operand(act)
                act.cost += 1
                if type(obj) in _MAP_TYPES:
                    try:
                        return obj[key]
                    except KeyError:
                        raise EvalError(f"no such key: {key}", pos) from None
                if type(obj) is Optional:
                    return _optional_index(obj, key, pos)
                return _index(obj, key, pos)

            return index_str
        index = self.plan(node.index)

        def index_any(act: Activation) -> Any:
            obj = operand(act)
            key = index(act)
            act.cost += 1
            if type(obj) is Optional:
                return _optional_index(obj, key, pos)
            return _index(obj, key, pos)

        return index_any

    # -- calls -----------------------------------------------------------------

    def call(self, node: Call) -> Fn:
        function = node.function
        if function == "_&&_":
            return self._logical(node, short=False)
        if function == "_||_":
            return self._logical(node, short=True)
        if function == "_?_:_":
            return self._conditional(node)
        if function in (OPTIONAL_SELECT, OPTIONAL_INDEX):
            return self._optional_access(node)
        if function in ("or", "orValue") and _is_optional_overload(node.overloads):
            return self._optional_or(node)
        arg_nodes = ([node.target] if node.target is not None else []) + node.args
        args = [self.plan(a) for a in arg_nodes]
        overloads = node.overloads
        static = _static_overload(overloads, arg_nodes)
        if function in ("_==_", "_!=_"):
            return _equality(args[0], args[1], negate=function == "_!=_", pos=node.pos)
        if function == "matches":
            text_node = node.target if node.target is not None else node.args[0]
            if not isinstance(text_node, Const):
                special = _regex_match(node, args[0])
                if special is not None:
                    return special
        call = _make_call(function, node.pos, args, overloads, static)
        if arg_nodes and all(isinstance(a, Const) for a in arg_nodes):
            return _folded(call)
        return call

    def _logical(self, node: Call, short: bool) -> Fn:
        """`_&&_` (short=False decides on false) and `_||_` (decides on true)."""
        left = self.plan(node.args[0])
        right = self.plan(node.args[1])
        pos = node.pos
        decided = short  # the value that decides the result

        def logical(act: Activation) -> Any:
            error: EvalError | None = None
            try:
                value = left(act)
            except EvalError as exc:
                error = exc
            else:
                if value is decided:
                    return decided
                if value is not (not decided):
                    error = EvalError(
                        f"no such overload: {kind_of(value)} used as a condition", pos
                    )
            try:
                value = right(act)
            except EvalError:
                if error is not None:
                    raise error from None
                raise
            if value is decided:
                return decided
            if error is not None:
                raise error
            if value is (not decided):
                return not decided
            raise EvalError(f"no such overload: {kind_of(value)} used as a condition", pos)

        return logical

    def _conditional(self, node: Call) -> Fn:
        cond = self.plan(node.args[0])
        then = self.plan(node.args[1])
        other = self.plan(node.args[2])
        pos = node.pos

        def conditional(act: Activation) -> Any:
            value = cond(act)
            if value is True:
                return then(act)
            if value is False:
                return other(act)
            raise EvalError(f"no such overload: {kind_of(value)} used as a condition", pos)

        return conditional

    def _optional_access(self, node: Call) -> Fn:
        """`a.?f` / `a[?k]`: optional.of(a.f) / optional.of(a[k]) when present, else none."""
        operand = self.plan(node.args[0])
        key_fn = self.plan(node.args[1])  # for `.?f` the field name, a string constant
        select = node.function == OPTIONAL_SELECT
        pos = node.pos

        def optional_access(act: Activation) -> Any:
            obj = operand(act)
            key = key_fn(act)
            act.cost += 1
            if type(obj) is not Optional:
                obj = Optional(obj)
            if select:
                return _optional_select(obj, key, pos)
            return _optional_index(obj, key, pos)

        return optional_access

    def _optional_or(self, node: Call) -> Fn:
        """`o.or(p)` / `o.orValue(x)`: the argument is evaluated only when `o` is empty."""
        assert node.target is not None
        receiver = self.plan(node.target)
        alternative = self.plan(node.args[0])
        unwrap = node.function == "orValue"
        pos = node.pos
        function = node.function

        def optional_or(act: Activation) -> Any:
            opt = receiver(act)
            act.cost += 1
            if type(opt) is not Optional:
                raise EvalError(f"no such overload: {function}({kind_of(opt)}, ...)", pos)
            if opt.has_value:
                return opt.value if unwrap else opt
            other = alternative(act)
            if not unwrap and type(other) is not Optional:
                raise EvalError(f"no such overload: or(optional_type, {kind_of(other)})", pos)
            return other

        return optional_or

    # -- literals ----------------------------------------------------------------

    def list_lit(self, node: ListLit) -> Fn:
        if node.optional:
            return self._list_with_optionals(node)
        if all(isinstance(e, Const) for e in node.elements):
            # Lists are never mutated, so a literal of constants is built once.
            constant = [e.value for e in node.elements if isinstance(e, Const)]

            def constant_list(act: Activation) -> Any:
                act.cost += costs.LIST_CREATE_COST
                return constant

            return constant_list
        elements = [self.plan(e) for e in node.elements]

        def list_lit(act: Activation) -> Any:
            act.cost += costs.LIST_CREATE_COST
            return [e(act) for e in elements]

        return list_lit

    def _list_with_optionals(self, node: ListLit) -> Fn:
        elements = [(self.plan(e), i in node.optional, e.pos) for i, e in enumerate(node.elements)]

        def list_lit(act: Activation) -> Any:
            act.cost += costs.LIST_CREATE_COST
            result = []
            for fn, optional, pos in elements:
                value = fn(act)
                if optional:
                    if type(value) is not Optional:
                        raise EvalError(
                            f"cannot initialize optional list element from non-optional value "
                            f"{display(value)}",
                            pos,
                        )
                    if not value.has_value:
                        continue
                    value = value.value
                result.append(value)
            return result

        return list_lit

    def map_lit(self, node: MapLit) -> Fn:
        entries = [
            (self.plan(k), self.plan(v), k.pos, i in node.optional)
            for i, (k, v) in enumerate(node.entries)
        ]

        def map_lit(act: Activation) -> Any:
            act.cost += costs.MAP_CREATE_COST
            result: dict[Any, Any] = {}
            for key_fn, value_fn, key_pos, optional in entries:
                key = key_fn(act)
                kind = kind_of(key)
                if kind not in ("string", "int", "uint", "bool"):
                    raise EvalError(f"unsupported key type: {kind}", key_pos)
                if map_lookup(result, key)[0]:
                    raise EvalError(f"Failed with repeated key: {display(key)}", key_pos)
                value = value_fn(act)
                if optional:
                    if type(value) is not Optional:
                        raise EvalError(
                            f"cannot initialize optional entry '{display(key)}' "
                            "from non-optional value",
                            key_pos,
                        )
                    if not value.has_value:
                        continue
                    value = value.value
                result = map_insert(result, key, value)
            return result

        return map_lit

    # -- macros --------------------------------------------------------------------

    def comprehension(self, node: Comprehension) -> Fn:
        range_fn = self.plan(node.range)
        args = [self.plan(a) for a in node.args]
        return _COMPREHENSIONS[node.kind](node, range_fn, args)

    def bind(self, node: Bind) -> Fn:
        init = self.plan(node.init)
        body = self.plan(node.body)
        var = node.var

        def bind(act: Activation) -> Any:
            act.cost += costs.LIST_CREATE_COST
            value = init(act)
            scope = act.vars
            saved = scope.get(var, _MISSING)
            scope[var] = value
            try:
                return body(act)
            finally:
                if saved is _MISSING:
                    del scope[var]
                else:
                    scope[var] = saved

        return bind


# -- helpers -----------------------------------------------------------------------


def _equality(left: Fn, right: Fn, *, negate: bool, pos: int) -> Fn:
    """`==` / `!=`, with a fast path for the common string comparison."""
    factor = costs.STRING_TRAVERSAL_FACTOR

    def equality(act: Activation) -> Any:
        a = left(act)
        b = right(act)
        kind = type(a)
        if kind is type(b):
            if kind is str:
                act.cost += math.ceil(min(len(a), len(b)) * factor)
                return (a == b) is not negate
            if kind is int or kind is bool:
                act.cost += 1
                return (a == b) is not negate
        act.cost += math.ceil(min(costs.size_of(a), costs.size_of(b)) * factor)
        try:
            return cel_equal(a, b) is not negate
        except FunctionError as exc:
            raise EvalError(exc.message, pos) from None

    return equality


def _folded(call: Fn) -> Fn:
    """A call whose arguments are all literals, evaluated once at plan time.

    The cost is still charged on every evaluation, as cel-go would. A call
    that fails stays unfolded so the error is raised (with its position) at
    evaluation, as in cel-go.
    """
    probe = Activation(None, costs.CEL_SELECTOR_EXPRESSION_MAX_COST)  # type: ignore[arg-type]
    try:
        value = call(probe)
    except (EvalError, CostLimitExceeded):
        return call
    charge = probe.cost

    def folded(act: Activation) -> Any:
        act.cost += charge
        return value

    return folded


def _index(obj: Any, key: Any, pos: int) -> Any:
    if type(obj) is list:
        kind = kind_of(key)
        if kind == "double" and key == int(key):
            key = int(key)
        elif kind not in ("int", "uint"):
            raise EvalError(f"unsupported index type '{kind}' in list", pos)
        if not 0 <= key < len(obj):
            raise EvalError(f"index '{int(key)}' out of range in list size '{len(obj)}'", pos)
        return obj[key]
    if type(obj) in _MAP_TYPES:
        found, value = map_lookup(obj, key)
        if found:
            return value
        if type(obj) is DefaultingMap:
            return EMPTY_MAP
        raise EvalError(f"no such key: {display(key)}", pos)
    raise EvalError(f"no such overload: {kind_of(obj)}[{kind_of(key)}]", pos)


def _optional_select(opt: Optional, name: str, pos: int) -> Optional:
    """Field `name` of the optional's value, as an optional (none when absent)."""
    if not opt.has_value:
        return NONE
    obj = opt.value
    if type(obj) is Optional:
        return _optional_select(obj, name, pos)
    if type(obj) in _MAP_TYPES:
        try:
            return Optional(obj[name])
        except KeyError:
            return NONE
    if isinstance(obj, DeviceValue):
        return Optional(obj.field(name, pos)) if obj.has_field(name) else NONE
    raise EvalError(f"no such key: {name}", pos)


def _optional_index(opt: Optional, key: Any, pos: int) -> Optional:
    """Element `key` of the optional's value, as an optional (none when absent)."""
    if not opt.has_value:
        return NONE
    obj = opt.value
    if type(obj) is Optional:
        return _optional_index(obj, key, pos)
    if type(obj) is list:
        kind = kind_of(key)
        if kind == "double" and math.isfinite(key) and key == int(key):
            key = int(key)
        elif kind not in ("int", "uint"):
            raise EvalError(f"unsupported index type '{kind}' in list", pos)
        return Optional(obj[key]) if 0 <= key < len(obj) else NONE
    if type(obj) in _MAP_TYPES:
        found, value = map_lookup(obj, key)
        if found:
            return Optional(value)
        return Optional(EMPTY_MAP) if type(obj) is DefaultingMap else NONE
    raise EvalError(f"no such key: {display(key)}", pos)


def _is_optional_overload(overloads: list[Overload]) -> bool:
    return bool(overloads) and all(o.id.startswith("optional_") for o in overloads)


def _static_overload(overloads: list[Overload], arg_nodes: list[Node]) -> Overload | None:
    """The overload to call without run-time dispatch, when the checker pinned it down."""
    if len(overloads) != 1:
        return None
    overload = overloads[0]
    for param_kind, arg in zip(overload.kinds, arg_nodes, strict=True):
        if param_kind is not None and (arg.type.is_dynamic or arg.type.kind != param_kind):
            return None
    return overload


def _make_call(
    function: str,
    pos: int,
    args: list[Fn],
    overloads: list[Overload],
    static: Overload | None,
) -> Fn:
    """The closure for a call: evaluate arguments, pick the overload, run it, charge it."""
    dispatch: dict[tuple[str, ...], Overload | None] = {}

    def resolve(values: list[Any]) -> Overload:
        if static is not None:
            return static
        kinds = tuple(kind_of(v) for v in values)
        overload = dispatch.get(kinds, _MISSING)
        if overload is _MISSING:
            overload = next((o for o in overloads if o.accepts_kinds(kinds)), None)
            dispatch[kinds] = overload
        if overload is None:
            raise EvalError(f"no such overload: {function}({', '.join(kinds)})", pos)
        return overload  # type: ignore[return-value]

    if static is not None and type(static.cost) is int and len(args) <= 2:
        return _static_call(function, pos, args, static.impl, static.cost)

    def call(act: Activation) -> Any:
        values = [a(act) for a in args]
        overload = resolve(values)
        try:
            result = overload.impl(*values)
        except FunctionError as exc:
            raise EvalError(exc.message, pos) from None
        except _FUNCTION_FAILURES as exc:
            raise EvalError(f"{function}: {exc}", pos) from None
        charge = overload.cost
        if type(charge) is int:
            act.cost += charge
        else:
            act.cost += charge(values, result)  # type: ignore[operator]
            if act.cost > act.limit:
                raise CostLimitExceeded(costs.COST_LIMIT_MESSAGE)
        return result

    return call


def _static_call(
    function: str, pos: int, args: list[Fn], impl: Callable[..., Any], charge: int
) -> Fn:
    """A call whose overload and (constant) cost are known at plan time."""
    if len(args) == 1:
        (a0,) = args

        def call1(act: Activation) -> Any:
            value = a0(act)
            try:
                result = impl(value)
            except FunctionError as exc:
                raise EvalError(exc.message, pos) from None
            except _FUNCTION_FAILURES as exc:
                raise EvalError(f"{function}: {exc}", pos) from None
            act.cost += charge
            return result

        return call1
    if len(args) == 2:
        a0, a1 = args

        def call2(act: Activation) -> Any:
            v0 = a0(act)
            v1 = a1(act)
            try:
                result = impl(v0, v1)
            except FunctionError as exc:
                raise EvalError(exc.message, pos) from None
            except _FUNCTION_FAILURES as exc:
                raise EvalError(f"{function}: {exc}", pos) from None
            act.cost += charge
            return result

        return call2

    def call0(act: Activation) -> Any:
        try:
            result = impl()
        except FunctionError as exc:
            raise EvalError(exc.message, pos) from None
        act.cost += charge
        return result

    return call0


def _regex_match(node: Call, text_fn: Fn) -> Fn | None:
    """`s.matches('literal')` with the pattern compiled at plan time (the common case)."""
    pattern_node = node.args[-1]
    if not (isinstance(pattern_node, Const) and type(pattern_node.value) is str):
        return None
    try:
        pattern = regex.compile_re2(pattern_node.value)
    except FunctionError:
        return None
    is_match = pattern.is_match
    pattern_cost = math.ceil(len(pattern_node.value) * costs.REGEX_LENGTH_FACTOR)
    factor = costs.STRING_TRAVERSAL_FACTOR
    pos = node.pos

    def matches(act: Activation) -> Any:
        text = text_fn(act)
        if type(text) is not str:
            raise EvalError(f"no such overload: matches({kind_of(text)}, string)", pos)
        act.cost += math.ceil((1 + len(text)) * factor) * pattern_cost
        if act.cost > act.limit:
            raise CostLimitExceeded(costs.COST_LIMIT_MESSAGE)
        return is_match(text)

    return matches


def _iteration(value: Any, pos: int) -> list[Any]:
    if type(value) is list:
        return value
    if type(value) in _MAP_TYPES:
        return list(value)
    raise EvalError(f"got '{go_type_name(value)}', expected iterable type", pos)


def _pairs(value: Any, pos: int) -> list[tuple[Any, Any]]:
    if type(value) is list:
        return list(enumerate(value))
    if type(value) in _MAP_TYPES:
        return list(value.items())
    raise EvalError(f"got '{go_type_name(value)}', expected iterable type", pos)


class _Scope:
    """Binds comprehension variables for the duration of a loop."""

    __slots__ = ("names", "saved", "scope")

    def __init__(self, act: Activation, names: tuple[str, ...]) -> None:
        self.scope = act.vars
        self.names = names
        self.saved = [self.scope.get(n, _MISSING) for n in names]

    def restore(self) -> None:
        for name, saved in zip(self.names, self.saved, strict=True):
            if saved is _MISSING:
                self.scope.pop(name, None)
            else:
                self.scope[name] = saved


def _loop_items(node: Comprehension, value: Any) -> list[Any]:
    """What the loop runs over: elements (or map keys), or (index/key, value) pairs."""
    if node.var2 is None:
        return _iteration(value, node.range.pos)
    return _pairs(value, node.range.pos)


def _names(node: Comprehension) -> tuple[str, ...]:
    return (node.var1,) if node.var2 is None else (node.var1, node.var2)


def _plan_quantifier(node: Comprehension, range_fn: Fn, args: list[Fn]) -> Fn:
    """all / exists: stop at the deciding element; errors lose to a decision."""
    predicate = args[0]
    is_all = node.kind == "all"
    condition_cost = 2 if is_all else 3
    decided = not is_all  # exists decides on true, all on false
    names = _names(node)
    var1, var2 = node.var1, node.var2
    pos = node.pos

    def quantifier(act: Activation) -> Any:
        items = _loop_items(node, range_fn(act))
        scope = _Scope(act, names)
        variables = act.vars
        error: EvalError | None = None
        last = len(items) - 1
        try:
            for index, item in enumerate(items):
                act.cost += condition_cost + 1
                if act.cost > act.limit:
                    raise CostLimitExceeded(costs.COST_LIMIT_MESSAGE)
                if var2 is None:
                    variables[var1] = item
                else:
                    variables[var1], variables[var2] = item
                try:
                    result = predicate(act)
                except EvalError as exc:
                    if error is None:
                        error = exc
                    continue
                if result is decided:
                    # cel-go checks the loop condition once more before stopping.
                    act.cost += 1 + (condition_cost if index < last else 0)
                    return decided
                if result is not (not decided) and error is None:
                    error = EvalError(
                        f"no such overload: {kind_of(result)} used as a condition", pos
                    )
        finally:
            scope.restore()
        act.cost += 1
        if error is not None:
            raise error
        return not decided

    return quantifier


def _plan_exists_one(node: Comprehension, range_fn: Fn, args: list[Fn]) -> Fn:
    predicate = args[0]
    names = _names(node)
    var1, var2 = node.var1, node.var2
    pos = node.pos

    def exists_one(act: Activation) -> Any:
        items = _loop_items(node, range_fn(act))
        scope = _Scope(act, names)
        variables = act.vars
        count = 0
        try:
            for item in items:
                if act.cost > act.limit:
                    raise CostLimitExceeded(costs.COST_LIMIT_MESSAGE)
                if var2 is None:
                    variables[var1] = item
                else:
                    variables[var1], variables[var2] = item
                result = predicate(act)
                if result is True:
                    count += 1
                    act.cost += 2
                elif result is False:
                    act.cost += 1
                else:
                    raise EvalError(f"no such overload: {kind_of(result)} used as a condition", pos)
        finally:
            scope.restore()
        act.cost += 2
        return count == 1

    return exists_one


def _plan_collect(node: Comprehension, range_fn: Fn, args: list[Fn]) -> Fn:
    """map / filter / transformList: build a list, optionally filtered."""
    names = _names(node)
    var1, var2 = node.var1, node.var2
    pos = node.pos
    if node.kind == "filter":
        keep: Fn | None = args[0]
        transform: Fn | None = None
    else:
        keep = args[0] if len(args) == 2 else None
        transform = args[-1]

    def collect(act: Activation) -> Any:
        items = _loop_items(node, range_fn(act))
        scope = _Scope(act, names)
        variables = act.vars
        result: list[Any] = []
        act.cost += costs.LIST_CREATE_COST
        try:
            for item in items:
                if act.cost > act.limit:
                    raise CostLimitExceeded(costs.COST_LIMIT_MESSAGE)
                if var2 is None:
                    variables[var1] = item
                else:
                    variables[var1], variables[var2] = item
                if keep is not None:
                    flag = keep(act)
                    if flag is False:
                        act.cost += 1
                        continue
                    if flag is not True:
                        raise EvalError(
                            f"no such overload: {kind_of(flag)} used as a condition", pos
                        )
                act.cost += 13 if transform is None else 12
                if transform is None:
                    result.append(item if var2 is None else item[1])
                else:
                    result.append(transform(act))
        finally:
            scope.restore()
        act.cost += 1
        return result

    return collect


def _plan_transform_map(node: Comprehension, range_fn: Fn, args: list[Fn]) -> Fn:
    """transformMap / transformMapEntry: build a map."""
    names = _names(node)
    var1, var2 = node.var1, node.var2
    pos = node.pos
    keep = args[0] if len(args) == 2 else None
    transform = args[-1]
    entry = node.kind == "transformMapEntry"

    def transform_map(act: Activation) -> Any:
        items = _loop_items(node, range_fn(act))
        scope = _Scope(act, names)
        variables = act.vars
        result: dict[Any, Any] = {}
        act.cost += costs.MAP_CREATE_COST
        try:
            for item in items:
                if act.cost > act.limit:
                    raise CostLimitExceeded(costs.COST_LIMIT_MESSAGE)
                if var2 is None:
                    variables[var1] = item
                else:
                    variables[var1], variables[var2] = item
                if keep is not None:
                    flag = keep(act)
                    if flag is False:
                        act.cost += 1
                        continue
                    if flag is not True:
                        raise EvalError(
                            f"no such overload: {kind_of(flag)} used as a condition", pos
                        )
                value = transform(act)
                act.cost += 3
                if entry:
                    if type(value) not in _MAP_TYPES:
                        raise EvalError(
                            f"transformMapEntry: expected a map, got {kind_of(value)}", pos
                        )
                    for k, v in value.items():
                        if map_lookup(result, k)[0]:
                            raise EvalError(f"insert failed: key {display(k)} already exists", pos)
                        result = map_insert(result, k, v)
                else:
                    result = map_insert(result, item[0], value)
        finally:
            scope.restore()
        act.cost += 1
        return result

    return transform_map


_COMPREHENSIONS: Final[dict[str, Callable[[Comprehension, Fn, list[Fn]], Fn]]] = {
    "all": _plan_quantifier,
    "exists": _plan_quantifier,
    "exists_one": _plan_exists_one,
    "map": _plan_collect,
    "filter": _plan_collect,
    "transformList": _plan_collect,
    "transformMap": _plan_transform_map,
    "transformMapEntry": _plan_transform_map,
}
