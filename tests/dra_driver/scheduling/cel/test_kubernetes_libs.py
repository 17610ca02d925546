"""Kubernetes' CEL libraries: semver, quantity, lists and the regex find functions."""

from __future__ import annotations

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView, compile_selector

DEVICE = DeviceView(
    driver="gpu.nvidia.com",
    attributes={"cc": {"version": "9.0.0"}, "rc": {"version": "1.2.3-rc.1+build.7"}},
    capacity={"memory": {"value": "80Gi"}, "cores": {"value": "132"}},
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
        ("semver('1.2.3').major() == 1", True),
        ("semver('1.2.3').minor() == 2", True),
        ("semver('1.2.3').patch() == 3", True),
        ("semver('1.2.3') == semver('1.2.3')", True),
        ("semver('1.2.3+a') == semver('1.2.3+b')", True),
        ("semver('1.2.3') == semver('1.2.4')", False),
        ("semver('1.2.3').compareTo(semver('1.2.3')) == 0", True),
        ("semver('1.2.3').compareTo(semver('2.0.0')) == -1", True),
        ("semver('1.2.3').compareTo(semver('0.1.2')) == 1", True),
        ("semver('1.10.0').isGreaterThan(semver('1.9.0'))", True),
        ("semver('1.9.0').isGreaterThan(semver('1.10.0'))", False),
        ("semver('1.0.0-alpha').isLessThan(semver('1.0.0'))", True),
        ("semver('1.0.0-alpha').isLessThan(semver('1.0.0-alpha.1'))", True),
        ("semver('1.0.0-alpha.1').isLessThan(semver('1.0.0-alpha.beta'))", True),
        ("semver('1.0.0-beta.2').isLessThan(semver('1.0.0-beta.11'))", True),
        ("semver('1.0.0-rc.1').isLessThan(semver('1.0.0'))", True),
        ("semver('1.0.0').isLessThan(semver('1.0.0'))", False),
        ("semver('v1.0.0', true) == semver('1.0.0')", True),
        ("semver('1.0', true) == semver('1.0.0')", True),
        ("semver('1', true) == semver('1.0.0')", True),
        ("semver('01.01.01', true) == semver('1.1.1')", True),
        ("isSemver('1.0.0')", True),
        ("isSemver('0.1.0-alpha.1')", True),
        ("isSemver('hello')", False),
        ("isSemver('v1.0')", False),
        ("isSemver('v1.0', true)", True),
        ("isSemver('01.0.0')", False),
        ("isSemver('1.0.0-01')", False),
        ("isSemver('1.0.0+')", False),
        ("isSemver('1.0-rc', true)", False),
        ("device.attributes['gpu.nvidia.com'].cc.isGreaterThan(semver('8.0.0'))", True),
        ("device.attributes['gpu.nvidia.com'].cc == semver('9.0.0')", True),
        ("device.attributes['gpu.nvidia.com'].rc.isLessThan(semver('1.2.3'))", True),
        ("device.attributes['gpu.nvidia.com'].rc == semver('1.2.3-rc.1')", True),
    ],
)
def test_semver(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("semver('1.0') == semver('1.0.0')", "No Major.Minor.Patch elements found"),
        ("semver('Three') == semver('1.0.0')", "No Major.Minor.Patch elements found"),
        ("semver('1.x.0') == semver('1.0.0')", "Invalid character(s) found in minor number"),
        ("semver('1.0.0-') == semver('1.0.0')", "Prerelease is empty"),
        ("semver('1.0-rc', true) == semver('1.0.0')", "short version cannot contain"),
    ],
)
def test_semver_errors(expression: str, message: str) -> None:
    assert message in runtime_error(expression)


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("quantity('12Mi') == quantity('12582912')", True),
        ("quantity('200M') == quantity('0.2G')", True),
        ("quantity('2M') == quantity('0.002G') && quantity('2000k') == quantity('2M')", True),
        ("quantity('200M') == quantity('0.3G')", False),
        ("quantity('1e3') == quantity('1k')", True),
        ("quantity('50M').isLessThan(quantity('50Mi'))", True),
        ("quantity('100M').isLessThan(quantity('50M'))", False),
        ("quantity('50Mi').isGreaterThan(quantity('50M'))", True),
        ("quantity('50M').isGreaterThan(quantity('100M'))", False),
        ("quantity('200M').compareTo(quantity('0.2G')) == 0", True),
        ("quantity('50M').compareTo(quantity('50Mi')) == -1", True),
        ("quantity('50Mi').compareTo(quantity('50M')) == 1", True),
        ("quantity('50k').add(quantity('20')) == quantity('50.02k')", True),
        ("quantity('50k').add(20) == quantity('50020')", True),
        ("quantity('50k').sub(quantity('20')) == quantity('49.98k')", True),
        ("quantity('50k').sub(20000) == quantity('30k')", True),
        ("quantity('50k').add(20).sub(quantity('100k')).sub(-50000).asInteger() == 20", True),
        ("quantity('50k').asInteger() == 50000", True),
        ("quantity('1000m').asInteger() == 1", True),
        ("quantity('50').isInteger()", True),
        ("quantity('1.5').isInteger()", False),
        ("quantity('9999999999999999999999999999999999999G').isInteger()", False),
        ("quantity('50.703k').asApproximateFloat() == 50703.0", True),
        (
            "quantity('-1').sign() == -1 && sign(quantity('0')) == 0 && quantity('3m').sign() == 1",
            True,
        ),
        ("isQuantity('1.3G') && isQuantity('1.3Gi') && isQuantity('10000k')", True),
        ("isQuantity('1,3G')", False),
        ("isQuantity('200K')", False),
        ("isQuantity('Three')", False),
        ("isQuantity('Mi')", False),
        ("isQuantity('20Mo')", False),
        ("isQuantity('10Mm')", False),
        ("device.capacity['gpu.nvidia.com'].memory == quantity('80Gi')", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", True),
        ("device.capacity['gpu.nvidia.com'].cores.asInteger() == 132", True),
    ],
)
def test_quantity(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("quantity('10Mo') == quantity('1')", "quantities must match the regular expression"),
        ("quantity('10Mm') == quantity('1')", "unable to parse quantity's suffix"),
        (
            "quantity('9999999999999999999999999999999999999G').asInteger() == 1",
            "cannot convert value to integer",
        ),
        ("quantity('1.5').asInteger() == 1", "cannot convert value to integer"),
    ],
)
def test_quantity_errors(expression: str, message: str) -> None:
    assert message in runtime_error(expression)


def test_quantity_needs_a_string() -> None:
    with pytest.raises(CelError, match="found no matching overload for 'isQuantity' applied to"):
        compile_selector("isQuantity([1, 2, 3])")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("[1, 2, 3].isSorted()", True),
        ("['a', 'b', 'b', 'c'].isSorted()", True),
        ("[2.0, 1.0].isSorted()", False),
        ("[1].isSorted() && [].isSorted()", True),
        ("[1, 3].sum() == 4", True),
        ("[1.0, 3.0].sum() == 4.0", True),
        ("[1u, 3u].sum() == 4u", True),
        ("[duration('1m'), duration('1s')].sum() == duration('61s')", True),
        ("[1, 3].min() == 1", True),
        ("[1, 3].max() == 3", True),
        ("['b', 'c', 'a'].max() == 'c'", True),
        ("[1].min() == 1", True),
        ("[1, 2, 2, 3].indexOf(2) == 1", True),
        ("['a', 'b', 'b', 'c'].lastIndexOf('b') == 2", True),
        ("[1.0].indexOf(1.1) == -1", True),
        ("[1, 2].lastIndexOf(5) == -1", True),
    ],
)
def test_lists(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


def test_list_errors() -> None:
    assert "max called on empty list" in runtime_error("dyn([]).max() == 1")
    assert "integer overflow" in runtime_error("[9223372036854775807, 1].sum() == 0")
    with pytest.raises(CelError, match="found no matching overload for 'max'"):
        compile_selector("[semver('1.0.0')].max() == semver('1.0.0')")


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("'abc 123'.find('[0-9]+') == '123'", True),
        ("'abc 123'.find('xyz') == ''", True),
        ("'123 abc 456'.findAll('[0-9]+') == ['123', '456']", True),
        ("'123 abc 456'.findAll('[0-9]+', 1) == ['123']", True),
        ("'123 abc 456'.findAll('[0-9]+', 0) == []", True),
        ("'123 abc 456'.findAll('xyz') == []", True),
        ("'baaac'.findAll('a*') == ['', 'aaa', '']", True),
        ("'hello'.matches('^h.*o$')", True),
        ("'hello'.matches('^e')", False),
        ("matches('hello', 'l+')", True),
    ],
)
def test_regex_functions(expression: str, expected: bool) -> None:
    assert evaluate(expression) is expected


def test_invalid_regex_literal_is_a_compile_error() -> None:
    with pytest.raises(CelError, match="error parsing regexp") as info:
        compile_selector("'abc'.find('[') == ''")
    assert info.value.position == "1:11"
    assert "error parsing regexp" in runtime_error("'abc'.matches(dyn('('))")
