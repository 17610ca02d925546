"""Fakes and builders shared by the tests, the demo and the benchmarks.

Several engineers add to this module; each keeps to a clearly headed section.
"""

from __future__ import annotations

import ctypes
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid as _uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import MappingProxyType, ModuleType
from typing import Any, Self, TypeVar, cast
from urllib.parse import parse_qs, unquote, urlsplit

import grpc
import pynvml as _real_pynvml

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver import cdi as cdi_module
from dra_driver import failpoints as failpoints_module
from dra_driver.checkpoint import Checkpoint
from dra_driver.checkpoint import decode as decode_checkpoint
from dra_driver.cluster import apiserver_rules as cluster_rules
from dra_driver.cluster.interface import API_VERSION, Cluster, ConflictError
from dra_driver.cluster.local import LocalCluster
from dra_driver.errors import CelError, ClusterError, NvmlError, PluginError
from dra_driver.inventory import GpuInventory, NodeInventory
from dra_driver.nvml import codes as nvml_codes
from dra_driver.nvml.backend import Hardware, open_hardware, sim_proc_root
from dra_driver.nvml.interface import (
    ComputeInstanceInfo,
    ComputeInstanceProfile,
    GpuInfo,
    GpuInstanceInfo,
    GpuInstanceProfile,
    MigDeviceInfo,
    Placement,
    SystemInfo,
)
from dra_driver.nvml.pci import normalize_pci_bus_id
from dra_driver.sim.hardware import SimHardware
from dra_driver.sim.models import GiProfileSpec
from dra_driver.sim.views import ComputeInstanceView, GpuFacts, GpuInstanceView
from kubelet_plugin.gen.dra.v1 import api_pb2 as dra_v1_pb2
from kubelet_plugin.gen.dra.v1 import api_pb2_grpc as dra_v1_pb2_grpc
from kubelet_plugin.gen.dra.v1beta1 import api_pb2 as dra_v1beta1_pb2
from kubelet_plugin.gen.dra.v1beta1 import api_pb2_grpc as dra_v1beta1_pb2_grpc
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2 as registration_pb2
from kubelet_plugin.gen.pluginregistration.v1 import api_pb2_grpc as registration_pb2_grpc
from kubelet_plugin.main import CHECKPOINT_FILE, plugin_data_dir
from kubelet_plugin.server import dra_socket_path, registration_socket_path
from kubelet_plugin.service import ClaimRef, PrepareResult, ResultDevice, UnprepareResult

# ---------------------------------------------------------------------------
# Inventory and device-model builders (GpuInfo, MIG profiles, MIG devices,
# node inventories). Numbers come from /work/shared/reference/gpu-mig-nvml.md.
# ---------------------------------------------------------------------------

_MIB = 2**20


def make_system_info(
    driver_version: str = "550.54.15", cuda_driver_version: int = 12040
) -> SystemInfo:
    """Driver-wide facts; defaults are an R550 driver (CUDA 12.4)."""
    return SystemInfo(driver_version=driver_version, cuda_driver_version=cuda_driver_version)


# model -> (nvmlDeviceGetName, PCI device id, architecture, compute capability, total MiB)
GPU_MODELS: dict[str, tuple[str, int, int, tuple[int, int], int]] = {
    "A30": ("NVIDIA A30", 0x20B7, 7, (8, 0), 24576),
    "A100-SXM4-40GB": ("NVIDIA A100-SXM4-40GB", 0x20B0, 7, (8, 0), 40960),
    "A100-PCIE-40GB": ("NVIDIA A100-PCIE-40GB", 0x20F1, 7, (8, 0), 40960),
    "A100-SXM4-80GB": ("NVIDIA A100-SXM4-80GB", 0x20B2, 7, (8, 0), 81920),
    "H100-SXM5-80GB": ("NVIDIA H100 80GB HBM3", 0x2330, 9, (9, 0), 81559),
    "H200-SXM": ("NVIDIA H200", 0x2335, 9, (9, 0), 143771),
    "B200": ("NVIDIA B200", 0x2901, 10, (10, 0), 183359),
}


def fake_gpu_uuid(seed: int) -> str:
    """A well-formed, deterministic `GPU-...` UUID."""
    return f"GPU-{_uuid.UUID(int=(0xA1 << 120) | seed)}"


def fake_mig_uuid(seed: int) -> str:
    """A well-formed, deterministic `MIG-...` UUID."""
    return f"MIG-{_uuid.UUID(int=(0xB2 << 120) | seed)}"


def make_gpu_info(
    *,
    model: str = "A100-SXM4-40GB",
    index: int = 0,
    minor: int | None = None,
    uuid: str | None = None,
    pci_bus_id: str | None = None,
    brand: str = "Nvidia",
    mig_capable: bool = True,
    mig_enabled: bool = False,
    mig_pending: bool | None = None,
    pcie_root: str | None = None,
    numa_node: int | None = None,
    memory_bytes: int | None = None,
) -> GpuInfo:
    """A GpuInfo for one of `GPU_MODELS`; minor, UUID and bus id default from `index`."""
    product, device_id, arch, cc, total_mib = GPU_MODELS[model]
    return GpuInfo(
        index=index,
        minor=index if minor is None else minor,
        uuid=uuid or fake_gpu_uuid(index),
        product_name=product,
        brand=brand,
        architecture_id=arch,
        cuda_compute_capability=cc,
        memory_bytes=total_mib * _MIB if memory_bytes is None else memory_bytes,
        pci_bus_id=pci_bus_id or f"0000:{0x10 + index:02x}:00.0",
        pci_device_id=(device_id << 16) | 0x10DE,
        mig_capable=mig_capable,
        mig_enabled=mig_enabled,
        mig_pending=mig_enabled if mig_pending is None else mig_pending,
        pcie_root=pcie_root,
        numa_node=numa_node,
    )


# (id, name, compute slices, instanceCount, memorySizeMB, (SM, CE, DEC, ENC, JPG, OFA),
#  placement starts, placement size) -- one `nvidia-smi mig -lgip/-lgipp` row
_ProfileRow = tuple[
    int, str, int, int, int, tuple[int, int, int, int, int, int], tuple[int, ...], int
]


def _profiles(rows: list[_ProfileRow]) -> tuple[GpuInstanceProfile, ...]:
    profiles = []
    for profile_id, name, slices, instances, mib, engines, starts, size in rows:
        sms, ce, dec, enc, jpg, ofa = engines
        profiles.append(
            GpuInstanceProfile(
                id=profile_id,
                name=name,
                slice_count=slices,
                instance_count=instances,
                memory_mib=mib,
                multiprocessors=sms,
                copy_engines=ce,
                decoders=dec,
                encoders=enc,
                jpeg_engines=jpg,
                ofa_engines=ofa,
                placements=tuple(Placement(start, size) for start in starts),
            )
        )
    return tuple(profiles)


def a100_40gb_gi_profiles() -> tuple[GpuInstanceProfile, ...]:
    """A100-40GB GI profiles (gpu-mig-nvml.md §2.2, memory set A)."""
    seven = (0, 1, 2, 3, 4, 5, 6)
    return _profiles(
        [
            (19, "1g.5gb", 1, 7, 4864, (14, 1, 0, 0, 0, 0), seven, 1),
            (20, "1g.5gb+me", 1, 1, 4864, (14, 1, 1, 0, 1, 1), seven, 1),
            (15, "1g.10gb", 1, 4, 9856, (14, 1, 1, 0, 0, 0), (0, 2, 4, 6), 2),
            (14, "2g.10gb", 2, 3, 9856, (28, 2, 1, 0, 0, 0), (0, 2, 4), 2),
            (9, "3g.20gb", 3, 2, 19968, (42, 3, 2, 0, 0, 0), (0, 4), 4),
            (5, "4g.20gb", 4, 1, 19968, (56, 4, 2, 0, 0, 0), (0,), 4),
            (0, "7g.40gb", 7, 1, 40192, (98, 7, 5, 0, 1, 1), (0,), 8),
        ]
    )


def h100_80gb_gi_profiles() -> tuple[GpuInstanceProfile, ...]:
    """H100 80GB SXM5 GI profiles (gpu-mig-nvml.md §2.4)."""
    seven = (0, 1, 2, 3, 4, 5, 6)
    return _profiles(
        [
            (19, "1g.10gb", 1, 7, 9984, (16, 1, 1, 0, 1, 0), seven, 1),
            (20, "1g.10gb+me", 1, 1, 9984, (16, 1, 1, 0, 1, 1), seven, 1),
            (15, "1g.20gb", 1, 4, 20096, (26, 1, 1, 0, 1, 0), (0, 2, 4, 6), 2),
            (14, "2g.20gb", 2, 3, 20096, (32, 2, 2, 0, 2, 0), (0, 2, 4), 2),
            (9, "3g.40gb", 3, 2, 40448, (60, 3, 3, 0, 3, 0), (0, 4), 4),
            (5, "4g.40gb", 4, 1, 40448, (64, 4, 4, 0, 4, 0), (0,), 4),
            (0, "7g.80gb", 7, 1, 81152, (132, 8, 7, 0, 7, 1), (0,), 8),
        ]
    )


# compute slices -> the CI profile (enum) that fills a GI of that many slices
_FULL_CI_PROFILE = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}


def make_mig_device(
    parent: GpuInfo,
    profile: GpuInstanceProfile,
    placement_start: int,
    *,
    gpu_instance_id: int,
    compute_instance_id: int = 0,
    ci_profile_id: int | None = None,
    multiprocessors: int | None = None,
    uuid: str | None = None,
) -> MigDeviceInfo:
    """A MIG device of `parent`; by default one CI filling the whole GI."""
    placement = next((p for p in profile.placements if p.start == placement_start), None)
    if placement is None:
        raise ValueError(f"profile {profile.name} has no placement starting at {placement_start}")
    return MigDeviceInfo(
        parent_uuid=parent.uuid,
        parent_minor=parent.minor,
        uuid=uuid
        or fake_mig_uuid((parent.minor << 16) | (gpu_instance_id << 8) | compute_instance_id),
        gpu_instance_id=gpu_instance_id,
        compute_instance_id=compute_instance_id,
        gi_profile=profile,
        ci_profile_id=_FULL_CI_PROFILE[profile.slice_count]
        if ci_profile_id is None
        else ci_profile_id,
        placement=placement,
        multiprocessors=profile.multiprocessors if multiprocessors is None else multiprocessors,
        memory_bytes=profile.memory_bytes,
    )


def make_gpu_inventory(
    info: GpuInfo,
    gi_profiles: tuple[GpuInstanceProfile, ...] = (),
    mig_devices: tuple[MigDeviceInfo, ...] = (),
) -> GpuInventory:
    return GpuInventory(info=info, gi_profiles=gi_profiles, mig_devices=mig_devices)


# DGX H100 GPU bus numbers, in the order `nvidia-smi` lists them.
DGX_H100_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)


def dgx_h100_inventory(system: SystemInfo | None = None) -> NodeInventory:
    """Eight H100 80GB HBM3, MIG-capable with MIG off, four per NUMA node."""
    gpus = []
    for index, bus in enumerate(DGX_H100_BUSES):
        info = make_gpu_info(
            model="H100-SXM5-80GB",
            index=index,
            pci_bus_id=f"0000:{bus:02x}:00.0",
            numa_node=index // 4,
        )
        gpus.append(make_gpu_inventory(info, h100_80gb_gi_profiles()))
    return NodeInventory(system=system or make_system_info("570.172.08", 12080), gpus=tuple(gpus))


def a100_static_mig_inventory() -> NodeInventory:
    """Three A100-SXM4-40GB: GPU 0 partitioned (3g.20gb@4, 2g.10gb@0, 1g.5gb@2,
    1g.5gb+me@3), GPU 1 with MIG off, GPU 2 with MIG on but no MIG devices."""
    profiles = {p.name: p for p in a100_40gb_gi_profiles()}
    gpu0 = make_gpu_info(index=0, mig_enabled=True, numa_node=0, pcie_root="pci0000:00")
    migs = (
        make_mig_device(gpu0, profiles["2g.10gb"], 0, gpu_instance_id=3),
        make_mig_device(gpu0, profiles["1g.5gb"], 2, gpu_instance_id=9),
        make_mig_device(gpu0, profiles["1g.5gb+me"], 3, gpu_instance_id=10),
        make_mig_device(gpu0, profiles["3g.20gb"], 4, gpu_instance_id=2),
    )
    gpu1 = make_gpu_info(index=1, numa_node=0, pcie_root="pci0000:00")
    gpu2 = make_gpu_info(index=2, mig_enabled=True, numa_node=1, pcie_root="pci0000:80")
    return NodeInventory(
        system=make_system_info(),
        gpus=(
            make_gpu_inventory(gpu0, tuple(profiles.values()), migs),
            make_gpu_inventory(gpu1, tuple(profiles.values())),
            make_gpu_inventory(gpu2, tuple(profiles.values())),
        ),
    )


class InventoryNvml:
    """A read-only `Nvml` serving a fixed `NodeInventory`, recording every call.

    GPUs come back in the order given (like NVML's index order), so tests can
    check that `discover` sorts them. Every mutating call raises NvmlError
    NOT_SUPPORTED: use `dra_driver.sim` for a node that changes.
    """

    def __init__(self, inventory: NodeInventory) -> None:
        self.inventory = inventory
        self.calls: list[tuple[str, str]] = []

    def _gpu(self, method: str, uuid: str) -> GpuInventory:
        self.calls.append((method, uuid))
        for gpu in self.inventory.gpus:
            if gpu.info.uuid == uuid:
                return gpu
        raise NvmlError(nvml_codes.ERROR_NOT_FOUND, f"GPU {uuid}: not found")

    def _refuse(self, what: str) -> NvmlError:
        return NvmlError(nvml_codes.ERROR_NOT_SUPPORTED, f"{what}: InventoryNvml is read-only")

    def system(self) -> SystemInfo:
        self.calls.append(("system", ""))
        return self.inventory.system

    def gpus(self) -> list[GpuInfo]:
        self.calls.append(("gpus", ""))
        return [gpu.info for gpu in self.inventory.gpus]

    def gpu(self, uuid: str) -> GpuInfo:
        return self._gpu("gpu", uuid).info

    def gpu_instance_profiles(self, uuid: str) -> list[GpuInstanceProfile]:
        return list(self._gpu("gpu_instance_profiles", uuid).gi_profiles)

    def compute_instance_profiles(
        self, uuid: str, gi_profile_id: int
    ) -> list[ComputeInstanceProfile]:
        self._gpu("compute_instance_profiles", uuid)
        self.calls[-1] = ("compute_instance_profiles", f"{uuid}/{gi_profile_id}")
        return []

    def gpu_instances(self, uuid: str) -> list[GpuInstanceInfo]:
        migs = self._gpu("gpu_instances", uuid).mig_devices
        found = {
            mig.gpu_instance_id: GpuInstanceInfo(
                id=mig.gpu_instance_id, profile_id=mig.gi_profile.id, placement=mig.placement
            )
            for mig in migs
        }
        return [found[key] for key in sorted(found)]

    def compute_instances(self, uuid: str, gpu_instance_id: int) -> list[ComputeInstanceInfo]:
        migs = self._gpu("compute_instances", uuid).mig_devices
        return [
            ComputeInstanceInfo(
                id=mig.compute_instance_id,
                gpu_instance_id=gpu_instance_id,
                profile_id=mig.ci_profile_id,
            )
            for mig in migs
            if mig.gpu_instance_id == gpu_instance_id
        ]

    def mig_devices(self, uuid: str) -> list[MigDeviceInfo]:
        return list(self._gpu("mig_devices", uuid).mig_devices)

    def set_mig_mode(self, uuid: str, enabled: bool) -> int:
        raise self._refuse(f"set MIG mode of {uuid} to {enabled}")

    def create_gpu_instance(
        self, uuid: str, profile_id: int, placement: Placement
    ) -> GpuInstanceInfo:
        raise self._refuse(f"create GI profile {profile_id} at {placement} on {uuid}")

    def create_compute_instance(
        self, uuid: str, gpu_instance_id: int, ci_profile_id: int
    ) -> MigDeviceInfo:
        raise self._refuse(f"create CI profile {ci_profile_id} in GI {gpu_instance_id} on {uuid}")

    def destroy_compute_instance(
        self, uuid: str, gpu_instance_id: int, compute_instance_id: int
    ) -> None:
        raise self._refuse(f"destroy CI {compute_instance_id} of GI {gpu_instance_id} on {uuid}")

    def destroy_gpu_instance(self, uuid: str, gpu_instance_id: int) -> None:
        raise self._refuse(f"destroy GI {gpu_instance_id} on {uuid}")


# ---------------------------------------------------------------------------
# Kubelet plugin gRPC: a kubelet-like client and a fake DraService
# (owner: kubelet-plugin gRPC; see kubelet_plugin/server.py).
# ---------------------------------------------------------------------------

_RECONNECT_OPTIONS = [
    # Reconnect fast after a plugin restart (gRPC's default backoff grows to 120 s).
    ("grpc.initial_reconnect_backoff_ms", 100),
    ("grpc.min_reconnect_backoff_ms", 100),
    ("grpc.max_reconnect_backoff_ms", 1000),
]
DRA_API_VERSIONS = ("v1", "v1beta1")


class KubeletClient:
    """Drives a kubelet plugin over its Unix sockets with the generated stubs, as the kubelet does.

    The registration socket is `<kubelet_root>/plugins_registry/<driver>-reg.sock`.
    DRA calls go to the endpoint the plugin reported in the last `get_info()` /
    `register()`, else to the default `<kubelet_root>/plugins/<driver>/dra.sock`.
    Every call has the kubelet's deadline (45 s unless `timeout` says otherwise);
    with `wait_for_ready` a call waits (within the deadline) for the plugin to
    come up instead of failing with UNAVAILABLE. gRPC failures are raised as
    `grpc.RpcError`, which is what the kubelet would see. Thread-safe.
    """

    def __init__(
        self,
        kubelet_root: Path,
        driver: str = DEFAULT_DRIVER_NAME,
        *,
        timeout: float = 45.0,
        wait_for_ready: bool = False,
    ) -> None:
        root = Path(os.path.abspath(kubelet_root))
        self.driver = driver
        self.registration_socket = registration_socket_path(root, driver)
        self.dra_socket = dra_socket_path(root, driver)
        self.timeout = timeout
        self.wait_for_ready = wait_for_ready
        self._lock = threading.Lock()
        self._channels: dict[Path, grpc.Channel] = {}

    def get_info(self) -> registration_pb2.PluginInfo:
        """Call Registration/GetInfo; remember the reported DRA endpoint."""
        stub = registration_pb2_grpc.RegistrationStub(self._channel(self.registration_socket))
        info = stub.GetInfo(
            registration_pb2.InfoRequest(),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )
        if info.endpoint:
            self.dra_socket = Path(info.endpoint)
        return info

    def notify_registration(self, ok: bool, error: str = "") -> None:
        """Call Registration/NotifyRegistrationStatus (raises grpc.RpcError if the plugin does)."""
        stub = registration_pb2_grpc.RegistrationStub(self._channel(self.registration_socket))
        stub.NotifyRegistrationStatus(
            registration_pb2.RegistrationStatus(plugin_registered=ok, error=error),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )

    def register(self) -> str:
        """The kubelet's registration: GetInfo, check it, notify the outcome.

        Returns the DRA API version the kubelet would use ("v1" or "v1beta1").
        On a mismatch it notifies the plugin of the failure and raises PluginError.
        """
        info = self.get_info()
        problem = ""
        if info.type != "DRAPlugin":
            problem = f"PluginInfo.type is {info.type!r}, want 'DRAPlugin'"
        elif info.name != self.driver:
            problem = f"PluginInfo.name is {info.name!r}, want {self.driver!r}"
        # Like kubelet 1.34+: the first entry of the plugin's list that the kubelet knows.
        known = [f"{v}.DRAPlugin" for v in DRA_API_VERSIONS]
        version = next(
            (v.removesuffix(".DRAPlugin") for v in info.supported_versions if v in known), ""
        )
        if not problem and not version:
            problem = f"none of the versions {list(info.supported_versions)} is supported"
        if problem:
            self.notify_registration(False, problem)
            raise PluginError(f"registration of {self.driver} rejected: {problem}")
        self.notify_registration(True)
        return version

    def prepare(self, claims: Sequence[ClaimRef], version: str = "v1") -> dict[str, PrepareResult]:
        """Call DRAPlugin/NodePrepareResources of `version`; results keyed by claim UID."""
        pb2, pb2_grpc = self._dra_modules(version)
        response = pb2_grpc.DRAPluginStub(self._channel(self.dra_socket)).NodePrepareResources(
            pb2.NodePrepareResourcesRequest(claims=self._claims(pb2, claims)),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )
        return {
            uid: PrepareResult(
                devices=tuple(
                    ResultDevice(
                        request_names=tuple(d.request_names),
                        pool_name=d.pool_name,
                        device_name=d.device_name,
                        cdi_device_ids=tuple(d.cdi_device_ids),
                        # share_id exists in v1 only
                        share_id=d.share_id if version == "v1" and d.HasField("share_id") else None,
                    )
                    for d in entry.devices
                ),
                error=entry.error,
            )
            for uid, entry in response.claims.items()
        }

    def unprepare(
        self, claims: Sequence[ClaimRef], version: str = "v1"
    ) -> dict[str, UnprepareResult]:
        """Call DRAPlugin/NodeUnprepareResources of `version`; results keyed by claim UID."""
        pb2, pb2_grpc = self._dra_modules(version)
        response = pb2_grpc.DRAPluginStub(self._channel(self.dra_socket)).NodeUnprepareResources(
            pb2.NodeUnprepareResourcesRequest(claims=self._claims(pb2, claims)),
            timeout=self.timeout,
            wait_for_ready=self.wait_for_ready,
        )
        return {uid: UnprepareResult(error=entry.error) for uid, entry in response.claims.items()}

    @staticmethod
    def _dra_modules(version: str) -> tuple[Any, Any]:
        """The generated message and stub modules of one DRA API version."""
        if version == "v1":
            return dra_v1_pb2, dra_v1_pb2_grpc
        if version == "v1beta1":
            return dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
        raise ValueError(f"unknown DRA API version {version!r}; use one of {DRA_API_VERSIONS}")

    @staticmethod
    def _claims(pb2: Any, claims: Sequence[ClaimRef]) -> list[Any]:
        return [pb2.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims]

    def close(self) -> None:
        """Close all channels; the client may be used again afterwards (it re-dials)."""
        with self._lock:
            channels, self._channels = self._channels, {}
        for channel in channels.values():
            channel.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def _channel(self, socket_path: Path) -> grpc.Channel:
        with self._lock:
            channel = self._channels.get(socket_path)
            if channel is None:
                channel = grpc.insecure_channel(f"unix:{socket_path}", options=_RECONNECT_OPTIONS)
                self._channels[socket_path] = channel
            return channel


def claim_ref(n: int, *, namespace: str = "default") -> ClaimRef:
    """A deterministic ClaimRef: `claim-<n>` with UID `uid-<n>`."""
    return ClaimRef(namespace=namespace, uid=f"uid-{n}", name=f"claim-{n}")


def fake_result_device(uid: str, index: int = 0) -> ResultDevice:
    """The device FakeDraService prepares for claim `uid` unless told otherwise."""
    return ResultDevice(
        request_names=("gpu",),
        pool_name="node-a",
        device_name=f"gpu-{index}",
        cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={uid}-gpu-{index}",),
    )


class FakeDraService:
    """A `DraService` that answers from tables and records every call.

    - `results[uid]` is returned for that claim; otherwise one `fake_result_device(uid)`.
    - `unprepare_errors[uid]` is the unprepare error for that claim (default: success).
    - `omit` lists UIDs the service leaves out of its answer (a buggy service).
    - `raises`, when set, is raised by every call (a crashing service).
    - `gates[uid]`: prepare of that claim waits until the event is set; `entered[uid]`
      is set when such a call has started waiting.
    - `calls` records `(operation, claims)` for every call, in order.
    """

    def __init__(self) -> None:
        self.results: dict[str, PrepareResult] = {}
        self.unprepare_errors: dict[str, str] = {}
        self.omit: set[str] = set()
        self.raises: Exception | None = None
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}
        self.calls: list[tuple[str, tuple[ClaimRef, ...]]] = []
        self._lock = threading.Lock()

    def gate(self, uid: str) -> threading.Event:
        """Make prepare of `uid` block until the returned event is set."""
        self.gates[uid] = threading.Event()
        self.entered[uid] = threading.Event()
        return self.gates[uid]

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        self._record("prepare", claims)
        for claim in claims:
            if claim.uid in self.gates:
                self.entered[claim.uid].set()
                self.gates[claim.uid].wait()
        return {
            c.uid: self.results.get(c.uid, PrepareResult(devices=(fake_result_device(c.uid),)))
            for c in claims
            if c.uid not in self.omit
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        self._record("unprepare", claims)
        return {
            c.uid: UnprepareResult(error=self.unprepare_errors.get(c.uid, ""))
            for c in claims
            if c.uid not in self.omit
        }

    def _record(self, operation: str, claims: Sequence[ClaimRef]) -> None:
        with self._lock:
            self.calls.append((operation, tuple(claims)))
        if self.raises is not None:
            raise self.raises


# ---------------------------------------------------------------------------
# ResourceClaim builders (claim parsing, Prepare/Unprepare, CDI, checkpoint).
# Claims are plain dicts shaped like `kubectl get resourceclaim -o json`.
# ---------------------------------------------------------------------------

TEST_DRIVER = DEFAULT_DRIVER_NAME
TEST_POOL = "sim-node"
TEST_CLAIM_UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"  # starts with a digit, like many UIDs


def make_opaque_config(
    parameters: Mapping[str, Any],
    *,
    requests: Sequence[str] = (),
    source: str = "FromClaim",
    driver: str = TEST_DRIVER,
) -> dict[str, Any]:
    """One `status.allocation.devices.config[]` entry with an opaque config."""
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": dict(parameters)},
    }
    if requests:
        entry["requests"] = list(requests)
    return entry


def make_allocated_claim(
    name: str = "claim-1",
    namespace: str = "default",
    uid: str = TEST_CLAIM_UID,
    results: Sequence[tuple[str, str] | Mapping[str, Any]] = (("gpu", "gpu-0"),),
    *,
    driver: str = TEST_DRIVER,
    pool: str = TEST_POOL,
    configs: Sequence[Mapping[str, Any]] = (),
    device_class: str = "gpu.nvidia.com",
) -> dict[str, Any]:
    """An allocated resource.k8s.io/v1 ResourceClaim as the API server returns it.

    `results` are `(request, device)` pairs for `driver`/`pool`, or dicts
    merged over those defaults for anything else (another driver,
    `adminAccess`, `shareID`, `consumedCapacity`, a "req/sub" request).
    `configs` are raw config entries (see `make_opaque_config`). The spec
    gets one request per base request name: `exactly`, or `firstAvailable`
    listing the subrequests the results name.
    """
    result_list: list[dict[str, Any]] = []
    for item in results:
        base = {"driver": driver, "pool": pool}
        if isinstance(item, tuple):
            request, device = item
            result_list.append({"request": request, **base, "device": device})
        else:
            result_list.append({**base, **item})
    # request -> subrequest ("" for none) -> device count
    counts: dict[str, dict[str, int]] = {}
    for r in result_list:
        base_request, _, sub = str(r.get("request", "")).partition("/")
        per_sub = counts.setdefault(base_request, {})
        per_sub[sub] = per_sub.get(sub, 0) + 1

    def spec_request(req: str, per_sub: dict[str, int]) -> dict[str, Any]:
        if "" in per_sub:
            return {"name": req, "exactly": {"deviceClassName": device_class, "count": per_sub[""]}}
        return {
            "name": req,
            "firstAvailable": [
                {"name": sub, "deviceClassName": device_class, "count": n}
                for sub, n in per_sub.items()
            ],
        }

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "1",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
        "spec": {
            "devices": {"requests": [spec_request(req, per_sub) for req, per_sub in counts.items()]}
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": result_list,
                    "config": [dict(c) for c in configs],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [pool]}
                            ]
                        }
                    ]
                },
            },
        },
    }


# ---------------------------------------------------------------------------
# Cluster fakes: `FakeApiServer`, a small kube-apiserver for resource.k8s.io/v1
# over real HTTP (so `KubeCluster` is tested with the real `kubernetes` client),
# and `RecordingCluster`, a `Cluster` wrapper that records writes (publisher tests).
# ---------------------------------------------------------------------------

_FAKE_API_KINDS = {
    kind.plural: kind
    for kind in (
        cluster_rules.RESOURCE_SLICE,
        cluster_rules.DEVICE_CLASS,
        cluster_rules.RESOURCE_CLAIM,
    )
}
_FAKE_API_PREFIX = ("apis", "resource.k8s.io", "v1")


class _ApiFailure(Exception):
    """An HTTP error answer of the fake apiserver (a `Status` object)."""

    def __init__(self, code: int, reason: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.reason = reason
        self.message = message


class FakeApiServer:
    """An in-memory kube-apiserver for the resource.k8s.io/v1 calls dra-gpu makes.

    It serves `/version` and, for resourceslices and deviceclasses (cluster
    scoped) and resourceclaims (namespaced, with `/status`), list (with
    `fieldSelector`, `limit`/`continue`), get, create, replace and delete. It
    listens on 127.0.0.1 on an ephemeral port, in a daemon thread. Writes
    follow `dra_driver.cluster.apiserver_rules`, as in kube-apiserver: new UIDs on
    create, resourceVersion preconditions (409 Conflict), 409 AlreadyExists,
    status only through `/status`. Errors are `Status` objects worded like the
    apiserver's, and list items carry no `apiVersion`/`kind`, as on a real
    apiserver. `requests` records `(method, path?query)` of every request.

        with FakeApiServer() as server:
            cluster = KubeCluster(server.api_client())
    """

    def __init__(self, *, version: tuple[str, str] = ("1", "34")) -> None:
        self.version = version
        self.requests: list[tuple[str, str]] = []
        self._objects: dict[tuple[str, str | None, str], dict[str, Any]] = {}
        self._resource_version = 0
        self._lock = threading.Lock()
        self._failures: list[tuple[str, int, str]] = []
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        """`http://127.0.0.1:<port>` of the running server."""
        if self._httpd is None:
            raise RuntimeError("FakeApiServer is not running")
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> FakeApiServer:
        """Start serving (returns self)."""
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out in two writes

            def log_message(self, format: str, *args: Any) -> None:
                """Keep test output quiet."""

            def do_GET(self) -> None:
                server._handle(self, "GET")

            def do_POST(self) -> None:
                server._handle(self, "POST")

            def do_PUT(self) -> None:
                server._handle(self, "PUT")

            def do_DELETE(self) -> None:
                server._handle(self, "DELETE")

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.05},
            name="fake-apiserver",
            daemon=True,
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the listening socket."""
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None
        if self._thread is not None:
            self._thread.join(timeout=5)
            self._thread = None

    def __enter__(self) -> FakeApiServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def api_client(self) -> Any:
        """A real `kubernetes.client.ApiClient` pointed at this server (close it after use)."""
        import kubernetes.client

        configuration = kubernetes.client.Configuration(host=self.url)
        return kubernetes.client.ApiClient(configuration)

    def fail_next(self, method: str, code: int, reason: str) -> None:
        """Answer the next `method` request with HTTP `code` and Status reason `reason`."""
        with self._lock:
            self._failures.append((method, code, reason))

    def objects(self, plural: str) -> list[dict[str, Any]]:
        """Copies of the stored objects of one resource (e.g. "resourceslices")."""
        with self._lock:
            return [
                json.loads(json.dumps(obj))
                for (kind, _ns, _name), obj in sorted(self._objects.items(), key=_fake_key)
                if kind == plural
            ]

    # Request handling

    def _handle(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        url = urlsplit(handler.path)
        self.requests.append((method, handler.path))
        length = int(handler.headers.get("Content-Length") or 0)
        raw_body = handler.rfile.read(length) if length else b""
        try:
            with self._lock:
                code, payload = self._route(method, url.path, parse_qs(url.query), raw_body)
        except _ApiFailure as failure:
            code = failure.code
            payload = {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Failure",
                "message": failure.message,
                "reason": failure.reason,
                "code": failure.code,
            }
        data = json.dumps(payload).encode()
        handler.send_response(code)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw_body: bytes
    ) -> tuple[int, dict[str, Any]]:
        for index, (fail_method, code, reason) in enumerate(self._failures):
            if fail_method == method:
                del self._failures[index]
                raise _ApiFailure(code, reason, f"injected failure: {reason}")
        parts = [unquote(part) for part in path.strip("/").split("/")]
        if parts == ["version"] and method == "GET":
            major, minor = self.version
            return 200, {
                "major": major,
                "minor": minor,
                "gitVersion": f"v{major}.{minor.rstrip('+')}.0",
                "platform": "linux/amd64",
            }
        if tuple(parts[:3]) != _FAKE_API_PREFIX:
            raise _ApiFailure(404, "NotFound", "the server could not find the requested resource")
        rest = parts[3:]
        namespace: str | None = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or rest[0] not in _FAKE_API_KINDS:
            raise _ApiFailure(404, "NotFound", "the server could not find the requested resource")
        kind = _FAKE_API_KINDS[rest[0]]
        if kind.namespaced != (namespace is not None) and not (
            kind.namespaced and len(rest) == 1 and method == "GET"
        ):
            raise _ApiFailure(404, "NotFound", "the server could not find the requested resource")
        body = self._decode_body(raw_body) if method in ("POST", "PUT") else None
        if len(rest) == 1:
            if method == "GET":
                return 200, self._list(kind, namespace, query)
            if method == "POST":
                return 201, self._create(kind, namespace, body)
        elif len(rest) == 2:
            name = rest[1]
            if method == "GET":
                return 200, self._get(kind, namespace, name)
            if method == "PUT":
                return 200, self._update(kind, namespace, name, body, status_only=False)
            if method == "DELETE":
                obj = self._get(kind, namespace, name)
                del self._objects[(kind.plural, namespace, name)]
                return 200, obj
        elif len(rest) == 3 and rest[2] == "status" and kind.has_status:
            name = rest[1]
            if method == "GET":
                return 200, self._get(kind, namespace, name)
            if method == "PUT":
                return 200, self._update(kind, namespace, name, body, status_only=True)
        raise _ApiFailure(405, "MethodNotAllowed", f"{method} is not supported on {path}")

    @staticmethod
    def _decode_body(raw_body: bytes) -> dict[str, Any]:
        try:
            body = json.loads(raw_body)
        except ValueError as exc:
            raise _ApiFailure(400, "BadRequest", f"the body is not JSON: {exc}") from exc
        if not isinstance(body, dict):
            raise _ApiFailure(400, "BadRequest", "the body is not a JSON object")
        return body

    def _get(
        self, kind: cluster_rules.ResourceKind, namespace: str | None, name: str
    ) -> dict[str, Any]:
        obj = self._objects.get((kind.plural, namespace, name))
        if obj is None:
            raise _ApiFailure(404, "NotFound", f'{kind.plural}.resource.k8s.io "{name}" not found')
        return obj

    def _list(
        self,
        kind: cluster_rules.ResourceKind,
        namespace: str | None,
        query: dict[str, list[str]],
    ) -> dict[str, Any]:
        try:
            wanted = cluster_rules.parse_field_selector(
                ",".join(query.get("fieldSelector", [])), kind
            )
        except ClusterError as exc:
            raise _ApiFailure(400, "BadRequest", str(exc)) from exc
        matching = [
            obj
            for (plural, ns, _name), obj in sorted(self._objects.items(), key=_fake_key)
            if plural == kind.plural
            and namespace in (None, ns)
            and cluster_rules.matches_field_selector(obj, wanted)
        ]
        start = int(query.get("continue", ["0"])[0])
        limit = int(query.get("limit", ["0"])[0]) or len(matching)
        page = matching[start : start + limit]
        metadata: dict[str, Any] = {"resourceVersion": str(self._resource_version)}
        if start + limit < len(matching):
            metadata["continue"] = str(start + limit)
        items = [{k: v for k, v in obj.items() if k not in ("apiVersion", "kind")} for obj in page]
        return {
            "kind": f"{kind.kind}List",
            "apiVersion": API_VERSION,
            "metadata": metadata,
            "items": items,
        }

    def _create(
        self, kind: cluster_rules.ResourceKind, namespace: str | None, body: Any
    ) -> dict[str, Any]:
        try:
            ns, name = cluster_rules.object_key(kind, body, namespace)
            if (kind.plural, ns, name) in self._objects:
                raise _ApiFailure(
                    409, "AlreadyExists", f'{kind.plural}.resource.k8s.io "{name}" already exists'
                )
            new = cluster_rules.prepare_create(kind, body, namespace=ns, keep_uid=False)
        except ClusterError as exc:
            raise _ApiFailure(422, "Invalid", str(exc)) from exc
        self._resource_version += 1
        new["metadata"]["resourceVersion"] = str(self._resource_version)
        self._objects[(kind.plural, ns, name)] = new
        return new

    def _update(
        self,
        kind: cluster_rules.ResourceKind,
        namespace: str | None,
        name: str,
        body: Any,
        *,
        status_only: bool,
    ) -> dict[str, Any]:
        stored = self._get(kind, namespace, name)
        try:
            body_ns, body_name = cluster_rules.object_key(kind, body, namespace)
            if body_name != name:
                raise ClusterError(
                    f"the name of the object ({body_name}) does not match the name on the URL "
                    f"({name})"
                )
            new = cluster_rules.prepare_update(kind, stored, body, status_only=status_only)
        except ConflictError as exc:
            raise _ApiFailure(
                409,
                "Conflict",
                f'Operation cannot be fulfilled on {kind.plural}.resource.k8s.io "{name}": '
                f"the object has been modified; please apply your changes to the latest "
                f"version and try again ({exc})",
            ) from exc
        except ClusterError as exc:
            raise _ApiFailure(422, "Invalid", str(exc)) from exc
        if new is None:
            return stored
        self._resource_version += 1
        new["metadata"]["resourceVersion"] = str(self._resource_version)
        self._objects[(kind.plural, body_ns, name)] = new
        return new


def _fake_key(item: tuple[tuple[str, str | None, str], Any]) -> tuple[str, str, str]:
    (plural, namespace, name), _obj = item
    return plural, namespace or "", name


class RecordingCluster:
    """A `Cluster` that forwards to `inner` and records every write call.

    `writes` lists `(method, object name)` in call order, so a test can assert
    that a publish wrote nothing. `before_next(method, hook)` runs `hook` once,
    just before the next call of `method` reaches `inner` (e.g. to change a
    slice behind the caller's back and provoke a real conflict).
    `after_each_write(hook)` runs `hook(method, name)` after every successful
    write (to check what a consumer could see at that moment). `rewrite`, if
    given, maps `(method, obj)` to the object actually forwarded (e.g. to drop
    fields the way an apiserver with a feature gate off does).
    """

    def __init__(
        self,
        inner: Cluster,
        *,
        rewrite: Callable[[str, dict[str, Any]], dict[str, Any]] | None = None,
    ) -> None:
        self.inner = inner
        self.writes: list[tuple[str, str]] = []
        self._hooks: dict[str, list[Callable[[], None]]] = {}
        self._after_write: list[Callable[[str, str], None]] = []
        self._rewrite = rewrite

    def before_next(self, method: str, hook: Callable[[], None]) -> None:
        """Run `hook` right before the next call of `method`."""
        self._hooks.setdefault(method, []).append(hook)

    def after_each_write(self, hook: Callable[[str, str], None]) -> None:
        """Run `hook(method, name)` after every write that succeeded."""
        self._after_write.append(hook)

    def _enter(self, method: str) -> None:
        hooks = self._hooks.get(method)
        if hooks:
            hooks.pop(0)()

    def _write(self, method: str, name: str, call: Callable[[], Any]) -> Any:
        self._enter(method)
        self.writes.append((method, name))
        result = call()
        for hook in self._after_write:
            hook(method, name)
        return result

    def _obj(self, method: str, obj: dict[str, Any]) -> dict[str, Any]:
        return self._rewrite(method, obj) if self._rewrite is not None else obj

    def get_resource_claim(self, namespace: str, name: str) -> dict[str, Any]:
        self._enter("get_resource_claim")
        return self.inner.get_resource_claim(namespace, name)

    def list_resource_claims(self, namespace: str | None = None) -> list[dict[str, Any]]:
        self._enter("list_resource_claims")
        return self.inner.list_resource_claims(namespace)

    def put_resource_claim(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "put_resource_claim"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.put_resource_claim(obj)
        )
        return result

    def update_resource_claim_status(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "update_resource_claim_status"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.update_resource_claim_status(obj)
        )
        return result

    def delete_resource_claim(self, namespace: str, name: str) -> None:
        self._write(
            "delete_resource_claim", name, lambda: self.inner.delete_resource_claim(namespace, name)
        )

    def list_resource_slices(
        self, *, driver: str | None = None, node_name: str | None = None
    ) -> list[dict[str, Any]]:
        self._enter("list_resource_slices")
        return self.inner.list_resource_slices(driver=driver, node_name=node_name)

    def create_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "create_resource_slice"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.create_resource_slice(obj)
        )
        return result

    def update_resource_slice(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "update_resource_slice"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.update_resource_slice(obj)
        )
        return result

    def delete_resource_slice(self, name: str) -> None:
        self._write("delete_resource_slice", name, lambda: self.inner.delete_resource_slice(name))

    def list_device_classes(self) -> list[dict[str, Any]]:
        self._enter("list_device_classes")
        return self.inner.list_device_classes()

    def put_device_class(self, obj: dict[str, Any]) -> dict[str, Any]:
        method = "put_device_class"
        obj = self._obj(method, obj)
        result: dict[str, Any] = self._write(
            method, obj["metadata"]["name"], lambda: self.inner.put_device_class(obj)
        )
        return result

    def server_version(self) -> tuple[int, int] | None:
        self._enter("server_version")
        return self.inner.server_version()


# ---------------------------------------------------------------------------
# Fake pynvml (owner: real NVML backend, dra_driver/nvml/real.py).
# `fake_pynvml(hw)` stands in for the `pynvml` module, backed by `SimHardware`:
# pynvml's function names and parameter names, its return types (str from the
# string getters, a list from GetMigMode, a c_uint from IsMigDeviceHandle), its
# ctypes structs (taken from the installed pynvml, so field names and its
# bytes-or-str decoding of char fields cannot drift), caller-
# allocated arrays, and NVMLError_* classes carrying `.value`. `RealNvml` runs
# on it unchanged, so the backend is tested without a GPU.
# ---------------------------------------------------------------------------

# nvml.h NVML_ERROR_FUNCTION_NOT_FOUND: pynvml raises it for an unknown `version` argument.
# Not in `codes` because no backend ever reports it.
_NVML_ERROR_FUNCTION_NOT_FOUND = 13
_FAKE_NVML_ERROR_STRINGS: Mapping[int, str] = MappingProxyType(
    {**nvml_codes.ERROR_STRINGS, _NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found"}
)
_NVML_INIT_FLAGS = 0x1 | 0x2  # NVML_INIT_FLAG_NO_GPUS | NVML_INIT_FLAG_NO_ATTACH
# ctypes types and constants the fake re-exports from the real module
_PYNVML_STRUCTS = (
    "c_nvmlDevice_t",
    "c_nvmlGpuInstance_t",
    "c_nvmlComputeInstance_t",
    "c_nvmlGpuInstancePlacement_t",
    "c_nvmlComputeInstancePlacement_t",
    "c_nvmlGpuInstanceProfileInfo_t",
    "c_nvmlGpuInstanceProfileInfo_v2_t",
    "c_nvmlComputeInstanceProfileInfo_t",
    "c_nvmlComputeInstanceProfileInfo_v2_t",
    "c_nvmlGpuInstanceInfo_t",
    "c_nvmlComputeInstanceInfo_t",
    "c_nvmlMemory_t",
    "c_nvmlMemory_v2_t",
    "nvmlPciInfo_t",
)


class FakeNVMLError(Exception):
    """The fake module's `NVMLError`: `.value` is the NVML return code, as in pynvml.

    Like pynvml's generated subclasses, `NVMLError_InUse()` needs no argument;
    the base class takes the code (`NVMLError(23)`).
    """

    fixed_value: int | None = None

    def __init__(self, value: int | None = None) -> None:
        code = self.fixed_value if self.fixed_value is not None else value
        if code is None:
            raise TypeError("NVMLError needs an NVML return code")
        super().__init__(code)
        self.value: int = code

    def __str__(self) -> str:
        return _FAKE_NVML_ERROR_STRINGS.get(self.value, f"NVML Error with code {self.value}")

    def __eq__(self, other: object) -> bool:
        return isinstance(other, FakeNVMLError) and self.value == other.value

    def __hash__(self) -> int:
        return hash(self.value)


def _nvml_error_class_name(constant: str) -> str:
    """pynvml's class name for `NVML_ERROR_<constant>`: "IN_USE" -> "NVMLError_InUse"."""
    return "NVMLError_" + "".join(part.capitalize() for part in constant.lower().split("_"))


def _fake_nvml_error_classes() -> dict[int, type[FakeNVMLError]]:
    constants: dict[str, int] = {
        name.removeprefix("ERROR_"): value
        for name, value in vars(nvml_codes).items()
        if name.startswith("ERROR_") and isinstance(value, int)
    }
    constants["FUNCTION_NOT_FOUND"] = _NVML_ERROR_FUNCTION_NOT_FOUND
    classes: dict[int, type[FakeNVMLError]] = {}
    for constant, value in constants.items():
        cls = type(_nvml_error_class_name(constant), (FakeNVMLError,), {"fixed_value": value})
        cls.__module__ = "pynvml"
        classes[value] = cls
    return classes


FAKE_NVML_ERRORS: Mapping[int, type[FakeNVMLError]] = MappingProxyType(_fake_nvml_error_classes())


def fake_nvml_error(code: int) -> FakeNVMLError:
    """The fake module's exception for an NVML return code (its NVMLError_* subclass)."""
    cls = FAKE_NVML_ERRORS.get(code)
    return cls() if cls is not None else FakeNVMLError(code)


@dataclass(frozen=True)
class _FakeHandle:
    """What one opaque pynvml handle stands for."""

    kind: str  # "gpu", "mig", "gi" or "ci"
    gpu: int  # NVML index of the (parent) GPU
    gi: int = -1
    ci: int = -1
    mig_uuid: str = ""  # MIG handles: a recreated CI is a new device


_AnyFn = TypeVar("_AnyFn", bound=Callable[..., Any])
_NO_INIT_NEEDED = frozenset({"nvmlInit", "nvmlInitWithFlags", "nvmlErrorString"})


def _pynvml_call(fn: _AnyFn) -> _AnyFn:
    """Count the call, refuse it before init, inject failures, and turn the
    simulator's NvmlError into the fake's NVMLError_* class."""
    name = fn.__name__

    @functools.wraps(fn)
    def call(self: FakePynvml, *args: Any, **kwargs: Any) -> Any:
        self.calls[name] += 1
        if name not in _NO_INIT_NEEDED and not self.initialized:
            raise fake_nvml_error(nvml_codes.ERROR_UNINITIALIZED)
        self._fail_if_injected(name)
        try:
            return fn(self, *args, **kwargs)
        except NvmlError as exc:
            raise fake_nvml_error(exc.code) from exc

    return cast(_AnyFn, call)


def _deref(ref: Any) -> Any:
    """The object behind `byref(x)` or `pointer(x)`, or `ref` itself."""
    if type(ref).__name__ == "CArgObject":
        return ref._obj
    if isinstance(ref, ctypes._Pointer):
        return ref.contents
    return ref


def _out_uint(ref: Any, function: str) -> ctypes.c_uint:
    target = _deref(ref)
    if not isinstance(target, ctypes.c_uint):
        raise NvmlError(
            nvml_codes.ERROR_INVALID_ARGUMENT, f"{function}: countRef must be byref(c_uint())"
        )
    return target


def _text_arg(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class FakePynvml(ModuleType):
    """A `pynvml` look-alike over `SimHardware` (see the section comment).

    Test hooks: `calls` counts calls per function name; `fail_next(name, code)`
    makes the next call(s) of a function raise that NVMLError (a GPU falling
    off the bus, a missing privilege). `initialized` is true between init and
    the matching shutdown (calls are ref-counted, like pynvml's).
    """

    def __init__(self, hw: SimHardware) -> None:
        super().__init__("pynvml", "Fake pynvml backed by dra_driver.sim.hardware.SimHardware")
        self.hw = hw
        self.calls: Counter[str] = Counter()
        self._failures: dict[str, list[int]] = {}
        self._refcount = 0
        self._lock = threading.Lock()
        self._tokens: dict[_FakeHandle, int] = {}
        self._handles: dict[int, _FakeHandle] = {}
        for name in _PYNVML_STRUCTS:
            setattr(self, name, getattr(_real_pynvml, name))
        for name in dir(_real_pynvml):
            if name.startswith("NVML_") and isinstance(getattr(_real_pynvml, name), int):
                setattr(self, name, getattr(_real_pynvml, name))
        self.NVMLError = FakeNVMLError
        for cls in FAKE_NVML_ERRORS.values():
            setattr(self, cls.__name__, cls)
        # pynvml's aliases for the versioned entry points
        self.nvmlDeviceGetGpuInstanceProfileInfoV = self.nvmlDeviceGetGpuInstanceProfileInfo
        self.nvmlDeviceGetGpuInstanceProfileInfoByIdV = self.nvmlDeviceGetGpuInstanceProfileInfoById
        self.nvmlGpuInstanceGetComputeInstanceProfileInfoV = (
            self.nvmlGpuInstanceGetComputeInstanceProfileInfo
        )

    def __dir__(self) -> list[str]:
        """Functions too, as `dir(pynvml)` lists them."""
        return sorted(set(super().__dir__()) | {n for n in dir(type(self)) if n.startswith("nvml")})

    # -- test hooks ----------------------------------------------------------

    @property
    def initialized(self) -> bool:
        return self._refcount > 0

    def fail_next(self, function: str, code: int, times: int = 1) -> None:
        """Make the next `times` calls of `function` raise the NVMLError for `code`."""
        if not callable(getattr(self, function, None)):
            raise AttributeError(f"fake pynvml has no function {function}")
        self._failures.setdefault(function, []).extend([code] * times)

    def _fail_if_injected(self, function: str) -> None:
        pending = self._failures.get(function)
        if pending:
            raise fake_nvml_error(pending.pop(0))

    def nvmlExceptionClass(self, nvmlErrorCode: int) -> type[FakeNVMLError]:
        if nvmlErrorCode not in FAKE_NVML_ERRORS:
            raise ValueError(f"nvmlErrorCode {nvmlErrorCode} is not valid")
        return FAKE_NVML_ERRORS[nvmlErrorCode]

    # -- handles -------------------------------------------------------------

    def _pointer(self, handle: _FakeHandle) -> Any:
        """An opaque pynvml handle of the right ctypes type; its address names `handle`."""
        with self._lock:
            token = self._tokens.get(handle)
            if token is None:
                token = 0x1000 + 0x10 * len(self._tokens)
                self._tokens[handle] = token
                self._handles[token] = handle
        ctype = {
            "gpu": _real_pynvml.c_nvmlDevice_t,
            "mig": _real_pynvml.c_nvmlDevice_t,
            "gi": _real_pynvml.c_nvmlGpuInstance_t,
            "ci": _real_pynvml.c_nvmlComputeInstance_t,
        }[handle.kind]
        return ctypes.cast(ctypes.c_void_p(token), ctype)

    def _resolve(self, pointer: Any, *kinds: str) -> _FakeHandle:
        handle = None
        if isinstance(pointer, ctypes._Pointer):
            address = ctypes.cast(pointer, ctypes.c_void_p).value
            handle = self._handles.get(address or 0)
        if handle is None or handle.kind not in kinds:
            raise NvmlError(
                nvml_codes.ERROR_INVALID_ARGUMENT,
                f"not a {' or '.join(kinds)} handle of this fake NVML: {pointer!r}",
            )
        return handle

    def _gpu(self, device: Any) -> GpuFacts:
        return self.hw.gpu(self._resolve(device, "gpu").gpu)

    def _mig(self, handle: _FakeHandle) -> ComputeInstanceView:
        try:
            return self.hw.find_mig_device(handle.mig_uuid)
        except NvmlError as exc:  # its compute instance was destroyed: the handle is stale
            raise NvmlError(nvml_codes.ERROR_INVALID_ARGUMENT, str(exc)) from exc

    def _device_pointer(self, index: int) -> Any:
        return self._pointer(_FakeHandle("gpu", index))

    def _gi_pointer(self, view: GpuInstanceView) -> Any:
        return self._pointer(_FakeHandle("gi", view.gpu_index, view.id))

    def _ci_pointer(self, view: ComputeInstanceView) -> Any:
        return self._pointer(_FakeHandle("ci", view.gpu_index, view.gpu_instance_id, view.id))

    def _mig_pointer(self, view: ComputeInstanceView) -> Any:
        handle = _FakeHandle("mig", view.gpu_index, view.gpu_instance_id, view.id, view.uuid)
        return self._pointer(handle)

    def _fill_array(self, function: str, ref: Any, count_ref: Any, items: list[Any]) -> int:
        """Fill a caller-allocated ctypes array (or only the count when `ref` is None)."""
        count = _out_uint(count_ref, function)
        if ref is None:
            count.value = len(items)
            return nvml_codes.SUCCESS
        target = _deref(ref)
        if isinstance(target, ctypes.Array) and len(target) < len(items):
            count.value = len(items)
            raise NvmlError(
                nvml_codes.ERROR_INSUFFICIENT_SIZE,
                f"{function}: array of {len(target)} for {len(items)} entries",
            )
        for i, item in enumerate(items):
            target[i] = item
        count.value = len(items)
        return nvml_codes.SUCCESS

    # -- library and system --------------------------------------------------

    @_pynvml_call
    def nvmlInitWithFlags(self, flags: int) -> None:
        if flags & ~_NVML_INIT_FLAGS:
            raise NvmlError(nvml_codes.ERROR_INVALID_ARGUMENT, f"unknown init flags {flags:#x}")
        with self._lock:
            self._refcount += 1

    @_pynvml_call
    def nvmlInit(self) -> None:
        self.nvmlInitWithFlags(0)

    @_pynvml_call
    def nvmlShutdown(self) -> None:
        with self._lock:
            self._refcount -= 1

    @_pynvml_call
    def nvmlErrorString(self, result: int) -> str:
        return _FAKE_NVML_ERROR_STRINGS.get(result, "Unknown Error")

    @_pynvml_call
    def nvmlSystemGetDriverVersion(self) -> str:
        return self.hw.driver_version()

    @_pynvml_call
    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return self.hw.cuda_driver_version()

    @_pynvml_call
    def nvmlSystemGetCudaDriverVersion_v2(self) -> int:
        return self.hw.cuda_driver_version()

    @_pynvml_call
    def nvmlSystemGetNVMLVersion(self) -> str:
        return f"{self.hw.cuda_driver_version() // 1000}.{self.hw.driver_version()}"

    # -- device handles ------------------------------------------------------

    @_pynvml_call
    def nvmlDeviceGetCount(self) -> int:
        return self.hw.gpu_count()

    @_pynvml_call
    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        return self._device_pointer(self.hw.gpu(int(index)).index)

    @_pynvml_call
    def nvmlDeviceGetHandleByUUID(self, uuid: str | bytes) -> Any:
        text = _text_arg(uuid)
        if text.startswith("MIG-"):
            return self._mig_pointer(self.hw.find_mig_device(text))
        return self._device_pointer(self.hw.index_of(text))

    @_pynvml_call
    def nvmlDeviceGetHandleByPciBusId(self, pciBusId: str | bytes) -> Any:
        wanted = normalize_pci_bus_id(_text_arg(pciBusId))
        for facts in self.hw.gpus():
            if facts.pci_bus_id == wanted:
                return self._device_pointer(facts.index)
        raise NvmlError(nvml_codes.ERROR_NOT_FOUND, f"no GPU at PCI bus id {wanted}")

    @_pynvml_call
    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._gpu(handle).index

    # -- device facts --------------------------------------------------------

    @_pynvml_call
    def nvmlDeviceGetName(self, handle: Any) -> str:
        h = self._resolve(handle, "gpu", "mig")
        product = self.hw.gpu(h.gpu).model.product_name
        if h.kind == "mig":
            return f"{product} MIG {self._mig(h).profile.name}"
        return product

    @_pynvml_call
    def nvmlDeviceGetUUID(self, handle: Any) -> str:
        h = self._resolve(handle, "gpu", "mig")
        return self._mig(h).uuid if h.kind == "mig" else self.hw.gpu(h.gpu).uuid

    @_pynvml_call
    def nvmlDeviceGetMinorNumber(self, handle: Any) -> int:
        return self._gpu(handle).minor

    @_pynvml_call
    def nvmlDeviceGetMemoryInfo(self, handle: Any, version: int | None = None) -> Any:
        h = self._resolve(handle, "gpu", "mig")
        if h.kind == "mig":
            total = self._mig(h).gi_profile.memory_mib * 2**20
        else:
            total = self.hw.gpu(h.gpu).model.memory_bytes
        if not version:
            return _real_pynvml.c_nvmlMemory_t(total=total, free=total, used=0)
        memory = _real_pynvml.c_nvmlMemory_v2_t(total=total, reserved=0, free=total, used=0)
        memory.version = version
        return memory

    @_pynvml_call
    def nvmlDeviceGetPciInfo_v3(self, handle: Any) -> Any:
        facts = self._gpu(handle)
        domain_text, bus_text, rest = facts.pci_bus_id.split(":")
        device_text, function_text = rest.split(".")
        domain, bus = int(domain_text, 16), int(bus_text, 16)
        device, function = int(device_text, 16), int(function_text, 16)
        info = _real_pynvml.nvmlPciInfo_t()
        info.busIdLegacy = f"{domain:04X}:{bus:02X}:{device:02X}.{function:X}".encode()
        info.domain, info.bus, info.device = domain, bus, device
        info.pciDeviceId = facts.model.pci_device_id
        info.pciSubSystemId = 0  # not modelled by the simulator
        info.busId = f"{domain:08X}:{bus:02X}:{device:02X}.{function:X}".encode()
        return info

    @_pynvml_call
    def nvmlDeviceGetPciInfo(self, handle: Any) -> Any:
        return self.nvmlDeviceGetPciInfo_v3(handle)

    @_pynvml_call
    def nvmlDeviceGetArchitecture(self, device: Any) -> int:
        return self._gpu(device).model.architecture_id

    @_pynvml_call
    def nvmlDeviceGetCudaComputeCapability(self, handle: Any) -> tuple[int, int]:
        major, minor = self._gpu(handle).model.compute_capability
        return (major, minor)

    @_pynvml_call
    def nvmlDeviceGetBrand(self, handle: Any) -> int:
        return self._gpu(handle).model.brand_id

    # -- MIG mode and GPU-instance profiles ----------------------------------

    @_pynvml_call
    def nvmlDeviceGetMigMode(self, device: Any) -> list[int]:
        current, pending = self.hw.mig_mode(self._resolve(device, "gpu").gpu)
        return [current, pending]

    @_pynvml_call
    def nvmlDeviceSetMigMode(self, device: Any, mode: int) -> int:
        index = self._resolve(device, "gpu").gpu
        if mode not in (0, 1):
            raise NvmlError(nvml_codes.ERROR_INVALID_ARGUMENT, f"MIG mode {mode} is not 0 or 1")
        return self.hw.set_mig_mode(index, bool(mode))

    def _gi_profile_info(self, index: int, spec: GiProfileSpec, version: int) -> Any:
        """v1 answers with MIG on or off (go-nvlib relies on it); the V call, like its
        nvml.h doc says, only with MIG on."""
        if version == 2:
            if not self.hw.mig_mode(index)[0]:
                raise NvmlError(nvml_codes.ERROR_NOT_SUPPORTED, f"GPU {index}: MIG mode is off")
            info = _real_pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
            info.name = f"MIG {spec.name}".encode()
        elif version == 1:
            info = _real_pynvml.c_nvmlGpuInstanceProfileInfo_t()
        else:
            raise NvmlError(_NVML_ERROR_FUNCTION_NOT_FOUND, f"profile info version {version}")
        info.id = spec.id
        info.isP2pSupported = 0
        info.sliceCount = spec.slice_count
        info.instanceCount = spec.instance_count
        info.multiprocessorCount = spec.multiprocessors
        info.copyEngineCount = spec.copy_engines
        info.decoderCount = spec.decoders
        info.encoderCount = spec.encoders
        info.jpegCount = spec.jpeg_engines
        info.ofaCount = spec.ofa_engines
        info.memorySizeMB = spec.memory_mib
        return info

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceProfileInfo(
        self, device: Any, profile: int, version: int = 2
    ) -> Any:
        index = self._resolve(device, "gpu").gpu
        return self._gi_profile_info(index, self.hw.gi_profile_by_enum(index, profile), version)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceProfileInfoById(self, device: Any, profileId: int) -> Any:
        index = self._resolve(device, "gpu").gpu
        return self._gi_profile_info(index, self.hw.gi_profile_by_id(index, profileId), 2)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, device: Any, profileId: int) -> int:
        return self.hw.gi_remaining_capacity(self._resolve(device, "gpu").gpu, profileId)

    @_pynvml_call
    def nvmlDeviceGetGpuInstancePossiblePlacements(
        self, device: Any, profileId: int, placementsRef: Any, countRef: Any
    ) -> int:
        placements = self.hw.possible_placements(self._resolve(device, "gpu").gpu, profileId)
        items = [
            _real_pynvml.c_nvmlGpuInstancePlacement_t(start=p.start, size=p.size)
            for p in placements
        ]
        return self._fill_array(
            "nvmlDeviceGetGpuInstancePossiblePlacements", placementsRef, countRef, items
        )

    # -- GPU instances -------------------------------------------------------

    @_pynvml_call
    def nvmlDeviceCreateGpuInstance(self, device: Any, profileId: int) -> Any:
        """Without a placement NVML picks one; the fake takes the first that fits."""
        index = self._resolve(device, "gpu").gpu
        last: NvmlError | None = None
        for placement in self.hw.possible_placements(index, profileId):
            try:
                return self._gi_pointer(self.hw.create_gpu_instance(index, profileId, placement))
            except NvmlError as exc:
                if exc.code != nvml_codes.ERROR_INSUFFICIENT_RESOURCES:
                    raise
                last = exc
        raise last or NvmlError(nvml_codes.ERROR_INSUFFICIENT_RESOURCES, "no placement")

    @_pynvml_call
    def nvmlDeviceCreateGpuInstanceWithPlacement(
        self, device: Any, profileId: int, placement: Any
    ) -> Any:
        index = self._resolve(device, "gpu").gpu
        wanted = _deref(placement)
        if not isinstance(wanted, _real_pynvml.c_nvmlGpuInstancePlacement_t):
            raise NvmlError(
                nvml_codes.ERROR_INVALID_ARGUMENT,
                "placement must be byref(c_nvmlGpuInstancePlacement_t)",
            )
        view = self.hw.create_gpu_instance(
            index, profileId, Placement(int(wanted.start), int(wanted.size))
        )
        return self._gi_pointer(view)

    @_pynvml_call
    def nvmlGpuInstanceDestroy(self, gpuInstance: Any) -> int:
        h = self._resolve(gpuInstance, "gi")
        self.hw.destroy_gpu_instance(h.gpu, h.gi)
        return nvml_codes.SUCCESS

    @_pynvml_call
    def nvmlDeviceGetGpuInstances(
        self, device: Any, profileId: int, gpuInstancesRef: Any, countRef: Any
    ) -> int:
        views = self.hw.gpu_instances(self._resolve(device, "gpu").gpu, profileId)
        items = [self._gi_pointer(v) for v in views]
        return self._fill_array("nvmlDeviceGetGpuInstances", gpuInstancesRef, countRef, items)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceById(self, device: Any, gpuInstanceId: int) -> Any:
        index = self._resolve(device, "gpu").gpu
        return self._gi_pointer(self.hw.gpu_instance(index, gpuInstanceId))

    @_pynvml_call
    def nvmlGpuInstanceGetInfo(self, gpuInstance: Any) -> Any:
        h = self._resolve(gpuInstance, "gi")
        view = self.hw.gpu_instance(h.gpu, h.gi)
        info = _real_pynvml.c_nvmlGpuInstanceInfo_t()
        info.device = self._device_pointer(view.gpu_index)
        info.id = view.id
        info.profileId = view.profile_id
        info.placement.start = view.placement.start
        info.placement.size = view.placement.size
        return info

    # -- compute instances ---------------------------------------------------

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(
        self, device: Any, profile: int, engProfile: int, version: int = 2
    ) -> Any:
        h = self._resolve(device, "gi")
        if engProfile != 0:  # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_COUNT is 1 (SHARED)
            raise NvmlError(
                nvml_codes.ERROR_INVALID_ARGUMENT, f"engine profile {engProfile} out of range"
            )
        spec = self.hw.ci_profile_by_enum(h.gpu, h.gi, profile)
        if version == 2:
            info = _real_pynvml.c_nvmlComputeInstanceProfileInfo_v2_t()
            info.name = f"MIG {spec.name}".encode()
        elif version == 1:
            info = _real_pynvml.c_nvmlComputeInstanceProfileInfo_t()
        else:
            raise NvmlError(_NVML_ERROR_FUNCTION_NOT_FOUND, f"profile info version {version}")
        info.id = spec.id
        info.sliceCount = spec.slice_count
        info.instanceCount = spec.instance_count
        info.multiprocessorCount = spec.multiprocessors
        info.sharedCopyEngineCount = spec.shared_copy_engines
        info.sharedDecoderCount = spec.shared_decoders
        info.sharedEncoderCount = spec.shared_encoders
        info.sharedJpegCount = spec.shared_jpeg_engines
        info.sharedOfaCount = spec.shared_ofa_engines
        return info

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstanceRemainingCapacity(
        self, gpuInstance: Any, profileId: int
    ) -> int:
        h = self._resolve(gpuInstance, "gi")
        return self.hw.ci_remaining_capacity(h.gpu, h.gi, profileId)

    @_pynvml_call
    def nvmlGpuInstanceCreateComputeInstance(self, gpuInstance: Any, profileId: int) -> Any:
        h = self._resolve(gpuInstance, "gi")
        return self._ci_pointer(self.hw.create_compute_instance(h.gpu, h.gi, profileId))

    @_pynvml_call
    def nvmlComputeInstanceDestroy(self, computeInstance: Any) -> int:
        h = self._resolve(computeInstance, "ci")
        self.hw.destroy_compute_instance(h.gpu, h.gi, h.ci)
        return nvml_codes.SUCCESS

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstances(
        self, gpuInstance: Any, profileId: int, computeInstancesRef: Any, countRef: Any
    ) -> int:
        h = self._resolve(gpuInstance, "gi")
        items = [self._ci_pointer(v) for v in self.hw.compute_instances(h.gpu, h.gi, profileId)]
        return self._fill_array(
            "nvmlGpuInstanceGetComputeInstances", computeInstancesRef, countRef, items
        )

    @_pynvml_call
    def nvmlGpuInstanceGetComputeInstanceById(
        self, gpuInstance: Any, computeInstanceId: int
    ) -> Any:
        h = self._resolve(gpuInstance, "gi")
        return self._ci_pointer(self.hw.compute_instance(h.gpu, h.gi, computeInstanceId))

    @_pynvml_call
    def nvmlComputeInstanceGetInfo_v2(self, computeInstance: Any) -> Any:
        h = self._resolve(computeInstance, "ci")
        view = self.hw.compute_instance(h.gpu, h.gi, h.ci)
        info = _real_pynvml.c_nvmlComputeInstanceInfo_t()
        info.device = self._mig_pointer(view)
        info.gpuInstance = self._pointer(_FakeHandle("gi", view.gpu_index, view.gpu_instance_id))
        info.id = view.id
        info.profileId = view.profile_id
        info.placement.start = view.placement.start
        info.placement.size = view.placement.size
        return info

    @_pynvml_call
    def nvmlComputeInstanceGetInfo(self, computeInstance: Any) -> Any:
        return self.nvmlComputeInstanceGetInfo_v2(computeInstance)

    # -- MIG device handles --------------------------------------------------

    @_pynvml_call
    def nvmlDeviceIsMigDeviceHandle(self, device: Any) -> ctypes.c_uint:
        """A c_uint, as pynvml returns it: `bool()` works, `== 1` does not."""
        return ctypes.c_uint(1 if self._resolve(device, "gpu", "mig").kind == "mig" else 0)

    @_pynvml_call
    def nvmlDeviceGetGpuInstanceId(self, device: Any) -> int:
        return self._mig(self._resolve(device, "mig")).gpu_instance_id

    @_pynvml_call
    def nvmlDeviceGetComputeInstanceId(self, device: Any) -> int:
        return self._mig(self._resolve(device, "mig")).id

    @_pynvml_call
    def nvmlDeviceGetMaxMigDeviceCount(self, device: Any) -> int:
        return self.hw.max_mig_devices(self._resolve(device, "gpu").gpu)

    @_pynvml_call
    def nvmlDeviceGetMigDeviceHandleByIndex(self, device: Any, index: int) -> Any:
        gpu = self._resolve(device, "gpu").gpu
        return self._mig_pointer(self.hw.mig_device_by_index(gpu, int(index)))

    @_pynvml_call
    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, migDevice: Any) -> Any:
        return self._device_pointer(self._mig(self._resolve(migDevice, "mig")).gpu_index)


def fake_pynvml(hw: SimHardware) -> FakePynvml:
    """A fresh, uninitialised fake `pynvml` module over `hw` (see `FakePynvml`)."""
    return FakePynvml(hw)


def fake_sysfs(hw: SimHardware, root: Path) -> Path:
    """A `/sys` tree with the PCI topology of `hw`'s GPUs, for `RealNvml(sysfs_root=...)`.

    `<root>/bus/pci/devices/<bdf>` links to `<root>/devices/<pcie root>/<bdf>`,
    which holds `numa_node`, as on Linux.
    """
    for facts in hw.gpus():
        device_dir = root / "devices" / facts.pcie_root / facts.pci_bus_id
        device_dir.mkdir(parents=True, exist_ok=True)
        (device_dir / "numa_node").write_text(f"{facts.numa_node}\n")
        link = root / "bus" / "pci" / "devices" / facts.pci_bus_id
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():
            link.symlink_to(device_dir)
    return root


# ---------------------------------------------------------------------------
# Plugin process: the real `dra-gpu kubelet-plugin` daemon in a child process
# on a simulated node, with a local directory "cluster" (owner: plugin
# end-to-end tests; used by the demo, the crash tests and the benchmarks).
# ---------------------------------------------------------------------------

PLUGIN_START_TIMEOUT_S = 30.0


class PluginProcess:
    """Runs `python -m dra_driver.cli kubelet-plugin` on a simulated node and talks to it.

    Everything lives in a short work directory under /tmp (Unix socket paths
    may be at most 107 bytes, pytest's tmp_path is too long):

        <work>/sim-state.json (+ .proc/)  the simulated hardware, shared across restarts
        <work>/cluster/                   the LocalCluster the plugin reads and publishes to
        <work>/kubelet/                   the kubelet root: sockets, checkpoint
        <work>/cdi/                       the CDI spec directory
        <work>/plugin.log                 the plugin's stdout and stderr, all runs appended

    `extra_args` are appended to the command line (e.g. a feature flag).
    `start()` returns once the registration socket of *this* run appears (the
    DRA socket is created before it), or raises `PluginError` with the tail of
    the log if the process exits first. `failpoints` are armed through
    `DRA_GPU_FAILPOINTS` (see `dra_driver.failpoints`). Use as a context
    manager: on exit the process is killed and the work directory removed
    (unless `keep`).

        with PluginProcess() as plugin:
            plugin.store_claim(make_allocated_claim())
            plugin.client.prepare([ClaimRef("default", TEST_CLAIM_UID, "claim-1")])
    """

    def __init__(
        self,
        *,
        node_name: str = TEST_POOL,
        shape: str = "dgx-h100",
        driver: str = DEFAULT_DRIVER_NAME,
        failpoints: Sequence[str] = (),
        publish_interval: float | None = None,
        extra_args: Sequence[str] = (),
        prefix: str = "dra-gpu-plugin-",
        keep: bool = False,
        client_timeout: float = 20.0,
        wait_for_ready: bool = False,
    ) -> None:
        self.node_name = node_name
        self.shape = shape
        self.driver = driver
        self.publish_interval = publish_interval
        self.extra_args = tuple(extra_args)
        self.keep = keep
        self.work = Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp"))
        self.sim_state = self.work / "sim-state.json"
        self.cluster_root = self.work / "cluster"
        self.kubelet_root = self.work / "kubelet"
        self.cdi_root = self.work / "cdi"
        self.log_path = self.work / "plugin.log"
        self.checkpoint_path = plugin_data_dir(self.kubelet_root, driver) / CHECKPOINT_FILE
        self.registration_socket = registration_socket_path(self.kubelet_root, driver)
        self.dra_socket = dra_socket_path(self.kubelet_root, driver)
        self.cluster = LocalCluster(self.cluster_root)
        self.client = KubeletClient(
            self.kubelet_root, driver, timeout=client_timeout, wait_for_ready=wait_for_ready
        )
        self.process: subprocess.Popen[bytes] | None = None
        self._failpoints = tuple(failpoints)
        self._runs = 0

    # -- life cycle ------------------------------------------------------------------

    @property
    def pid(self) -> int:
        """The pid of the running plugin."""
        return self._require_process().pid

    def start(
        self, failpoints: Sequence[str] | None = None, timeout: float = PLUGIN_START_TIMEOUT_S
    ) -> Self:
        """Start the plugin and wait until it serves; `failpoints` replaces the armed ones."""
        if self.process is not None and self.process.poll() is None:
            raise PluginError(f"plugin pid {self.process.pid} is still running; stop it first")
        if failpoints is not None:
            self._failpoints = tuple(failpoints)
        stale = _file_identity(self.registration_socket)
        self._runs += 1
        env = {k: v for k, v in os.environ.items() if k != failpoints_module.ENV_VAR}
        env["PYTHONUNBUFFERED"] = "1"
        if self._failpoints:
            env[failpoints_module.ENV_VAR] = ",".join(self._failpoints)
        args = [
            sys.executable,
            "-m",
            "dra_driver.cli",
            "kubelet-plugin",
            f"--node-name={self.node_name}",
            f"--driver-name={self.driver}",
            f"--nvml=sim:{self.shape}",
            f"--sim-state={self.sim_state}",
            f"--cluster=local:{self.cluster_root}",
            f"--kubelet-root={self.kubelet_root}",
            f"--cdi-root={self.cdi_root}",
        ]
        if self.publish_interval is not None:
            args.append(f"--publish-interval={self.publish_interval:g}")
        args.extend(self.extra_args)
        with self.log_path.open("ab") as log:
            log.write(
                f"--- run {self._runs}: failpoints {','.join(self._failpoints) or '-'}\n".encode()
            )
            log.flush()
            self.process = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env)

        def fresh_socket() -> bool:
            identity = _file_identity(self.registration_socket)
            return identity is not None and identity != stale

        self.wait_for(fresh_socket, "registration socket", timeout)
        return self

    def wait_for(
        self,
        condition: Callable[[], bool],
        what: str,
        timeout: float = PLUGIN_START_TIMEOUT_S,
    ) -> None:
        """Poll `condition` until true; PluginError with the log tail if the plugin exits first."""
        process = self._require_process()
        deadline = time.monotonic() + timeout
        while not condition():
            if process.poll() is not None:
                raise PluginError(
                    f"the plugin exited with {process.returncode} before its {what} appeared; "
                    f"log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(f"no {what} after {timeout:g} s; log:\n{self.log_tail()}")
            time.sleep(0.02)

    def wait_exit(self, timeout: float = 15.0) -> int:
        """Wait for the plugin to exit on its own; its return code (-9: killed by SIGKILL)."""
        return self._require_process().wait(timeout=timeout)

    def kill(self) -> int:
        """SIGKILL the plugin, as an OOM kill or a node crash would; returns the exit code."""
        self.client.close()
        process = self._require_process()
        if process.poll() is None:
            process.kill()
        return process.wait(timeout=15)

    def terminate(self, timeout: float = 15.0) -> int:
        """SIGTERM the plugin and wait for it to exit (a clean stop); returns the exit code."""
        self.client.close()
        process = self._require_process()
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
        return process.wait(timeout=timeout)

    def restart(self, failpoints: Sequence[str] | None = None) -> Self:
        """Stop the plugin if it runs (SIGTERM), then start it with `failpoints` (default: none).

        The client's channels are closed so the next call dials the new process.
        """
        if self.process is not None and self.process.poll() is None:
            self.terminate()
        self.client.close()
        return self.start(failpoints=failpoints or ())

    def reboot_node(self) -> str:
        """Simulate a node reboot; returns the new boot id.

        The plugin dies (SIGKILL) if it runs, and the simulated hardware gets
        a new boot id in its fake /proc (MIG instances are gone, as after a
        power cycle). Files under the work directory stay, as a persistent
        disk's would. Call `start()` to bring the plugin back.
        """
        if self.process is not None and self.process.poll() is None:
            self.kill()
        hardware = SimHardware(state_path=self.sim_state, proc_root=sim_proc_root(self.sim_state))
        hardware.reboot()
        return hardware.boot_id()

    def close(self) -> None:
        """Kill the plugin if it runs and remove the work directory (unless `keep`)."""
        self.client.close()
        if self.process is not None:
            if self.process.poll() is None:
                self.process.kill()
            self.process.wait(timeout=15)
        if not self.keep:
            shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- what the plugin left on disk ---------------------------------------------

    def store_claim(self, claim: Mapping[str, Any]) -> dict[str, Any]:
        """Store a claim as a real API server would get it: create, then write its status.

        A `status` (the allocation) goes through the status subresource; the
        metadata's resourceVersion is dropped for the create. Returns the stored object.
        """
        body = json.loads(json.dumps(claim))
        status = body.pop("status", None)
        body["metadata"].pop("resourceVersion", None)
        stored = self.cluster.put_resource_claim(body)
        if status is None:
            return stored
        stored["status"] = status
        return self.cluster.update_resource_claim_status(stored)

    def checkpoint(self) -> Checkpoint | None:
        """The checkpoint file as written (None when there is none); its boot id is not checked."""
        try:
            data = self.checkpoint_path.read_bytes()
        except FileNotFoundError:
            return None
        return decode_checkpoint(data, source=str(self.checkpoint_path))

    def cdi_spec_path(self, claim_uid: str) -> Path:
        """Where the plugin writes the CDI spec of `claim_uid`."""
        return self.cdi_root / cdi_module.spec_file_name(claim_uid)

    def cdi_files(self) -> list[str]:
        """Names of every file in the CDI directory (ours, temp files, anything)."""
        try:
            return sorted(p.name for p in self.cdi_root.iterdir())
        except FileNotFoundError:
            return []

    def rss_peak_kib(self) -> int:
        """The plugin's peak resident set size so far (VmHWM in /proc/<pid>/status), in KiB."""
        status = Path(f"/proc/{self.pid}/status").read_text(encoding="ascii")
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise PluginError(f"/proc/{self.pid}/status has no VmHWM line")

    def log_tail(self, chars: int = 3000) -> str:
        """The end of the plugin's log (all runs)."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    def _require_process(self) -> subprocess.Popen[bytes]:
        if self.process is None:
            raise PluginError("the plugin was never started")
        return self.process


def _file_identity(path: Path) -> tuple[int, int] | None:
    """Inode and change time of `path`: tells a new socket from a stale one at the same path."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return None
    return info.st_ino, info.st_ctime_ns


# ---------------------------------------------------------------------------
# Allocator builders (owner: structured allocator, dra_driver/allocator/):
# ResourceSlices, DeviceClasses and ResourceClaims as the resource.k8s.io/v1
# dicts `dra_driver.allocator.Allocator` consumes, plus a selector evaluator
# backed by Python predicates for tests that are not about CEL.
# ---------------------------------------------------------------------------


def make_api_attribute(value: Any) -> dict[str, Any]:
    """A DeviceAttribute union from a Python value: bool, int, str, or ("version", "1.2.3")."""
    if isinstance(value, tuple) and len(value) == 2 and value[0] == "version":
        return {"version": value[1]}
    if isinstance(value, bool):
        return {"bool": value}
    if isinstance(value, int):
        return {"int": value}
    return {"string": str(value)}


def make_slice_device(
    name: str,
    *,
    attributes: Mapping[str, Any] | None = None,
    capacity: Mapping[str, str] | None = None,
    consumes: Mapping[str, Mapping[str, str]] | None = None,
    taints: Sequence[Mapping[str, str]] = (),
    allow_multiple_allocations: bool = False,
) -> dict[str, Any]:
    """A ResourceSlice device; `consumes` maps counter set -> counter -> quantity."""
    device: dict[str, Any] = {"name": name}
    if attributes:
        device["attributes"] = {k: make_api_attribute(v) for k, v in attributes.items()}
    if capacity:
        device["capacity"] = {k: {"value": v} for k, v in capacity.items()}
    if consumes:
        device["consumesCounters"] = [
            {"counterSet": set_name, "counters": {k: {"value": v} for k, v in counters.items()}}
            for set_name, counters in consumes.items()
        ]
    if taints:
        device["taints"] = [dict(taint) for taint in taints]
    if allow_multiple_allocations:
        device["allowMultipleAllocations"] = True
    return device


def make_resource_slice(
    name: str,
    *,
    driver: str = DEFAULT_DRIVER_NAME,
    pool: str | None = None,
    node: str | None = None,
    devices: Sequence[Mapping[str, Any]] = (),
    generation: int = 1,
    slice_count: int = 1,
    shared_counters: Mapping[str, Mapping[str, str]] | None = None,
) -> dict[str, Any]:
    """A ResourceSlice for one node (or, with `node=None`, for all nodes)."""
    spec: dict[str, Any] = {
        "driver": driver,
        "pool": {
            "name": pool or node or name,
            "generation": generation,
            "resourceSliceCount": slice_count,
        },
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["allNodes"] = True
    if devices:
        spec["devices"] = [dict(device) for device in devices]
    if shared_counters:
        spec["sharedCounters"] = [
            {"name": set_name, "counters": {k: {"value": v} for k, v in counters.items()}}
            for set_name, counters in shared_counters.items()
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_device_class(
    name: str, *expressions: str, config: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """A DeviceClass with CEL selectors (and optional `opaque` config entries)."""
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": e}} for e in expressions]}
    if config:
        spec["config"] = [dict(entry) for entry in config]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def make_device_request(
    name: str,
    device_class: str,
    *,
    count: int | None = 1,
    selectors: Sequence[str] = (),
    allocation_mode: str | None = None,
    admin_access: bool | None = None,
    tolerations: Sequence[Mapping[str, Any]] = (),
    capacity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A DeviceRequest with `exactly`."""
    exactly: dict[str, Any] = {"deviceClassName": device_class}
    if allocation_mode:
        exactly["allocationMode"] = allocation_mode
    if count is not None and allocation_mode != "All":
        exactly["count"] = count
    if selectors:
        exactly["selectors"] = [{"cel": {"expression": e}} for e in selectors]
    if admin_access is not None:
        exactly["adminAccess"] = admin_access
    if tolerations:
        exactly["tolerations"] = [dict(t) for t in tolerations]
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    return {"name": name, "exactly": exactly}


def make_resource_claim(
    name: str,
    *requests: Mapping[str, Any],
    namespace: str = "default",
    constraints: Sequence[Mapping[str, Any]] = (),
    config: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """A ResourceClaim (no status) with the given device requests."""
    devices: dict[str, Any] = {"requests": [dict(r) for r in requests]}
    if constraints:
        devices["constraints"] = [dict(c) for c in constraints]
    if config:
        devices["config"] = [dict(c) for c in config]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": devices},
    }


class PythonSelectors:
    """A selector evaluator for `Allocator(evaluate=...)` that maps expression strings
    to Python predicates over the device view; unknown expressions raise CelError."""

    def __init__(self, predicates: Mapping[str, Callable[[Any], bool]]) -> None:
        self.predicates = dict(predicates)
        self.calls = 0

    def __call__(self, expression: str, device: Any) -> bool:
        self.calls += 1
        predicate = self.predicates.get(expression)
        if predicate is None:
            raise CelError(f"undeclared reference in {expression!r}", expression=expression)
        return predicate(device)


# ---------------------------------------------------------------------------
# Dynamic MIG (owner: dynamic-MIG acceptance tests; used by the MIG plugin and
# crash tests and the mig-parallel benchmark): what MIG instances a plugin's
# simulated node holds, and claims that ask for MIG profiles by attribute.
# ---------------------------------------------------------------------------

MIG_DEVICE_CLASS = "mig.nvidia.com"
PARENT_UUID_ATTRIBUTE = f"{DEFAULT_DRIVER_NAME}/parentUUID"


@dataclass(frozen=True)
class LiveMigInstance:
    """A GPU instance that exists on the hardware, with its compute instances.

    `compute_instances` holds `(CI id, CI profile id, MIG UUID)` per CI.
    """

    parent_uuid: str
    gi_id: int
    profile_id: int
    placement: Placement
    compute_instances: tuple[tuple[int, int, str], ...]


def plugin_hardware(plugin: PluginProcess) -> Hardware:
    """The simulated node of `plugin`, shared via its state file: what
    `dra-gpu mig status --sim-state` would open (`.sim` is always set)."""
    return open_hardware(
        f"sim:{plugin.shape}", sim_state=plugin.sim_state, node_name=plugin.node_name
    )


def plugin_sim(plugin: PluginProcess) -> SimHardware:
    """The `SimHardware` of `plugin_hardware(plugin)`, to read or change the node directly."""
    sim = plugin_hardware(plugin).sim
    if sim is None:
        raise PluginError(f"plugin on {plugin.shape} has no simulated hardware")
    return sim


def live_mig_instances(hardware: SimHardware) -> dict[tuple[str, int], LiveMigInstance]:
    """Every GPU instance on the node, keyed by (parent UUID, GI id), read in one snapshot."""
    snapshot = hardware.snapshot()
    found: dict[tuple[str, int], LiveMigInstance] = {}
    for gi in snapshot.gpu_instances:
        cis = tuple(
            sorted(
                (ci.id, ci.profile_id, ci.uuid)
                for ci in snapshot.compute_instances
                if ci.gpu_uuid == gi.gpu_uuid and ci.gpu_instance_id == gi.id
            )
        )
        found[(gi.gpu_uuid, gi.id)] = LiveMigInstance(
            gi.gpu_uuid, gi.id, gi.profile_id, gi.placement, cis
        )
    return found


def make_mig_profile_claim(
    name: str,
    uid: str,
    profiles: Sequence[str],
    *,
    namespace: str = "default",
    same_gpu: bool = True,
) -> dict[str, Any]:
    """An unallocated ResourceClaim with one `mig.nvidia.com` request per entry of
    `profiles` (named `mig-<i>`), each selecting
    `device.attributes['gpu.nvidia.com'].profile == '<profile>'`; with `same_gpu`
    a `matchAttribute: gpu.nvidia.com/parentUUID` constraint puts them on one GPU."""
    requests = [
        {
            "name": f"mig-{index}",
            "exactly": {
                "deviceClassName": MIG_DEVICE_CLASS,
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.attributes['{DEFAULT_DRIVER_NAME}']"
                            f".profile == '{profile}'"
                        }
                    }
                ],
            },
        }
        for index, profile in enumerate(profiles)
    ]
    devices: dict[str, Any] = {"requests": requests}
    if same_gpu:
        devices["constraints"] = [{"matchAttribute": PARENT_UUID_ATTRIBUTE}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": devices},
    }


# ---------------------------------------------------------------------------
# Simulator fakes (owner: `dra-gpu simulate`/`explain`, controller/simulate/):
# `FakeClusterApiServer`, the fake apiserver plus the read-only core objects
# `explain --cluster kube` reads (Nodes, Pods, ResourceClaimTemplates).
# ---------------------------------------------------------------------------


class FakeClusterApiServer(FakeApiServer):
    """`FakeApiServer` that also answers GETs for Nodes (list), Pods and
    ResourceClaimTemplates (get), which tests add with `add_object`."""

    def __init__(self, *, version: tuple[str, str] = ("1", "34")) -> None:
        super().__init__(version=version)
        self._core: dict[tuple[str, str, str], dict[str, Any]] = {}

    def add_object(self, obj: Mapping[str, Any]) -> None:
        """Store a Node, Pod or ResourceClaimTemplate (as the apiserver would return it)."""
        meta = obj.get("metadata") or {}
        key = (str(obj["kind"]), str(meta.get("namespace") or ""), str(meta["name"]))
        with self._lock:
            self._core[key] = json.loads(json.dumps(obj))

    def _route(
        self, method: str, path: str, query: dict[str, list[str]], raw_body: bytes
    ) -> tuple[int, dict[str, Any]]:
        parts = [unquote(part) for part in path.strip("/").split("/")]
        if method == "GET" and parts == ["api", "v1", "nodes"]:
            items = [obj for (kind, _, _), obj in sorted(self._core.items()) if kind == "Node"]
            return 200, {"kind": "NodeList", "apiVersion": "v1", "metadata": {}, "items": items}
        found: tuple[str, str, str] | None = None
        if (
            method == "GET"
            and len(parts) == 6
            and parts[:3] == ["api", "v1", "namespaces"]
            and parts[4] == "pods"
        ):
            found = ("Pod", parts[3], parts[5])
        if (
            method == "GET"
            and len(parts) == 7
            and parts[:4] == ["apis", "resource.k8s.io", "v1", "namespaces"]
            and parts[5] == "resourceclaimtemplates"
        ):
            found = ("ResourceClaimTemplate", parts[4], parts[6])
        if found is not None:
            obj = self._core.get(found)
            if obj is None:
                raise _ApiFailure(404, "NotFound", f'{found[0]} "{found[2]}" not found')
            return 200, obj
        return super()._route(method, path, query, raw_body)

    def kubeconfig(self, path: Path) -> Path:
        """Write a kubeconfig pointing at this server (no auth) and return its path."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}],
            "current-context": "fake",
        }
        path.write_text(json.dumps(config), encoding="utf-8")
        return path
