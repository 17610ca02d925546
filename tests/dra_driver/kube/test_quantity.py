"""Quantity strings: what we publish must be what the apiserver prints back."""

from __future__ import annotations

from decimal import localcontext
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.utils.quantity import parse_quantity as client_parse_quantity

from dra_driver.errors import ConfigError, QuantityError
from dra_driver.kube.quantity import INT64_MAX, format_quantity, parse_quantity


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (5, "5"),
        (14, "14"),
        (1000, "1k"),
        (1500, "1500"),
        (2000, "2k"),
        (1023, "1023"),
        (1024, "1Ki"),
        (1025, "1025"),
        (2048, "2Ki"),
        (1024000, "1000Ki"),
        (4864 * 2**20, "4864Mi"),  # A100 1g.5gb MIG memory
        (85520809984, "81559Mi"),  # H100 80GB HBM3 total
        (85899345920, "80Gi"),
        (40960 * 2**20, "40Gi"),  # A100 40GB total
        (2**40, "1Ti"),
        (2**50, "1Pi"),
        (2**62, "4Ei"),
        (10**6, "1M"),
        (10**9 + 1, "1000000001"),
        (-1024, "-1Ki"),
        (-3000, "-3k"),
        (INT64_MAX, str(INT64_MAX)),
    ],
)
def test_format_quantity_prints_the_canonical_form(value: int, text: str) -> None:
    assert format_quantity(value) == text


@pytest.mark.parametrize("bad", [2**63, -(2**63) - 1, 1.5, True, "5"])
def test_format_quantity_refuses_what_a_quantity_cannot_hold(bad: object) -> None:
    with pytest.raises(ConfigError):
        format_quantity(bad)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", Fraction(0)),
        ("5", Fraction(5)),
        ("+5", Fraction(5)),
        ("-5", Fraction(-5)),
        ("1Ki", Fraction(1024)),
        ("1Mi", Fraction(2**20)),
        ("1Gi", Fraction(2**30)),
        ("1Ti", Fraction(2**40)),
        ("1Pi", Fraction(2**50)),
        ("1Ei", Fraction(2**60)),
        ("1.5Gi", Fraction(3 * 2**29)),
        ("81559Mi", Fraction(85520809984)),
        ("1k", Fraction(1000)),
        ("1M", Fraction(10**6)),
        ("1G", Fraction(10**9)),
        ("1T", Fraction(10**12)),
        ("1P", Fraction(10**15)),
        ("1E", Fraction(10**18)),
        ("100m", Fraction(1, 10)),
        ("250u", Fraction(1, 4000)),
        ("7n", Fraction(7, 10**9)),
        ("1e3", Fraction(1000)),
        ("1E3", Fraction(1000)),
        ("1e+3", Fraction(1000)),
        ("5e-2", Fraction(1, 20)),
        ("0.5", Fraction(1, 2)),
        (".5", Fraction(1, 2)),
        ("1.", Fraction(1)),
        ("007", Fraction(7)),
        # rounded up to whole nanos, away from zero, like ParseQuantity
        ("0.1n", Fraction(1, 10**9)),
        ("-0.1n", Fraction(-1, 10**9)),
        ("1.0000000001", Fraction(1_000_000_001, 10**9)),
        # BinarySI is capped at int64
        ("8Ei", Fraction(INT64_MAX)),
        ("16Ei", Fraction(INT64_MAX)),
    ],
)
def test_parse_quantity_reads_every_suffix(text: str, value: Fraction) -> None:
    assert parse_quantity(text).value == value


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "-",
        "+",
        ".",
        "Gi",
        "1K",
        "1KI",
        "1e",
        "1Kii",
        "1iK",
        "1 Gi",
        " 1",
        "1Gi ",
        "abc",
        "1e3k",
        "1.2.3",
        "0x10",
        "1_000",
        "--1",
        "1e3.5",
    ],
)
def test_parse_quantity_rejects_what_is_not_a_quantity(bad: str) -> None:
    with pytest.raises(ConfigError, match="quantity"):
        parse_quantity(bad)


def test_parse_quantity_names_the_bad_suffix() -> None:
    with pytest.raises(ConfigError, match="unknown suffix 'K'"):
        parse_quantity("4K")


def test_parse_quantity_rejects_non_strings() -> None:
    with pytest.raises(ConfigError):
        parse_quantity(5)  # type: ignore[arg-type]


@given(st.integers(min_value=-INT64_MAX, max_value=INT64_MAX))
def test_formatted_integers_parse_back_to_themselves(value: int) -> None:
    assert parse_quantity(format_quantity(value)).value == value


@given(st.integers(min_value=0, max_value=2**40), st.sampled_from([2**20, 1000, 1]))
def test_format_is_a_fixed_point_of_the_round_trip(value: int, scale: int) -> None:
    text = format_quantity(value * scale)
    assert format_quantity(int(parse_quantity(text).value)) == text


def test_huge_exponent_is_refused_quickly() -> None:
    with pytest.raises(ConfigError, match="exponent out of range"):
        parse_quantity("1e999999999")


@pytest.mark.parametrize(
    ("bad", "problem"),
    [
        ("4K", "suffix"),
        ("10Mm", "suffix"),
        ("20Mo", "format"),
        ("1.2.3", "format"),
        ("", "format"),
        ("1e2000", "exponent"),
    ],
)
def test_parse_errors_say_which_rule_broke(bad: str, problem: str) -> None:
    with pytest.raises(QuantityError) as err:
        parse_quantity(bad)
    assert err.value.problem == problem


@given(
    st.integers(min_value=0, max_value=10**30),
    st.sampled_from(["", "k", "M", "G", "T", "P", "E", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei", "e3"]),
)
def test_parse_agrees_with_the_kubernetes_client_on_whole_numbers(number: int, suffix: str) -> None:
    text = f"{number}{suffix}"
    with localcontext() as context:
        context.prec = 80
        expected = Fraction(client_parse_quantity(text))
    if suffix.endswith("i"):
        expected = min(expected, Fraction(INT64_MAX))
    assert parse_quantity(text).value == expected


def test_quantities_compare_by_value_and_print_in_their_format() -> None:
    assert parse_quantity("80Gi") == parse_quantity("85899345920")
    assert parse_quantity("0.2G").compare(parse_quantity("200M")) == 0
    assert parse_quantity("1Gi").compare(parse_quantity("1G")) == 1
    assert str(parse_quantity("1024")) == "1024"
    assert str(parse_quantity("1024Mi")) == "1Gi"
    assert str(parse_quantity("1e3")) == "1e3"
