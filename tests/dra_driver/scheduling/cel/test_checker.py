"""Compile-time checking: what cel-go rejects before any device is seen."""

from __future__ import annotations

import re

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import compile_selector


@pytest.mark.parametrize(
    ("expression", "message", "position"),
    [
        ("foo == 1", "undeclared reference to 'foo' (in container '')", "1:0"),
        ("nosuch(1)", "undeclared reference to 'nosuch' (in container '')", "1:6"),
        ("device.foo == 1", "undefined field 'foo'", "1:6"),
        ("1 == 'a'", "found no matching overload for '_==_' applied to '(int, string)'", "1:2"),
        ("1 == 1.0", "found no matching overload for '_==_' applied to '(int, double)'", "1:2"),
        ("1 + 1u == 2u", "found no matching overload for '_+_' applied to '(int, uint)'", "1:2"),
        (
            "quantity('1').isGreaterThan(semver('1.0.0'))",
            "found no matching overload for 'isGreaterThan' applied to "
            "'kubernetes.Quantity.(kubernetes.Semver)'",
            "1:27",
        ),
        (
            "device.driver.lowerAscii(1) == ''",
            "found no matching overload for 'lowerAscii'",
            "1:24",
        ),
        ("size(1) == 1", "found no matching overload for 'size' applied to '(int)'", "1:4"),
        ("[1, 'a'].size() == 2", "expected type 'int' but found 'string'", "1:4"),
        ("{'a': 1, 'b': 'x'}.size() == 2", "expected type 'int' but found 'string'", "1:14"),
        ("{1.5: 1}.size() == 1", "unsupported map key type: double", "1:1"),
        ("device.driver.x == 1", "type 'string' does not support field selection", "1:13"),
        ("[1][true] == 1", "found no matching overload for '_[_]'", "1:3"),
        ("(1).all(x, true)", "cannot be range of a comprehension", "1:1"),
        ("[1].all(x, x)", "found no matching overload for '_&&_' applied to '(bool, int)'", "1:11"),
        ("[1].all(1, true)", "argument must be a simple name", "1:8"),
        ("cel.bind(1, 2, true)", "cel.bind() variable names must be simple identifiers", "1:9"),
        ("has(device)", "invalid argument to has() macro", "1:3"),
        ("'a'.matches('(')", "error parsing regexp: missing closing )", "1:12"),
        ("1 ? true : false", "found no matching overload for '_?_:_'", "1:2"),
        ("true ? 1 : 'a'", "found no matching overload for '_?_:_'", "1:5"),
        ("99999999999999999999 > 0", "invalid int literal", "1:0"),
        ("Foo{a: 1}", "message construction is not supported", "1:0"),
    ],
)
def test_compile_errors(expression: str, message: str, position: str) -> None:
    with pytest.raises(CelError, match=re.escape(message)) as info:
        compile_selector(expression)
    assert info.value.position == position
    assert str(info.value).startswith(f'selector "{expression}": compilation failed: ')


@pytest.mark.parametrize(
    "expression",
    [
        # Attribute values are of the unknown type: anything goes until run time.
        "device.attributes['d'].x == 1",
        "device.attributes['d'].x == 'a'",
        "device.attributes['d'].x.isGreaterThan(semver('1.0.0'))",
        "device.attributes['d'].x.lowerAscii() == 'a'",
        "device.attributes['d'].x",
        "dyn(1) == 1.0",
        "[dyn('a'), 1].size() == 2",
        "[1, dyn('a')].size() == 2",
        "sets.contains(dyn([1]), [1])",
        "type(1) == int",
        "device.capacity['d'].m.sign() == 1 && sign(device.capacity['d'].m) == 1",
        "[1, 2].exists(device, device == 2)",
        "cel.bind(sets, [1], sets.size() == 1)",
    ],
)
def test_gradual_typing_accepts(expression: str) -> None:
    compile_selector(expression)


def test_namespaced_functions_are_resolved() -> None:
    assert compile_selector("sets.intersects([1], [1])").output_type.kind == "bool"
    assert compile_selector("strings.quote('a') == '\"a\"'").output_type.kind == "bool"
    with pytest.raises(CelError, match="undeclared reference to 'nosuch'"):
        compile_selector("sets.nosuch([1], [1])")


def test_output_types() -> None:
    # Attribute values are `dyn` with DRAListTypeAttributes (a list can be iterated), `any` before.
    assert str(compile_selector("device.attributes['d'].x").output_type) == "dyn"
    without_lists = compile_selector("device.attributes['d'].x", list_type_attributes=False)
    assert str(without_lists.output_type) == "any"
    assert str(compile_selector("dyn(1)").output_type) == "dyn"
    assert str(compile_selector("[1].exists(x, x == 1)").output_type) == "bool"
