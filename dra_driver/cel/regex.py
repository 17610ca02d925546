"""RE2 regular expressions (CEL's `matches`, Kubernetes' `find`/`findAll`) in Python.

CEL specifies RE2 syntax and RE2's guarantee of linear-time matching. Python's
`re` differs in syntax details and backtracks, so a hostile pattern such as
`(a+)+$` could stall the allocator. This module therefore

* translates RE2 syntax to Python's (`\\z`, `(?<name>...)`, POSIX classes,
  `\\Q...\\E`, octal escapes, `$` meaning end of text, mid-pattern flags) and
  rejects what RE2 rejects (backreferences, lookaround, possessive or nested
  repetition operators, repeat counts over 1000);
* runs patterns that cannot backtrack badly on `re` (fast, in C) and all
  others on `nfa.py`, a Thompson-NFA simulation that is linear in the input
  like RE2 itself.

Both engines give RE2's leftmost-first match, which is what `find` returns.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

# Python 3.11+ keeps its regex parser in re._parser; its parse tree feeds the NFA.
from re import _constants as sre_constants
from re import _parser as sre_parse
from typing import Final

from dra_driver.cel import nfa
from dra_driver.cel.diagnostics import FunctionError

MAX_REPEAT_COUNT: Final = 1000
# Patterns with more repetitions/alternations than this run on the NFA.
_MAX_BACKTRACKING_CHOICES: Final = 3

_POSIX_CLASSES: Final = {
    "alnum": "0-9A-Za-z",
    "alpha": "A-Za-z",
    "ascii": "\\x00-\\x7f",
    "blank": "\\t ",
    "cntrl": "\\x00-\\x1f\\x7f",
    "digit": "0-9",
    "graph": "!-~",
    "lower": "a-z",
    "print": " -~",
    "punct": "!-/:-@\\[-`{-~",
    "space": "\\t\\n\\v\\f\\r ",
    "upper": "A-Z",
    "word": "0-9A-Za-z_",
    "xdigit": "0-9A-Fa-f",
}
_SIMPLE_ESCAPES: Final = frozenset("dDsSwWbBAfnrtv.*+?()[]{}|^$\\-/")
_QUANTIFIER_START: Final = frozenset("*+?{")


class Re2Error(FunctionError):
    """The pattern is not valid RE2 syntax (or uses something RE2 does not have)."""


class Pattern:
    """A compiled RE2 pattern with RE2's search semantics."""

    def __init__(self, source: str, python_pattern: str, flags: int, linear: bool) -> None:
        self.source = source
        compiled = re.compile(python_pattern, flags)
        self._search: Callable[[str, int], tuple[int, int] | None]
        self.is_match: Callable[[str], bool]
        if linear:
            try:
                program = nfa.compile_program(sre_parse.parse(python_pattern, flags), flags)
            except nfa.NfaError as exc:
                raise Re2Error(f"error parsing regexp: {exc}: `{source}`") from exc
            self._search = program.search
            self.is_match = functools.partial(_nfa_is_match, program)
        else:
            self._search = functools.partial(_re_search, compiled)
            self.is_match = functools.partial(_re_is_match, compiled.search)

    def search(self, text: str, pos: int = 0) -> tuple[int, int] | None:
        """The leftmost-first match at or after `pos` as `(start, end)`, or None."""
        return self._search(text, pos)

    def find_all(self, text: str, limit: int = -1) -> list[str]:
        """Successive non-overlapping matches, like Go's `FindAllString(text, limit)`."""
        if limit == 0:
            return []
        result: list[str] = []
        pos = 0
        prev_end = -1
        end = len(text)
        while pos <= end and (limit < 0 or len(result) < limit):
            match = self._search(text, pos)
            if match is None:
                break
            start, stop = match
            accept = True
            if stop == start:
                # An empty match right after the previous match is skipped (Go semantics).
                if start == prev_end:
                    accept = False
                pos = stop + 1
            else:
                pos = stop
            prev_end = stop
            if accept:
                result.append(text[start:stop])
        return result


def _re_is_match(search: Callable[[str], re.Match[str] | None], text: str) -> bool:
    return search(text) is not None


def _nfa_is_match(program: nfa.Program, text: str) -> bool:
    return program.search(text) is not None


def _re_search(compiled: re.Pattern[str], text: str, pos: int) -> tuple[int, int] | None:
    match = compiled.search(text, pos)
    return None if match is None else match.span()


@functools.lru_cache(maxsize=512)
def compile_re2(pattern: str) -> Pattern:
    """Compiles an RE2 pattern; raises Re2Error (a FunctionError) when it is invalid."""
    python_pattern = _Translator(pattern).run()
    # RE2's \d, \w, \s and \b are ASCII-only; so is case folding here, in both engines.
    flags = re.ASCII
    try:
        tree = sre_parse.parse(python_pattern, flags)
    except re.error as exc:
        raise Re2Error(f"error parsing regexp: {exc}: `{pattern}`") from exc
    return Pattern(pattern, python_pattern, flags, linear=_may_backtrack(tree))


# -- safety analysis -----------------------------------------------------------


def _may_backtrack(tree: object) -> bool:
    """Whether `re` could need super-linear time on this pattern.

    Backtracking blows up when the engine has many ways to split the input:
    a repetition inside a repetition (`(a+)+`), a repeated alternation
    (`(a|aa)*`), or many choice points in sequence (`a?a?a?...aaa`,
    `.*.*.*.*x`). Patterns with nesting or with more than three repetitions
    and alternations run on the NFA instead.
    """
    choices = 0

    def walk(items: object, inside_repeat: bool) -> bool:
        nonlocal choices
        for op, av in items:  # type: ignore[attr-defined]
            if op in (sre_constants.MAX_REPEAT, sre_constants.MIN_REPEAT):
                choices += 1
                if inside_repeat or walk(av[2], True):
                    return True
            elif op == sre_constants.BRANCH:
                choices += 1
                if inside_repeat or any(walk(branch, inside_repeat) for branch in av[1]):
                    return True
            elif op == sre_constants.SUBPATTERN and walk(av[-1], inside_repeat):
                return True
        return False

    return walk(tree, False) or choices > _MAX_BACKTRACKING_CHOICES


# -- RE2 to Python syntax --------------------------------------------------------


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.i = 0
        self.out: list[str] = []
        # One entry per open group: how many extra ")" to emit when it closes
        # (mid-group flag changes become scoped groups).
        self.groups: list[int] = [0]
        self.multiline = "m" in self._all_flags()
        self.last_was_quantifiable = False

    def fail(self, message: str) -> Re2Error:
        return Re2Error(f"error parsing regexp: {message}: `{self.src}`")

    def _all_flags(self) -> str:
        return "".join(m.group(1) for m in re.finditer(r"\(\?([imsU-]+)[):]", self.src))

    def run(self) -> str:
        src = self.src
        while self.i < len(src):
            c = src[self.i]
            if c == "\\":
                self.escape()
            elif c == "[":
                self.char_class()
            elif c == "(":
                self.open_group()
            elif c == ")":
                if len(self.groups) == 1:
                    raise self.fail("unexpected )")
                self.out.append(")" * (self.groups.pop() + 1))
                self.i += 1
                self.last_was_quantifiable = True
            elif c in _QUANTIFIER_START:
                self.quantifier()
            elif c == "$":
                self.out.append("$" if self.multiline else r"\Z")
                self.i += 1
                self.last_was_quantifiable = False
            else:
                self.out.append(c)
                self.i += 1
                self.last_was_quantifiable = c not in "|^"
        if len(self.groups) != 1:
            raise self.fail("missing closing )")
        self.out.append(")" * self.groups[0])
        return "".join(self.out)

    def escape(self) -> None:
        src = self.src
        if self.i + 1 >= len(src):
            raise self.fail("trailing backslash at end of expression")
        c = src[self.i + 1]
        self.i += 2
        self.last_was_quantifiable = c not in "bBAz"
        if c == "z":
            self.out.append(r"\Z")
        elif c == "Q":
            end = src.find(r"\E", self.i)
            literal = src[self.i :] if end < 0 else src[self.i : end]
            self.i = len(src) if end < 0 else end + 2
            self.out.append("(?:" + re.escape(literal) + ")")
            self.last_was_quantifiable = True
        elif c in "01234567":
            self.out.append(self.octal(c))
        elif c == "x":
            self.out.append(self.hex_escape())
        elif c in "pP":
            raise self.fail(
                f"invalid character class range: \\{c} (Unicode classes are not supported)"
            )
        elif c in _SIMPLE_ESCAPES or not c.isalnum():
            self.out.append("\\" + c)
        else:
            raise self.fail(f"invalid escape sequence: \\{c}")

    def octal(self, first: str) -> str:
        src = self.src
        digits = first
        if first != "0" and (self.i >= len(src) or src[self.i] not in "01234567"):
            raise self.fail(
                f"invalid escape sequence: \\{first} (backreferences are not supported)"
            )
        while len(digits) < 3 and self.i < len(src) and src[self.i] in "01234567":
            digits += src[self.i]
            self.i += 1
        return _escape_code(int(digits, 8))

    def hex_escape(self) -> str:
        src = self.src
        if src.startswith("{", self.i):
            end = src.find("}", self.i)
            if end < 0:
                raise self.fail("invalid escape sequence: \\x{")
            digits = src[self.i + 1 : end]
            self.i = end + 1
        else:
            digits = src[self.i : self.i + 2]
            self.i += 2
        try:
            code = int(digits, 16)
        except ValueError as exc:
            raise self.fail(f"invalid escape sequence: \\x{digits}") from exc
        if code > 0x10FFFF or not digits:
            raise self.fail(f"invalid escape sequence: \\x{digits}")
        return _escape_code(code)

    def char_class(self) -> None:
        src = self.src
        out = ["["]
        self.i += 1
        if src.startswith("^", self.i):
            out.append("^")
            self.i += 1
        first = True
        while True:
            if self.i >= len(src):
                raise self.fail("missing closing ]")
            c = src[self.i]
            if c == "]" and not first:
                self.i += 1
                break
            if c == "[" and src.startswith("[:", self.i):
                end = src.find(":]", self.i + 2)
                name = src[self.i + 2 : end] if end >= 0 else ""
                if name in _POSIX_CLASSES:
                    out.append(_POSIX_CLASSES[name])
                    self.i = end + 2
                    first = False
                    continue
                raise self.fail(f"invalid character class range: {src[self.i : end + 2]}")
            if c == "\\":
                if self.i + 1 >= len(src):
                    raise self.fail("trailing backslash at end of expression")
                e = src[self.i + 1]
                self.i += 2
                if e in "01234567":
                    out.append(self.octal(e))
                elif e == "x":
                    out.append(self.hex_escape())
                elif e in "pP":
                    raise self.fail(
                        "invalid character class range (Unicode classes are not supported)"
                    )
                elif e in "dDsSwWfnrtv" or not e.isalnum():
                    out.append("\\" + e)
                else:
                    raise self.fail(f"invalid escape sequence: \\{e}")
            elif c in "[&~|":
                out.append("\\" + c)
                self.i += 1
            else:
                out.append(c)
                self.i += 1
            first = False
        out.append("]")
        self.out.append("".join(out))
        self.last_was_quantifiable = True

    def open_group(self) -> None:
        src = self.src
        rest = src[self.i :]
        self.last_was_quantifiable = False
        if not rest.startswith("(?"):
            self.out.append("(")
            self.groups.append(0)
            self.i += 1
            return
        if rest.startswith(("(?=", "(?!", "(?<=", "(?<!")):
            raise self.fail("invalid or unsupported Perl syntax: lookaround assertions")
        if rest.startswith(("(?P<", "(?<")):
            start = 4 if rest.startswith("(?P<") else 3
            end = rest.find(">")
            name = rest[start:end] if end > 0 else ""
            if not name or not re.fullmatch(r"[A-Za-z0-9_]+", name):
                raise self.fail(f"invalid named capture: {rest[: end + 1]}")
            self.out.append(f"(?P<{name}>")
            self.groups.append(0)
            self.i += end + 1
            return
        flags_match = re.match(r"\(\?([imsU]*(?:-[imsU]*)?)([):])", rest)
        if flags_match is None:
            raise self.fail(f"invalid or unsupported Perl syntax: {rest[:3]}")
        flags, closer = flags_match.group(1), flags_match.group(2)
        if "U" in flags:
            raise self.fail("the ungreedy flag (?U) is not supported")
        self.i += flags_match.end()
        if closer == ":":
            self.out.append(f"(?{flags}:" if flags else "(?:")
            self.groups.append(0)
            return
        if not flags or flags == "-":
            return
        # A flag change applies to the rest of the enclosing group.
        self.out.append(f"(?{flags}:")
        self.groups[-1] += 1

    def quantifier(self) -> None:
        src = self.src
        c = src[self.i]
        if c == "{":
            match = re.match(r"\{(\d+)(,(\d*))?\}", src[self.i :])
            if match is None:
                self.out.append(r"\{")
                self.i += 1
                self.last_was_quantifiable = True
                return
            low = int(match.group(1))
            high = int(match.group(3)) if match.group(3) else low
            if low > MAX_REPEAT_COUNT or high > MAX_REPEAT_COUNT or (match.group(3) and high < low):
                raise self.fail(f"invalid repeat count: {match.group(0)}")
            token = match.group(0)
        else:
            token = c
        if not self.last_was_quantifiable:
            raise self.fail(f"missing argument to repetition operator: {token}")
        self.i += len(token)
        if src.startswith("?", self.i):
            token += "?"
            self.i += 1
        nested = self.i < len(src) and src[self.i] in "*+?"
        nested = nested or bool(re.match(r"\{\d+(,\d*)?\}", src[self.i :]))
        if nested:
            raise self.fail(f"invalid nested repetition operator: {token}{src[self.i]}")
        self.out.append(token)
        self.last_was_quantifiable = False


def _escape_code(code: int) -> str:
    return (
        f"\\U{code:08x}"
        if code > 0xFFFF
        else f"\\x{code:02x}"
        if code < 0x100
        else f"\\u{code:04x}"
    )
