"""A prepared claim's CDI spec carries the driver's user space from the driver root.

Whole GPU and MIG device, with nvcdi's hooks and with `--disable-cdi-hook
all`, for a GPU Operator root (host /run/nvidia/driver, read by the plugin
elsewhere): the device edits carry the GPU's nodes (and a whole GPU its DRM
nodes from sysfs), the spec-level edits add the mounts with host paths and
the hooks (in the node's base spec, which a container gets with the claim's
own spec exactly as the self-contained spec of before), the host's MPS pipe
directory is never mounted, and `cdiVersion` stays the minimum.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.claims.checkpoint_store import CheckpointStore
from dra_driver.container import injection
from dra_driver.container.cdi import ALL_HOOKS, minimum_cdi_version, validate_spec
from dra_driver.container.cdi_store import CdiStore
from dra_driver.container.driver_files import firmware_search_paths
from dra_driver.container.driver_root import DriverRoot, DriverUserSpace
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.hardware.simulated.sysfs import materialize_sysfs
from dra_driver.kube import yaml_io
from dra_driver.kube.local_store import LocalCluster
from dra_driver.node.devices import build_devices
from dra_driver.node.host import HostInfo
from dra_driver.node.inventory import discover
from kubelet_plugin.driver import GpuDriver
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.mig_lifecycle import MigLifecycle
from kubelet_plugin.service import ClaimRef
from tests.dra_driver.container.driver_roots import build_root
from tests.fakes import TEST_POOL, make_allocated_claim

HOOK = "/usr/local/nvidia/toolkit/nvidia-cdi-hook"
HOST_ROOT = "/run/nvidia/driver"
LIB = "/usr/lib/x86_64-linux-gnu"


def _prepare(
    tmp_path: Path, shape: str, hook: str | None, uid: str, mig: bool
) -> tuple[dict[str, Any], DriverUserSpace]:
    """Prepare one device; `hook` None disables every hook."""
    hardware = SimHardware(load_shape(shape), proc_root=tmp_path / "proc")
    if mig:
        gi = hardware.create_gpu_instance(1, 9, Placement(4, 4))  # 3g.20gb
        hardware.create_compute_instance(1, gi.id, 2)
    nvml = SimNvml(hardware)
    materialize_sysfs(tmp_path / "sys", [gpu.pci_bus_id for gpu in nvml.gpus()])
    devices = build_devices(discover(nvml))
    device = next(d for d in devices if (d.mig is not None) == mig)
    root = build_root(tmp_path, "gpu-operator", version=nvml.system().driver_version)
    space = DriverUserSpace(
        DriverRoot(
            host_path=HOST_ROOT,
            container_path=str(root.container_root),
            cdi_hook_path=hook,
            disabled_hooks=frozenset() if hook else frozenset({ALL_HOOKS}),
        ),
        firmware_paths=firmware_search_paths("6.8.0"),
    )
    cluster = LocalCluster(tmp_path / "cluster")
    checkpoints = CheckpointStore(tmp_path / "plugin/checkpoint.json", "boot")
    store = CdiStore(tmp_path / "cdi")
    driver = GpuDriver(
        driver_name=DEFAULT_DRIVER_NAME,
        pool_name=TEST_POOL,
        cluster=cluster,
        devices=devices,
        host=HostInfo(tmp_path / "proc", sys_root=tmp_path / "sys"),
        checkpoints=checkpoints,
        cdi_store=store,
        mig=MigLifecycle(nvml),
        gpu_locks=GpuLocks(tmp_path / "plugin/locks"),
        driver_edits=lambda: space.edits(nvml.system().driver_version),
        cdi_hooks=space.root.hooks,
    )
    claim = make_allocated_claim("job", uid=uid, results=[("gpu", device.name)])
    del claim["metadata"]["resourceVersion"]
    status = claim.pop("status")
    stored = cluster.put_resource_claim(claim)
    stored["status"] = status
    cluster.update_resource_claim_status(stored)
    result = driver.prepare([ClaimRef("default", uid, "job")])[uid]
    assert result.error == ""
    spec = store.read(uid)
    assert spec is not None
    validate_spec(spec)
    (base_name,) = store.base_names()
    base = yaml_io.load(store.base_path(base_name).read_text())
    validate_spec(base)
    # The claim's spec as it was before the node's base spec: the same devices, the base
    # spec's edits at spec level. A container gets exactly the same from both.
    whole = {**spec, "containerEdits": base["containerEdits"]}
    whole["cdiVersion"] = minimum_cdi_version(whole)
    validate_spec(whole)
    ids = [cdi_id for d in result.devices for cdi_id in d.cdi_device_ids]
    own = [cdi_id for cdi_id in ids if not cdi_id.startswith("k8s.gpu.nvidia.com/driver=")]
    assert ids == [f"k8s.gpu.nvidia.com/driver={base_name}", *own]
    assert injection.inject([spec, base], ids) == injection.inject([whole], own)
    return whole, space


@pytest.mark.parametrize(("shape", "mig"), [("dgx-h100", False), ("dgx-a100-40gb", True)])
@pytest.mark.parametrize("hook", [None, HOOK])
def test_claim_spec_carries_driver_mounts(
    tmp_path: Path, shape: str, mig: bool, hook: str | None
) -> None:
    spec, _space = _prepare(tmp_path, shape, hook, uid="claim-a1", mig=mig)
    version = load_shape(shape).driver_version

    (device,) = spec["devices"]
    nodes = [n["path"] for n in device["containerEdits"]["deviceNodes"]]
    assert nodes[0].startswith("/dev/nvidia")
    assert any("nvidia-caps" in n for n in nodes) == mig  # MIG keeps its capability nodes
    if mig:  # nvcdi's rule: the parent's node, then the GI and CI caps of mig-minors
        minors = HostInfo(tmp_path / "proc").mig_minors()
        caps = tmp_path / "proc/driver/nvidia/capabilities/gpu1/mig"
        # The 3g.20gb at 4:4 on GPU 1 (an A100 names it GI 1 or 2), and its first CI.
        gi, ci = next(g for g in (1, 2) if (caps / f"gi{g}").exists()), 0
        assert nodes == [
            "/dev/nvidia1",
            f"/dev/nvidia-caps/nvidia-cap{minors[f'gpu1/gi{gi}/access']}",
            f"/dev/nvidia-caps/nvidia-cap{minors[f'gpu1/gi{gi}/ci{ci}/access']}",
        ]
    else:  # the first GPU of the node: card1 and renderD128 in the simulated sysfs
        assert nodes[1:] == ["/dev/dri/card1", "/dev/dri/renderD128"]
        links = device["containerEdits"].get("hooks", [])
        assert [h["args"][1] for h in links] == (["create-symlinks"] if hook else [])
    common = spec["containerEdits"]
    assert [n["path"] for n in common["deviceNodes"]][:2] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert common["env"] == ["NVIDIA_VISIBLE_DEVICES=void", f"NVIDIA_CTK_LIBCUDA_DIR={LIB}"]
    mounts = {m["containerPath"]: m for m in common["mounts"]}
    libcuda = mounts[f"{LIB}/libcuda.so.{version}"]
    assert libcuda == {
        "hostPath": f"{HOST_ROOT}{LIB}/libcuda.so.{version}",
        "containerPath": f"{LIB}/libcuda.so.{version}",
        "options": ["ro", "nosuid", "nodev", "bind"],
    }
    assert mounts["/usr/bin/nvidia-smi"]["hostPath"] == f"{HOST_ROOT}/usr/bin/nvidia-smi"
    assert mounts["/etc/vulkan/icd.d/nvidia_icd.json"]["hostPath"] == (
        f"{HOST_ROOT}/etc/vulkan/icd.d/nvidia_icd.json"
    )
    assert "/etc/OpenCL/vendors/nvidia.icd" in mounts
    assert all(m["hostPath"].startswith(HOST_ROOT + "/") for m in common["mounts"])
    assert not [m for m in mounts if "nvidia-mps" in m]  # the root has /tmp/nvidia-mps
    soname_mounts = [m for m in mounts if m.startswith(LIB) and m.endswith(".so.1")]
    if hook is None:
        assert "hooks" not in common
        assert mounts[f"{LIB}/libcuda.so.1"]["hostPath"] == libcuda["hostPath"]
        assert f"{LIB}/libnvidia-ml.so.1" in soname_mounts
    else:
        assert [h["args"][1] for h in common["hooks"]] == [
            "create-symlinks",
            "create-symlinks",
            "enable-cuda-compat",
            "update-ldcache",
            "disable-device-node-modification",
            "update-application-profile",
        ]
        assert {h["path"] for h in common["hooks"]} == {HOOK}
        assert soname_mounts == []
    # Mount options and hooks need nothing above CDI 0.3.0.
    assert spec["cdiVersion"] == "0.3.0"


def test_prepare_does_not_walk_the_driver_root_again(tmp_path: Path) -> None:
    _spec, space = _prepare(tmp_path, "dgx-h100", None, uid="claim-b2", mig=False)
    assert space.discoveries == 1
