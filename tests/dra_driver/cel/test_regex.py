"""RE2 semantics on top of Python: syntax translation, rejections, and the linear-time NFA."""

from __future__ import annotations

import re
from re import _parser as sre_parse

import pytest

from dra_driver.cel import nfa
from dra_driver.cel.regex import Re2Error, compile_re2


@pytest.mark.parametrize(
    ("pattern", "text", "span"),
    [
        (r"abc\z", "xabc", (1, 4)),
        (r"a$", "a\n", None),  # RE2's $ is end of text, not "before a final newline"
        (r"(?m)a$", "a\nb", (0, 1)),
        (r"(?P<n>b+)", "abbc", (1, 3)),
        (r"(?<n>b+)", "abbc", (1, 3)),
        (r"[[:digit:]]+", "ab12c", (2, 4)),
        (r"[[:upper:][:digit:]]+", "abC1d", (2, 4)),
        (r"\Q.*\E", "a.*b", (1, 3)),
        (r"\x{41}", "zA", (1, 2)),
        (r"\x41", "zA", (1, 2)),
        (r"\101", "zA", (1, 2)),
        (r"(?i)h100", "NVIDIA H100", (7, 11)),
        (r"x(?i)h", "xH", (0, 2)),
        (r"a|ab", "ab", (0, 1)),  # leftmost-first, not leftmost-longest
        (r"\d+", "x٣4", (2, 3)),  # \d is ASCII-only in RE2
        (r"[a[]+", "x[a", (1, 3)),
        (r"a{2,3}", "aaaa", (0, 3)),
        (r"a{,2}", "a{,2}", (0, 5)),
    ],
)
def test_re2_syntax(pattern: str, text: str, span: tuple[int, int] | None) -> None:
    assert compile_re2(pattern).search(text) == span


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        (r"(a)\1", "backreferences are not supported"),
        (r"(?=a)", "lookaround"),
        (r"(?<!a)b", "lookaround"),
        (r"a*+", "invalid nested repetition operator"),
        (r"a**", "invalid nested repetition operator"),
        (r"a{1001}", "invalid repeat count"),
        (r"*a", "missing argument to repetition operator"),
        (r"\pL", "Unicode classes are not supported"),
        (r"(?U)a+", "ungreedy"),
        (r"[a", "missing closing ]"),
        (r"(a", "missing closing )"),
        (r"a)", "unexpected )"),
        (r"\Z", "invalid escape sequence"),
        ("a\\", "trailing backslash"),
    ],
)
def test_re2_rejections(pattern: str, message: str) -> None:
    with pytest.raises(Re2Error, match=re.escape(message)):
        compile_re2(pattern)


DIFFERENTIAL = [
    (r"^.*h100.*\Z", ["nvidia h100 80gb", "a100", ""]),
    (r"a|ab|abc", ["abc", "xxab", "b"]),
    (r"(a|ab)(c|bcd)", ["abcd", "acd"]),
    (r"a+?b", ["aaab", "b"]),
    (r"a*?", ["aaa"]),
    (r"(a*)*b", ["aaab", "aaa"]),
    (r"\bfoo\b", ["a foo b", "afoo", "foo"]),
    (r"\Bo\B", ["foo bar", "o"]),
    (r"[^a-c]+", ["abcdefabc"]),
    (r"(?i)[a-c]+", ["xxABcaX"]),
    (r"(?s)a.b", ["a\nb"]),
    (r"a.b", ["a\nb", "axb"]),
    (r"^\d{1,3}(\.\d{1,3}){3}\Z", ["10.0.0.1", "10.0.0", "1000.1.1.1"]),
    (r"x{2}y{0,2}", ["xxyyy", "xy"]),
    (r"(?m)^b", ["a\nb"]),
    (r"\s+\S", ["a  b"]),
    (r"[\w.-]+@[\w.-]+", ["mail me@host.example now"]),
    (r"", ["abc", ""]),
]


@pytest.mark.parametrize(("pattern", "texts"), DIFFERENTIAL)
def test_nfa_agrees_with_backtracking_engine(pattern: str, texts: list[str]) -> None:
    flags = re.ASCII
    program = nfa.compile_program(sre_parse.parse(pattern, flags), flags)
    compiled = re.compile(pattern, flags)
    for text in texts:
        for pos in range(len(text) + 1):
            expected = compiled.search(text, pos)
            assert program.search(text, pos) == (expected.span() if expected else None), (text, pos)


@pytest.mark.parametrize(
    ("pattern", "text"),
    [
        (r"(a+)+$", "a" * 64 + "b"),
        (r"(a|aa)*c", "a" * 64),
        (r"(x+x+)+y", "x" * 64),
        (
            r"a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?a?aaaaaaaaaaaaaaaaaaaaaaaaaaz",
            "a" * 52,
        ),
    ],
)
def test_catastrophic_patterns_finish(pattern: str, text: str) -> None:
    # These would backtrack for longer than the test suite's timeout on Python's `re`.
    compiled = compile_re2(pattern)
    assert compiled.search(text) is None
    assert not compiled.is_match(text)
    assert compiled.find_all(text) == []


def test_find_all_follows_go_semantics() -> None:
    assert compile_re2("a*").find_all("baaac") == ["", "aaa", ""]
    assert compile_re2("[0-9]+").find_all("123 abc 456", 1) == ["123"]
    assert compile_re2("x").find_all("xxx", 0) == []
    assert compile_re2("(a+)+b").find_all("ab aab " + "a" * 40) == ["ab", "aab"]


def test_program_size_is_bounded() -> None:
    with pytest.raises(Re2Error):
        compile_re2("(" + "a{1000}" * 30 + ")")
