"""cel-go's string and set extensions as Kubernetes enables them."""

from __future__ import annotations

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView, compile_selector

DEVICE = DeviceView(
    driver="gpu.nvidia.com", attributes={"name": {"string": "NVIDIA H100"}}, capacity={}
)


def evaluate(expression: str) -> bool:
    return compile_selector(expression).matches(DEVICE)


def runtime_error(expression: str) -> str:
    selector = compile_selector(expression)
    with pytest.raises(CelError) as info:
        selector.matches(DEVICE)
    return str(info.value)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'hello'.charAt(4) == 'o'", True),
        ("'hello'.charAt(5) == ''", True),
        ("'héllo'.charAt(1) == 'é'", True),
        ("'hello mellow'.indexOf('') == 0", True),
        ("'hello mellow'.indexOf('ello') == 1", True),
        ("'hello mellow'.indexOf('jello') == -1", True),
        ("'hello mellow'.indexOf('', 2) == 2", True),
        ("'hello mellow'.indexOf('ello', 2) == 7", True),
        ("'hello mellow'.lastIndexOf('') == 12", True),
        ("'hello mellow'.lastIndexOf('ello') == 7", True),
        ("'hello mellow'.lastIndexOf('jello') == -1", True),
        ("'hello mellow'.lastIndexOf('ello', 6) == 1", True),
        ("'TacoCat'.lowerAscii() == 'tacocat'", True),
        ("'TacoCÆt Xii'.lowerAscii() == 'tacocÆt xii'", True),
        ("'TacoCat'.upperAscii() == 'TACOCAT'", True),
        ("'TacoCÆt Xii'.upperAscii() == 'TACOCÆT XII'", True),
        ("'hello hello'.replace('he', 'we') == 'wello wello'", True),
        ("'hello hello'.replace('he', 'we', -1) == 'wello wello'", True),
        ("'hello hello'.replace('he', 'we', 1) == 'wello hello'", True),
        ("'hello hello'.replace('he', 'we', 0) == 'hello hello'", True),
        ("'hello hello hello'.split(' ') == ['hello', 'hello', 'hello']", True),
        ("'hello hello hello'.split(' ', 0) == []", True),
        ("'hello hello hello'.split(' ', 1) == ['hello hello hello']", True),
        ("'hello hello hello'.split(' ', 2) == ['hello', 'hello hello']", True),
        ("'hello hello hello'.split(' ', -1) == ['hello', 'hello', 'hello']", True),
        ("'abc'.split('') == ['a', 'b', 'c']", True),
        ("'abc'.split('', 2) == ['a', 'bc']", True),
        ("'tacocat'.substring(4) == 'cat'", True),
        ("'tacocat'.substring(0, 4) == 'taco'", True),
        ("'  \\ttrim\\n    '.trim() == 'trim'", True),
        ("['hello', 'mellow'].join() == 'hellomellow'", True),
        ("['hello', 'mellow'].join(' ') == 'hello mellow'", True),
        ("[].join() == '' && [].join('/') == ''", True),
        ("'gums'.reverse() == 'smug'", True),
        (
            "strings.quote('single-quote with \"double quote\"') == "
            '\'"single-quote with \\\\"double quote\\\\""\'',
            True,
        ),
        ("strings.quote('two\\n') == '\"two\\\\n\"'", True),
        ("'%s and %d'.format([dyn('str'), 42]) == 'str and 42'", True),
        ("'%s'.format([dyn(1.5)]) == '1.5'", True),
        ("'%.2f|%f'.format([3.14159, 2.0]) == '3.14|2.000000'", True),
        # x/text's en_US scientific notation (cel-go's formatter below strings version 4).
        ("'%e'.format([2.71828]) == '2.718280\u202f\u00d7\u202f10\u2070\u2070'", True),
        ("'%f'.format([1234567.5]) == '1,234,567.500000'", True),
        ("'%b %x %X %o'.format([5, 26, 26, 30]) == '101 1a 1A 36'", True),
        ("'%x'.format(['hi']) == '6869'", True),
        ("'%s'.format([[1, 2]]) == '[1, 2]'", True),
        ("'%s'.format([{'b': 2, 'a': 1}]) == '{\"a\":1, \"b\":2}'", True),
        ("'100%%'.format([]) == '100%'", True),
        ("device.attributes['gpu.nvidia.com'].name.lowerAscii().contains('h100')", True),
    ],
)
def test_strings(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("'hello'.charAt(-1) == ''", "index out of range: -1"),
        ("'hello'.charAt(6) == ''", "index out of range: 6"),
        ("'hello mellow'.indexOf('ello', 20) == 0", "index out of range: 20"),
        ("'hello mellow'.lastIndexOf('ello', -1) == 0", "index out of range: -1"),
        ("'tacocat'.substring(-1) == ''", "index out of range: -1"),
        ("'tacocat'.substring(2, 1) == ''", "invalid substring range. start: 2, end: 1"),
        ("'tacocat'.substring(0, 8) == ''", "index out of range: 8"),
        ("dyn('%d').format(['x']) == ''", "decimal clause can only be used on integers"),
        ("dyn('%d %d').format([1]) == ''", "out of range"),
        ("dyn('%q').format([1]) == ''", "unrecognized formatting clause"),
    ],
)
def test_string_errors(expression: str, message: str) -> None:
    assert message in runtime_error(expression)


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        (
            "'%d'.format(['x']) == ''",
            "error during formatting: decimal clause can only be used on integers, "
            "was given string (at 1:13)",
        ),
        ("'%d %d'.format([1]) == ''", "index 1 out of range (at 1:14)"),
        (
            "'%q'.format([1]) == ''",
            'could not parse formatting clause: unrecognized formatting clause "q" (at 1:11)',
        ),
        (
            "'%s'.format([1, 2]) == ''",
            "too many arguments supplied to string.format (expected 1, got 2)",
        ),
        (
            "'%s'.format([[1, optional.none()]]) == ''",
            "string clause can only be used on strings, bools, bytes, ints, doubles, maps, "
            "lists, types, durations, and timestamps, was given optional_type (at 1:30)",
        ),
    ],
)
def test_constant_format_calls_are_checked_when_compiled(expression: str, message: str) -> None:
    """The strings library's validator: a literal format string with a literal list."""
    with pytest.raises(CelError, match="compilation failed") as info:
        compile_selector(expression)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("sets.contains([], [])", True),
        ("sets.contains([], [1])", False),
        ("sets.contains([1, 2, 3, 4], [2, 3])", True),
        ("sets.contains([1, 2, 3], [4])", False),
        ("sets.contains([dyn(1), 2.0, 3u], [dyn(1.0), 2u, 3])", True),
        ("sets.equivalent([], [])", True),
        ("sets.equivalent([1], [1, 1])", True),
        ("sets.equivalent([1], [dyn(1u), 1.0])", True),
        ("sets.equivalent([1, 2], [2, 3])", False),
        ("sets.intersects([1], [])", False),
        ("sets.intersects([1], [1, 2])", True),
        ("sets.intersects([[1], [2, 3]], [[1, 2], [2, dyn(3.0)]])", True),
        ("sets.intersects(['a'], ['b'])", False),
    ],
)
def test_sets(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("lists.range(4) == [0, 1, 2, 3]", True),
        ("lists.range(0) == []", True),
        ("[1, 2, 3, 4].slice(1, 3) == [2, 3]", True),
        ("[1, 2, 3, 4].slice(4, 4) == []", True),
        ("[[1], [2, 3]].flatten() == [1, 2, 3]", True),
        ("[dyn([1]), [dyn(2), [3]]].flatten() == [dyn(1), 2, [3]]", True),
        ("[dyn([1]), [dyn(2), [3]]].flatten(2) == [1, 2, 3]", True),
        ("[1, 2, 1, 3, 2].distinct() == [1, 2, 3]", True),
        ("[1, 2, 3].reverse() == [3, 2, 1]", True),
        ("[3, 1, 2].sort() == [1, 2, 3]", True),
        ("['b', 'a'].sort() == ['a', 'b']", True),
        ("[dyn(2), 1.5, 1u].sort() == [dyn(1u), 1.5, 2]", True),
    ],
)
def test_lists(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[1, 2].slice(-1, 1) == []", "negative indexes not supported"),
        ("[1, 2].slice(2, 1) == []", "start index must be less than or equal to end index"),
        ("[1, 2].slice(0, 3) == []", "list is length 2"),
        ("[[1]].flatten(-1) == []", "level must be non-negative"),
        ("[dyn('a'), 1].sort() == []", "list elements must have the same type"),
    ],
)
def test_list_errors(expression: str, message: str) -> None:
    assert message in runtime_error(expression)
