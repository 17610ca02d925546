"""RE2 regular expressions (CEL's `matches`, Kubernetes' `find`/`findAll`) in Python.

CEL specifies RE2 syntax and RE2's guarantee of linear-time matching. Every
pattern is compiled by `google-re2`, so RE2 itself decides what is valid
(`\\pL`, `(?U)`, `[[:^alpha:]]` included) and runs any pattern that could
backtrack. Its errors are worded as Go's `regexp/syntax` words them, which is
what cel-go and the API server report.

Calling `google-re2` from Python costs about 10 µs a search against Python's
`re` at 0.5 µs, and selectors run once per device per claim. So
`re2_translate` also translates the patterns that cannot backtrack badly into
`re` syntax, and those run on `re`. The translator covers the common subset
of RE2 and gives up (the pattern then runs on RE2) on anything else; a
property test checks it against RE2.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import re2

from dra_driver.memo import memoized
from dra_driver.scheduling.cel.diagnostics import FunctionError

# Patterns with more repetitions/alternations than this run on RE2.
_MAX_BACKTRACKING_CHOICES: Final = 3

# Go's regexp/syntax wording for RE2's error codes (re2.h ErrorCode texts).
_GO_WORDING: Final = {
    "missing ]": "missing closing ]",
    "missing )": "missing closing )",
    "trailing \\": "trailing backslash at end of expression",
    "no argument for repetition operator": "missing argument to repetition operator",
    "invalid repetition size": "invalid repeat count",
    "bad repetition operator": "invalid nested repetition operator",
    "invalid perl operator": "invalid or unsupported Perl syntax",
    "invalid named capture group": "invalid named capture",
    "pattern too large - compile failed": "expression too large",
    "pattern too large - reverse compile failed": "expression too large",
}
_BACKREFERENCE: Final = re.compile(r"\\[1-9]")
_LOOKAROUND: Final = ("(?=", "(?!", "(?<=", "(?<!")

_OPTIONS: Final = re2.Options()
_OPTIONS.log_errors = False

# RE2's Perl and POSIX classes as ranges (ASCII-only, as in RE2).
_PERL_CLASSES: Final = {"d": "0-9", "s": "\\t\\n\\f\\r ", "w": "0-9A-Za-z_"}
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
_CONTROL_ESCAPES: Final = {"a": 7, "f": 12, "n": 10, "r": 13, "t": 9, "v": 11}
_REPEAT: Final = re.compile(r"\{(\d+)(,(\d*))?\}")
_GROUP_FLAGS: Final = re.compile(r"\(\?([imsU]*)(?:-([imsU]*))?([):])")


class Re2Error(FunctionError):
    """The pattern is not valid RE2 syntax."""


class Pattern:
    """A compiled RE2 pattern with RE2's leftmost-first search semantics."""

    def __init__(
        self, source: str, engine: Any, fast: re.Pattern[str] | None, ascii_only: bool
    ) -> None:
        self.source = source
        # google-re2 runs everything; `fast` is the `re` translation when there is
        # a safe one, exact on all text or (when it folds case) on ASCII text only.
        self._re2 = engine
        self._fast = fast
        self._ascii_only = ascii_only
        self.is_match: Callable[[str], bool]
        if fast is None:
            self.is_match = self._re2_is_match
        elif ascii_only:
            self.is_match = self._ascii_is_match
        else:
            search = fast.search
            self.is_match = lambda text: search(text) is not None

    def _re2_is_match(self, text: str) -> bool:
        return self._re2.search(text) is not None

    def _ascii_is_match(self, text: str) -> bool:
        return self.search(text) is not None

    def search(self, text: str, pos: int = 0) -> tuple[int, int] | None:
        """The leftmost-first match at or after `pos` as `(start, end)`, or None."""
        fast = self._fast
        if fast is not None and (not self._ascii_only or text.isascii()):
            match = fast.search(text, pos)
            return None if match is None else match.span()
        found = self._re2.search(text, pos)
        return None if found is None else (found.start(), found.end())

    def find_all(self, text: str, limit: int = -1) -> list[str]:
        """Successive non-overlapping matches, like Go's `FindAllString(text, limit)`."""
        if limit == 0:
            return []
        result: list[str] = []
        pos = 0
        prev_end = -1
        end = len(text)
        while pos <= end and (limit < 0 or len(result) < limit):
            match = self.search(text, pos)
            if match is None:
                break
            start, stop = match
            # An empty match right after the previous match is skipped (Go semantics).
            if stop != start or start != prev_end:
                result.append(text[start:stop])
            pos = stop + 1 if stop == start else stop
            prev_end = stop
        return result


@memoized(512)
def compile_re2(pattern: str) -> Pattern:
    """Compiles an RE2 pattern; raises Re2Error (a FunctionError) when it is invalid."""
    try:
        compiled = re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        raise Re2Error(_go_message(exc, pattern)) from None
    except UnicodeEncodeError as exc:
        raise Re2Error(f"error parsing regexp: invalid UTF-8: `{pattern}`") from exc
    translation = re2_translate(pattern)
    if translation is None or translation.may_backtrack:
        return Pattern(pattern, compiled, None, ascii_only=False)
    return Pattern(
        pattern,
        compiled,
        re.compile(translation.python, re.ASCII),
        ascii_only=translation.folds_case,
    )


def _go_message(exc: re2.error, pattern: str) -> str:
    raw = exc.args[0] if exc.args else b""
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    code, _, arg = text.partition(": ")
    message = f"error parsing regexp: {_GO_WORDING.get(code, code)}: `{arg or pattern}`"
    if code == "invalid escape sequence" and _BACKREFERENCE.fullmatch(arg):
        message += " (backreferences are not supported)"
    elif code == "invalid perl operator" and arg.startswith(_LOOKAROUND):
        message += " (lookaround assertions are not supported)"
    return message


# -- RE2 to Python syntax --------------------------------------------------------


@dataclass(frozen=True)
class Translation:
    """A valid RE2 pattern in Python `re` syntax (to be compiled with re.ASCII)."""

    python: str
    # Nested or many repetitions/alternations: `re` could take super-linear time.
    may_backtrack: bool
    # Case folding is used; Python's ASCII folding equals RE2's only on ASCII text.
    folds_case: bool


class _GiveUp(Exception):
    """The translator does not cover this construct; the pattern runs on RE2."""


@dataclass
class _Group:
    flags: frozenset[str]
    has_choice: bool = False


def re2_translate(pattern: str) -> Translation | None:
    """Translates a pattern RE2 accepted into `re` syntax, or None if not covered.

    Captures become non-capturing groups (CEL never reads them); flags are
    applied atom by atom (`(?i:x)`, `\\Z` for a `$` outside multi-line mode),
    so RE2's "flags last until the group closes" needs no scoping in `re`.
    """
    try:
        return _Translator(pattern).run()
    except _GiveUp:
        return None


class _Translator:
    def __init__(self, pattern: str) -> None:
        self.src = pattern
        self.i = 0
        self.out: list[str] = []
        self.groups = [_Group(frozenset())]
        self.choices = 0
        self.nested = False
        self.folds_case = False
        # What a following repetition operator would apply to: None (nothing
        # repeatable), "atom", or "group" / "choice-group" (a group without or
        # with repetitions or alternations inside).
        self.last: str | None = None

    @property
    def flags(self) -> frozenset[str]:
        return self.groups[-1].flags

    def run(self) -> Translation:
        src = self.src
        while self.i < len(src):
            c = src[self.i]
            if c == "\\":
                self.escape()
            elif c == "[":
                self.emit(self.char_class(), "atom")
            elif c == "(":
                self.open_group()
            elif c == ")":
                self.close_group()
            elif c in "*+?" or (c == "{" and _REPEAT.match(src, self.i)):
                self.repeat()
            elif c == "|":
                self.choice()
                self.i += 1
                self.out.append("|")
                self.last = None
            elif c == "^":
                self.i += 1
                self.emit("(?m:^)" if "m" in self.flags else "^", None)
            elif c == "$":
                self.i += 1
                self.emit("(?m:$)" if "m" in self.flags else r"\Z", None)
            elif c == ".":
                self.i += 1
                self.emit("(?s:.)" if "s" in self.flags else ".", "atom")
            else:
                self.i += 1
                self.literal(ord(c))
        return Translation(
            "".join(self.out),
            self.nested or self.choices > _MAX_BACKTRACKING_CHOICES,
            self.folds_case,
        )

    def emit(self, text: str, kind: str | None) -> None:
        self.out.append(text)
        self.last = kind

    def choice(self) -> None:
        self.choices += 1
        self.groups[-1].has_choice = True

    def literal(self, code: int) -> None:
        char = chr(code)
        escaped = _escape_code(code) if code < 0x20 or code > 0x7E else re.escape(char)
        if "i" in self.flags and char.lower() != char.upper():
            self.case_folding(code)
            escaped = f"(?i:{escaped})"
        self.emit(escaped, "atom")

    def case_folding(self, highest: int) -> None:
        if highest > 0x7F:
            raise _GiveUp  # RE2 folds Unicode (K ~ k); re.ASCII does not
        self.folds_case = True

    def escape(self) -> None:
        src = self.src
        c = src[self.i + 1]
        self.i += 2
        if c == "Q":
            end = src.find(r"\E", self.i)
            literal = src[self.i :] if end < 0 else src[self.i : end]
            self.i = len(src) if end < 0 else end + 2
            for char in literal:
                self.literal(ord(char))
        elif c.lower() in _PERL_CLASSES:
            if c.lower() == "w" and "i" in self.flags:
                # RE2 folds the class's letters too: (?i)\w matches the Kelvin sign (K ~ k).
                self.case_folding(ord("z"))
            negate = "^" if c.isupper() else ""
            self.emit(f"[{negate}{_PERL_CLASSES[c.lower()]}]", "atom")
        elif c == "b":
            self.emit(r"\b", None)
        elif c == "A":
            self.emit(r"\A", None)
        elif c == "z":
            self.emit(r"\Z", None)
        else:
            self.literal(self.escaped_char(c))

    def escaped_char(self, c: str) -> int:
        """The code point of a single-character escape (after its backslash)."""
        if c in "01234567":
            digits = c
            while len(digits) < 3 and self.i < len(self.src) and self.src[self.i] in "01234567":
                digits += self.src[self.i]
                self.i += 1
            return int(digits, 8)
        if c == "x":
            if self.src.startswith("{", self.i):
                end = self.src.index("}", self.i)
                digits = self.src[self.i + 1 : end]
                self.i = end + 1
            else:
                digits = self.src[self.i : self.i + 2]
                self.i += 2
            return int(digits, 16)
        if c in _CONTROL_ESCAPES:
            return _CONTROL_ESCAPES[c]
        if c.isascii() and not c.isalnum():
            return ord(c)
        raise _GiveUp  # \pL, \C, \B (`re` never matches it in empty text), ...

    def char_class(self) -> str:
        """An RE2 class as a Python class of escaped ranges (Go's parseClass rules)."""
        src = self.src
        self.i += 1
        negated = src.startswith("^", self.i)
        self.i += negated
        items: list[str] = []
        highest = 0
        first = True
        while first or src[self.i] != "]":
            first = False
            end = src.find(":]", self.i + 2) if src.startswith("[:", self.i) else -1
            if end >= 0:
                name = src[self.i + 2 : end]
                if name not in _POSIX_CLASSES:
                    raise _GiveUp  # [:^alpha:]
                items.append(_POSIX_CLASSES[name])
                self.i = end + 2
                continue
            if src[self.i] == "\\" and src[self.i + 1] in _PERL_CLASSES:
                items.append(_PERL_CLASSES[src[self.i + 1]])
                self.i += 2
                continue
            if src[self.i] == "\\" and src[self.i + 1] in "DW":
                items.append("\\" + src[self.i + 1])
                self.i += 2
                continue
            low = self.class_char()
            high = low
            if src[self.i] == "-" and src[self.i + 1] != "]":
                self.i += 1
                high = self.class_char()
            highest = max(highest, high)
            items.append(
                _escape_code(low) if low == high else f"{_escape_code(low)}-{_escape_code(high)}"
            )
        self.i += 1
        body = f"[{'^' if negated else ''}{''.join(items)}]"
        if "i" in self.flags:
            self.case_folding(highest)
            return f"(?i:{body})"
        return body

    def class_char(self) -> int:
        c = self.src[self.i]
        self.i += 1
        if c != "\\":
            return ord(c)
        self.i += 1
        return self.escaped_char(self.src[self.i - 1])

    def open_group(self) -> None:
        rest = self.src[self.i :]
        flags = self.flags
        if not rest.startswith("(?"):
            self.i += 1
        elif rest.startswith(("(?P<", "(?<")):
            self.i += rest.index(">") + 1
        else:
            match = _GROUP_FLAGS.match(rest)
            if match is None or "U" in match.group(0):
                raise _GiveUp
            flags = (flags | set(match.group(1))) - set(match.group(2) or "")
            self.i += match.end()
            if match.group(3) == ")":
                # A flag change lasts until the enclosing group closes.
                self.groups[-1].flags = flags
                self.last = None
                return
        self.groups.append(_Group(flags))
        self.emit("(?:", None)

    def close_group(self) -> None:
        group = self.groups.pop()
        self.i += 1
        if group.has_choice:
            self.groups[-1].has_choice = True
        self.emit(")", "choice-group" if group.has_choice else "group")

    def repeat(self) -> None:
        src = self.src
        match = _REPEAT.match(src, self.i)
        token = match.group(0) if match else src[self.i]
        if self.last is None:
            raise _GiveUp  # a repeated assertion (`^*`): RE2 allows it, `re` does not
        if self.last == "choice-group":
            self.nested = True
        self.i += len(token)
        if src.startswith("?", self.i):
            token += "?"
            self.i += 1
        self.choice()
        self.emit(token, None)


def _escape_code(code: int) -> str:
    if code > 0xFFFF:
        return f"\\U{code:08x}"
    if code >= 0x100:
        return f"\\u{code:04x}"
    return f"\\x{code:02x}"
