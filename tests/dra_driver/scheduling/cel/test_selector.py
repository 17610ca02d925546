"""The public selector API: NVIDIA-style selectors, the device variable, limits, errors, caching."""

from __future__ import annotations

import dataclasses
import re

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import CompiledSelector, DeviceView, clear_cache, compile_selector

H100 = DeviceView(
    driver="gpu.nvidia.com",
    attributes={
        "type": {"string": "gpu"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "cudaComputeCapability": {"version": "9.0.0"},
        "driverVersion": {"version": "550.54.15"},
        "index": {"int": 3},
        "brand": {"string": "Nvidia"},
        "resource.kubernetes.io/pciBusID": {"string": "0000:1b:00.0"},
    },
    capacity={"memory": {"value": "80Gi"}},
)

A100_MIG = DeviceView(
    driver="gpu.nvidia.com",
    attributes={
        "type": {"string": "mig"},
        "profile": {"string": "1g.10gb"},
        "productName": {"string": "NVIDIA A100-SXM4-80GB"},
        "cudaComputeCapability": {"version": "8.0.0"},
    },
    capacity={"memory": {"value": "9856Mi"}},
)

OTHER_DRIVER = DeviceView(
    driver="dra.example.com",
    attributes={"type": {"string": "gpu"}},
    capacity={},
)


def matches(
    expression: str, device: DeviceView = H100, *, consumable_capacity: bool = False
) -> bool:
    return compile_selector(expression, consumable_capacity=consumable_capacity).matches(device)


def error_of(expression: str, device: DeviceView = H100, **kwargs: bool) -> CelError:
    with pytest.raises(CelError) as info:
        matches(expression, device, **kwargs)
    return info.value


# -- NVIDIA-style selectors -------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "h100", "mig", "other"),
    [
        (
            "device.driver == 'gpu.nvidia.com' && "
            "device.attributes['gpu.nvidia.com'].type == 'gpu'",
            True,
            False,
            False,
        ),
        (
            "device.attributes['gpu.nvidia.com'].productName.lowerAscii().matches('^.*h100.*$')",
            True,
            False,
            None,
        ),
        (
            "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('40Gi')) >= 0",
            True,
            False,
            None,
        ),
        (
            "device.attributes['gpu.nvidia.com'].cudaComputeCapability.isGreaterThan(semver('8.0.0'))",
            True,
            False,
            None,
        ),
        ("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'", None, True, None),
        (
            "'profile' in device.attributes['gpu.nvidia.com'] && "
            "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'",
            False,
            True,
            False,
        ),
    ],
)
def test_nvidia_style_selectors(
    expression: str, h100: bool | None, mig: bool | None, other: bool | None
) -> None:
    for device, expected in ((H100, h100), (A100_MIG, mig), (OTHER_DRIVER, other)):
        if expected is None:
            with pytest.raises(CelError, match="no such key"):
                matches(expression, device)
        else:
            assert matches(expression, device) is expected


# -- the device variable ----------------------------------------------------------


def test_names_without_domain_go_under_the_driver_domain() -> None:
    assert matches("device.attributes['gpu.nvidia.com'].index == 3")
    assert matches("device.attributes['gpu.nvidia.com']['brand'] == 'Nvidia'")
    assert matches("device.capacity['gpu.nvidia.com'].memory == quantity('80Gi')")


def test_qualified_names_go_under_their_own_domain() -> None:
    assert matches("device.attributes['resource.kubernetes.io'].pciBusID == '0000:1b:00.0'")
    assert not matches("'pciBusID' in device.attributes['gpu.nvidia.com']")


def test_unknown_domain_is_an_empty_map() -> None:
    assert matches("device.attributes['unknown.example.com'].size() == 0")
    assert matches("device.capacity['unknown.example.com'] == {}")
    assert matches("!('unknown.example.com' in device.attributes)")
    assert matches("'gpu.nvidia.com' in device.attributes && 'gpu.nvidia.com' in device.capacity")
    assert matches("!has(device.attributes['unknown.example.com'].x)")


def test_missing_key_is_a_runtime_error_with_position() -> None:
    expression = "device.attributes['gpu.nvidia.com'].model == 1"
    error = error_of(expression)
    assert error.expression == expression
    assert error.position == "1:35"
    assert str(error) == f'selector "{expression}": no such key: model (at 1:35)'


def test_missing_key_in_unknown_domain_is_an_error() -> None:
    error = error_of("device.attributes['no-such-domain'].noSuchAttr.isGreaterThan(quantity('0'))")
    assert "no such key: noSuchAttr" in str(error)


def test_positions_count_lines_and_columns() -> None:
    error = error_of("device.driver == 'gpu.nvidia.com' &&\n  device.attributes['x']['y'] == 1")
    assert error.position == "2:24"


def test_attribute_value_types() -> None:
    device = DeviceView(
        driver="d.example.com",
        attributes={
            "i": {"int": 7},
            "b": {"bool": True},
            "s": {"string": "x"},
            "v": {"version": "1.2.3-rc.1"},
        },
        capacity={"c": {"value": "1500m"}},
    )
    assert matches(
        "cel.bind(a, device.attributes['d.example.com'], "
        "type(a.i) == int && type(a.b) == bool && type(a.s) == string && a.v.patch() == 3)",
        device,
    )
    assert matches("device.capacity['d.example.com'].c == quantity('1.5')", device)
    assert matches("device.attributes['d.example.com'].b", device)


def test_invalid_attribute_values_are_runtime_errors() -> None:
    bad_version = DeviceView(driver="d", attributes={"v": {"version": "1.0"}}, capacity={})
    assert "attribute v: parse semantic version" in str(
        error_of("device.attributes['d'].v.major() == 1", bad_version)
    )
    bad_union = DeviceView(driver="d", attributes={"v": {"floats": [1.5]}}, capacity={})
    assert "unsupported attribute value" in str(
        error_of("'v' in device.attributes['d']", bad_union)
    )
    bad_capacity = DeviceView(driver="d", attributes={}, capacity={"m": {"value": "lots"}})
    assert "capacity m" in str(error_of("device.capacity['d'].m.sign() == 1", bad_capacity))


def test_allow_multiple_allocations_needs_consumable_capacity() -> None:
    error = error_of("device.allowMultipleAllocations == false")
    assert "undefined field 'allowMultipleAllocations'" in str(error)
    assert error.position == "1:6"
    shared = DeviceView(driver="d", attributes={}, capacity={}, allow_multiple_allocations=True)
    assert matches("device.allowMultipleAllocations", shared, consumable_capacity=True)
    assert matches("!device.allowMultipleAllocations", H100, consumable_capacity=True)


def test_device_fields_are_checked() -> None:
    assert "undefined field 'name'" in str(error_of("device.name == 'gpu-0'"))
    assert matches("has(device.driver)")


# -- results ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("expression", "type_name"),
    [
        ("1", "int"),
        ("device.driver", "string"),
        ("device.capacity['gpu.nvidia.com'].memory", "kubernetes.Quantity"),
        ("[true]", "list(bool)"),
    ],
)
def test_statically_non_bool_result_is_a_compile_error(expression: str, type_name: str) -> None:
    expected = f"must evaluate to bool or the unknown type, not {type_name}"
    with pytest.raises(CelError, match=re.escape(expected)):
        compile_selector(expression)


def test_dynamic_non_bool_result_is_a_runtime_error() -> None:
    selector = compile_selector("device.attributes['gpu.nvidia.com'].productName")
    with pytest.raises(CelError, match="CEL result of type string could not be converted to bool"):
        selector.matches(H100)
    assert compile_selector("device.attributes['d'].flag").matches(
        DeviceView(driver="d", attributes={"flag": {"bool": True}}, capacity={})
    )


# -- compile errors -----------------------------------------------------------------


def test_syntax_error_names_position() -> None:
    with pytest.raises(CelError, match="Syntax error") as info:
        compile_selector("device.driver == ")
    assert info.value.position == "1:17"
    with pytest.raises(CelError, match="Syntax error") as info:
        compile_selector("?!")
    assert info.value.position == "1:0"


def test_expression_length_limit() -> None:
    longest = "true" + " " * (10 * 1024 - 4)
    assert compile_selector(longest).matches(H100)
    with pytest.raises(CelError, match="longer than the maximum of 10240") as info:
        compile_selector(longest + " ")
    assert info.value.position == ""
    # Length is counted in UTF-8 bytes, as the apiserver does.
    with pytest.raises(CelError, match="10241 bytes long"):
        compile_selector("'é' == 'é'" + " " * (10 * 1024 - 11))


def test_deep_nesting_is_refused() -> None:
    with pytest.raises(CelError, match="max recursion depth"):
        compile_selector("!" * 300 + "true")
    with pytest.raises(CelError, match="max recursion depth"):
        compile_selector("[" * 300 + "]" * 300 + " == []")
    assert matches("!" * 50 + "true")
    assert matches("(" * 500 + "true" + ")" * 500)


def test_long_operator_chains_compile() -> None:
    assert matches(" && ".join(["true"] * 1000))
    assert not matches(" || ".join(["false"] * 1000))
    assert matches(" + ".join(["1"] * 200) + " == 200")


# -- cost ---------------------------------------------------------------------------


def test_cost_limit_stops_runaway_comprehensions() -> None:
    ten = "[1, 2, 3, 4, 5, 6, 7, 8, 9, 10]"
    expression = (
        f"{ten}.all(a, {ten}.all(b, {ten}.all(c, {ten}.all(d, {ten}.all(e, "
        f"{ten}.all(f, a < 100))))))"
    )
    selector = compile_selector(expression)
    with pytest.raises(CelError, match="actual cost limit exceeded"):
        selector.matches(H100)


def test_cost_limit_stops_exponential_strings() -> None:
    expression = (
        "cel.bind(s, 'xxxxxxxxxx', " + "cel.bind(s, s + s, " * 30 + "s.size() > 0" + ")" * 31
    )
    with pytest.raises(CelError, match="actual cost limit exceeded"):
        matches(expression)


def test_cheap_selectors_stay_within_the_limit() -> None:
    selector = compile_selector("[1, 2, 3].map(x, x * 2).exists(y, y == 6)")
    assert selector.matches_with_cost(H100)[0]


# -- caching ------------------------------------------------------------------------


def test_compiled_selectors_are_cached_per_expression_and_flags() -> None:
    expression = "device.attributes['gpu.nvidia.com'].type == 'gpu'"
    first = compile_selector(expression)
    assert isinstance(first, CompiledSelector)
    assert compile_selector(expression) is first
    assert compile_selector(expression, consumable_capacity=True) is not first
    clear_cache()
    assert compile_selector(expression) is not first


def test_compile_errors_are_raised_again_from_cache() -> None:
    for _ in range(2):
        with pytest.raises(CelError, match="undeclared reference to 'nope'"):
            compile_selector("nope")


def test_selector_is_reusable_across_devices() -> None:
    selector = compile_selector("device.attributes['gpu.nvidia.com'].type == 'mig'")
    assert [selector.matches(d) for d in (H100, A100_MIG, H100)] == [False, True, False]
    with pytest.raises(CelError, match="no such key: type"):
        selector.matches(OTHER_DRIVER)


def test_expression_must_be_a_string() -> None:
    with pytest.raises(CelError, match="expression must be a string"):
        compile_selector(["device.driver == 'x'"])  # type: ignore[arg-type]


def test_device_view_is_a_plain_record() -> None:
    view = DeviceView(driver="d", attributes={"a": {"int": 1}}, capacity={})
    assert matches("device.attributes['d'].a == 1", view)
    assert [f.name for f in dataclasses.fields(DeviceView)] == [
        "driver",
        "attributes",
        "capacity",
        "allow_multiple_allocations",
    ]
    assert view == DeviceView(driver="d", attributes={"a": {"int": 1}}, capacity={})
    assert "_cel" not in repr(view)


def test_device_can_be_bound_and_shadowed() -> None:
    assert matches("cel.bind(d, device, d.driver == 'gpu.nvidia.com' && has(d.attributes))")
    assert matches("[1, 2].exists(device, device == 2)")
