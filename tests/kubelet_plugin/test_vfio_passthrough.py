"""VFIO passthrough through the real plugin process on a simulated node (`--passthrough`).

The plugin binds a claimed GPU to vfio-pci by writing the simulated node's
sysfs (`dra_driver.hardware.simulated.pci_bus` refuses what the kernel
refuses), hands the VM its /dev/vfio node through CDI, withdraws the GPU's
other devices from the slices while it is passed through, and binds it back
to nvidia at Unprepare. The tests read the node's sysfs and /dev back.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.composition.hardware import open_simulated
from dra_driver.errors import PluginError
from dra_driver.hardware.pci_sysfs import PciSysfs
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.node.vfio_devices import vfio_uuid
from kubelet_plugin.main import PluginOptions, _passthrough_pci
from kubelet_plugin.service import ClaimRef, UnprepareResult
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config

pytestmark = pytest.mark.slow

SHAPE = "dgx-h100"
PCI = "resource.kubernetes.io/pciBusID"
PASSTHROUGH = ["--passthrough", "--no-device-health-checks"]  # as deploy/components/passthrough


def vfio_config(policy: str = "LegacyOnly", api_device: bool = True) -> dict[str, Any]:
    return make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "VfioDeviceConfig",
            "iommu": {"backendPolicy": policy, "enableAPIDevice": api_device},
        }
    )


def store(
    plugin: PluginProcess,
    index: int,
    results: list[Any],
    configs: tuple[dict[str, Any], ...] = (),
) -> ClaimRef:
    ref = ClaimRef("default", f"5f10000{index}-0000-4000-8000-000000000000", f"vm-{index}")
    plugin.store_claim(
        make_allocated_claim(ref.name, uid=ref.uid, results=results, configs=configs)
    )
    return ref


def pci(plugin: PluginProcess) -> PciSysfs:
    pci = plugin.hardware().pci
    assert pci is not None
    return pci


def sim(plugin: PluginProcess) -> SimHardware:
    return plugin.simulated_node().sim


def address(plugin: PluginProcess, index: int) -> str:
    return pci(plugin).gpus()[index].address


def prepare_error(plugin: PluginProcess, ref: ClaimRef) -> str:
    return plugin.client.prepare([ref])[ref.uid].error


def unprepare(plugin: PluginProcess, *refs: ClaimRef) -> None:
    assert plugin.client.unprepare(list(refs)) == {ref.uid: UnprepareResult() for ref in refs}


def published(plugin: PluginProcess) -> dict[str, dict[str, Any]]:
    slices = plugin.cluster.list_resource_slices(node_name=plugin.node_name)
    return {d["name"]: d for s in slices for d in s["spec"].get("devices", [])}


def wait_published(plugin: PluginProcess, present: set[str], absent: set[str]) -> None:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        names = set(published(plugin))
        if present <= names and not absent & names:
            return
        time.sleep(0.02)
    names = set(published(plugin))
    raise AssertionError(f"published {sorted(names)}; wanted {present} and not {absent}")


def on_nvidia(plugin: PluginProcess, index: int) -> bool:
    bdf = address(plugin, index)
    return pci(plugin).driver(bdf) == "nvidia" and pci(plugin).driver_override(bdf) == ""


def assert_nothing_left(plugin: PluginProcess) -> None:
    checkpoint = plugin.checkpoint()
    assert checkpoint is None or dict(checkpoint.claims) == {}
    assert plugin.cdi_files() == []
    for index in range(len(pci(plugin).gpus())):
        assert on_nvidia(plugin, index), index


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(shape=SHAPE, extra_args=PASSTHROUGH, mps_host=False) as process:
        yield process


def test_every_gpu_without_mig_devices_gets_nvidias_vfio_device(plugin: PluginProcess) -> None:
    devices = published(plugin)
    gpus = pci(plugin).gpus()
    vfio = {name: d for name, d in devices.items() if name.startswith("gpu-vfio-")}
    assert sorted(vfio) == sorted(f"gpu-vfio-{i}" for i in range(len(gpus)))
    first = vfio["gpu-vfio-0"]["attributes"]
    assert first["type"] == {"string": "vfio"}
    assert first["uuid"] == {"string": vfio_uuid(gpus[0].address)}
    assert first["vendorID"] == {"string": "0x10de"}
    assert first["deviceID"] == {"string": f"0x{gpus[0].device_id:04x}"}
    assert first["iommuFDEnabled"] == {"bool": True}
    assert first["resource.kubernetes.io/pciBusID"] == {"string": gpus[0].address}
    (whole,) = [
        d
        for d in devices.values()
        if d["attributes"]["type"] == {"string": "gpu"}
        and d["attributes"]["resource.kubernetes.io/pciBusID"] == first[PCI]
    ]  # the whole GPU is still offered next to it
    assert first["productName"] == whole["attributes"]["productName"]
    assert (
        first["resource.kubernetes.io/pcieRoot"]
        == whole["attributes"]["resource.kubernetes.io/pcieRoot"]
    )


def test_a_vfio_claim_binds_the_gpu_writes_cdi_and_unprepare_gives_it_back(
    plugin: PluginProcess,
) -> None:
    ref = store(plugin, 1, [("gpu", "gpu-vfio-0")], (vfio_config(),))
    bdf = address(plugin, 0)
    group = pci(plugin).iommu_group(bdf)

    result = plugin.client.prepare([ref])[ref.uid]

    assert result.error == ""
    assert pci(plugin).driver(bdf) == "vfio-pci"
    assert pci(plugin).group_node(group or -1).exists()
    spec = yaml.safe_load(plugin.cdi_spec_path(ref.uid).read_text())
    (device,) = spec["devices"]
    assert device["name"] == f"{ref.uid}-gpu-vfio-0"
    assert device["containerEdits"]["deviceNodes"] == [{"path": f"/dev/vfio/{group}"}]
    assert spec["containerEdits"] == {
        "env": ["NVIDIA_VISIBLE_DEVICES=void"],
        "deviceNodes": [{"path": "/dev/vfio/vfio"}],
    }  # no driver files, no /dev/nvidia* control nodes
    assert on_nvidia(plugin, 1)  # the other GPUs stay
    wait_published(plugin, {"gpu-vfio-0", "gpu-1"}, {"gpu-0"})

    unprepare(plugin, ref)

    assert_nothing_left(plugin)
    wait_published(plugin, {"gpu-0", "gpu-vfio-0"}, set())


def whole_gpu(plugin: PluginProcess, index: int) -> str:
    """The `gpu-<minor>` device of the GPU at PCI index `index`."""
    bdf = address(plugin, index)
    (gpu,) = [g for g in plugin.hardware().nvml.gpus() if g.pci_bus_id == bdf]
    return f"gpu-{gpu.minor}"


def test_the_iommufd_backend_gets_the_cdev_and_dev_iommu(plugin: PluginProcess) -> None:
    ref = store(plugin, 1, [("gpu", "gpu-vfio-2")], (vfio_config("PreferIommuFD"),))

    assert prepare_error(plugin, ref) == ""

    cdev = pci(plugin).iommufd_cdev(address(plugin, 2))
    assert cdev is not None
    assert pci(plugin).cdev_node(cdev).exists()
    spec = yaml.safe_load(plugin.cdi_spec_path(ref.uid).read_text())
    (device,) = spec["devices"]
    assert device["containerEdits"]["deviceNodes"] == [{"path": f"/dev/vfio/devices/{cdev}"}]
    assert spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/iommu"}]
    unprepare(plugin, ref)
    assert_nothing_left(plugin)


def test_prefer_iommufd_falls_back_to_the_group_on_a_kernel_without_it(
    plugin: PluginProcess,
) -> None:
    sim(plugin).set_iommufd(False)
    ref = store(plugin, 1, [("gpu", "gpu-vfio-2")], (vfio_config("PreferIommuFD"),))

    assert prepare_error(plugin, ref) == ""

    group = pci(plugin).iommu_group(address(plugin, 2))
    spec = yaml.safe_load(plugin.cdi_spec_path(ref.uid).read_text())
    assert spec["devices"][0]["containerEdits"]["deviceNodes"] == [{"path": f"/dev/vfio/{group}"}]
    assert spec["containerEdits"]["deviceNodes"] == [{"path": "/dev/vfio/vfio"}]
    unprepare(plugin, ref)
    assert_nothing_left(plugin)


def test_a_passed_through_gpu_is_refused_to_other_claims_in_any_other_form(
    plugin: PluginProcess,
) -> None:
    vm = store(plugin, 1, [("gpu", "gpu-vfio-0")])
    whole = whole_gpu(plugin, 0)
    container = store(plugin, 2, [("gpu", whole)])
    assert prepare_error(plugin, vm) == ""

    error = prepare_error(plugin, container)

    assert "ResourceClaim default/vm-2" in error
    assert f"device {whole!r}" in error
    assert "'gpu-vfio-0'" in error
    assert "claim default/vm-1" in error
    unprepare(plugin, vm)
    assert prepare_error(plugin, container) == ""  # back on nvidia: usable again
    wait_published(plugin, {whole}, {"gpu-vfio-0"})
    assert "claim default/vm-2" in prepare_error(plugin, vm)  # and refused
    assert on_nvidia(plugin, 0)
    unprepare(plugin, container, vm)
    assert_nothing_left(plugin)


def test_a_vfio_claim_next_to_a_gpu_claim_on_another_gpu(plugin: PluginProcess) -> None:
    vm = store(plugin, 1, [("gpu", "gpu-vfio-0")], (vfio_config(),))
    container = store(plugin, 2, [("gpu", whole_gpu(plugin, 1))])

    results = plugin.client.prepare([vm, container])

    assert {uid: r.error for uid, r in results.items()} == {vm.uid: "", container.uid: ""}
    assert pci(plugin).driver(address(plugin, 0)) == "vfio-pci"
    assert on_nvidia(plugin, 1)

    def device_nodes(uid: str) -> set[str]:
        ids = [i for device in results[uid].devices for i in device.cdi_device_ids]
        return {node["path"] for node in plugin.container_edits(ids).get("deviceNodes", [])}

    # The container claim keeps the driver's nodes (from the node's base spec); the VM gets
    # its VFIO node alone.
    assert "/dev/nvidiactl" in device_nodes(container.uid)
    assert "/dev/nvidiactl" not in device_nodes(vm.uid)
    assert any(path.startswith("/dev/vfio/") for path in device_nodes(vm.uid))
    unprepare(plugin, vm, container)
    assert_nothing_left(plugin)


def test_a_gpu_with_processes_is_never_bound_away(plugin: PluginProcess) -> None:
    gpu = next(g for g in plugin.hardware().nvml.gpus() if g.pci_bus_id == address(plugin, 3))
    sim(plugin).run_workload(gpu.uuid, "pod-1", sm_percent=10, memory_bytes=2**30)
    ref = store(plugin, 1, [("gpu", "gpu-vfio-3")])

    error = prepare_error(plugin, ref)

    assert "ResourceClaim default/vm-1" in error
    assert f"GPU {address(plugin, 3)}" in error
    assert "in use by 1 process(es)" in error
    assert on_nvidia(plugin, 3)
    assert_nothing_left(plugin)


def test_a_gpu_someone_else_bound_to_vfio_pci_is_never_touched(plugin: PluginProcess) -> None:
    bdf = address(plugin, 4)
    pci(plugin).unbind(bdf)
    pci(plugin).write_override(bdf, "vfio-pci")
    pci(plugin).bind(bdf, "vfio-pci")
    ref = store(plugin, 1, [("gpu", "gpu-vfio-4")])

    error = prepare_error(plugin, ref)

    assert f"GPU {bdf}" in error
    assert "bound to vfio-pci by someone else" in error
    assert pci(plugin).driver(bdf) == "vfio-pci"  # left as it was, override and all
    assert pci(plugin).driver_override(bdf) == "vfio-pci"
    checkpoint = plugin.checkpoint()
    assert checkpoint is None or ref.uid not in checkpoint.claims
    assert plugin.cdi_files() == []


def test_kubevirt_reads_the_pci_bus_id_from_the_device_metadata() -> None:
    with PluginProcess(
        shape=SHAPE, extra_args=[*PASSTHROUGH, "--device-metadata"], mps_host=False
    ) as plugin:
        ref = store(plugin, 1, [("gpu", "gpu-vfio-1")])
        (device,) = plugin.client.prepare([ref])[ref.uid].devices
        (metadata_file,) = plugin.kubelet_root.glob("**/dra-device-metadata/default_vm-1/*/*")
        first = json.loads(metadata_file.read_text().split("\n}\n")[0] + "\n}")
        (request,) = first["requests"]
        (entry,) = request["devices"]
        assert entry["name"] == "gpu-vfio-1"
        assert entry["attributes"][PCI] == {"string": address(plugin, 1)}
        assert entry["attributes"]["uuid"] == {"string": vfio_uuid(address(plugin, 1))}
        assert any(i.startswith("gpu.nvidia.com/metadata=") for i in device.cdi_device_ids)
        unprepare(plugin, ref)
        assert_nothing_left(plugin)


def test_the_vm_keeps_its_gpu_across_a_plugin_restart(plugin: PluginProcess) -> None:
    vm = store(plugin, 1, [("gpu", "gpu-vfio-5")])
    whole = whole_gpu(plugin, 5)
    (before,) = plugin.client.prepare([vm])[vm.uid].devices

    plugin.restart()

    assert pci(plugin).driver(address(plugin, 5)) == "vfio-pci"
    wait_published(plugin, {"gpu-vfio-5"}, {whole})  # still withdrawn after the restart
    (again,) = plugin.client.prepare([vm])[vm.uid].devices  # the kubelet asks again
    assert again == before
    unprepare(plugin, vm)
    assert_nothing_left(plugin)
    wait_published(plugin, {"gpu-vfio-5", whole}, set())


def test_the_plugin_refuses_to_start_without_an_iommu_or_vfio_pci(tmp_path: Path) -> None:
    options = PluginOptions(
        node_name="n",
        open_hardware=lambda: plugin_hardware,
        cluster="local:/nonexistent",
        kubelet_root=tmp_path,
        cdi_root=tmp_path,
        driver_name="gpu.nvidia.com",
        passthrough=True,
    )
    sys_root = tmp_path / "sys"
    plugin_hardware = dataclasses.replace(
        open_simulated("l4-node").hardware, pci=PciSysfs(sys_root, tmp_path / "dev")
    )
    with pytest.raises(PluginError, match=r"no IOMMU .*intel_iommu=on"):
        _passthrough_pci(options, plugin_hardware)
    (sys_root / "kernel/iommu_groups/0").mkdir(parents=True)
    with pytest.raises(PluginError, match=r"vfio-pci driver is not loaded.*modprobe vfio-pci"):
        _passthrough_pci(options, plugin_hardware)
    (sys_root / "bus/pci/drivers/vfio-pci").mkdir(parents=True)
    assert _passthrough_pci(options, plugin_hardware) is plugin_hardware.pci
    assert (
        _passthrough_pci(dataclasses.replace(options, passthrough=False), plugin_hardware) is None
    )


def test_a_refused_unbind_fails_the_claim_and_leaves_the_gpu_on_nvidia(
    plugin: PluginProcess,
) -> None:
    # A client NVML does not list (a graphics or monitoring client) holds the GPU open:
    # the kernel refuses the unbind with EBUSY.
    bdf = address(plugin, 6)
    gpu = next(g for g in plugin.hardware().nvml.gpus() if g.pci_bus_id == bdf)
    sim(plugin).set_busy(gpu.uuid, True)
    ref = store(plugin, 1, [("gpu", "gpu-vfio-6")])

    error = prepare_error(plugin, ref)

    assert f"ResourceClaim default/vm-1 (uid {ref.uid}): GPU {bdf}" in error
    assert "moving it to vfio-pci failed" in error
    assert "unbind failed: Device or resource busy" in error
    assert on_nvidia(plugin, 6)
    assert_nothing_left(plugin)
    sim(plugin).set_busy(gpu.uuid, False)
    assert prepare_error(plugin, ref) == ""  # the kubelet retries once the GPU is free
    unprepare(plugin, ref)
    assert_nothing_left(plugin)


def test_a_gpu_shared_by_claims_is_not_passed_through_until_the_last_share_goes() -> None:
    share = "aaaaaaaa-0000-4000-8000-000000000001"
    with PluginProcess(
        shape=SHAPE, extra_args=[*PASSTHROUGH, "--consumable-shares=2"], mps_host=False
    ) as plugin:
        whole = whole_gpu(plugin, 0)
        shared = store(
            plugin,
            1,
            [
                {
                    "request": "gpu",
                    "device": whole,
                    "shareID": share,
                    "consumedCapacity": {"memory": "0", "shares": "1"},
                }
            ],
        )
        vm = store(plugin, 2, [("gpu", "gpu-vfio-0")])
        assert prepare_error(plugin, shared) == ""
        wait_published(plugin, {whole}, {"gpu-vfio-0"})

        error = prepare_error(plugin, vm)

        assert "ResourceClaim default/vm-2" in error
        assert "claim default/vm-1" in error
        assert on_nvidia(plugin, 0)
        unprepare(plugin, shared)
        assert prepare_error(plugin, vm) == ""
        unprepare(plugin, vm)
        assert_nothing_left(plugin)
