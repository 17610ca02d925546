"""The one cache helper: results and chosen errors are remembered, each error raised afresh."""

from __future__ import annotations

import pytest

from dra_driver.errors import CelError
from dra_driver.memo import clear_caches, memoized

calls: list[str] = []


@memoized(2, errors=(CelError,))
def compile_it(text: str) -> str:
    calls.append(text)
    if text == "bad":
        raise CelError("does not compile", expression=text, position="1:1")
    if text == "crash":
        raise RuntimeError("not remembered")
    return text.upper()


def test_results_and_listed_errors_are_computed_once() -> None:
    clear_caches()
    calls.clear()
    assert compile_it("a") == compile_it("a") == "A"
    with pytest.raises(CelError) as first:
        compile_it("bad")
    with pytest.raises(CelError) as second:
        compile_it("bad")
    assert calls == ["a", "bad"]
    assert first.value is not second.value  # a fresh copy each time
    assert (second.value.expression, second.value.position) == ("bad", "1:1")
    assert str(second.value) == "does not compile"


def test_other_errors_are_not_remembered_and_old_entries_go_first() -> None:
    clear_caches()
    calls.clear()
    for _ in range(2):
        with pytest.raises(RuntimeError):
            compile_it("crash")
    assert calls == ["crash", "crash"]
    compile_it("a")
    compile_it("b")
    compile_it("c")  # maxsize 2: "a" is dropped
    compile_it("a")
    assert calls[-4:] == ["a", "b", "c", "a"]
    clear_caches()
    compile_it("c")
    assert calls[-1] == "c"
