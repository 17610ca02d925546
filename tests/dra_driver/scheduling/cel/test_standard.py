"""Standard CEL: operators, equality, conversions, macros, cel.bind and error propagation."""

from __future__ import annotations

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView, compile_selector

DEVICE = DeviceView(
    driver="gpu.nvidia.com",
    attributes={"index": {"int": 2}, "type": {"string": "gpu"}},
    capacity={},
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
        ("1 + 2 == 3", True),
        ("1 + 2 == 4", False),
        ("7 / 2 == 3", True),
        ("-7 / 2 == -3", True),
        ("-7 % 3 == -1", True),
        ("7 % -3 == 1", True),
        ("2 * 3 - 1 == 5", True),
        ("7.0 / 2.0 == 3.5", True),
        ("1.0 / 0.0 > 1e308", True),
        ("1u + 2u == 3u", True),
        ("10u / 3u == 3u", True),
        ("-(3) == -3", True),
        ("'ab' + 'cd' == 'abcd'", True),
        ("b'ab' + b'c' == b'abc'", True),
        ("[1, 2] + [3] == [1, 2, 3]", True),
        ("!false", True),
        ("!true", False),
    ],
)
def test_arithmetic(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("9223372036854775807 + 1 == 0", "integer overflow"),
        ("-9223372036854775808 - 1 == 0", "integer overflow"),
        ("-(-9223372036854775808) == 0", "integer overflow"),
        ("0u - 1u == 0u", "unsigned integer overflow"),
        ("1 / 0 == 0", "division by zero"),
        ("1 % 0 == 0", "modulus by zero"),
    ],
)
def test_arithmetic_errors(expression: str, message: str) -> None:
    assert message in runtime_error(expression)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("dyn(1) == 1.0", True),
        ("dyn(1) == 1u", True),
        ("dyn(true) == 1", False),
        ("dyn('1') == 1", False),
        ("[1, 2] == [1, 2]", True),
        ("[1, 2] == [2, 1]", False),
        ("{'a': 1, 'b': 2} == {'b': 2, 'a': 1}", True),
        ("{'a': 1} == {'a': 2}", False),
        ("null == null", True),
        ("1 != 2", True),
        ("'a' != 'a'", False),
        ("1 < 2.5", True),
        ("2u > 1", True),
        ("1.5 >= 2u", False),
        ("'abc' < 'abd'", True),
        ("b'a' < b'b'", True),
        ("false < true", True),
        ("3 <= 3", True),
    ],
)
def test_equality_and_ordering(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


def test_mixed_types_do_not_order() -> None:
    assert "no such overload" in runtime_error("dyn('a') < 1")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("int('42') == 42", True),
        ("int('-42') == -42", True),
        ("int(3.9) == 3", True),
        ("int(-3.9) == -3", True),
        ("int(7u) == 7", True),
        ("uint(7) == 7u", True),
        ("double(2) == 2.0", True),
        ("double('1.5') == 1.5", True),
        ("string(1.5) == '1.5'", True),
        ("string(1e6) == '1e+06'", True),
        ("string(100000.0) == '100000'", True),
        ("string(0.00001) == '1e-05'", True),
        ("string(-2) == '-2'", True),
        ("string(3u) == '3'", True),
        ("string(true) == 'true'", True),
        ("string(b'hi') == 'hi'", True),
        ("bytes('hi') == b'hi'", True),
        ("bool('true') && bool('T') && !bool('0')", True),
        ("type(1) == int", True),
        ("type(1u) == uint", True),
        ("type('a') == string", True),
        ("type([]) == list", True),
        ("type({}) == map", True),
        ("type(null) == null_type", True),
        ("type(1) == type(2)", True),
        ("type(1) == double", False),
        ("type(type(1)) == type", True),
        ("dyn(1) + 1 == 2", True),
    ],
)
def test_conversions(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("int('x') == 0", "cannot convert"),
        ("int('9223372036854775808') == 0", "integer overflow"),
        ("int(1e19) == 0", "range error"),
        ("uint(-1) == 0u", "range error"),
        ("double('one') == 1.0", "cannot convert"),
        ("bool('yes')", "type conversion error"),
        ("string(b'\\xff') == ''", "invalid UTF-8"),
    ],
)
def test_conversion_errors(expression: str, message: str) -> None:
    assert message in runtime_error(expression)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("size('héllo') == 5", True),
        ("'héllo'.size() == 5", True),
        ("size(b'ab') == 2", True),
        ("size([1, 2, 3]) == 3", True),
        ("{'a': 1}.size() == 1", True),
        ("'hello'.contains('ell')", True),
        ("'hello'.contains('xyz')", False),
        ("'hello'.startsWith('he')", True),
        ("'hello'.startsWith('lo')", False),
        ("'hello'.endsWith('lo')", True),
        ("'hello'.endsWith('he')", False),
        ("1 in [1, 2]", True),
        ("3 in [1, 2]", False),
        ("'a' in {'a': 1}", True),
        ("'b' in {'a': 1}", False),
        ("2 in {1: 'x', 2: 'y'}", True),
        ("true ? true : false", True),
        ("false ? true : false", False),
    ],
)
def test_builtin_functions(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("[1, 2, 3].all(x, x > 0)", True),
        ("[1, 2, 3].all(x, x > 1)", False),
        ("[].all(x, false)", True),
        ("[1, 2, 3].exists(x, x == 2)", True),
        ("[1, 2, 3].exists(x, x == 5)", False),
        ("[1, 2, 3].exists_one(x, x >= 3)", True),
        ("[1, 2, 3].exists_one(x, x >= 2)", False),
        ("[1, 2, 3].map(x, x * 2) == [2, 4, 6]", True),
        ("[1, 2, 3].map(x, x > 1, x * 2) == [4, 6]", True),
        ("[1, 2, 3].filter(x, x != 2) == [1, 3]", True),
        ("{'a': 1, 'bb': 2}.all(k, k.size() <= 2)", True),
        ("{'a': 1, 'bb': 2}.filter(k, k.size() == 2) == ['bb']", True),
        ("[[1], [2, 3]].exists(l, 3 in l)", True),
        ("[1, 2].all(i, v, i < v)", True),
        ("['a', 'b'].exists(i, v, i == 1 && v == 'b')", True),
        ("{'a': 1}.exists(k, v, k == 'a' && v == 1)", True),
        ("[5, 6].existsOne(i, v, v == 6)", True),
        ("[1, 2].transformList(i, v, v * 10) == [10, 20]", True),
        ("[1, 2, 3].transformList(i, v, v > 1, v * 10) == [20, 30]", True),
        ("{'a': 1}.transformMap(k, v, v + 1) == {'a': 2}", True),
        ("{'a': 1}.transformMapEntry(k, v, {v: k}) == {1: 'a'}", True),
        ("[1, 2].map(x, [1, 2].map(x, x * 10)) == [[10, 20], [10, 20]]", True),
        ("has({'a': 1}.a)", True),
        ("has({'a': 1}.b)", False),
        ("{'a': 1}.a == 1", True),
    ],
)
def test_macros(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("cel.bind(x, 5, x * x == 25)", True),
        (
            "cel.bind(a, 'hello', cel.bind(b, 'world', a + b + b + a == 'helloworldworldhello'))",
            True,
        ),
        (
            "cel.bind(dra, device.attributes['gpu.nvidia.com'], "
            "dra.type == 'gpu' && dra.index == 2)",
            True,
        ),
        ("cel.bind(x, 1, [2, 3].exists(y, y == x + 1))", True),
        ("cel.bind(x, 1, cel.bind(x, 2, x) == 2 && x == 1)", True),
    ],
)
def test_bind(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


def test_logical_operators_absorb_errors_when_the_other_side_decides() -> None:
    missing = "device.attributes['gpu.nvidia.com'].missing"
    assert evaluate(f"{missing} == 1 || true")
    assert evaluate(f"true || {missing} == 1")
    assert not evaluate(f"{missing} && false")
    assert not evaluate(f"false && {missing}")
    assert "no such key: missing" in runtime_error(f"{missing} || false")
    assert "no such key: missing" in runtime_error(f"true && {missing}")


def test_comprehensions_absorb_errors_when_an_element_decides() -> None:
    assert evaluate("[0, 1].exists(x, 1 / x == 1)")
    assert not evaluate("[0, 2].all(x, 1 / x == 1)")
    assert "division by zero" in runtime_error("[0, 1].all(x, 1 / x == 1)")
    assert "division by zero" in runtime_error("[0, 1].exists_one(x, 1 / x == 1)")


def test_non_bool_conditions_are_errors() -> None:
    assert "no such overload" in runtime_error("dyn(1) && true")
    assert "no such overload" in runtime_error("dyn('x') ? true : false")
    assert "no such overload" in runtime_error("[1].all(x, dyn(x))")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("[1][5] == 1", "index '5' out of range in list size '1'"),
        ("{'a': 1}['b'] == 1", "no such key: b"),
        ("{'a': 1}.b == 1", "no such key: b"),
        ("dyn(1).x == 1", "does not support field selection"),
        ("dyn(1).all(x, true)", "expected iterable type"),
        ("{dyn('a'): 1, dyn('a'): 2}.size() == 2", "repeated key"),
    ],
)
def test_access_errors(expression: str, message: str) -> None:
    assert message in runtime_error(expression)


def test_time_functions() -> None:
    assert evaluate("duration('1h') > duration('30m')")
    assert evaluate("timestamp('2023-01-01T00:00:00Z').getFullYear() == 2023")
    assert evaluate(
        "timestamp('2023-01-01T00:00:00Z') + duration('24h') > timestamp('2023-01-01T12:00:00Z')"
    )
    assert evaluate("timestamp(0) == timestamp('1970-01-01T00:00:00Z')")
    assert "type conversion error from 'string' to 'google.protobuf.Duration'" in runtime_error(
        "duration(dyn('soon')) > duration('1s')"
    )


MIXED_KEYS = '{dyn(1): "a", dyn(true): "b"}'


@pytest.mark.parametrize(
    "expression",
    [
        f'{MIXED_KEYS}[dyn(true)] == "b" && {MIXED_KEYS}[dyn(1)] == "a"',
        'size({dyn(1): "a", dyn(true): "b", dyn(0u): "c", dyn(false): "d"}) == 4',
        f'{MIXED_KEYS} == {{dyn(true): "b", dyn(1): "a"}}',
        f'{MIXED_KEYS} != {{dyn(1): "a", dyn(2): "b"}}',
        f"{MIXED_KEYS}.filter(k, type(k) == bool) == [true]",
        f'{MIXED_KEYS}.transformMap(k, v, v + "!") == {{dyn(1): "a!", dyn(true): "b!"}}',
        f"dyn(1u) in {MIXED_KEYS}",
    ],
)
def test_bool_and_number_keys_are_distinct(expression: str) -> None:
    # Python's dicts say True == 1; CEL's maps keep both keys.
    assert evaluate(expression)


@pytest.mark.parametrize(
    "expression",
    [
        "timestamp('2023-01-01T00:00:00.000000001Z') > timestamp('2023-01-01T00:00:00Z')",
        "timestamp('2023-01-01T00:00:00.000000001Z') - timestamp('2023-01-01T00:00:00Z')"
        " == duration('1ns')",
        "string(timestamp('2023-01-01T00:00:00.5Z') + duration('1.000000001s'))"
        " == '2023-01-01T00:00:01.500000001Z'",
        "duration('-1ns') < duration('0s') && duration('1ns') > duration('0s')",
        "duration('1h1m') == duration('3660s')",
    ],
)
def test_time_keeps_nanoseconds(expression: str) -> None:
    assert evaluate(expression)


def test_time_range_is_checked_to_the_nanosecond() -> None:
    assert "out of range" in runtime_error(
        "timestamp('9999-12-31T23:59:59.999999999Z') + duration('1ns') > timestamp(0)"
    )
