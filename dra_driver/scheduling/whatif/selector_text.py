"""Saying in words what a CEL device selector asks for.

"no device has productName matching '^.*b200.*$' (8 devices have 'NVIDIA H100
80GB HBM3')" helps more than "selector #0 is false". To get there this module
splits a selector into its top-level `&&` parts (so the part no device meets
can be named on its own), recognises the common shapes of a part (regex
match, equality, quantity and semver comparison, prefix/suffix/contains) and
finds which attributes and capacities a part reads, so the values the devices
actually have can be shown next to it. Anything it does not recognise is
quoted as written.

All of it works on the CEL syntax tree (`dra_driver.scheduling.cel.parser`): the parts
are the operands of the top-level `&&` calls, and their text is the source
between those operators' offsets, with the parentheses of enclosing groups
removed (what is left is the shortest piece that parses on its own).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.scheduling.cel.ast import Call, Const, Ident, Index, Node, Select, children
from dra_driver.scheduling.cel.diagnostics import CompileError
from dra_driver.scheduling.cel.parser import parse

_AND: Final = "_&&_"
_COMPARISONS: Final = {
    "_==_": "==",
    "_!=_": "!=",
    "_>=_": ">=",
    "_<=_": "<=",
    "_>_": ">",
    "_<_": "<",
}
_STRING_TESTS: Final = {
    "matches": "matching",
    "startsWith": "starting with",
    "endsWith": "ending with",
    "contains": "containing",
}
_CASE_FOLDS: Final = frozenset({"lowerAscii", "upperAscii"})
_ORDER_TESTS: Final = {"isGreaterThan": ">", "isLessThan": "<"}
_VERSIONED: Final = frozenset({"quantity", "semver"})
_OPTIONAL_LOOKUPS: Final = frozenset({"_?._", "_[?_]"})


@dataclass(frozen=True)
class Reference:
    """An attribute or capacity a selector reads: kind, domain and identifier."""

    kind: str  # "attributes", "capacity" or "driver"
    domain: str
    name: str

    def lookup(self, device: Any, driver: str) -> str | None:
        """The value `device` (with `.attributes`/`.capacity` API maps) has, as text."""
        if self.kind == "driver":
            return f"'{driver}'"
        table: Mapping[str, Mapping[str, Any]] = getattr(device, self.kind)
        entry = table.get(f"{self.domain}/{self.name}")
        if entry is None and self.domain == driver:
            entry = table.get(self.name)
        if entry is None:
            return None
        if self.kind == "capacity":
            return str(entry.get("value"))
        if "string" in entry:
            return f"'{entry['string']}'"
        if "bool" in entry:
            return "true" if entry["bool"] else "false"
        for member in ("int", "version"):
            if member in entry:
                return str(entry[member])
        return None


_DRIVER: Final = Reference("driver", "", "driver")


def conjuncts(expression: str) -> list[str]:
    """The top-level `&&` parts of an expression, outer parentheses removed.

    An expression that is not a conjunction (or does not parse) comes back as
    the only part.
    """
    tree = _parsed(expression)
    if tree is None:
        return [expression.strip()]
    operators: list[int] = []
    _and_operators(tree, operators)
    if not operators:
        return [_unwrapped(expression)]
    operators.sort()
    starts = [0, *(offset + len("&&") for offset in operators)]
    ends = [*operators, len(expression)]
    return [_unwrapped(expression[start:end]) for start, end in zip(starts, ends, strict=True)]


def references(expression: str) -> list[Reference]:
    """The attributes and capacities an expression reads, in order, without repeats."""
    tree = _parsed(expression)
    if tree is None:
        return []
    found = sorted(
        ((node.pos, ref) for node in _walk(tree) if (ref := _reference(node)) is not None),
        key=lambda item: (item[1] != _DRIVER, item[0]),
    )
    return list(dict.fromkeys(ref for _, ref in found))


def describe(expression: str) -> str:
    """A short phrase for what one part asks: "productName matching '^.*b200.*$'".

    Unrecognised expressions are quoted: "`<expression>`".
    """
    text = _unwrapped(" ".join(expression.split()))
    tree = _parsed(text)
    phrase = _phrase(tree) if tree is not None else None
    return phrase if phrase is not None else f"`{text}`"


# -- the tree ----------------------------------------------------------------


def _parsed(text: str) -> Node | None:
    try:
        return parse(text)
    except CompileError:
        return None


def _and_operators(node: Node, offsets: list[int]) -> None:
    """The source offsets of the `&&` operators joining the top-level parts."""
    if isinstance(node, Call) and node.function == _AND and node.target is None:
        offsets.append(node.pos)
        for operand in node.args:
            _and_operators(operand, offsets)


def _unwrapped(text: str) -> str:
    """`text` without the parentheses of groups it was cut out of, or around it."""
    original = text = text.strip()
    while _parsed(text) is None:
        if text.startswith("("):
            text = text[1:].strip()
        elif text.endswith(")"):
            text = text[:-1].strip()
        else:
            return original
    while text.startswith("(") and text.endswith(")") and _parsed(text[1:-1]) is not None:
        text = text[1:-1].strip()
    return text


def _walk(node: Node) -> Iterator[Node]:
    yield node
    for child in children(node):
        yield from _walk(child)


def _string(node: Node | None) -> str | None:
    if isinstance(node, Const) and type(node.value) is str:
        return node.value
    return None


def _reference(node: Node) -> Reference | None:
    """`device.driver`, `device.<kind>['<domain>'].<name>` or `...['<domain>']['<name>']`
    (also inside `has()`, optional as `.?<name>` / `[?'<name>']`, with or without
    an `.orValue(<literal>)` default)."""
    node = _without_default(node)
    if isinstance(node, Call) and node.function in _OPTIONAL_LOOKUPS and node.target is None:
        base, name_node = node.args
        if (name := _string(name_node)) is None:
            return None
    elif isinstance(node, Select):
        if node.field == "driver" and _is_device(node.operand):
            return _DRIVER
        base, name = node.operand, node.field
    elif isinstance(node, Index) and (key := _string(node.index)) is not None:
        base, name = node.operand, key
    else:
        return None
    if not isinstance(base, Index) or (domain := _string(base.index)) is None:
        return None
    table = base.operand
    if (
        isinstance(table, Select)
        and table.field in ("attributes", "capacity")
        and _is_device(table.operand)
    ):
        return Reference(table.field, domain, name)
    return None


def _without_default(node: Node) -> Node:
    """`x.orValue(<literal>)` -> `x`."""
    if (
        isinstance(node, Call)
        and node.function == "orValue"
        and node.target is not None
        and len(node.args) == 1
        and isinstance(node.args[0], Const)
    ):
        return node.target
    return node


def _is_device(node: Node) -> bool:
    return isinstance(node, Ident) and node.name == "device"


def _phrase(node: Node) -> str | None:
    if not isinstance(node, Call):
        return None
    if node.function in _COMPARISONS and node.target is None and len(node.args) == 2:
        return _comparison(_COMPARISONS[node.function], node.args[0], node.args[1])
    subject = node.target
    if subject is not None and len(node.args) == 1:
        if isinstance(subject, Call) and subject.function in _CASE_FOLDS and not subject.args:
            folded = subject.target
            subject = folded if folded is not None and node.function in _STRING_TESTS else None
        ref = _reference(subject) if subject is not None else None
        if ref is None or ref == _DRIVER:
            return None
        if node.function in _STRING_TESTS and (arg := _string(node.args[0])) is not None:
            return f"{ref.name} {_STRING_TESTS[node.function]} '{arg}'"
        if node.function in _ORDER_TESTS and (bound := _versioned(node.args[0])) is not None:
            return f"{ref.name} {_ORDER_TESTS[node.function]} {bound}"
    return None


def _comparison(op: str, left: Node, right: Node) -> str | None:
    """`<ref> op <literal>`, `device.driver op '<name>'`, `<ref>.compareTo(quantity(..)) op 0`."""
    ref = _reference(left)
    if ref == _DRIVER:
        name = _string(right)
        return f"driver {op} '{name}'" if name is not None and op in ("==", "!=") else None
    if ref is not None:
        literal = _literal(right)
        return f"{ref.name} {op} {literal}" if literal is not None else None
    if (
        isinstance(left, Call)
        and left.function == "compareTo"
        and left.target is not None
        and len(left.args) == 1
        and isinstance(right, Const)
        and type(right.value) is int
        and right.value == 0
    ):
        ref = _reference(left.target)
        bound = _versioned(left.args[0])
        if ref is not None and ref != _DRIVER and bound is not None:
            return f"{ref.name} {op} {bound}"
    return None


def _literal(node: Node) -> str | None:
    if not isinstance(node, Const):
        return None
    value = node.value
    if type(value) is str:
        return f"'{value}'"
    if type(value) is bool:
        return "true" if value else "false"
    if type(value) in (int, float):
        return str(value)
    return None


def _versioned(node: Node) -> str | None:
    """The text of `quantity('40Gi')` or `semver('1.2.3')`."""
    is_call = isinstance(node, Call) and node.function in _VERSIONED and node.target is None
    if is_call and isinstance(node, Call) and len(node.args) == 1:
        return _string(node.args[0])
    return None
