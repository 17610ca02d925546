"""NVIDIA's last per-GPU differences, on simulated GH200/GB200 nodes, through both NVML backends
(the simulated one, and the pynvml backend over the fake pynvml module):

* `addressingMode` on coherent platforms (GPU and MIG devices), absent elsewhere and on drivers
  without the NVML call;
* `resource.kubernetes.io/numaNode` as a one-element list under DRAListTypeAttributes, in
  slices the 1.37 strict schema and the 1.36 limits accept;
* a Hopper-or-newer GPU with MIG on whose NVML lists no GPU-instance profile: the full GPU with
  `--dynamic-mig`, nothing without;
* `cliqueID`, the NVLink clique of a whole GPU whose fabric is COMPLETED and healthy.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from controller.limits import validate_resource_slice, validate_schema
from controller.slices import build_resource_slices
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.real import RealNvml
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.node.devices import (
    CLIQUE_ATTRIBUTE,
    NUMA_NODE_ATTRIBUTE,
    AllocatableDevice,
    AttributeValue,
    build_devices,
    inventory_warnings,
)
from dra_driver.node.inventory import NodeInventory, discover
from tests.fakes import FakePynvml, fake_pynvml, fake_sysfs

Backend = Callable[[str, Path], tuple[NodeInventory, SimHardware, FakePynvml | None]]


def _sim(shape: str, tmp: Path) -> tuple[NodeInventory, SimHardware, FakePynvml | None]:
    hw = SimHardware(load_shape(shape))
    return discover(SimNvml(hw)), hw, None


def _pynvml(shape: str, tmp: Path) -> tuple[NodeInventory, SimHardware, FakePynvml | None]:
    hw = SimHardware(load_shape(shape))
    lib = fake_pynvml(hw)
    nvml = RealNvml(lib, sysfs_root=fake_sysfs(hw, tmp / "sys"))
    return discover(nvml), hw, lib


BACKENDS = pytest.mark.parametrize("backend", [_sim, _pynvml], ids=["sim", "pynvml"])


def _by_name(devices: list[AllocatableDevice]) -> dict[str, AllocatableDevice]:
    return {device.name: device for device in devices}


# --- addressingMode ----------------------------------------------------------------------


@BACKENDS
@pytest.mark.parametrize("shape", ["gh200-node", "gb200-node", "gb300-node"])
def test_grace_gpus_and_their_mig_devices_publish_ats(
    backend: Backend, shape: str, tmp_path: Path
) -> None:
    inventory, _, _ = backend(shape, tmp_path)
    devices = build_devices(inventory, dynamic_mig=True)
    assert devices  # full GPUs and every MIG placement
    for device in devices:
        assert device.attributes["addressingMode"] == AttributeValue.of_string("ATS"), device.name
        assert device.to_api()["attributes"]["addressingMode"] == {"string": "ATS"}


@BACKENDS
def test_gpus_off_coherent_platforms_publish_no_addressing_mode(
    backend: Backend, tmp_path: Path
) -> None:
    inventory, _, _ = backend("dgx-h100", tmp_path)
    assert not any("addressingMode" in d.attributes for d in build_devices(inventory))


def test_a_driver_without_the_call_publishes_everything_but_addressing_mode(
    tmp_path: Path,
) -> None:
    hw = SimHardware(load_shape("gh200-node"))
    lib = fake_pynvml(hw)
    lib.missing_functions.add("nvmlDeviceGetAddressingMode")
    devices = build_devices(discover(RealNvml(lib, sysfs_root=None)))
    assert [d.name for d in devices] == ["gpu-0", "gpu-1"]
    assert not any("addressingMode" in d.attributes for d in devices)


# --- list-typed numaNode -----------------------------------------------------------------


@BACKENDS
@pytest.mark.parametrize("shape", ["gh200-node", "gb200-node", "gb300-node"])
def test_numa_node_is_a_one_element_list_under_the_gate(
    backend: Backend, shape: str, tmp_path: Path
) -> None:
    inventory, hw, _ = backend(shape, tmp_path)
    numa = {facts.uuid: facts.numa_node for facts in hw.gpus()}
    scalar = build_devices(inventory, dynamic_mig=True)
    listed = build_devices(inventory, dynamic_mig=True, list_attributes=True)
    assert [d.name for d in listed] == [d.name for d in scalar]
    for plain, device in zip(scalar, listed, strict=True):
        node = numa[device.gpu.uuid]
        assert plain.attributes[NUMA_NODE_ATTRIBUTE] == AttributeValue.of_int(node)
        assert device.to_api()["attributes"][NUMA_NODE_ATTRIBUTE] == {"ints": [node]}
        others = {k: v for k, v in device.attributes.items() if k != NUMA_NODE_ATTRIBUTE}
        assert others == {k: v for k, v in plain.attributes.items() if k != NUMA_NODE_ATTRIBUTE}


@BACKENDS
def test_list_slices_pass_the_137_strict_schema_and_the_136_limits(
    backend: Backend, tmp_path: Path
) -> None:
    inventory, _, _ = backend("gb200-node", tmp_path)
    devices = build_devices(inventory, dynamic_mig=True, list_attributes=True)
    slices = build_resource_slices(devices, driver="gpu.nvidia.com", node_name="gb200-0")
    assert sum(len(s["spec"].get("devices", [])) for s in slices) == len(devices)
    for obj in slices:
        assert len(obj["spec"].get("devices", [])) <= 64  # list attributes: an advanced feature
        validate_schema(obj, "1.37")
        assert validate_resource_slice(obj, version="1.36") == []
        assert validate_resource_slice(obj, version="1.37") == []
    # A 1.35 API server knows no list values: it would refuse the slice.
    first = next(s for s in slices if s["spec"].get("devices"))
    assert any("unknown value fields ['ints']" in m for m in validate_resource_slice(first))


# --- MIG on, no GPU-instance profile listed ------------------------------------------------


def _mig_on_without_profiles(shape: str) -> NodeInventory:
    """Every GPU of `shape` in MIG mode, with NVML answering NOT_SUPPORTED for every profile."""
    hw = SimHardware(load_shape(shape))
    lib = fake_pynvml(hw)
    nvml = RealNvml(lib, sysfs_root=None)
    for gpu in nvml.gpus():
        assert nvml.set_mig_mode(gpu.uuid, True) == codes.SUCCESS
    lib.fail_next("nvmlDeviceGetGpuInstanceProfileInfo", codes.ERROR_NOT_SUPPORTED, times=10_000)
    return discover(nvml)


@pytest.mark.parametrize("shape", ["gh200-node", "gb200-node"])
def test_mig_on_without_profiles_offers_the_full_gpu_with_dynamic_mig(shape: str) -> None:
    inventory = _mig_on_without_profiles(shape)
    assert all(g.info.mig_enabled and not g.gi_profiles for g in inventory.gpus)
    devices = build_devices(inventory, dynamic_mig=True)
    assert [d.name for d in devices] == [f"gpu-{g.info.minor}" for g in inventory.gpus]
    for device in devices:
        assert device.kind == "gpu"
        assert device.attributes["type"] == AttributeValue.of_string("gpu")
        assert device.capacity["memory"] == device.gpu.memory_bytes
        assert not device.consumes_counters  # no MIG device to exclude
    warnings = inventory_warnings(inventory, dynamic_mig=True)
    assert len(warnings) == len(inventory.gpus)
    assert all("no GPU-instance profiles: it is published as a full GPU" in w for w in warnings)
    slices = build_resource_slices(devices, driver="gpu.nvidia.com", node_name="n")
    for obj in slices:
        validate_schema(obj, "1.35")


def test_mig_on_without_profiles_stays_unpublished_without_dynamic_mig() -> None:
    inventory = _mig_on_without_profiles("gh200-node")
    assert build_devices(inventory) == []
    assert all(
        "MIG enabled but no MIG devices: nothing is published" in w
        for w in inventory_warnings(inventory)
    )


# --- NVLink clique -----------------------------------------------------------------------

RACK_CLIQUE = "00000000-0000-0000-0000-000000000001.0"


@BACKENDS
def test_gb200_gpus_publish_their_clique_and_mig_devices_do_not(
    backend: Backend, tmp_path: Path
) -> None:
    inventory, _, _ = backend("gb200-node", tmp_path)
    devices = build_devices(inventory, dynamic_mig=True)
    gpus = [d for d in devices if d.kind == "gpu"]
    assert [d.name for d in gpus] == ["gpu-0", "gpu-1", "gpu-2", "gpu-3"]
    for device in gpus:
        assert device.to_api()["attributes"][CLIQUE_ATTRIBUTE] == {"string": RACK_CLIQUE}
    assert not any(CLIQUE_ATTRIBUTE in d.attributes for d in devices if d.kind == "mig")
    assert inventory_warnings(inventory, dynamic_mig=True) == []


@BACKENDS
@pytest.mark.parametrize("shape", ["gh200-node", "dgx-h100"])
def test_gpus_without_fabric_publish_no_clique(
    backend: Backend, shape: str, tmp_path: Path
) -> None:
    inventory, _, _ = backend(shape, tmp_path)
    assert not any(CLIQUE_ATTRIBUTE in d.attributes for d in build_devices(inventory))


@BACKENDS
@pytest.mark.parametrize(
    ("block", "why"),
    [
        ("  state: in_progress\n", "fabric registering (state in-progress"),
        ("  state: not_started\n", "fabric registering (state not-started"),
        ("  status: 999\n", "fabric failed"),
        ("  healthSummary: unhealthy\n", "fabric unhealthy"),
        ("  healthSummary: limited_capacity\n", "fabric unhealthy"),
    ],
)
def test_a_fabric_not_settled_or_unhealthy_publishes_no_clique_and_says_why(
    backend: Backend, block: str, why: str, tmp_path: Path
) -> None:
    shape = tmp_path / "tray.yaml"
    shape.write_text(
        "gpus:\n  - model: GB200\n    count: 2\nfabric:\n"
        f"  clusterUuid: 00000000-0000-0000-0000-000000000001\n  cliqueId: 0\n{block}"
    )
    inventory, _, _ = backend(str(shape), tmp_path)
    devices = build_devices(inventory)
    assert [d.name for d in devices] == ["gpu-0", "gpu-1"]  # still published, without clique
    assert not any(CLIQUE_ATTRIBUTE in d.attributes for d in devices)
    warnings = inventory_warnings(inventory)
    assert len(warnings) == 2
    assert all(why in w and "cliqueID attribute is left out" in w for w in warnings)


def test_a_zero_cluster_is_nvlink_without_a_multi_node_clique(tmp_path: Path) -> None:
    shape = tmp_path / "tray.yaml"
    shape.write_text(
        "gpus:\n  - model: GB200\nfabric:\n"
        "  clusterUuid: 00000000-0000-0000-0000-000000000000\n  cliqueId: 0\n"
    )
    inventory, _, _ = _pynvml(str(shape), tmp_path)
    assert not any(CLIQUE_ATTRIBUTE in d.attributes for d in build_devices(inventory))
    assert inventory_warnings(inventory) == []  # a normal state, nothing to warn about
