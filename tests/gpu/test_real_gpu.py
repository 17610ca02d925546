"""dra-gpu on a real NVIDIA GPU: inventory, CDI, Prepare/Unprepare, usage and MPS.

Read-only towards the GPUs' settings: nothing here changes MIG mode, compute
mode, time-slice or clocks, or resets a GPU. A whole-GPU claim is prepared
without any sharing config, so Prepare touches no GPU setting either. Skipped
with the reason where NVML does not load from the driver root (`conftest`).
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import time
import uuid as uuid_module
import xml.etree.ElementTree as ET
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.hardware.machine import Hardware
from dra_driver.hardware.nvml.interface import GpuInfo
from dra_driver.node.inventory import discover
from kubelet_plugin.mps_host_main import host_daemons
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim
from tests.gpu.real_root import driver_root

pytestmark = pytest.mark.gpu


def nvidia_smi_gpus(hardware: Hardware) -> list[ET.Element]:
    binaries = hardware.driver_binaries()
    assert binaries.nvidia_smi is not None, "the driver root has no nvidia-smi"
    out = subprocess.run(
        [str(binaries.nvidia_smi), "-q", "-x"],
        env={**os.environ, **binaries.env},
        capture_output=True,
        check=True,
        text=True,
    ).stdout
    return ET.fromstring(out).findall("gpu")


def mib(text: str | None) -> int:
    return int((text or "0 MiB").split()[0])


def whole_gpu(hardware: Hardware) -> GpuInfo:
    """A GPU without MIG (a whole-GPU claim and per-process sampling need one)."""
    for gpu in hardware.nvml.gpus():
        if not gpu.mig_enabled:
            return gpu
    pytest.fail(
        "every GPU has MIG enabled, and these tests never change MIG mode: the whole-GPU "
        "tests need a GPU with MIG off (an admin can turn MIG off on an idle GPU)"
    )


def test_inventory_matches_nvidia_smi(real: Hardware) -> None:
    inventory = {gpu.info.uuid: gpu.info for gpu in discover(real.nvml).gpus}
    smi = nvidia_smi_gpus(real)
    assert sorted(inventory) == sorted(g.findtext("uuid") or "" for g in smi)
    for element in smi:
        ours = inventory[element.findtext("uuid") or ""]
        assert ours.product_name == element.findtext("product_name")
        total = mib(element.findtext("fb_memory_usage/total"))
        reserved = mib(element.findtext("fb_memory_usage/reserved"))
        assert total <= ours.memory_bytes // 2**20 <= total + reserved + 1
        mig = element.findtext("mig_mode/current_mig")
        assert ours.mig_capable == (mig not in (None, "N/A"))
        if ours.mig_capable:
            assert ours.mig_enabled == (mig == "Enabled")
        assert ours.pci_bus_id == (element.get("id") or "").lower()[4:]


def test_dra_gpu_cdi_mounts_only_files_that_exist(real: Hardware) -> None:
    root = driver_root()
    out = io.StringIO()
    with redirect_stdout(out):
        assert main(["cdi", "--nvml", "real", "--nvidia-driver-root", root.host, "-o", "json"]) == 0
    doc = json.loads(out.getvalue())
    mounts = doc["containerEdits"]["mounts"]
    assert any(m["containerPath"].endswith(f"libcuda.so.{real.driver_version()}") for m in mounts)
    missing = [m["hostPath"] for m in mounts if not os.path.exists(m["hostPath"])]
    assert missing == []
    for device in doc["devices"]:
        for node in device["containerEdits"]["deviceNodes"]:
            rdev = os.stat(node["path"]).st_rdev
            assert (os.major(rdev), os.minor(rdev)) == (node["major"], node["minor"]), node


def test_prepare_and_unprepare_a_whole_gpu_through_the_socket(real: Hardware) -> None:
    gpu = whole_gpu(real)
    root = driver_root()
    args = ["--nvml=real", f"--nvidia-driver-root={root.host}"]
    with PluginProcess(extra_args=args) as plugin:
        uid = str(uuid_module.uuid4())
        device = f"gpu-{gpu.minor}"
        plugin.store_claim(make_allocated_claim("gpu-test", "default", uid, [("gpu", device)]))
        ref = ClaimRef(namespace="default", uid=uid, name="gpu-test")
        result = plugin.client.prepare([ref])[uid]
        assert result.error == ""
        spec = yaml.safe_load(plugin.cdi_spec_path(uid).read_text())
        # what the container gets: the node's base spec (driver files) and the claim's
        common = plugin.container_edits([i for d in result.devices for i in d.cdi_device_ids])
        assert [m["hostPath"] for m in common["mounts"] if not os.path.exists(m["hostPath"])] == []
        (entry,) = spec["devices"]
        nodes = entry["containerEdits"]["deviceNodes"]
        assert nodes[0]["path"] == f"/dev/nvidia{gpu.minor}"
        for node in nodes:
            rdev = os.stat(node["path"]).st_rdev
            assert (os.major(rdev), os.minor(rdev)) == (node["major"], node["minor"]), node
        assert plugin.client.unprepare([ref])[uid] == ""
        assert not plugin.cdi_spec_path(uid).exists()


CUDA_LOAD = textwrap.dedent(
    """
    import ctypes, sys, time
    cuda = ctypes.CDLL(sys.argv[1])
    dev, ctx, ptr = ctypes.c_int(), ctypes.c_void_p(), ctypes.c_uint64()
    assert cuda.cuInit(0) == 0
    assert cuda.cuDeviceGetByPCIBusId(ctypes.byref(dev), sys.argv[2].encode()) == 0
    assert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev) == 0
    assert cuda.cuMemAlloc_v2(ctypes.byref(ptr), 256 << 20) == 0
    print("ready", flush=True)
    time.sleep(float(sys.argv[3]))
    """
)


def test_usage_sampling_sees_a_real_cuda_process(real: Hardware) -> None:
    """The claim-status issue's per-process sampling (Nvml.running_compute_processes and
    Nvml.process_utilization) against a process holding a CUDA context and 256 MiB."""
    gpu = whole_gpu(real)
    files = real.driver.files(real.driver_version())
    libcuda = files.library("libcuda.so.1")
    assert libcuda is not None
    load = subprocess.Popen(
        [sys.executable, "-c", CUDA_LOAD, str(driver_root().in_container(libcuda.path)),
         gpu.pci_bus_id, "20"],
        stdout=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        assert load.stdout is not None
        assert load.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 10
        while True:
            seen = {p.pid: p for p in real.nvml.running_compute_processes(gpu.uuid)}
            if load.pid in seen or time.monotonic() > deadline:
                break
            time.sleep(0.5)
        assert load.pid in seen, f"pid {load.pid} not among {sorted(seen)}"
        used = seen[load.pid].used_memory_bytes
        assert used is None or used >= 256 << 20
        samples = real.nvml.process_utilization(gpu.uuid, 0)  # idle: may be absent, never made up
        assert all(0 <= s.sm_percent <= 100 for s in samples)
    finally:
        load.kill()
        load.wait(timeout=10)


def test_an_mps_control_daemon_starts_and_stops(real: Hardware, tmp_path: Path) -> None:
    gpu = whole_gpu(real)
    daemons = host_daemons(real, tmp_path / "mps")  # what the node's MPS host runs
    paths = daemons.paths(gpu.uuid)
    process = daemons.start(paths, multi_user=False)
    try:
        assert daemons.find(paths) == process
        assert daemons.running() == 1
    finally:
        daemons.stop(paths)
    assert daemons.find(paths) is None
    assert daemons.running() == 0
