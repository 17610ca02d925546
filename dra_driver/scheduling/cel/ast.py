"""The selector syntax tree that the checker and the interpreter share.

cel-python's parser yields a Lark parse tree that mirrors the grammar rule by
rule (nine levels for a single literal). `parser.py` folds it into these few
node kinds, with macros (`has`, `all`, `exists`, `map`, `cel.bind`, ...)
already expanded into dedicated nodes, so that type checking and planning
each deal with one small tree. Every node remembers the source offset of its
operator (the `.` of a field selection, the `(` of a call, the `==` of a
comparison) because that is the position cel-go reports errors at.

The checker fills in `type` on every node and `overloads` on calls.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dra_driver.scheduling.cel.types import DYN, CelType

if TYPE_CHECKING:
    from dra_driver.scheduling.cel.functions import Overload


@dataclass(eq=False)
class Node:
    """Base of all syntax tree nodes; `pos` is an offset into the expression."""

    pos: int
    type: CelType = field(default=DYN, init=False)


@dataclass(eq=False)
class Const(Node):
    """A literal value."""

    value: Any
    literal_type: CelType


@dataclass(eq=False)
class Ident(Node):
    """A variable or type name; `binding` says which (set by the checker)."""

    name: str
    binding: str = field(default="", init=False)  # "device", "local", "type"


@dataclass(eq=False)
class Select(Node):
    """`operand.field`, or `has(operand.field)` when `test_only` is set."""

    operand: Node
    field: str
    test_only: bool = False


@dataclass(eq=False)
class Index(Node):
    """`operand[index]`."""

    operand: Node
    index: Node


@dataclass(eq=False)
class Call(Node):
    """A function or operator call; operators use cel-go's names (`_==_`, `@in`, ...)."""

    function: str
    args: list[Node]
    target: Node | None = None
    overloads: list[Overload] = field(default_factory=list, init=False)


@dataclass(eq=False)
class ListLit(Node):
    """`[a, b, ...]`; `optional` holds the positions written `?x` (kept only if x has a value)."""

    elements: list[Node]
    optional: frozenset[int] = frozenset()


@dataclass(eq=False)
class MapLit(Node):
    """`{k: v, ...}`; `optional` holds the positions of entries written `?k: v`."""

    entries: list[tuple[Node, Node]]
    optional: frozenset[int] = frozenset()


@dataclass(eq=False)
class Comprehension(Node):
    """A macro that iterates: all, exists, exists_one, map, filter, transformList, ...

    `var2` is set for the two-variable forms (index/key and value). `args`
    holds the macro's expressions after the variable names: the predicate, or
    the transform, or filter then transform.
    """

    kind: str
    range: Node
    var1: str
    var2: str | None
    args: list[Node]


@dataclass(eq=False)
class Bind(Node):
    """`cel.bind(var, init, body)`."""

    var: str
    init: Node
    body: Node


def children(node: Node) -> list[Node]:
    """The direct sub-expressions of `node`, in evaluation order."""
    if isinstance(node, Select):
        return [node.operand]
    if isinstance(node, Index):
        return [node.operand, node.index]
    if isinstance(node, Call):
        return ([node.target] if node.target is not None else []) + node.args
    if isinstance(node, ListLit):
        return list(node.elements)
    if isinstance(node, MapLit):
        return [n for entry in node.entries for n in entry]
    if isinstance(node, Comprehension):
        return [node.range, *node.args]
    if isinstance(node, Bind):
        return [node.init, node.body]
    return []
