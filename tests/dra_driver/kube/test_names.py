"""Kubernetes name rules: the names the apiserver takes, and the ones it refuses."""

from __future__ import annotations

import pytest

from dra_driver.kube.names import (
    is_c_identifier,
    is_dns_label,
    is_dns_subdomain,
    is_label_name,
    is_label_value,
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
