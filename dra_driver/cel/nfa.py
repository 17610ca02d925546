"""A linear-time regex matcher (Thompson NFA, Pike VM) for patterns `re` could choke on.

RE2 never backtracks; Python's `re` does, so `(a+)+$` against forty `a`s and
a `b` takes longer than the universe has left. `regex.py` sends such patterns
here. The program is compiled from the parse tree Python's own regex parser
produces (after RE2-to-Python translation), and simulated with one thread per
NFA state, in priority order, which yields RE2's leftmost-first match in
O(len(text) * len(program)) time.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from re import _constants as c
from typing import Any, Final

MAX_PROGRAM: Final = 20_000

_CHAR, _SPLIT, _JMP, _ASSERT, _MATCH = range(5)

CharTest = Callable[[str], bool]


class NfaError(ValueError):
    """The pattern uses something the NFA cannot run, or compiles too large."""


def _is_word(ch: str) -> bool:
    return ch == "_" or (ch.isascii() and ch.isalnum())


_CATEGORIES: Final[dict[Any, CharTest]] = {
    c.CATEGORY_DIGIT: lambda ch: "0" <= ch <= "9",
    c.CATEGORY_NOT_DIGIT: lambda ch: not "0" <= ch <= "9",
    c.CATEGORY_SPACE: lambda ch: ch in " \t\n\r\f\v",
    c.CATEGORY_NOT_SPACE: lambda ch: ch not in " \t\n\r\f\v",
    c.CATEGORY_WORD: _is_word,
    c.CATEGORY_NOT_WORD: lambda ch: not _is_word(ch),
}


class Program:
    """A compiled NFA program."""

    def __init__(self) -> None:
        self.ops: list[int] = []
        self.args: list[Any] = []
        self.args2: list[int] = []

    def emit(self, op: int, arg: Any = None, arg2: int = -1) -> int:
        if len(self.ops) >= MAX_PROGRAM:
            raise NfaError("regular expression too large")
        self.ops.append(op)
        self.args.append(arg)
        self.args2.append(arg2)
        return len(self.ops) - 1

    def search(self, text: str, pos: int = 0) -> tuple[int, int] | None:
        """The leftmost-first match starting at or after `pos`, as `(start, end)`."""
        n = len(text)
        ops, args = self.ops, self.args
        marks = [-1] * len(ops)
        clist: list[tuple[int, int]] = []
        self._add(clist, marks, 0, pos, at=pos, text=text)
        matched: tuple[int, int] | None = None
        for i in range(pos, n + 1):
            nlist: list[tuple[int, int]] = []
            ch = text[i] if i < n else ""
            generation = i + 1
            for pc, start in clist:
                op = ops[pc]
                if op == _MATCH:
                    matched = (start, i)
                    break  # lower-priority threads lose to this match
                if op == _CHAR and i < n and args[pc](ch):
                    self._add(nlist, marks, pc + 1, start, at=generation, text=text)
            if i < n and matched is None:
                self._add(nlist, marks, 0, i + 1, at=generation, text=text)
            if not nlist and matched is not None:
                break
            clist = nlist
        return matched

    def _add(
        self,
        threads: list[tuple[int, int]],
        marks: list[int],
        pc: int,
        start: int,
        *,
        at: int,
        text: str,
    ) -> None:
        """Adds `pc` and everything reachable from it without consuming input."""
        ops, args, args2 = self.ops, self.args, self.args2
        stack = [pc]
        while stack:
            pc = stack.pop()
            if marks[pc] == at:
                continue
            marks[pc] = at
            op = ops[pc]
            if op == _JMP:
                stack.append(args[pc])
            elif op == _SPLIT:
                stack.append(args2[pc])  # lower priority, explored after the first branch
                stack.append(args[pc])
            elif op == _ASSERT:
                if args[pc](text, at):
                    stack.append(pc + 1)
            else:
                threads.append((pc, start))


def _at_begin(_text: str, at: int) -> bool:
    return at == 0


def _at_begin_line(text: str, at: int) -> bool:
    return at == 0 or text[at - 1] == "\n"


def _at_end(text: str, at: int) -> bool:
    return at == len(text)


def _at_end_line(text: str, at: int) -> bool:
    return at == len(text) or text[at] == "\n"


def _at_end_python(text: str, at: int) -> bool:
    return at == len(text) or (at == len(text) - 1 and text[at] == "\n")


def _at_boundary(text: str, at: int) -> bool:
    before = at > 0 and _is_word(text[at - 1])
    after = at < len(text) and _is_word(text[at])
    return before != after


def _not_boundary(text: str, at: int) -> bool:
    return not _at_boundary(text, at)


def compile_program(tree: Any, flags: int) -> Program:
    """Compiles a `re._parser.parse` tree into an NFA program."""
    program = Program()
    global_flags = flags | int(getattr(getattr(tree, "state", None), "flags", 0))
    _Compiler(program).seq(list(tree), global_flags)
    program.emit(_MATCH)
    return program


class _Compiler:
    def __init__(self, program: Program) -> None:
        self.p = program

    def seq(self, items: list[Any], flags: int) -> None:
        for op, av in items:
            self.item(op, av, flags)

    def item(self, op: Any, av: Any, flags: int) -> None:
        p = self.p
        if op == c.LITERAL:
            p.emit(_CHAR, _literal_test(av, flags))
        elif op == c.NOT_LITERAL:
            p.emit(_CHAR, _negated(_literal_test(av, flags)))
        elif op == c.ANY:
            p.emit(_CHAR, _any_char if flags & re.DOTALL else _not_newline)
        elif op == c.IN:
            p.emit(_CHAR, _set_test(av, flags))
        elif op == c.AT:
            p.emit(_ASSERT, _assertion(av, flags))
        elif op == c.BRANCH:
            self.branch(av[1], flags)
        elif op == c.SUBPATTERN:
            _group, add_flags, del_flags, sub = av
            self.seq(list(sub), (flags | add_flags) & ~del_flags)
        elif op in (c.MAX_REPEAT, c.MIN_REPEAT):
            low, high, sub = av
            self.repeat(low, high, list(sub), op == c.MAX_REPEAT, flags)
        else:
            raise NfaError(f"unsupported regular expression construct {op}")

    def branch(self, alternatives: list[Any], flags: int) -> None:
        p = self.p
        jumps: list[int] = []
        for index, alternative in enumerate(alternatives):
            if index < len(alternatives) - 1:
                split = p.emit(_SPLIT, 0, 0)
                p.args[split] = split + 1
                self.seq(list(alternative), flags)
                jumps.append(p.emit(_JMP, 0))
                p.args2[split] = len(p.ops)
            else:
                self.seq(list(alternative), flags)
        for jump in jumps:
            p.args[jump] = len(p.ops)

    def repeat(self, low: int, high: int, sub: list[Any], greedy: bool, flags: int) -> None:
        p = self.p
        for _ in range(low):
            self.seq(sub, flags)
        if high == c.MAXREPEAT:
            loop = p.emit(_SPLIT, 0, 0)
            self.seq(sub, flags)
            p.emit(_JMP, loop)
            self._set_split(loop, loop + 1, len(p.ops), greedy)
            return
        pending: list[int] = []
        for _ in range(high - low):
            split = p.emit(_SPLIT, 0, 0)
            pending.append(split)
            self.seq(sub, flags)
        end = len(p.ops)
        for split in pending:
            self._set_split(split, split + 1, end, greedy)

    def _set_split(self, split: int, body: int, out: int, greedy: bool) -> None:
        if greedy:
            self.p.args[split], self.p.args2[split] = body, out
        else:
            self.p.args[split], self.p.args2[split] = out, body


def _any_char(_ch: str) -> bool:
    return True


def _not_newline(ch: str) -> bool:
    return ch != "\n"


def _ascii_lower(ch: str) -> str:
    return ch.lower() if ch.isascii() else ch


def _folded(ch: str) -> tuple[str, ...]:
    return (ch, ch.lower(), ch.upper()) if ch.isascii() else (ch,)


def _literal_test(code: int, flags: int) -> CharTest:
    target = chr(code)
    if flags & re.IGNORECASE:
        lowered = _ascii_lower(target)

        def folded_literal(ch: str) -> bool:
            return _ascii_lower(ch) == lowered

        return folded_literal

    def literal(ch: str) -> bool:
        return ch == target

    return literal


def _negated(test: CharTest) -> CharTest:
    def negated(ch: str) -> bool:
        return not test(ch)

    return negated


def _range_test(low: str, high: str, fold: bool) -> CharTest:
    def in_range(ch: str) -> bool:
        if fold:
            return any(low <= f <= high for f in _folded(ch))
        return low <= ch <= high

    return in_range


def _set_test(items: list[Any], flags: int) -> CharTest:
    negate = False
    tests: list[CharTest] = []
    for op, av in items:
        if op == c.NEGATE:
            negate = True
        elif op == c.LITERAL:
            tests.append(_literal_test(av, flags))
        elif op == c.NOT_LITERAL:
            tests.append(_negated(_literal_test(av, flags)))
        elif op == c.RANGE:
            tests.append(_range_test(chr(av[0]), chr(av[1]), bool(flags & re.IGNORECASE)))
        elif op == c.CATEGORY:
            tests.append(_CATEGORIES[av])
        else:
            raise NfaError(f"unsupported character class item {op}")

    def test(ch: str) -> bool:
        return any(t(ch) for t in tests) != negate

    return test


def _assertion(kind: Any, flags: int) -> Callable[[str, int], bool]:
    multiline = bool(flags & re.MULTILINE)
    if kind == c.AT_BEGINNING:
        return _at_begin_line if multiline else _at_begin
    if kind == c.AT_BEGINNING_STRING:
        return _at_begin
    if kind == c.AT_END:
        return _at_end_line if multiline else _at_end_python
    if kind == c.AT_END_STRING:
        return _at_end
    if kind == c.AT_BOUNDARY:
        return _at_boundary
    if kind == c.AT_NON_BOUNDARY:
        return _not_boundary
    raise NfaError(f"unsupported assertion {kind}")
