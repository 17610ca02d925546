"""Kubernetes' named formats: apimachinery's and kube-openapi's checks, with their messages."""

from __future__ import annotations

import pytest

from dra_driver.scheduling.cel.named_formats import FORMATS

LABEL_REGEX_ERROR = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


def errors(name: str, value: str) -> list[str]:
    return FORMATS[name].validate(value)


def test_dns_labels_report_length_and_dots() -> None:
    assert errors("dns1123Label", "a" * 63) == []
    assert errors("dns1123Label", "a" * 64) == ["must be no more than 63 characters"]
    assert errors("dns1123Label", "my.name") == ["must not contain dots"]
    assert errors("dns1123Label", "-x" + "a" * 63) == [
        "must be no more than 63 characters",
        LABEL_REGEX_ERROR,
    ]
    assert errors("dns1035Label", "1abc") != []
    assert errors("dns1035Label", "abc1") == []


def test_prefix_forms_mask_a_trailing_dash_as_upstream_does() -> None:
    # maskTrailingDash replaces the last *two* bytes by "a" (upstream's slice).
    assert errors("dns1123LabelPrefix", "my-label-") == []
    assert errors("dns1123LabelPrefix", "x-") == []
    assert errors("dns1123LabelPrefix", "-") == [LABEL_REGEX_ERROR]
    assert errors("dns1123LabelPrefix", "aé-") == [LABEL_REGEX_ERROR]  # cuts é's second byte
    assert errors("dns1123SubdomainPrefix", "example.") != []
    assert errors("dns1123SubdomainPrefix", "example.-") == []


def test_qualified_names_check_prefix_and_name() -> None:
    assert errors("qualifiedName", "example.com/MyName") == []
    assert errors("qualifiedName", "/name") == ["prefix part must be non-empty"]
    assert errors("qualifiedName", "Example.com/name")[0].startswith("prefix part a lowercase")
    assert errors("qualifiedName", "a/b/c")[0].startswith("a valid label key must consist")
    assert errors("qualifiedName", "a/") == [
        "name part must be non-empty",
        "name part must consist of alphanumeric characters, '-', '_' or '.', and must start "
        "and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or "
        "'123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
    ]
    assert errors("qualifiedName", "n" * 64)[0] == "name part must be no more than 63 bytes"


def test_label_values() -> None:
    assert errors("labelValue", "") == []
    assert errors("labelValue", "v1.2_3-x") == []
    assert errors("labelValue", "é") != []  # lengths and characters are bytes and ASCII
    assert errors("labelValue", "a" * 64)[0] == "must be no more than 63 bytes"


@pytest.mark.parametrize(
    ("name", "value", "valid"),
    [
        ("uuid", "123e4567-e89b-12d3-a456-426614174000", True),
        ("uuid", "123E4567E89B12D3A456426614174000", True),
        ("uuid", "123e4567-e89b-12d3-a456-42661417400", False),
        ("uuid", "123e4567-e89b-12d3-a456-426614174000\n", False),
        ("byte", "aGVsbG8=", True),
        ("byte", "aGVsbG8", False),
        ("byte", "", False),
        ("byte", "a-_b", False),
        ("date", "2024-02-29", True),
        ("date", "2023-02-29", False),
        ("datetime", "2020-01-01T23:59:59Z", True),
        ("datetime", "2020-01-01t00:00:00.5+01:00", True),
        ("datetime", "2020-01-01T24:00:00Z", False),
        ("datetime", "2020-01-01 00:00:00Z", False),
        ("uri", "http://example.com", True),
        ("uri", "example.com", False),
    ],
)
def test_openapi_formats(name: str, value: str, valid: bool) -> None:
    assert (errors(name, value) == []) is valid


def test_uri_errors_are_go_url_errors() -> None:
    assert errors("uri", "example.com") == ['parse "example.com": invalid URI for request']


def test_formats_are_equal_by_name_and_cost_by_their_regex_size() -> None:
    assert FORMATS["uri"] == FORMATS["uri"]
    assert FORMATS["uri"] != FORMATS["uuid"]
    # library/format.go's MaxRegexSize (uuid and date use kube-openapi's pattern lengths).
    sizes = {name: f.max_regex_size for name, f in FORMATS.items()}
    assert sizes["dns1123Label"] == 30
    assert sizes["labelValue"] == 40
    assert sizes["uri"] == 1103
    assert sizes["byte"] == 84
    assert sizes["uuid"] == len(
        "(?i)^[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}$"
    )
