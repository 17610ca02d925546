"""Parse selector text with cel-python's grammar and fold it into `ast` nodes.

The Lark grammar is cel-python's (`celpy`), vendored as `cel.lark` and
extended with the optional syntax (`a.?b`, `a[?b]`, `[?x]`, `{?k: v}`) that
Kubernetes enables; this module turns its rule-per-level parse tree into the
small tree of `ast.py`, expands the
macros Kubernetes enables (`has`, `all`, `exists`, `exists_one`, `map`,
`filter`, the two-variable comprehensions, `cel.bind` and the optional
`optMap`/`optFlatMap`), decodes literals (`literals.py`),
and records for every node the offset of its operator token so runtime errors
can point at it. It also bounds nesting so that the recursive checker and
interpreter stay far from Python's recursion limit.
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path
from typing import Any, Final

import lark

from dra_driver.files.user_cache import user_cache_dir
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
    children,
)
from dra_driver.scheduling.cel.diagnostics import CompileError, offset_of
from dra_driver.scheduling.cel.literals import LiteralError, decode
from dra_driver.scheduling.cel.types import (
    BOOL,
    BYTES,
    DOUBLE,
    INT,
    NULL,
    STRING,
    TYPE_IDENTIFIERS,
    UINT,
)
from dra_driver.scheduling.cel.values import Uint

# Deepest nesting of sub-expressions accepted. cel-go stops at 250 parser
# recursions ("max recursion depth exceeded"); real selectors nest a handful
# of levels. Kept well below Python's default recursion limit of 1000 since
# the checker and interpreter recurse once or twice per level.
MAX_DEPTH: Final = 250

# cel-go's names for the optional selection and index operators.
OPTIONAL_SELECT: Final = "_?._"
OPTIONAL_INDEX: Final = "_[?_]"
# The function and variable cel-go's `sortBy` macro expands into.
SORT_BY_KEYS: Final = "@sortByAssociatedKeys"
_SORT_BY_INPUT: Final = "@__sortBy_input__"

_INT64_MIN: Final = -(2**63)
_INT64_MAX: Final = 2**63 - 1
_UINT64_MAX: Final = 2**64 - 1

# Grammar rules that, with a single child, only pass that child through.
_PASSTHROUGH: Final = frozenset(
    {
        "expr",
        "conditionalor",
        "conditionaland",
        "relation",
        "addition",
        "multiplication",
        "unary",
        "member",
        "primary",
        "paren_expr",
    }
)

_RELATION_OPS: Final = {
    "relation_lt": "_<_",
    "relation_le": "_<=_",
    "relation_gt": "_>_",
    "relation_ge": "_>=_",
    "relation_eq": "_==_",
    "relation_ne": "_!=_",
    "relation_in": "@in",
}
_ADDITION_OPS: Final = {"addition_add": "_+_", "addition_sub": "_-_"}
_MULTIPLICATION_OPS: Final = {
    "multiplication_mul": "_*_",
    "multiplication_div": "_/_",
    "multiplication_mod": "_%_",
}

# Receiver-style macros: name -> accepted argument counts (variables included).
_MEMBER_MACROS: Final = {
    "all": (2, 3),
    "exists": (2, 3),
    "exists_one": (2, 3),
    "existsOne": (3,),
    "map": (2, 3),
    "filter": (2,),
    "transformList": (3, 4),
    "transformMap": (3, 4),
    "transformMapEntry": (3, 4),
}
_TWO_VARIABLE_ONLY: Final = frozenset(
    {"existsOne", "transformList", "transformMap", "transformMapEntry"}
)

_Tree = lark.Tree[lark.Token]

_parser_lock = threading.Lock()
_parser: lark.Lark | None = None


def _literal_keywords(token: lark.Token) -> lark.Token:
    """`true`/`false` lex as identifiers in cel-python's grammar; retype them, keeping
    their source position (cel-python's own callback drops it)."""
    if token.value in ("true", "false"):
        return lark.Token.new_borrow_pos("BOOL_LIT", token.value, token)
    return token


def _lark() -> lark.Lark:
    """The CEL grammar (`cel.lark`), loaded into a Lark LALR parser once per process.

    Building the LALR tables takes a quarter of a second, more than a small
    `dra-gpu explain` spends on everything else, so they are built once per
    user and grammar: Lark's own cache (`cache=`), in a file of the user's
    cache directory named by the grammar's hash and Lark's version. Lark
    checks the file's hash (grammar, options, Lark and Python versions) before
    using it and rebuilds, rewriting the file, when it does not match or does
    not load (a file half written by a run beside this one does not unpickle).
    The hash covers the file's own path, so the file cannot be written under a
    temporary name and renamed. Without a writable cache directory the tables
    are built in every process, as before.
    """
    global _parser  # noqa: PLW0603 - built on first use, then shared
    if _parser is None:
        grammar = (Path(__file__).parent / "cel.lark").read_text(encoding="utf-8")
        options: dict[str, Any] = {
            "parser": "lalr",
            "start": "expr",
            "g_regex_flags": re.M,
            "lexer_callbacks": {"IDENT": _literal_keywords},
            "propagate_positions": True,
            "maybe_placeholders": False,
            "priority": "invert",
        }
        cached = _cache_file(grammar)
        _parser = lark.Lark(grammar, cache=str(cached) if cached else False, **options)
    return _parser


def _cache_file(grammar: str) -> Path | None:
    """Where this grammar's parser tables are kept for this Lark version (None: nowhere)."""
    directory = user_cache_dir()
    if directory is None:
        return None
    digest = hashlib.sha256(grammar.encode("utf-8")).hexdigest()[:16]
    return directory / f"cel-lalr-{digest}-lark-{lark.__version__}.cache"


def parse(text: str) -> Node:
    """The syntax tree of `text`; raises CompileError for syntax errors and macro misuse."""
    try:
        with _parser_lock:  # Lark parsers are not documented as thread-safe
            tree = _lark().parse(text)
    except lark.exceptions.UnexpectedInput as exc:
        raise CompileError(_syntax_message(exc), _syntax_offset(text, exc)) from None
    except lark.exceptions.LarkError as exc:
        raise CompileError(f"Syntax error: {exc}", None) from None
    except RecursionError:
        raise CompileError("expression nests too deeply", None) from None
    return _Converter(text).convert(tree)


def _syntax_offset(text: str, exc: lark.exceptions.UnexpectedInput) -> int | None:
    if isinstance(exc, lark.exceptions.UnexpectedToken) and exc.token.type == "$END":
        return len(text)
    line, column = getattr(exc, "line", None), getattr(exc, "column", None)
    if not isinstance(line, int) or not isinstance(column, int) or line < 1:
        return len(text) if isinstance(exc, lark.exceptions.UnexpectedEOF) else None
    return offset_of(text, line, column)


def _syntax_message(exc: lark.exceptions.UnexpectedInput) -> str:
    if isinstance(exc, lark.exceptions.UnexpectedCharacters):
        return f"Syntax error: token recognition error at: '{exc.char}'"
    if isinstance(exc, lark.exceptions.UnexpectedToken):
        token = exc.token
        if token.type == "$END":
            return "Syntax error: unexpected end of input"
        return f"Syntax error: mismatched input '{token.value}'"
    return "Syntax error: unexpected end of input"


class _Converter:
    """Folds one Lark tree into `ast` nodes."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.depth: dict[int, int] = {}
        self.nesting = 0

    def convert(self, tree: _Tree) -> Node:
        return self.node(tree)

    # -- helpers -----------------------------------------------------------

    def add(self, node: Node) -> Node:
        """Registers `node`, enforcing the nesting limit on the finished tree."""
        depth = 1 + max((self.depth.get(id(c), 1) for c in children(node)), default=0)
        if depth > MAX_DEPTH:
            raise CompileError(f"max recursion depth exceeded ({MAX_DEPTH})", node.pos)
        self.depth[id(node)] = depth
        return node

    def op_pos(self, after: int) -> int:
        """Offset of the next operator token at or after `after`.

        Skips whitespace, `//` comments and closing parentheses (a parenthesised
        left operand's tree may end before its `)`).
        """
        text = self.text
        i = after
        n = len(text)
        while i < n:
            c = text[i]
            if c in " \t\r\n\f)":
                i += 1
            elif text.startswith("//", i):
                nl = text.find("\n", i)
                i = n if nl < 0 else nl + 1
            else:
                break
        return min(i, max(n - 1, 0))

    @staticmethod
    def start(tree: _Tree | lark.Token) -> int:
        if isinstance(tree, lark.Token):
            return int(tree.start_pos or 0)
        return 0 if tree.meta.empty else int(tree.meta.start_pos)

    @staticmethod
    def end(tree: _Tree | lark.Token) -> int:
        if isinstance(tree, lark.Token):
            return int(tree.end_pos or 0)
        return 0 if tree.meta.empty else int(tree.meta.end_pos)

    # -- dispatch ----------------------------------------------------------

    def node(self, tree: _Tree) -> Node:
        while tree.data in _PASSTHROUGH and len(tree.children) == 1:
            child = tree.children[0]
            if not isinstance(child, lark.Tree):
                break
            tree = child
        self.nesting += 1
        if self.nesting > MAX_DEPTH:
            raise CompileError(f"max recursion depth exceeded ({MAX_DEPTH})", self.start(tree))
        try:
            handler = getattr(self, "rule_" + str(tree.data), None)
            if handler is None:
                raise CompileError(f"unsupported syntax '{tree.data}'", self.start(tree))
            node: Node = handler(tree)
        finally:
            self.nesting -= 1
        return node

    # -- operators ---------------------------------------------------------

    def rule_expr(self, tree: _Tree) -> Node:
        cond_tree, then_tree, else_tree = tree.children
        assert isinstance(cond_tree, lark.Tree)
        assert isinstance(then_tree, lark.Tree)
        assert isinstance(else_tree, lark.Tree)
        pos = self.op_pos(self.end(cond_tree))
        cond = self.node(cond_tree)
        then = self.node(then_tree)
        other = self.node(else_tree)
        return self.add(Call(pos, "_?_:_", [cond, then, other]))

    def _logical(self, tree: _Tree, rule: str, function: str) -> Node:
        operands: list[tuple[_Tree, int]] = []
        while tree.data == rule and len(tree.children) == 2:
            left, right = tree.children
            assert isinstance(left, lark.Tree)
            assert isinstance(right, lark.Tree)
            operands.append((right, self.op_pos(self.end(left))))
            tree = left
        first = self.node(tree)
        terms = [(first, first.pos)] + [
            (self.node(right), pos) for right, pos in reversed(operands)
        ]
        return self._balanced(function, terms)

    def _balanced(self, function: str, terms: list[tuple[Node, int]]) -> Node:
        """Joins `a && b && c ...` as a balanced tree (like cel-go) to keep it shallow."""
        if len(terms) == 1:
            return terms[0][0]
        middle = len(terms) // 2
        left = self._balanced(function, terms[:middle])
        right = self._balanced(function, terms[middle:])
        # The operator between the two halves is the one that precedes the right half.
        return self.add(Call(terms[middle][1], function, [left, right]))

    def rule_conditionalor(self, tree: _Tree) -> Node:
        return self._logical(tree, "conditionalor", "_||_")

    def rule_conditionaland(self, tree: _Tree) -> Node:
        return self._logical(tree, "conditionaland", "_&&_")

    def _binary_chain(self, tree: _Tree, rule: str, ops: dict[str, str]) -> Node:
        chain: list[tuple[str, int, _Tree]] = []
        while tree.data == rule and len(tree.children) == 2:
            op_tree, right = tree.children
            assert isinstance(op_tree, lark.Tree)
            assert isinstance(right, lark.Tree)
            left = op_tree.children[0]
            assert isinstance(left, lark.Tree)
            chain.append((ops[str(op_tree.data)], self.op_pos(self.end(left)), right))
            tree = left
        result = self.node(tree)
        for function, pos, right in reversed(chain):
            result = self.add(Call(pos, function, [result, self.node(right)]))
        return result

    def rule_relation(self, tree: _Tree) -> Node:
        return self._binary_chain(tree, "relation", _RELATION_OPS)

    def rule_addition(self, tree: _Tree) -> Node:
        return self._binary_chain(tree, "addition", _ADDITION_OPS)

    def rule_multiplication(self, tree: _Tree) -> Node:
        return self._binary_chain(tree, "multiplication", _MULTIPLICATION_OPS)

    def rule_unary(self, tree: _Tree) -> Node:
        op_tree, operand_tree = tree.children
        assert isinstance(op_tree, lark.Tree)
        assert isinstance(operand_tree, lark.Tree)
        function = "!_" if op_tree.data == "unary_not" else "-_"
        operand = self.node(operand_tree)
        return self.add(Call(self.start(tree), function, [operand]))

    # -- members -----------------------------------------------------------

    def rule_member_dot(self, tree: _Tree) -> Node:
        operand_tree, name = tree.children
        assert isinstance(operand_tree, lark.Tree)
        assert isinstance(name, lark.Token)
        operand = self.node(operand_tree)
        qualified = _qualified_name(operand)
        if qualified is not None and f"{qualified}.{name.value}" in TYPE_IDENTIFIERS:
            # `google.protobuf.Timestamp`: a type name, not a field selection.
            return self.add(Ident(self.start(operand_tree), f"{qualified}.{name.value}"))
        return self.add(Select(self.op_pos(self.end(operand_tree)), operand, str(name.value)))

    def rule_member_dot_arg(self, tree: _Tree) -> Node:
        operand_tree, name = tree.children[0], tree.children[1]
        assert isinstance(operand_tree, lark.Tree)
        assert isinstance(name, lark.Token)
        pos = self.op_pos(self.end(name))
        target = self.node(operand_tree)
        args = self.exprlist(tree.children[2] if len(tree.children) > 2 else None)
        return self.member_call(pos, str(name.value), target, args)

    def rule_member_dot_opt(self, tree: _Tree) -> Node:
        """`a.?b`: cel-go's `_?._(a, "b")`."""
        operand_tree, name = tree.children
        assert isinstance(operand_tree, lark.Tree)
        assert isinstance(name, lark.Token)
        pos = self.op_pos(self.end(operand_tree))
        operand = self.node(operand_tree)
        field = self.add(Const(self.start(name), str(name.value), STRING))
        return self.add(Call(pos, OPTIONAL_SELECT, [operand, field]))

    def rule_member_index_opt(self, tree: _Tree) -> Node:
        """`a[?b]`: cel-go's `_[?_](a, b)`."""
        operand_tree, index_tree = tree.children
        assert isinstance(operand_tree, lark.Tree)
        assert isinstance(index_tree, lark.Tree)
        pos = self.op_pos(self.end(operand_tree))
        operand = self.node(operand_tree)
        index = self.node(index_tree)
        return self.add(Call(pos, OPTIONAL_INDEX, [operand, index]))

    def rule_member_index(self, tree: _Tree) -> Node:
        operand_tree, index_tree = tree.children
        assert isinstance(operand_tree, lark.Tree)
        assert isinstance(index_tree, lark.Tree)
        pos = self.op_pos(self.end(operand_tree))
        operand = self.node(operand_tree)
        index = self.node(index_tree)
        return self.add(Index(pos, operand, index))

    def rule_member_object(self, tree: _Tree) -> Node:
        raise CompileError(
            "message construction is not supported in device selectors", self.start(tree)
        )

    # -- primaries ---------------------------------------------------------

    def rule_ident(self, tree: _Tree) -> Node:
        (token,) = tree.children
        assert isinstance(token, lark.Token)
        return self.add(Ident(self.start(token), str(token.value)))

    def rule_dot_ident(self, tree: _Tree) -> Node:
        return self.rule_ident(tree)

    def rule_ident_arg(self, tree: _Tree) -> Node:
        name = tree.children[0]
        assert isinstance(name, lark.Token)
        pos = self.op_pos(self.end(name))
        args = self.exprlist(tree.children[1] if len(tree.children) > 1 else None)
        return self.global_call(pos, str(name.value), args)

    def rule_dot_ident_arg(self, tree: _Tree) -> Node:
        return self.rule_ident_arg(tree)

    def rule_list_lit(self, tree: _Tree) -> Node:
        elements: list[Node] = []
        optional: set[int] = set()
        if tree.children:
            inits = tree.children[0]
            assert isinstance(inits, lark.Tree)
            for i, elem in enumerate(inits.children):
                assert isinstance(elem, lark.Tree)
                (inner,) = elem.children
                assert isinstance(inner, lark.Tree)
                if inner.data == "list_opt_elem":
                    optional.add(i)
                    (inner,) = inner.children
                    assert isinstance(inner, lark.Tree)
                elements.append(self.node(inner))
        return self.add(ListLit(self.start(tree), elements, frozenset(optional)))

    def rule_map_lit(self, tree: _Tree) -> Node:
        entries: list[tuple[Node, Node]] = []
        optional: set[int] = set()
        if tree.children:
            inits = tree.children[0]
            assert isinstance(inits, lark.Tree)
            for i, entry in enumerate(inits.children):
                assert isinstance(entry, lark.Tree)
                kids = entry.children
                if len(kids) == 1:
                    (opt_entry,) = kids
                    assert isinstance(opt_entry, lark.Tree)
                    optional.add(i)
                    kids = opt_entry.children
                key_tree, value_tree = kids
                assert isinstance(key_tree, lark.Tree)
                assert isinstance(value_tree, lark.Tree)
                entries.append((self.node(key_tree), self.node(value_tree)))
        return self.add(MapLit(self.start(tree), entries, frozenset(optional)))

    def rule_literal(self, tree: _Tree) -> Node:
        (token,) = tree.children
        assert isinstance(token, lark.Token)
        pos = self.start(token)
        kind = token.type
        text = str(token.value)
        if kind == "INT_LIT":
            value = _parse_int(text)
            if not _INT64_MIN <= value <= _INT64_MAX:
                raise CompileError(f"invalid int literal {text}", pos)
            return self.add(Const(pos, value, INT))
        if kind == "UINT_LIT":
            value = _parse_int(text[:-1])
            if not 0 <= value <= _UINT64_MAX:
                raise CompileError(f"invalid uint literal {text}", pos)
            return self.add(Const(pos, Uint(value), UINT))
        if kind == "FLOAT_LIT":
            return self.add(Const(pos, float(text), DOUBLE))
        if kind in ("STRING_LIT", "MLSTRING_LIT"):
            try:
                decoded = decode(text)
            except LiteralError as exc:
                raise CompileError(f"Syntax error: {exc.args[0]}: {text}", pos) from None
            if isinstance(decoded, bytes):
                return self.add(Const(pos, decoded, BYTES))
            return self.add(Const(pos, decoded, STRING))
        if kind == "BOOL_LIT":
            return self.add(Const(pos, text == "true", BOOL))
        if kind == "NULL_LIT":
            return self.add(Const(pos, None, NULL))
        raise CompileError(f"unsupported literal {text}", pos)

    def exprlist(self, tree: _Tree | lark.Token | None) -> list[Node]:
        if tree is None:
            return []
        assert isinstance(tree, lark.Tree)
        result = []
        for child in tree.children:
            assert isinstance(child, lark.Tree)
            result.append(self.node(child))
        return result

    # -- calls and macros --------------------------------------------------

    def global_call(self, pos: int, function: str, args: list[Node]) -> Node:
        if function == "has" and len(args) == 1:
            arg = args[0]
            if not isinstance(arg, Select) or arg.test_only:
                raise CompileError("invalid argument to has() macro", pos)
            return self.add(Select(arg.pos, arg.operand, arg.field, test_only=True))
        return self.add(Call(pos, function, args))

    def member_call(self, pos: int, function: str, target: Node, args: list[Node]) -> Node:
        is_bind = function == "bind" and isinstance(target, Ident) and target.name == "cel"
        if is_bind and len(args) == 3:
            var = args[0]
            if not isinstance(var, Ident):
                raise CompileError("cel.bind() variable names must be simple identifiers", var.pos)
            return self.add(Bind(pos, var.name, args[1], args[2]))
        if function in ("optMap", "optFlatMap") and len(args) == 2:
            return self.optional_macro(pos, function, target, args[0], args[1])
        if function == "sortBy" and len(args) == 2:
            return self.sort_by_macro(pos, target, args[0], args[1])
        counts = _MEMBER_MACROS.get(function)
        if counts is not None and len(args) in counts:
            two_vars = len(args) == 3 and function in ("all", "exists", "exists_one")
            two_vars = two_vars or function in _TWO_VARIABLE_ONLY
            n_vars = 2 if two_vars else 1
            names: list[str] = []
            for var in args[:n_vars]:
                if not isinstance(var, Ident):
                    raise CompileError("argument must be a simple name", var.pos)
                names.append(var.name)
            if n_vars == 2 and names[0] == names[1]:
                raise CompileError(f"duplicate variable name: {names[0]}", args[1].pos)
            kind = "exists_one" if function == "existsOne" else function
            return self.add(
                Comprehension(
                    pos,
                    kind,
                    target,
                    names[0],
                    names[1] if n_vars == 2 else None,
                    args[n_vars:],
                )
            )
        return self.add(Call(pos, function, args, target))

    def sort_by_macro(self, pos: int, target: Node, var: Node, key: Node) -> Node:
        """cel-go's expansion of `l.sortBy(e, key)`: `cel.bind(@__sortBy_input__, l,
        @__sortBy_input__.@sortByAssociatedKeys(@__sortBy_input__.map(e, key)))`."""
        return _sort_by(self, pos, target, var, key)

    def optional_macro(self, pos: int, function: str, target: Node, var: Node, body: Node) -> Node:
        """cel-go's expansion of `o.optMap(x, e)` / `o.optFlatMap(x, e)`:
        `o.hasValue() ? optional.of(cel.bind(x, o.value(), e)) : optional.none()`
        (optFlatMap without the `optional.of`)."""
        if not isinstance(var, Ident):
            raise CompileError(f"{function}() variable name must be a simple identifier", var.pos)
        has_value = self.add(Call(pos, "hasValue", [], target))
        value = self.add(Call(pos, "value", [], target))
        bound = self.add(Bind(pos, var.name, value, body))
        if function == "optMap":
            bound = self.add(Call(pos, "optional.of", [bound]))
        none = self.add(Call(pos, "optional.none", []))
        return self.add(Call(pos, "_?_:_", [has_value, bound, none]))


def _sort_by(converter: _Converter, pos: int, target: Node, var: Node, key: Node) -> Node:
    if not isinstance(var, Ident):
        raise CompileError("sortBy() variable name must be a simple identifier", var.pos)
    add = converter.add
    keys = add(Comprehension(pos, "map", add(Ident(pos, _SORT_BY_INPUT)), var.name, None, [key]))
    call = add(Call(pos, SORT_BY_KEYS, [keys], add(Ident(pos, _SORT_BY_INPUT))))
    return add(Bind(pos, _SORT_BY_INPUT, target, call))


def _qualified_name(node: Node) -> str | None:
    """`a.b.c` for a chain of plain field selections on an identifier, else None."""
    parts: list[str] = []
    while isinstance(node, Select) and not node.test_only:
        parts.append(node.field)
        node = node.operand
    if not isinstance(node, Ident):
        return None
    parts.append(node.name)
    return ".".join(reversed(parts))


def _parse_int(text: str) -> int:
    negative = text.startswith("-")
    digits = text[1:] if negative else text
    value = int(digits[2:], 16) if digits[:2].lower() == "0x" else int(digits, 10)
    return -value if negative else value
