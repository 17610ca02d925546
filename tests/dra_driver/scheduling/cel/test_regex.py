"""RE2 semantics: syntax and errors, linear time, and the `re` translation checked against RE2."""

from __future__ import annotations

import re

import pytest
import re2
from hypothesis import example, given, settings
from hypothesis import strategies as st

from dra_driver.scheduling.cel.regex import Pattern, Re2Error, compile_re2, re2_translate


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
        (r"\pL+", "1Äb2", (1, 3)),  # Unicode classes, as in RE2 and cel-go
        (r"\p{Greek}", "aβ", (1, 2)),
        (r"(?U)a+", "aaa", (0, 1)),  # RE2's ungreedy flag
        (r"[[:^alpha:]]+", "ab12", (2, 4)),
        (r"(?i)k", "\u212a", (0, 1)),  # RE2 folds case over Unicode (Kelvin sign)
        (r"(?i)k", "xK", (1, 2)),
        (r"\Qa.\E+", "a..x", (0, 3)),  # the repetition applies to the last literal
        (r"(a(?i)b|c)", "C", (0, 1)),  # a flag lasts until its group closes
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
        (r"(", "missing closing ): `(`"),  # Go's wording, as the API server reports it
        (r"a*+", "invalid nested repetition operator"),
        (r"a**", "invalid nested repetition operator"),
        (r"a{1001}", "invalid repeat count"),
        (r"*a", "missing argument to repetition operator"),
        (r"[[:foo:]]", "invalid character class range: `[:foo:]`"),
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


# Pieces of RE2 syntax; hypothesis strings them together into patterns.
_ATOMS = [
    "a",
    "b",
    "k",
    "K",
    "ä",
    ".",
    "^",
    "$",
    r"\d",
    r"\s",
    r"\w",
    r"\W",
    r"\S",
    r"\b",
    r"\B",
    r"\A",
    r"\z",
    r"\x41",
    r"\x{e4}",
    r"\101",
    r"\n",
    r"\.",
    "[ab]",
    "[^a]",
    "[a-c]",
    "[]a]",
    "[a-]",
    "[--/]",
    r"[\d.]",
    r"[^\s]",
    "[[:alpha:]]",
    "[[:space:]b]",
    "[[:^digit:]]",
    r"\pL",
    r"\Qa.b\E",
    "|",
    "(",
    ")",
    "(?:",
    "(?i)",
    "(?-i)",
    "(?s)",
    "(?m)",
    "(?i:",
    "(?P<n>",
    "*",
    "+",
    "?",
    "*?",
    "{2}",
    "{1,2}",
    "{2,}",
    "{,2}",
    " ",
    "-",
]
_TEXT = st.text(alphabet="abkKK\u212aAäÄ1 \n.-_[]", max_size=8)


@settings(max_examples=400, deadline=None)
@given(st.lists(st.sampled_from(_ATOMS), max_size=7).map("".join), st.lists(_TEXT, max_size=4))
@example(r"(a|ab)(c|bcd)", ["abcd", "acd"])
@example(r"^\d{1,3}(\.\d{1,3}){3}$", ["10.0.0.1", "1000.1.1.1"])
@example(r"(?m)^b$", ["a\nb\n"])
@example(r"(?i)\w", ["\u212a"])  # the Kelvin sign: RE2 folds it to k
def test_translation_agrees_with_re2(pattern: str, texts: list[str]) -> None:
    """Every RE2 pattern the translator covers finds the same spans on `re` as on RE2."""
    options = re2.Options()
    options.log_errors = False
    try:
        expected = re2.compile(pattern, options)
    except re2.error:
        with pytest.raises(Re2Error, match="error parsing regexp"):
            compile_re2(pattern)
        return
    translation = re2_translate(pattern)
    if translation is None:
        return
    translated = re.compile(translation.python, re.ASCII)
    for text in texts:
        if translation.folds_case and not text.isascii():
            continue  # such text runs on RE2
        for pos in range(len(text) + 1):
            want = expected.search(text, pos)
            got = translated.search(text, pos)
            assert (got.span() if got else None) == (want.span() if want else None), (text, pos)
        on_re2 = Pattern(pattern, expected, None, ascii_only=False)
        assert compile_re2(pattern).find_all(text) == on_re2.find_all(text)


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
    with pytest.raises(Re2Error, match="expression too large"):
        compile_re2(r"\pL{1000}" * 30)
