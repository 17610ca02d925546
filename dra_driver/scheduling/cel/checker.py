"""Static type checking of selector trees, mirroring what cel-go's checker rejects.

The checker is gradual: where a type is known (literals, `device.driver`,
function results, capacities) it is enforced; values of the unknown type
(attribute values are declared `any` by Kubernetes) are accepted anywhere and
checked at run time. It reports cel-go's messages: `undeclared reference to
'x'`, `undefined field 'f'`, `found no matching overload for 'f' applied to
'(int, string)'`. It annotates every node with its type and every call with
the overloads that may apply, which the interpreter uses to skip dispatch.
"""

from __future__ import annotations

from typing import Final

from dra_driver.scheduling.cel import regex, string_format
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
from dra_driver.scheduling.cel.diagnostics import CompileError, FunctionError
from dra_driver.scheduling.cel.functions import FUNCTIONS, Overload
from dra_driver.scheduling.cel.parser import OPTIONAL_INDEX, OPTIONAL_SELECT
from dra_driver.scheduling.cel.types import (
    ANY,
    BOOL,
    DYN,
    INT,
    QUANTITY,
    STRING,
    TYPE,
    TYPE_IDENTIFIERS,
    CelType,
    bind_params,
    join_types,
    list_of,
    map_of,
    optional_of,
    substitute,
)
from dra_driver.scheduling.cel.values import kind_of

DEVICE_VARIABLE: Final = "device"

ATTRIBUTES_TYPE: Final = map_of(STRING, map_of(STRING, ANY))
CAPACITY_TYPE: Final = map_of(STRING, map_of(STRING, QUANTITY))

_MAP_KEY_KINDS: Final = frozenset({"int", "uint", "bool", "string"})
_REGEX_FUNCTIONS: Final = frozenset({"matches", "find", "findAll"})
# Conversions whose literal argument is checked at compile time (cel-go's
# ValidateDurationLiterals and ValidateTimestampLiterals).
_CONVERSION_VALIDATED: Final = frozenset({"duration", "timestamp"})
# cel-go's HomogeneousAggregateLiteralExemptFunctions as the strings library sets them.
_HOMOGENEOUS_EXEMPT: Final = frozenset({"format"})


# With DRAListTypeAttributes an attribute may be a list, so Kubernetes declares
# attribute values `dyn` (iterable by macros) instead of `any`.
LIST_ATTRIBUTES_TYPE: Final = map_of(STRING, map_of(STRING, DYN))

# Functions that only exist with DRAListTypeAttributes.
LIST_ATTRIBUTE_FUNCTIONS: Final = frozenset({"includes"})


def device_fields(
    consumable_capacity: bool, list_type_attributes: bool = False
) -> dict[str, CelType]:
    """The fields of `device` (kubernetes.DRADevice) for the given feature set."""
    attributes = LIST_ATTRIBUTES_TYPE if list_type_attributes else ATTRIBUTES_TYPE
    fields = {"driver": STRING, "attributes": attributes, "capacity": CAPACITY_TYPE}
    if consumable_capacity:
        fields["allowMultipleAllocations"] = BOOL
    return fields


class Checker:
    """Type-checks one tree against the device declaration."""

    def __init__(
        self,
        device_type: CelType,
        fields: dict[str, CelType],
        variables: dict[str, CelType] | None = None,
        hidden_functions: frozenset[str] = frozenset(),
    ) -> None:
        self.device_type = device_type
        self.fields = fields
        # Registered functions this environment does not declare.
        self.hidden_functions = hidden_functions
        # Variables declared besides `device` (none in Kubernetes' selector
        # environment; `compile_expression` callers may add some).
        self.locals: dict[str, CelType] = dict(variables or {})
        # How many calls of a function exempt from the homogeneous literal
        # rule enclose the node being checked.
        self.exempt = 0

    def check(self, node: Node) -> CelType:
        t = self._check(node)
        node.type = t
        return t

    def _check(self, node: Node) -> CelType:
        if isinstance(node, Const):
            return node.literal_type
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

    # -- names and fields ----------------------------------------------------

    def ident(self, node: Ident) -> CelType:
        local = self.locals.get(node.name)
        if local is not None:
            node.binding = "local"
            return local
        if node.name == DEVICE_VARIABLE:
            node.binding = "device"
            return self.device_type
        if node.name in TYPE_IDENTIFIERS:
            node.binding = "type"
            return TYPE
        raise CompileError(f"undeclared reference to '{node.name}' (in container '')", node.pos)

    def select(self, node: Select) -> CelType:
        operand = self.check(node.operand)
        if operand.kind == "optional_type":
            # Optional chaining: `o.f` on an optional is an optional of the field.
            field_type = self.field_type(operand.params[0], node.field, node.pos)
            return BOOL if node.test_only else optional_of(_unwrap(field_type))
        field_type = self.field_type(operand, node.field, node.pos)
        return BOOL if node.test_only else field_type

    def field_type(self, operand: CelType, field: str, pos: int) -> CelType:
        """The type of `operand.field`."""
        if operand == self.device_type:
            field_type = self.fields.get(field)
            if field_type is None:
                raise CompileError(f"undefined field '{field}'", pos)
            return field_type
        if operand.kind == "map":
            key = operand.params[0]
            if not (key.is_dynamic or key.kind == "string"):
                raise CompileError(f"type '{operand}' does not support field selection", pos)
            return operand.params[1]
        if operand.is_dynamic:
            return DYN
        raise CompileError(f"type '{operand}' does not support field selection", pos)

    def index(self, node: Index) -> CelType:
        operand = self.check(node.operand)
        index = self.check(node.index)
        if operand.kind == "optional_type":
            return optional_of(_unwrap(self.element_type(operand.params[0], index, node.pos)))
        return self.element_type(operand, index, node.pos)

    @staticmethod
    def element_type(operand: CelType, index: CelType, pos: int, function: str = "_[_]") -> CelType:
        """The type of `operand[index]`."""
        if operand.kind == "list" and (index.is_dynamic or index.kind == "int"):
            return operand.params[0]
        if operand.kind == "map" and bind_params(operand.params[0], index, {}):
            return operand.params[1]
        if operand.is_dynamic and (index.is_dynamic or index.kind in _MAP_KEY_KINDS | {"double"}):
            return DYN
        raise CompileError(
            f"found no matching overload for '{function}' applied to '({operand}, {index})'", pos
        )

    def optional_access(self, node: Call) -> CelType:
        """`a.?f` and `a[?k]`: an optional of the field or element, chaining through optionals."""
        operand = self.check(node.args[0])
        key = self.check(node.args[1])
        if operand.kind == "optional_type":
            operand = operand.params[0]
        if node.function == OPTIONAL_SELECT:
            field = node.args[1]
            assert isinstance(field, Const)
            return optional_of(_unwrap(self.field_type(operand, str(field.value), node.pos)))
        return optional_of(_unwrap(self.element_type(operand, key, node.pos, node.function)))

    # -- calls ---------------------------------------------------------------

    def _qualified_name(self, target: Node) -> str | None:
        """`sets` for target `sets`, `a.b` for `a.b`; None if `target` is not a plain name."""
        parts: list[str] = []
        while isinstance(target, Select) and not target.test_only:
            parts.append(target.field)
            target = target.operand
        if not isinstance(target, Ident) or target.name in self.locals:
            return None
        if target.name == DEVICE_VARIABLE:
            return None
        parts.append(target.name)
        return ".".join(reversed(parts))

    def call(self, node: Call) -> CelType:
        if node.function in (OPTIONAL_SELECT, OPTIONAL_INDEX):
            return self.optional_access(node)
        if node.target is not None:
            namespace = self._qualified_name(node.target)
            if namespace is not None and f"{namespace}.{node.function}" in FUNCTIONS:
                node.function = f"{namespace}.{node.function}"
                node.target = None
        function = FUNCTIONS.get(node.function)
        if function is None or node.function in self.hidden_functions:
            raise CompileError(
                f"undeclared reference to '{node.function}' (in container '')", node.pos
            )
        is_member = node.target is not None
        exempt = node.function in _HOMOGENEOUS_EXEMPT
        self.exempt += exempt
        try:
            arg_types = [self.check(node.target)] if node.target is not None else []
            arg_types += [self.check(arg) for arg in node.args]
        finally:
            self.exempt -= exempt

        candidates: list[Overload] = []
        results: list[CelType] = []
        for overload in function.overloads:
            if overload.member != is_member or len(overload.params) != len(arg_types):
                continue
            bindings: dict[str, CelType] = {}
            if all(
                bind_params(p, a, bindings) for p, a in zip(overload.params, arg_types, strict=True)
            ):
                candidates.append(overload)
                results.append(substitute(overload.result, bindings))
        if not candidates:
            raise CompileError(
                f"found no matching overload for '{node.function}' applied to "
                f"'{_signature(arg_types, is_member)}'",
                node.pos,
            )
        node.overloads = candidates
        self._validate_literals(node)
        if node.function == "type":
            return TYPE
        if node.function in ("_&&_", "_||_", "!_"):
            return BOOL
        return join_types(results)

    def _validate_literals(self, node: Call) -> None:
        """Kubernetes' literal validators (base.go, 1.29+): constant regexes must compile, and
        `duration()`/`timestamp()` of a literal must succeed (cel-go's
        `ValidateDurationLiterals`/`ValidateTimestampLiterals`: "invalid duration argument",
        reported at the literal)."""
        if node.function in _CONVERSION_VALIDATED and node.target is None and node.args:
            literal = node.args[0]
            if isinstance(literal, Const):
                self._validate_conversion(node, literal)
            return
        if node.function == "format":
            self._validate_format(node)
            return
        if node.function not in _REGEX_FUNCTIONS:
            return
        pattern = node.args[0] if node.target is not None else node.args[-1]
        if isinstance(pattern, Const) and isinstance(pattern.value, str):
            try:
                regex.compile_re2(pattern.value)
            except FunctionError as exc:
                raise CompileError(exc.message, pattern.pos) from exc

    @staticmethod
    def _validate_format(node: Call) -> None:
        """The strings library's check of a constant format string with a list literal."""
        target = node.target
        if not (
            isinstance(target, Const)
            and isinstance(target.value, str)
            and len(node.args) == 1
            and isinstance(node.args[0], ListLit)
            and any(o.id == "string_format" for o in node.overloads)
        ):
            return
        error = string_format.check_call(target.value, node.args[0])
        if error is not None:
            where = error.node.pos if error.node is not None else node.pos
            raise CompileError(error.message, where)

    @staticmethod
    def _validate_conversion(node: Call, literal: Const) -> None:
        kind = kind_of(literal.value)
        for overload in node.overloads:
            if overload.accepts_kinds([kind]):
                try:
                    overload.impl(literal.value)
                except (FunctionError, ValueError, OverflowError) as exc:
                    raise CompileError(f"invalid {node.function} argument", literal.pos) from exc
                return

    # -- literals ------------------------------------------------------------

    def list_lit(self, node: ListLit) -> CelType:
        types = [self.check(e) for e in node.elements]
        for i in node.optional:
            types[i] = _optional_element(types[i], node.elements[i])
        return list_of(self._homogeneous(types, node.elements))

    def map_lit(self, node: MapLit) -> CelType:
        key_types: list[CelType] = []
        value_types: list[CelType] = []
        for i, (key, value) in enumerate(node.entries):
            key_type = self.check(key)
            if not (key_type.is_dynamic or key_type.kind in _MAP_KEY_KINDS):
                raise CompileError(f"unsupported map key type: {key_type}", key.pos)
            key_types.append(key_type)
            value_type = self.check(value)
            if i in node.optional:
                value_type = _optional_element(value_type, value)
            value_types.append(value_type)
        keys = self._homogeneous(key_types, [k for k, _ in node.entries])
        values = self._homogeneous(value_types, [v for _, v in node.entries])
        return map_of(keys, values)

    def _homogeneous(self, types: list[CelType], nodes: list[Node]) -> CelType:
        """The joined element type; Kubernetes requires literals to be homogeneous.

        As in cel-go, an element of the unknown type makes the join `dyn`;
        two different known types are an error (cel-go's homogeneous
        aggregate literal validator), except inside the arguments of
        `format()`, which the strings library exempts; there they join to dyn.
        """
        joined: CelType | None = None
        for t, n in zip(types, nodes, strict=True):
            if joined is None:
                joined = t
            elif bind_params(joined, t, {}):
                if t.is_dynamic:
                    joined = DYN
            elif self.exempt:
                return DYN
            else:
                raise CompileError(f"expected type '{joined}' but found '{t}'", n.pos)
        return DYN if joined is None else joined

    # -- macros --------------------------------------------------------------

    def comprehension(self, node: Comprehension) -> CelType:
        range_type = self.check(node.range)
        two_vars = node.var2 is not None
        if range_type.kind == "list":
            first, second = (INT, range_type.params[0]) if two_vars else (range_type.params[0], DYN)
        elif range_type.kind == "map":
            first, second = range_type.params[0], range_type.params[1]
        elif range_type == DYN:
            # `any` (attribute values without DRAListTypeAttributes) is not a
            # valid range in cel-go; `dyn` is.
            first, second = DYN, DYN
        else:
            raise CompileError(
                f"expression of type '{range_type}' cannot be range of a comprehension "
                "(must be list, map, or dynamic)",
                node.range.pos,
            )
        saved = dict(self.locals)
        self.locals[node.var1] = first
        if node.var2 is not None:
            self.locals[node.var2] = second
        try:
            arg_types = [self.check(arg) for arg in node.args]
        finally:
            self.locals = saved
        kind = node.kind
        # The first macro argument is a condition for the quantifiers and filter,
        # and for map/transform* when they have a filter before the transform.
        conditional = kind in ("all", "exists", "exists_one", "filter") or len(node.args) == 2
        if conditional and not (arg_types[0].is_dynamic or arg_types[0] == BOOL):
            raise CompileError(
                f"found no matching overload for '_&&_' applied to '(bool, {arg_types[0]})'",
                node.args[0].pos,
            )
        if kind in ("all", "exists", "exists_one"):
            return BOOL
        if kind == "filter":
            return list_of(first)
        result = arg_types[-1]
        if kind in ("map", "transformList"):
            return list_of(result)
        if kind == "transformMap":
            return map_of(first if range_type.kind == "map" else INT, result)
        if kind == "transformMapEntry":
            if not (result.is_dynamic or result.kind == "map"):
                raise CompileError(
                    f"transformMapEntry result must be a map, not '{result}'", node.args[-1].pos
                )
            return result if result.kind == "map" else map_of(DYN, DYN)
        raise CompileError(f"unsupported macro {kind}", node.pos)

    def bind(self, node: Bind) -> CelType:
        init = self.check(node.init)
        saved = dict(self.locals)
        self.locals[node.var] = init
        try:
            return self.check(node.body)
        finally:
            self.locals = saved


def _unwrap(t: CelType) -> CelType:
    """`T` for `optional_type(T)`: chaining through an optional does not nest optionals."""
    return t.params[0] if t.kind == "optional_type" else t


def _optional_element(t: CelType, node: Node) -> CelType:
    """The element type of an optional entry `?x` in a literal; `x` must be an optional."""
    if t.kind == "optional_type":
        return t.params[0]
    if t.is_dynamic:
        return DYN
    raise CompileError(f"expected type '{optional_of(t)}' but found '{t}'", node.pos)


def _signature(arg_types: list[CelType], is_member: bool) -> str:
    if is_member:
        receiver, *rest = arg_types
        return f"{receiver}.({', '.join(str(t) for t in rest)})"
    return f"({', '.join(str(t) for t in arg_types)})"
