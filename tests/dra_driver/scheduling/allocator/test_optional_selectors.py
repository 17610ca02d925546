"""Selectors with CEL optionals, list-type attributes and includes() through the allocator.

A defensive selector such as `.?productName.orValue("")` is what users write
for devices that may lack an attribute; the real scheduler accepts it, so
the allocator must place with it, and its evaluation cost must count
against the per-selector limit like any other selector's.
"""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.errors import AllocationError
from dra_driver.scheduling.allocator import Allocator, Node
from tests.fakes import (
    make_device_class,
    make_device_request,
    make_resource_claim,
    make_resource_slice,
    make_slice_device,
)

H100 = "NVIDIA H100 80GB HBM3"
OPTIONAL_PRODUCT = 'device.attributes["gpu.nvidia.com"].?productName.orValue("")'
GPU_CLASS = make_device_class("gpu.nvidia.com", 'device.driver == "gpu.nvidia.com"')


def _slices() -> list[dict[str, Any]]:
    """A MIG device without productName listed first, then an A100 and an H100."""
    mig = make_slice_device("gpu-0-mig-1g-0", attributes={"type": "mig", "profile": "1g.10gb"})
    a100 = make_slice_device(
        "gpu-1", attributes={"type": "gpu", "productName": "NVIDIA A100-SXM4-80GB"}
    )
    h100 = make_slice_device("gpu-2", attributes={"type": "gpu", "productName": H100})
    return [make_resource_slice("n1-gpus", node="n1", devices=[mig, a100, h100])]


def _allocate(*selectors: str, slices: list[dict[str, Any]] | None = None) -> list[str] | None:
    allocator = Allocator(slices or _slices(), [GPU_CLASS])
    claim = make_resource_claim(
        "c", make_device_request("gpu", "gpu.nvidia.com", selectors=selectors)
    )
    results = allocator.allocate(Node("n1"), [claim])
    if results is None:
        return None
    return [r["device"] for r in results[0]["devices"]["results"]]


def test_optional_selector_passes_over_devices_without_the_attribute() -> None:
    assert _allocate(f'{OPTIONAL_PRODUCT} == "{H100}"') == ["gpu-2"]
    # The same test without the optional aborts on the MIG device, as in the scheduler.
    with pytest.raises(AllocationError, match="no such key: productName"):
        _allocate(f'device.attributes["gpu.nvidia.com"].productName == "{H100}"')


def test_optional_selector_that_matches_nothing_leaves_the_claim_unallocated() -> None:
    assert _allocate(f'{OPTIONAL_PRODUCT} == "NVIDIA B200"') is None
    assert _allocate('device.attributes["gpu.nvidia.com"].?noSuch.hasValue()') is None


def test_optional_selector_cost_counts_against_the_limit() -> None:
    # 1000 x 1000 evaluations of the optional lookup exceed the 1,000,000 cost limit.
    thousand = "[" + ", ".join(["1"] * 1000) + "]"
    selector = f'{thousand}.all(x, {thousand}.all(y, {OPTIONAL_PRODUCT} != "x"))'
    with pytest.raises(AllocationError, match="actual cost limit exceeded"):
        _allocate(selector)


def test_list_attributes_and_includes_select_devices() -> None:
    gpu = make_slice_device("gpu-0", attributes={"type": "gpu"})
    gpu["attributes"]["gpu.nvidia.com/cudaFeatures"] = {"strings": ["fp8", "tf32"]}
    other = make_slice_device("gpu-1", attributes={"type": "gpu"})
    other["attributes"]["gpu.nvidia.com/cudaFeatures"] = {"strings": ["tf32"]}
    slices = [make_resource_slice("n1-gpus", node="n1", devices=[other, gpu])]
    features = 'device.attributes["gpu.nvidia.com"].cudaFeatures'
    assert _allocate(f'{features}.includes("fp8")', slices=slices) == ["gpu-0"]
    assert _allocate(f'{features}.exists(f, f == "fp8")', slices=slices) == ["gpu-0"]
    assert _allocate(f'{features}.includes("int4")', slices=slices) is None
