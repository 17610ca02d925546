"""Upstream's CEL library test tables, run as device selector expressions.

The cases come from Kubernetes' library tests (apiserver `pkg/cel/library`:
IP, CIDR, format, cost), its CRD validation tests (apiextensions-apiserver:
URLs, IPs, formats, duration and timestamp literals) and cel-go's
`string.format()` tests, converted by `generate.py` from the commits named in
`data/SOURCE.json`. Each expression compiles in the selector environment and
is checked the way the upstream test checks it: the result (CEL equality),
the exact run-time error text, the compile errors (as regular expressions),
or the run-time cost.

Differences that are Kubernetes' own choices are expected, asserted as such:

* the JSONPatch library is not in Kubernetes' base CEL environment
  (environment/base.go), only in the admission-mutation one; DRA selectors
  cannot call `jsonpatch.escapeKey`;
* Kubernetes' strings library uses the default `en_US` locale
  (`ext.Strings(ext.StringsVersion(2))`), so cel-go cases run in `fr_FR`
  print `%f` as en_US does;
* selectors have no protocol buffer message types (cel-go's `TestAllTypes`).

Upstream compares worst-case cost *estimates*, which this package does not
compute (docs/cel.md); the run-time cost is compared exactly and must lie
within upstream's estimate.
"""

from __future__ import annotations

import datetime
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest

from dra_driver.errors import CelError
from dra_driver.scheduling.cel import DeviceView
from dra_driver.scheduling.cel.diagnostics import quote_expression
from dra_driver.scheduling.cel.lib_time import Duration, Timestamp
from dra_driver.scheduling.cel.netaddr import parse_addr, parse_prefix
from dra_driver.scheduling.cel.selector import compile_expression
from dra_driver.scheduling.cel.types import DYN, STRING, map_of
from dra_driver.scheduling.cel.values import NONE, Optional, Uint, cel_equal

DATA = Path(__file__).parent / "data"
DEVICE = DeviceView(driver="gpu.nvidia.com", attributes={}, capacity={})

# Functions of Kubernetes' CEL libraries that the DRA environment does not have.
NOT_IN_ENVIRONMENT = re.compile(r"\bjsonpatch\.")
# Locales other than the default en_US change what %f prints; Kubernetes sets none.
LOCALE_DEPENDENT = {
    "locale support",
    "dyntype support for fixed-point formatting clause (comma separator locale)",
}


def _cases(file: str) -> list[Any]:
    data = json.loads((DATA / file).read_text(encoding="utf-8"))
    params = []
    seen: dict[str, int] = {}
    for case in data["cases"]:
        label = case.get("name") or case.get("section") or case["function"]
        case_id = f"{case.get('function', case.get('section'))}/{label}: {case['expr']}"
        seen[case_id] = seen.get(case_id, 0) + 1
        if seen[case_id] > 1:  # upstream repeats a few cases verbatim
            case_id += f" #{seen[case_id]}"
        params.append(pytest.param(case, id=case_id))
    return params


def _decode(tagged: dict[str, Any]) -> Any:
    ((kind, raw),) = tagged.items()
    if kind == "bool":
        return bool(raw)
    if kind == "int":
        return int(raw)
    if kind == "uint":
        return Uint(raw)
    if kind == "double":
        return float(raw)
    if kind == "string":
        return raw
    if kind == "ip":
        return parse_addr(raw)
    if kind == "cidr":
        return parse_prefix(raw)
    if kind == "list":
        return [_decode(v) for v in raw]
    if kind == "map":
        return {_decode(k): _decode(v) for k, v in raw}
    if kind == "optional":
        return NONE if raw is None else Optional(_decode(raw))
    if kind == "timestamp":
        return Timestamp.of(datetime.datetime.fromisoformat(raw))
    if kind == "duration_ns":
        return Duration.from_nanos(raw)
    raise AssertionError(f"no such value kind {kind}")


def _message(error: CelError, expression: str) -> str:
    """The error's message as cel-go words it: without our expression prefix and position."""
    text = str(error)
    prefix = f"selector {quote_expression(expression)}: "
    assert text.startswith(prefix), text
    return re.sub(r" \(at \d+:\d+\)$", "", text[len(prefix) :])


def _compile_error(expression: str, **kwargs: Any) -> str:
    with pytest.raises(CelError, match="compilation failed") as info:
        compile_expression(expression, **kwargs)
    return _message(info.value, expression).removeprefix("compilation failed: ")


def _evaluate(expression: str, **kwargs: Any) -> tuple[Any, int]:
    bindings = kwargs.pop("bindings", None)
    return compile_expression(expression, **kwargs).evaluate(DEVICE, bindings)


def _check_result(case: dict[str, Any], **kwargs: Any) -> int:
    result, cost = _evaluate(case["expr"], **kwargs)
    expected = _decode(case["result"])
    assert cel_equal(result, expected), f"{case['expr']} = {result!r}, expected {expected!r}"
    return cost


# -- Kubernetes' library tests (apiserver pkg/cel/library) --------------------------------------


@pytest.mark.parametrize(
    "case", _cases("apiserver_ip_test.json") + _cases("apiserver_cidr_test.json")
)
def test_apiserver_ip_and_cidr(case: dict[str, Any]) -> None:
    """TestIP and TestCIDR: results, exact run-time errors, compile errors."""
    _library_case(case)


@pytest.mark.parametrize("case", _cases("apiserver_format_test.json"))
def test_apiserver_format(case: dict[str, Any]) -> None:
    """TestFormat: every named format's validation, lookup and equality."""
    _library_case(case)


def _library_case(case: dict[str, Any]) -> None:
    expr = case["expr"]
    if "compile_error_patterns" in case:
        message = _compile_error(expr)
        for pattern in case["compile_error_patterns"]:
            assert re.search(pattern, message), f"{message!r} does not match {pattern!r}"
        return
    if "runtime_error" in case or "runtime_error_pattern" in case:
        program = compile_expression(expr)
        with pytest.raises(CelError) as info:
            program.evaluate(DEVICE)
        message = _message(info.value, expr)
        if "runtime_error" in case:
            assert message == case["runtime_error"]
        else:
            assert re.search(case["runtime_error_pattern"], message)
        return
    _check_result(case)


@pytest.mark.parametrize("case", _cases("apiserver_cost_test.json"))
def test_apiserver_cost(case: dict[str, Any]) -> None:
    """cost_test.go: the run-time cost of URL, IP, CIDR, format and string functions."""
    expr = case["expr"]
    if NOT_IN_ENVIRONMENT.search(expr):
        # Kubernetes difference: not in the base environment that DRA selectors use.
        assert "undeclared reference" in _compile_error(expr)
        return
    _result, cost = _evaluate(expr)
    assert cost == case["runtime_cost"]
    assert cost <= case["estimated_cost"][1]  # never above upstream's worst case


# -- CRD validation tests (apiextensions-apiserver) ------------------------------------------


@pytest.mark.parametrize("case", _cases("apiextensions_validation_test.json"))
def test_crd_validation_rules(case: dict[str, Any]) -> None:
    """TestValidationExpressions: URL, IP/CIDR and format rules; duration/timestamp literals."""
    expr = case["expr"]
    if "compile_error" in case:
        with pytest.raises(CelError, match="compilation failed") as info:
            compile_expression(expr)
        assert case["compile_error"] in str(info.value)
        # Upstream prints 1-based columns; ours are 0-based, as cel-go's source positions.
        assert str(info.value).endswith(f"(at {case['line']}:{case['column'] - 1})")
        return
    kwargs: dict[str, Any] = {}
    if "self" in case:
        kwargs = {"variables": {"self": map_of(STRING, STRING)}, "bindings": {"self": case["self"]}}
    cost = _check_result(case, **kwargs)
    if "runtime_cost" in case:
        assert cost == case["runtime_cost"]


# -- cel-go's string.format() tests -------------------------------------------------------------


@pytest.mark.parametrize("case", _cases("celgo_formatting_test.json"))
def test_celgo_string_format(case: dict[str, Any]) -> None:
    """TestStringFormat (strings version 3, the formatter of version 2)."""
    expr = case["expr"]
    if case.get("unsupported") or "TestAllTypes" in expr:
        # Kubernetes difference: no protocol buffer message types in selectors.
        with pytest.raises(CelError):
            _evaluate(expr, variables=dict.fromkeys(case.get("bindings", {}), DYN))
        return
    bindings = {name: _decode(value) for name, value in case.get("bindings", {}).items()}
    kwargs: dict[str, Any] = {"variables": dict.fromkeys(bindings, DYN), "bindings": bindings}
    if "error" in case:
        # As upstream's checkCase: the message contains the expected text, whether the
        # strings library's check refuses the call or its evaluation fails.
        with pytest.raises(CelError) as info:
            _evaluate(expr, **kwargs)
        assert case["error"] in str(info.value)
        return
    result, cost = _evaluate(expr, **kwargs)
    if case["name"] in LOCALE_DEPENDENT:
        # Kubernetes difference: the strings library runs with en_US.
        assert case.get("locale") not in (None, "", "en_US")
        assert result != case["result"]["string"]
        return
    assert result == case["result"]["string"]
    if "runtime_cost" in case:
        assert cost == case["runtime_cost"]


def test_every_source_is_named() -> None:
    source = json.loads((DATA / "SOURCE.json").read_text())
    for entry in source["sources"]:
        assert re.fullmatch(r"[0-9a-f]{40}", entry["commit"])
        assert entry["repository"].startswith("https://github.com/")
    for file in DATA.glob("*_test.json"):
        data = json.loads(file.read_text(encoding="utf-8"))
        assert data["source"] in source["sources"]
        assert data["cases"]


def _finite(value: float) -> bool:
    return math.isfinite(value)
