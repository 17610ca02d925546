"""A claim's CDI spec, built from its plan and what Prepare recorded."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.allocated import parse_allocated_claim
from dra_driver.claims.checkpoint import Checkpoint
from dra_driver.container import base_spec, injection
from dra_driver.container.cdi import CdiHooks, ContainerEdits
from dra_driver.container.claim_spec import build_claim_spec, common_edits
from dra_driver.container.driver_files import firmware_search_paths
from dra_driver.container.driver_root import DriverRoot, DriverUserSpace
from dra_driver.errors import CdiError
from dra_driver.node.devices import build_devices
from dra_driver.planning import ClaimPlan, plan_claim
from tests.dra_driver.container.driver_roots import VERSION, build_root
from tests.fakes import (
    TEST_POOL,
    a100_static_mig_inventory,
    dgx_h100_inventory,
    make_allocated_claim,
    make_opaque_config,
)

UID = "5e1f0c2a-7b3d-4e9a-8c61-0d2b4f6a8e13"


class Host:
    """The device numbers of a node's /proc and /sys, as `HostInfo` reads them."""

    def __init__(self, drm: dict[str, list[tuple[str, int, int]]] | None = None) -> None:
        self.drm = drm or {}

    def drm_nodes(self, pci_bus_id: str) -> list[tuple[str, int, int]]:
        return self.drm.get(pci_bus_id, [])

    def char_major(self, name: str) -> int:
        return {"nvidia-uvm": 510, "nvidia-caps": 236}[name]

    def mig_cap(self, gpu_minor: int, gi: int, ci: int | None = None) -> tuple[int, int]:
        return (gpu_minor * 100 + gi * 10 + (ci or 0), 0o444)


def _plan(devices: list[Any], results: list[Any], configs: Sequence[Any] = ()) -> ClaimPlan:
    claim = parse_allocated_claim(
        make_allocated_claim("c", uid=UID, results=results, configs=configs),
        driver=DEFAULT_DRIVER_NAME,
        expected_uid=UID,
    )
    return plan_claim(
        claim,
        pool_name=TEST_POOL,
        devices={d.name: d for d in devices},
        placed=Checkpoint(boot_id=""),
    )


def _nodes(spec: dict[str, Any], device: str) -> list[str]:
    (entry,) = [d for d in spec["devices"] if d["name"] == f"{UID}-{device}"]
    return [n["path"] for n in entry["containerEdits"]["deviceNodes"]]


def test_whole_gpus_and_static_mig_devices_get_their_nodes() -> None:
    plan = _plan(
        build_devices(a100_static_mig_inventory()),
        [("gpu", "gpu-1"), ("mig", "gpu-0-mig-3g20gb-9-4")],
    )
    spec = build_claim_spec(
        plan,
        plan.entry(),
        host=Host(),
        common=common_edits(Host(), ContainerEdits(env=("FROM_DRIVER=1",))),
    )

    assert _nodes(spec, "gpu-1") == ["/dev/nvidia1"]
    mig = plan.devices[1].device.mig
    assert mig is not None
    gi, ci = mig.gpu_instance_id, mig.compute_instance_id
    assert _nodes(spec, "gpu-0-mig-3g20gb-9-4") == [
        "/dev/nvidia0",
        f"/dev/nvidia-caps/nvidia-cap{gi * 10}",
        f"/dev/nvidia-caps/nvidia-cap{gi * 10 + ci}",
    ]
    assert "/dev/nvidia-uvm" in [n["path"] for n in spec["containerEdits"]["deviceNodes"]]
    assert "FROM_DRIVER=1" in spec["containerEdits"]["env"]


def test_an_mps_device_gets_the_daemons_directories_and_its_limits() -> None:
    config = make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 40}},
        }
    )
    plan = _plan(build_devices(dgx_h100_inventory()), [("gpu", "gpu-3")], [config])
    spec = build_claim_spec(plan, plan.entry(), host=Host())

    (device,) = spec["devices"]
    edits = device["containerEdits"]
    assert "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=40" in edits["env"]
    (record,) = plan.records
    assert record.mps is not None
    assert {m["hostPath"] for m in edits["mounts"]} == {
        f"{record.mps.daemon_dir}/shm",
        f"{record.mps.daemon_dir}/pipe",
    }

    without = dataclasses.replace(plan.entry(), devices=(dataclasses.replace(record, mps=None),))
    with pytest.raises(CdiError, match="no MPS daemon was recorded"):
        build_claim_spec(plan, without, host=Host())


def test_a_whole_gpu_gets_its_drm_nodes_and_a_compute_mig_device_does_not() -> None:
    devices = build_devices(a100_static_mig_inventory())
    plan = _plan(devices, [("gpu", "gpu-1"), ("mig", "gpu-0-mig-3g20gb-9-4")])
    by_name = {d.name: d for d in devices}
    gpu1, gpu0 = by_name["gpu-1"].gpu.pci_bus_id, by_name["gpu-0-mig-3g20gb-9-4"].gpu.pci_bus_id
    host = Host({gpu1: [("card2", 226, 2), ("renderD129", 226, 129)], gpu0: [("card1", 226, 1)]})
    spec = build_claim_spec(plan, plan.entry(), host=host, hooks=CdiHooks())

    assert _nodes(spec, "gpu-1") == ["/dev/nvidia1", "/dev/dri/card2", "/dev/dri/renderD129"]
    (entry,) = [d for d in spec["devices"] if d["name"] == f"{UID}-gpu-1"]
    (hook,) = entry["containerEdits"]["hooks"]
    assert hook["args"][1:] == [
        "create-symlinks",
        "--link",
        f"../card2::/dev/dri/by-path/pci-{gpu1}-card",
        "--link",
        f"../renderD129::/dev/dri/by-path/pci-{gpu1}-render",
    ]
    # A 3g.20gb has no graphics: no DRM node of its parent (nvcdi's "gfx" attribute rule).
    assert not [n for n in _nodes(spec, "gpu-0-mig-3g20gb-9-4") if n.startswith("/dev/dri")]


# ------------------------------------------------- the node's base spec changes nothing


def _driver_edits(tmp_path: Path) -> ContainerEdits:
    """The driver user space of a GPU Operator root (libraries, graphics, ICDs, firmware,
    binaries) with every nvcdi hook, as a node's plugin renders it."""
    root = build_root(tmp_path, "gpu-operator")
    space = DriverUserSpace(
        DriverRoot(host_path="/run/nvidia/driver", container_path=str(root.container_root)),
        firmware_paths=firmware_search_paths("6.8.0"),
    )
    edits = space.edits(VERSION)
    assert edits.hooks
    assert len(edits.mounts) > 40
    return edits


def _mps_config() -> Any:
    return make_opaque_config(
        {
            "apiVersion": "resource.nvidia.com/v1beta1",
            "kind": "GpuConfig",
            "sharing": {"strategy": "MPS", "mpsConfig": {"defaultActiveThreadPercentage": 40}},
        }
    )


CLAIM_KINDS = {
    "one whole GPU": ("h100", [("gpu", "gpu-1")], ()),
    "two whole GPUs, two requests": ("h100", [("a", "gpu-1"), ("b", "gpu-3")], ()),
    "static MIG and a whole GPU": (
        "a100",
        [("gpu", "gpu-1"), ("mig", "gpu-0-mig-3g20gb-9-4")],
        (),
    ),
    "an MPS share": ("h100", [("gpu", "gpu-3")], (_mps_config(),)),
}


@pytest.mark.parametrize("kind", list(CLAIM_KINDS))
def test_a_container_gets_from_base_and_claim_spec_what_the_whole_spec_gave(
    tmp_path: Path, kind: str
) -> None:
    """For each kind of claim, and each subset of its requests a container may name, a
    runtime injects the same edits (environment, device nodes, mounts, hooks, in order)
    from the claim's own spec plus the node's base spec as from the self-contained spec
    the plugin wrote before (all edits at its spec level)."""
    inventory, results, configs = CLAIM_KINDS[kind]
    shape = dgx_h100_inventory() if inventory == "h100" else a100_static_mig_inventory()
    devices = build_devices(shape)
    plan = _plan(devices, list(results), configs)
    by_name = {d.name: d for d in devices}
    host = Host(
        {
            by_name[r[1]].gpu.pci_bus_id: [("card1", 226, 1), ("renderD128", 226, 128)]
            for r in results
        }
    )
    hooks = CdiHooks()
    common = common_edits(host, _driver_edits(tmp_path))

    whole = build_claim_spec(plan, plan.entry(), host=host, common=common, hooks=hooks)
    own = build_claim_spec(plan, plan.entry(), host=host, hooks=hooks)
    name, base = base_spec.base_spec(common, owner="gpu.nvidia.com@/var/lib/kubelet/plugins")
    assert "containerEdits" not in own
    assert own["devices"] == whole["devices"]

    ids = {(r.device, r.request_names): r.cdi_device_ids for r in plan.entry().devices}
    for size in range(1, len(ids) + 1):
        for chosen in itertools.combinations(ids.values(), size):
            before = [i for device_ids in chosen for i in device_ids]
            after = [
                i for device_ids in chosen for i in (base_spec.qualified_id(name), *device_ids)
            ]
            expected = injection.inject([whole], before)
            assert injection.inject([own, base], after) == expected
            assert len(expected["mounts"]) > 40
            assert expected["hooks"]
