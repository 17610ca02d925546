"""Kubernetes name rules: the names the apiserver takes, and the ones it refuses."""

from __future__ import annotations

import pytest

from dra_driver.kube.names import (
    driver_name_errors,
    is_c_identifier,
    is_dns_label,
    is_dns_subdomain,
    is_label_name,
    is_label_value,
    is_uid,
    label_key_errors,
    qualified_name_errors,
)


@pytest.mark.parametrize("name", ["gpu-0", "a", "0", "x" * 63])
def test_dns_labels_taken(name: str) -> None:
    assert is_dns_label(name)


@pytest.mark.parametrize("name", ["", "GPU-0", "-gpu", "gpu-", "gpu.0", "x" * 64, "../etc"])
def test_dns_labels_refused(name: str) -> None:
    assert not is_dns_label(name)


@pytest.mark.parametrize("name", ["gpu.nvidia.com", "node-a", "a." * 126 + "b"])
def test_dns_subdomains_taken(name: str) -> None:
    assert is_dns_subdomain(name)


@pytest.mark.parametrize("name", ["", "Gpu.nvidia.com", "gpu..com", ".gpu", "a" * 254, "a_b"])
def test_dns_subdomains_refused(name: str) -> None:
    assert not is_dns_subdomain(name)


def test_identifiers_and_labels() -> None:
    assert is_c_identifier("productName")
    assert not is_c_identifier("9lives")
    assert is_label_name("node.kubernetes.io_x")
    assert not is_label_name("-x")
    assert is_label_value("")
    assert is_label_value("v1.2_3")
    assert not is_label_value("a" * 64)


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("productName", True),
        ("_x", True),
        ("gpu.nvidia.com/productName", True),
        ("resource.kubernetes.io/pciBusID", True),
        ("GPU.NVIDIA.COM/x", True),  # domains are checked lower-cased, like driver names
        ("a" * 32, True),
        ("a" * 33, False),
        ("a-b", False),
        ("x/", False),
    ],
)
def test_qualified_names(name: str, ok: bool) -> None:
    assert (qualified_name_errors(name) == []) is ok


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("example.com/unhealthy", True),
        ("unhealthy", True),
        ("a" * 63, True),
        ("a" * 64, False),
        ("example.com/", False),
        ("/x", False),
        ("a/b/c", False),
        ("-x", False),
    ],
)
def test_label_keys(name: str, ok: bool) -> None:
    assert (label_key_errors(name) == []) is ok


@pytest.mark.parametrize(
    ("name", "errors"),
    [
        ("gpu.nvidia.com", []),
        ("GPU.nvidia.com", []),  # checked lower-cased, as CSI driver names are
        ("a" * 63, []),
        ("a" * 64, ["longer than 63 characters"]),
        ("gpu_nvidia", ["'gpu_nvidia' is not a DNS subdomain"]),
        ("", ["required"]),
    ],
)
def test_driver_names(name: str, errors: list[str]) -> None:
    assert driver_name_errors(name) == errors


@pytest.mark.parametrize(
    ("uid", "ok"),
    [
        ("5e1f0c2a-7b3d-4e9a-8c61-0d2b4f6a8e13", True),
        ("c1", True),
        ("a.b_c", True),
        ("", False),
        ("-x", False),
        ("x-", False),
        ("a:b", False),
        ("../x", False),
        ("a/b", False),
        ("a" * 128, True),
        ("a" * 129, False),
    ],
)
def test_uids(uid: str, ok: bool) -> None:
    assert is_uid(uid) is ok
