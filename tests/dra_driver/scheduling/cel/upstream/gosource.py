"""A reader and evaluator for the small part of Go that upstream CEL test tables use.

`generate.py` turns Go test functions (Kubernetes' `library/*_test.go`, cel-go's
`formatting_test.go`, ...) into JSON test data. Their tables are composite
literals, short variable declarations, `for ... range` loops, closures and
calls to a test helper such as `testIP(t, expr, result, runtimeErr,
compileErrs)`. Rather than copying the tables by hand, this module parses the
Go source and runs those statements; `generate.py` supplies the Go library
functions the tables call (`netip.ParseAddr`, `types.Int`, ...) and the test
helpers, which record each case.

Only what the tables need is here: no goroutines, no channels, no generics,
no type checking. An unknown identifier or call yields `Opaque`, so a table
entry that mentions something unsupported still parses; the generator
checks that the fields it keeps are concrete.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

# -- tokens ----------------------------------------------------------------------------

_TOKEN = re.compile(
    r"""
    (?P<ws>[ \t\r]+)
  | (?P<nl>\n)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<raw>`[^`]*`)
  | (?P<str>"(?:\\.|[^"\\\n])*")
  | (?P<rune>'(?:\\.|[^'\\\n])+')
  | (?P<num>0[xX][0-9a-fA-F_]+|(?:\d[\d_]*\.?\d*(?:[eE][+-]?\d+)?|\.\d+(?:[eE][+-]?\d+)?))
  | (?P<ident>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op>\.\.\.|:=|==|!=|<=|>=|&&|\|\||\+\+|--|\+=|-=|\*=|/=|<-|<<|>>|&\^
      |[-+*/%&|^<>=!(){}\[\],;.:~])
    """,
    re.VERBOSE | re.DOTALL,
)
_SEMICOLON_AFTER = re.compile(r"^(?:[A-Za-z_]\w*|\d.*|[\"`'].*|\)|\]|\}|\+\+|--)$")
_KEYWORDS_WITHOUT_SEMICOLON = {
    "if",
    "for",
    "func",
    "switch",
    "case",
    "default",
    "else",
    "var",
    "const",
    "type",
    "struct",
    "map",
    "interface",
    "range",
    "go",
    "defer",
    "package",
    "import",
    "chan",
    "select",
}


@dataclass(frozen=True)
class Token:
    kind: str  # ident, num, str, rune, op
    text: str
    line: int


def tokenize(source: str) -> list[Token]:
    tokens: list[Token] = []
    line = 1
    pos = 0
    while pos < len(source):
        match = _TOKEN.match(source, pos)
        if match is None:
            raise SyntaxError(f"line {line}: cannot read {source[pos : pos + 20]!r}")
        kind = match.lastgroup
        text = match.group()
        pos = match.end()
        newlines = text.count("\n")
        if kind in ("nl", "comment") and newlines:
            if tokens and _needs_semicolon(tokens[-1]):
                tokens.append(Token("op", ";", line))
            line += newlines
            continue
        if kind in ("ws", "comment"):
            continue
        if kind == "raw":
            kind = "str"
        tokens.append(Token(kind or "", text, line))
        line += newlines
    if tokens and _needs_semicolon(tokens[-1]):
        tokens.append(Token("op", ";", line))
    return tokens


def _needs_semicolon(token: Token) -> bool:
    if token.kind == "ident":
        return token.text not in _KEYWORDS_WITHOUT_SEMICOLON or token.text in (
            "return",
            "break",
            "continue",
        )
    return token.kind in ("num", "str", "rune") or token.text in (")", "]", "}", "++", "--")


_ESCAPES = {"a": "\a", "b": "\b", "f": "\f", "n": "\n", "r": "\r", "t": "\t", "v": "\v"}


def unquote(text: str) -> str:
    """The value of a Go string literal (interpreted or raw)."""
    if text.startswith("`"):
        return text[1:-1].replace("\r", "")
    body = text[1:-1]
    out = bytearray()
    i = 0
    while i < len(body):
        c = body[i]
        if c != "\\":
            out += c.encode("utf-8")
            i += 1
            continue
        e = body[i + 1]
        if e in _ESCAPES:
            out += _ESCAPES[e].encode()
            i += 2
        elif e in "\\'\"":
            out += e.encode()
            i += 2
        elif e == "x":
            out.append(int(body[i + 2 : i + 4], 16))
            i += 4
        elif e in "01234567":
            out.append(int(body[i + 1 : i + 4], 8))
            i += 4
        elif e == "u":
            out += chr(int(body[i + 2 : i + 6], 16)).encode("utf-8", "surrogatepass")
            i += 6
        elif e == "U":
            out += chr(int(body[i + 2 : i + 10], 16)).encode("utf-8", "surrogatepass")
            i += 10
        else:
            raise SyntaxError(f"unknown escape \\{e} in {text}")
    return out.decode("utf-8", "surrogatepass")


# -- syntax tree ---------------------------------------------------------------------------


@dataclass
class Node:
    line: int


@dataclass
class Lit(Node):
    value: Any


@dataclass
class Name(Node):
    name: str


@dataclass
class Sel(Node):
    operand: Node
    field: str


@dataclass
class CallExpr(Node):
    func: Node
    args: list[Node]
    spread: bool = False  # `f(a, rest...)`


@dataclass
class IndexExpr(Node):
    operand: Node
    index: Node


@dataclass
class Unary(Node):
    op: str
    operand: Node


@dataclass
class Binary(Node):
    op: str
    left: Node
    right: Node


@dataclass
class TypeExpr(Node):
    """A type: `kind` is slice, map, struct, func, ptr, interface or named."""

    kind: str
    name: str = ""
    elem: TypeExpr | None = None
    key: TypeExpr | None = None


@dataclass
class Composite(Node):
    type: TypeExpr | None  # None: an elided element type
    elements: list[tuple[Node | None, Node]]  # (key, value)


@dataclass
class FuncLit(Node):
    params: list[str]
    body: list[Stmt]


@dataclass
class Stmt:
    line: int


@dataclass
class Define(Stmt):
    names: list[str]
    values: list[Node]


@dataclass
class Assign(Stmt):
    targets: list[Node]
    op: str
    values: list[Node]


@dataclass
class ExprStmt(Stmt):
    expr: Node


@dataclass
class Return(Stmt):
    values: list[Node]


@dataclass
class ForRange(Stmt):
    key: str | None
    value: str | None
    over: Node
    body: list[Stmt]


@dataclass
class If(Stmt):
    cond: Node
    body: list[Stmt]
    orelse: list[Stmt] = field(default_factory=list)


@dataclass
class Continue(Stmt):
    pass


@dataclass
class Ignored(Stmt):
    """A declaration the evaluator has no use for (`type x struct{...}`)."""


# -- parser ----------------------------------------------------------------------------------


class Parser:
    def __init__(self, tokens: list[Token]) -> None:
        self.tokens = tokens
        self.i = 0
        self.no_composite = 0  # >0 inside if/for headers, where `x {` opens a block

    # token helpers
    def peek(self, offset: int = 0) -> Token:
        index = self.i + offset
        return self.tokens[index] if index < len(self.tokens) else Token("eof", "", -1)

    def next(self) -> Token:
        token = self.peek()
        self.i += 1
        return token

    def at(self, text: str) -> bool:
        token = self.peek()
        return token.text == text and token.kind in ("op", "ident")

    def expect(self, text: str) -> Token:
        token = self.next()
        if token.text != text:
            raise SyntaxError(f"line {token.line}: expected {text!r}, got {token.text!r}")
        return token

    def skip_semicolons(self) -> None:
        while self.at(";"):
            self.i += 1

    # types
    def parse_type(self) -> TypeExpr:
        token = self.peek()
        if self.at("["):
            self.next()
            if not self.at("]"):  # array length
                self.parse_expr()
            self.expect("]")
            return TypeExpr(token.line, "slice", elem=self.parse_type())
        if self.at("chan"):
            self.next()
            return TypeExpr(token.line, "chan", elem=self.parse_type())
        if self.at("map"):
            self.next()
            self.expect("[")
            key = self.parse_type()
            self.expect("]")
            return TypeExpr(token.line, "map", key=key, elem=self.parse_type())
        if self.at("*"):
            self.next()
            return TypeExpr(token.line, "ptr", elem=self.parse_type())
        if self.at("struct") or self.at("interface"):
            kind = self.next().text
            self._skip_braces()
            return TypeExpr(token.line, kind)
        if self.at("func"):
            self.next()
            self._skip_parens()
            self._skip_result()
            return TypeExpr(token.line, "func")
        if token.kind == "ident":
            name = self.next().text
            while self.at(".") and self.peek(1).kind == "ident":
                self.next()
                name += "." + self.next().text
            if self.at("["):  # generic instantiation
                self._skip_brackets()
            return TypeExpr(token.line, "named", name=name)
        raise SyntaxError(f"line {token.line}: expected a type, got {token.text!r}")

    def _skip_balanced(self, open_: str, close: str) -> None:
        self.expect(open_)
        depth = 1
        while depth:
            token = self.next()
            if token.kind == "eof":
                raise SyntaxError("unbalanced brackets")
            if token.text == open_ and token.kind == "op":
                depth += 1
            elif token.text == close and token.kind == "op":
                depth -= 1

    def _skip_braces(self) -> None:
        self._skip_balanced("{", "}")

    def _skip_parens(self) -> None:
        self._skip_balanced("(", ")")

    def _skip_brackets(self) -> None:
        self._skip_balanced("[", "]")

    def _skip_result(self) -> None:
        if self.at("("):
            self._skip_parens()
        elif not self.at("{") and not self.at(",") and not self.at(")") and not self.at(";"):
            self.parse_type()

    # expressions
    def parse_expr(self) -> Node:
        return self._binary(0)

    _PRECEDENCE: ClassVar[dict[str, int]] = {
        "||": 1,
        "&&": 2,
        "==": 3,
        "!=": 3,
        "<": 3,
        "<=": 3,
        ">": 3,
        ">=": 3,
        "+": 4,
        "-": 4,
        "|": 4,
        "^": 4,
        "*": 5,
        "/": 5,
        "%": 5,
        "<<": 5,
        ">>": 5,
        "&": 5,
        "&^": 5,
    }

    def _binary(self, min_prec: int) -> Node:
        left = self._unary()
        while True:
            token = self.peek()
            prec = self._PRECEDENCE.get(token.text) if token.kind == "op" else None
            if prec is None or prec <= min_prec:
                return left
            self.next()
            right = self._binary(prec)
            left = Binary(token.line, token.text, left, right)

    def _unary(self) -> Node:
        token = self.peek()
        if token.kind == "op" and token.text in ("-", "+", "!", "&", "*", "^"):
            self.next()
            return Unary(token.line, token.text, self._unary())
        return self._primary()

    def _primary(self) -> Node:
        node = self._operand()
        while True:
            token = self.peek()
            if self.at("."):
                self.next()
                if self.at("("):  # type assertion
                    self._skip_parens()
                    continue
                node = Sel(token.line, node, self.next().text)
            elif self.at("("):
                self.next()
                args = []
                spread = False
                while not self.at(")"):
                    args.append(self.parse_expr())
                    if self.at("..."):
                        self.next()
                        spread = True
                    if self.at(","):
                        self.next()
                self.expect(")")
                node = CallExpr(token.line, node, args, spread)
            elif self.at("["):
                self.next()
                index = self.parse_expr()
                self.expect("]")
                node = IndexExpr(token.line, node, index)
            elif self.at("{") and not self.no_composite and _names_type(node):
                node = self._composite(_as_type(node))
            else:
                return node

    def _operand(self) -> Node:
        token = self.peek()
        if token.kind == "num":
            self.next()
            text = token.text.replace("_", "")
            if text.startswith(("0x", "0X")):
                return Lit(token.line, int(text, 16))
            if any(c in text for c in ".eE"):
                return Lit(token.line, float(text))
            if len(text) > 1 and text.startswith("0"):
                return Lit(token.line, int(text, 8))
            return Lit(token.line, int(text))
        if token.kind == "str":
            self.next()
            return Lit(token.line, unquote(token.text))
        if token.kind == "rune":
            self.next()
            return Lit(token.line, ord(unquote('"' + token.text[1:-1] + '"')))
        if self.at("("):
            self.next()
            self.no_composite, saved = 0, self.no_composite
            inner = self.parse_expr()
            self.no_composite = saved
            self.expect(")")
            return inner
        if self.at("func"):
            return self._func_lit()
        if self.at("[") or self.at("map") or self.at("struct") or self.at("chan"):
            type_ = self.parse_type()
            # A type as a value: `make([]T, 0)`, `new(T)`.
            return self._composite(type_) if self.at("{") else type_
        if token.kind == "ident":
            self.next()
            return Name(token.line, token.text)
        raise SyntaxError(f"line {token.line}: unexpected {token.text!r}")

    def _func_lit(self) -> FuncLit:
        line = self.expect("func").line
        self.expect("(")
        params: list[str] = []
        while not self.at(")"):
            names = [self.next().text]
            while self.at(","):
                self.next()
                names.append(self.next().text)
            self.parse_type()
            params += names
            if self.at(","):
                self.next()
        self.expect(")")
        self._skip_result()
        return FuncLit(line, params, self.parse_block())

    def _composite(self, type_: TypeExpr | None) -> Composite:
        line = self.expect("{").line
        saved, self.no_composite = self.no_composite, 0
        elements: list[tuple[Node | None, Node]] = []
        self.skip_semicolons()
        while not self.at("}"):
            key: Node | None = None
            value = self._element()
            if self.at(":"):
                self.next()
                key, value = value, self._element()
            elements.append((key, value))
            if self.at(","):
                self.next()
            self.skip_semicolons()
        self.expect("}")
        self.no_composite = saved
        return Composite(line, type_, elements)

    def _element(self) -> Node:
        if self.at("{"):
            return self._composite(None)
        return self.parse_expr()

    # statements
    def parse_block(self) -> list[Stmt]:
        self.expect("{")
        stmts = []
        self.skip_semicolons()
        while not self.at("}"):
            stmts.append(self.parse_stmt())
            self.skip_semicolons()
        self.expect("}")
        return stmts

    def parse_stmt(self) -> Stmt:
        token = self.peek()
        line = token.line
        if self.at("type"):
            self.next()
            self.next()
            self.parse_type()
            return Ignored(line)
        if self.at("var"):
            self.next()
            names = [self.next().text]
            while self.at(","):
                self.next()
                names.append(self.next().text)
            values: list[Node] = []
            if not self.at("="):
                self.parse_type()
            if self.at("="):
                self.next()
                values = self._expr_list()
            return Define(line, names, values)
        if self.at("return"):
            self.next()
            values = [] if self.at(";") or self.at("}") else self._expr_list()
            return Return(line, values)
        if self.at("continue"):
            self.next()
            return Continue(line)
        if self.at("if"):
            return self._if()
        if self.at("for"):
            return self._for()
        exprs = self._expr_list()
        if self.at(":="):
            self.next()
            return Define(line, [_name_of(e) for e in exprs], self._expr_list())
        if self.peek().text in ("=", "+=", "-=", "*=", "/="):
            op = self.next().text
            return Assign(line, exprs, op, self._expr_list())
        if self.at("++") or self.at("--"):
            op = "+=" if self.next().text == "++" else "-="
            return Assign(line, exprs, op, [Lit(line, 1)])
        return ExprStmt(line, exprs[0])

    def _expr_list(self) -> list[Node]:
        exprs = [self.parse_expr()]
        while self.at(","):
            self.next()
            exprs.append(self.parse_expr())
        return exprs

    def _if(self) -> If:
        line = self.expect("if").line
        self.no_composite += 1
        cond = self.parse_expr()
        self.no_composite -= 1
        body = self.parse_block()
        orelse: list[Stmt] = []
        if self.at("else"):
            self.next()
            orelse = [self._if()] if self.at("if") else self.parse_block()
        return If(line, cond, body, orelse)

    def _for(self) -> ForRange:
        line = self.expect("for").line
        self.no_composite += 1
        key = value = None
        if self.at("range"):
            self.next()
        else:
            key = _name_of(self.parse_expr())
            if self.at(","):
                self.next()
                value = _name_of(self.parse_expr())
            self.expect(":=")
            self.expect("range")
        over = self.parse_expr()
        self.no_composite -= 1
        return ForRange(line, key, value, over, self.parse_block())


def _name_of(node: Node) -> str:
    if not isinstance(node, Name):
        raise SyntaxError(f"line {node.line}: expected a name")
    return node.name


def _names_type(node: Node) -> bool:
    return isinstance(node, Name) or (isinstance(node, Sel) and isinstance(node.operand, Name))


def _as_type(node: Node) -> TypeExpr:
    if isinstance(node, Name):
        return TypeExpr(node.line, "named", name=node.name)
    assert isinstance(node, Sel)
    assert isinstance(node.operand, Name)
    return TypeExpr(node.line, "named", name=f"{node.operand.name}.{node.field}")


# -- source files ------------------------------------------------------------------------------


def function_body(source: str, name: str) -> list[Stmt]:
    """The statements of top-level function `name`."""
    match = re.search(rf"^func {re.escape(name)}\(.*?\)[^{{\n]*\{{", source, re.MULTILINE)
    if match is None:
        raise KeyError(f"no function {name}")
    start = match.end() - 1
    parser = Parser(tokenize(source[start:]))
    return parser.parse_block()


def defined_in(source: str, function: str, name: str) -> Stmt:
    """The statement `name := ...` of top-level function `function` (parsed alone)."""
    header = re.search(rf"^func {re.escape(function)}\(", source, re.MULTILINE)
    if header is None:
        raise KeyError(f"no function {function}")
    match = re.compile(rf"^\t{re.escape(name)} := ", re.MULTILINE).search(source, header.end())
    if match is None:
        raise KeyError(f"no {name} := in {function}")
    return Parser(tokenize(source[match.start() :])).parse_stmt()


def composite_entries(source: str, marker: str) -> list[Node]:
    """Each `{...}` entry of a table that begins where `marker` (e.g. `{name: "x",`) occurs."""
    entries = []
    for match in re.finditer(re.escape(marker), source):
        start = match.start()
        parser = Parser(tokenize(source[start:]))
        entries.append(parser._composite(None))
    return entries


# -- evaluation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Opaque:
    """Something the evaluator does not model (a schema, a proto message, ...)."""

    what: str

    def __call__(self, *args: Any) -> Opaque:
        return Opaque(f"{self.what}(...)")


class Struct(dict[str, Any]):
    """A composite literal of a named struct type (`testcase{...}`, `&pb.TestAllTypes{...}`)."""

    def __init__(self, type_name: str, fields: dict[str, Any]) -> None:
        super().__init__(fields)
        self.type_name = type_name


class _ContinueLoop(Exception):
    pass


class _ReturnValue(Exception):
    def __init__(self, values: list[Any]) -> None:
        self.values = values


Constructor = Callable[[TypeExpr, list[tuple[Any, Any]]], Any]


class Evaluator:
    """Runs statements with `globals` (Go library functions, helpers) in scope.

    `constructors` maps a named type (`apiservercel.IP`) to a function
    building the Python value of its composite literal.
    """

    def __init__(self, globals_: dict[str, Any], constructors: dict[str, Constructor]) -> None:
        self.globals = globals_
        self.constructors = constructors

    def run(self, stmts: list[Stmt], scope: dict[str, Any] | None = None) -> dict[str, Any]:
        env = dict(scope or {})
        self._block(stmts, env)
        return env

    def _block(self, stmts: list[Stmt], env: dict[str, Any]) -> None:
        for stmt in stmts:
            self._stmt(stmt, env)

    def _stmt(self, stmt: Stmt, env: dict[str, Any]) -> None:
        if isinstance(stmt, Define):
            values = [self.eval(v, env) for v in stmt.values]
            if len(stmt.names) > 1 and len(values) == 1 and isinstance(values[0], tuple):
                values = list(values[0])
            for name, value in zip(stmt.names, values or [None] * len(stmt.names), strict=False):
                if name != "_":
                    env[name] = value
        elif isinstance(stmt, Assign):
            values = [self.eval(v, env) for v in stmt.values]
            for target, value in zip(stmt.targets, values, strict=True):
                name = _name_of(target)
                if name == "_":
                    continue
                env[name] = value if stmt.op == "=" else _arith(stmt.op[0], env[name], value)
        elif isinstance(stmt, ExprStmt):
            self.eval(stmt.expr, env)
        elif isinstance(stmt, Return):
            raise _ReturnValue([self.eval(v, env) for v in stmt.values])
        elif isinstance(stmt, ForRange):
            self._for(stmt, env)
        elif isinstance(stmt, If):
            if self.eval(stmt.cond, env):
                self._block(stmt.body, env)
            else:
                self._block(stmt.orelse, env)
        elif isinstance(stmt, Continue):
            raise _ContinueLoop
        elif isinstance(stmt, Ignored):
            pass
        else:  # pragma: no cover
            raise TypeError(stmt)

    def _for(self, stmt: ForRange, env: dict[str, Any]) -> None:
        over = self.eval(stmt.over, env)
        if isinstance(over, dict):
            # Go's map order is random; sorted keys keep the generated data stable.
            items = [(k, over[k]) for k in sorted(over, key=str)]
        else:
            items = list(enumerate(over))
        for key, value in items:
            scope = dict(env)
            if stmt.key and stmt.key != "_":
                scope[stmt.key] = key
            if stmt.value and stmt.value != "_":
                scope[stmt.value] = value
            with contextlib.suppress(_ContinueLoop):
                self._block(stmt.body, scope)
            for name in env:  # assignments to outer variables survive the iteration
                env[name] = scope[name]

    def eval(self, node: Node, env: dict[str, Any]) -> Any:
        if isinstance(node, Lit):
            return node.value
        if isinstance(node, Name):
            if node.name in env:
                return env[node.name]
            if node.name in self.globals:
                return self.globals[node.name]
            return {"true": True, "false": False, "nil": None}.get(node.name, Opaque(node.name))
        if isinstance(node, Sel):
            qualified = _qualified(node)
            if qualified is not None and qualified in self.globals:
                return self.globals[qualified]
            operand = self.eval(node.operand, env)
            if isinstance(operand, dict):
                return operand.get(node.field)  # an absent struct field: its zero value
            return getattr(operand, node.field, Opaque(f"{operand}.{node.field}"))
        if isinstance(node, CallExpr):
            func = self.eval(node.func, env)
            args = [self.eval(a, env) for a in node.args]
            if node.spread:
                args = args[:-1] + list(args[-1])
            if isinstance(func, FuncLit):
                return self.call(func, args, env)
            if callable(func):
                return func(*args)
            return Opaque("call")
        if isinstance(node, IndexExpr):
            return self.eval(node.operand, env)[self.eval(node.index, env)]
        if isinstance(node, Unary):
            value = self.eval(node.operand, env)
            if node.op == "-":
                return -value
            if node.op == "!":
                return not value
            return value  # & and + change nothing here
        if isinstance(node, Binary):
            left = self.eval(node.left, env)
            if node.op == "&&":
                return left and self.eval(node.right, env)
            if node.op == "||":
                return left or self.eval(node.right, env)
            return _arith(node.op, left, self.eval(node.right, env))
        if isinstance(node, Composite):
            return self._composite(node, env)
        if isinstance(node, FuncLit):
            return _Closure(node, env, self)
        if isinstance(node, TypeExpr):
            return Opaque(f"type {node.kind} {node.name}")
        raise TypeError(node)  # pragma: no cover

    def call(self, func: FuncLit, args: list[Any], env: dict[str, Any]) -> Any:
        scope = dict(env)
        scope.update(zip(func.params, args, strict=False))
        try:
            self._block(func.body, scope)
        except _ReturnValue as ret:
            return ret.values[0] if len(ret.values) == 1 else tuple(ret.values)
        return None

    def _composite(self, node: Composite, env: dict[str, Any]) -> Any:
        type_ = node.type
        pairs = [
            (self._key(key, env, type_) if key is not None else None, self._value(value, env))
            for key, value in node.elements
        ]
        if type_ is not None and type_.kind == "named" and type_.name in self.constructors:
            return self.constructors[type_.name](type_, pairs)
        if type_ is not None and type_.kind == "named":
            return Struct(type_.name, dict(pairs))
        if type_ is not None and type_.kind == "slice":
            return [value for _, value in pairs]
        if type_ is not None and type_.kind == "map":
            return dict(pairs)
        if type_ is None and all(key is None for key, _ in pairs):
            return [value for _, value in pairs]
        return dict(pairs)

    def _key(self, key: Node, env: dict[str, Any], type_: TypeExpr | None) -> Any:
        if isinstance(key, Name) and (type_ is None or type_.kind != "map"):
            return key.name  # a struct field name
        return self.eval(key, env)

    def _value(self, value: Node, env: dict[str, Any]) -> Any:
        return self.eval(value, env)


class _Closure:
    """A function literal with the scope it was written in."""

    def __init__(self, func: FuncLit, env: dict[str, Any], evaluator: Evaluator) -> None:
        self.func = func
        self.env = env
        self.evaluator = evaluator

    def __call__(self, *args: Any) -> Any:
        return self.evaluator.call(self.func, list(args), self.env)


def _qualified(node: Sel) -> str | None:
    parts = [node.field]
    operand: Node = node.operand
    while isinstance(operand, Sel):
        parts.append(operand.field)
        operand = operand.operand
    if not isinstance(operand, Name):
        return None
    parts.append(operand.name)
    return ".".join(reversed(parts))


def _arith(op: str, left: Any, right: Any) -> Any:
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "/":
        return left // right if isinstance(left, int) and isinstance(right, int) else left / right
    if op == "%":
        return left % right
    if op == "==":
        return left == right
    if op == "!=":
        return left != right
    if op == "<":
        return left < right
    if op == "<=":
        return left <= right
    if op == ">":
        return left > right
    if op == ">=":
        return left >= right
    raise ValueError(f"operator {op} is not supported")
