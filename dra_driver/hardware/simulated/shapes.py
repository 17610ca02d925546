"""Simulated node shapes: which GPUs a simulated node has, and how it boots.

Tests and the demo need realistic machines (a DGX with eight A100s in MIG
mode, a Hopper box with MIG off, an L4 inference node) without spelling out
every GPU. A shape names them; `load_shape` also reads custom shapes from a
YAML file:

    driverVersion: "570.172.08"   # optional
    cudaDriverVersion: 12080      # optional, major*1000 + minor*10
    gpus:
      - model: A100-SXM4-40GB     # a key of `models.MODELS` or the product name
        migEnabled: true          # optional (default false): MIG mode at boot
        count: 2                  # optional (default 1)
        migDevices:               # optional: MIG devices an admin made (mig-parted),
          - {profile: 3g.20gb, placement: 4}   # on each GPU of the entry; implies
          - {profile: 2g.10gb, placement: 0}   # migEnabled: true
      - model: L4
    fabric:                       # optional: the NVLink fabric every GPU reports
      clusterUuid: 00000000-0000-0000-0000-000000000001
      cliqueId: 0
      state: completed            # or not_started, in_progress, not_supported
      healthSummary: healthy      # or unhealthy, limited_capacity, not_supported
      status: 0                   # optional: the NVML return code embedded in the answer

`migDevices` are checked against the model's placement table the way NVML
checks a create (a listed placement, no overlap, the profile's instance
count, one `+me` at a time), so a shape cannot describe a GPU that real
hardware could not be partitioned into. Each becomes a GPU instance with the
compute instance that fills it, as `nvidia-smi mig -cgi <profile> -C` makes.

Built-in shapes that boot with MIG on: `dgx-a100-40gb` and `a30-node` (on
Ampere the mode needs a reset to change, so a node meant for MIG has it set),
with no MIG devices: the plugin without `--dynamic-mig` publishes nothing for
them until an admin creates some (a shape file with `migDevices` describes
that). Every other shape boots with MIG off (Hopper and Blackwell switch it
on at once when asked). Driver/CUDA pairs are real observed ones
(`gpu-mig-nvml.md` §3). PCI bus ids are DGX-like layouts; GPUs are paired
behind PCIe roots and split across two NUMA nodes.

NVLink fabric (`nvmlDeviceGetGpuFabricInfo`/`V`): `gb200-node` is one
compute tray of an NVL72 rack, registered with the fabric manager: every GPU
answers what NVIDIA's mock NVML answers for its shipped GB200 profile
(cluster `00000000-0000-0000-0000-000000000001`, clique 0, COMPLETED,
status SUCCESS; computedomain.md §6.3) with a healthy v2/v3 health mask and
summary, so every simulated `gb200-node` is in the same clique: one clique
per rack. `gb300-node` is one GB300 compute tray as a real one was captured
(`nvidia-smi -q -x` of a 4x GB300 node in NVIDIA/k8s-test-infra,
tests/e2e/go/assertions/nvidiasmi/testdata/hardware/qx-gb300.xml): driver
580.173.02 / CUDA 13.0, GPUs at 0008:06:00.0, 0009:06:00.0, 0018:06:00.0 and
0019:06:00.0, MIG off, and that capture's fabric answer on every GPU
(COMPLETED, SUCCESS, clique 32766, healthy; its cluster UUID is the capture's
scrubbed placeholder `00000001-0000-0000-0000-000000000001`): every
simulated `gb300-node` is in one clique, another than the GB200 rack's. Which
NUMA node each GPU is on is not in the capture: the two-way split of the other
shapes. Other shapes have no fabric (NVML answers NOT_SUPPORTED). A shape
file's `fabric` block sets the answer, with the mock's vocabulary.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any, Final

from dra_driver.errors import ConfigError, yaml_problem
from dra_driver.hardware.nvml import codes, fabric
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated import rules
from dra_driver.hardware.simulated.models import MODELS, GiProfileSpec, GpuModel, find_model
from dra_driver.kube import yaml_io

MAX_GPUS = 32  # the MIG capability minors cover gpu0..gpu31 (§5)
DEFAULT_DRIVER = ("570.172.08", 12080)  # R570 -> CUDA 12.8 (§3); also seen on B200
_AMPERE_DRIVER = ("550.54.15", 12040)  # R550 -> CUDA 12.4, seen on A100 (§3)
_A30_DRIVER = ("535.183.01", 12020)  # R535 -> CUDA 12.2, seen on A30 (§2.1)
_GB200_DRIVER = ("580.95.05", 13000)  # R580 -> CUDA 13.0, seen on GB200 (§3)
_GH200_DRIVER = ("550.127.05", 12040)  # R550 -> CUDA 12.4, seen on GH200 96GB (§3)
# R580 -> CUDA 13.0 as captured on a 4x GB300 node (NVIDIA/k8s-test-infra qx-gb300.xml:
# driver_version 580.173.02, cuda_version 13.0)
_GB300_DRIVER = ("580.173.02", 13000)

# NVIDIA's mock NVML, shipped GB200 profile (computedomain.md §6.3): one rack, clique 0.
NVL72_RACK: Final = FabricInfo(
    cluster_uuid="00000000-0000-0000-0000-000000000001",
    clique_id=0,
    state=fabric.STATE_COMPLETED,
    status=codes.SUCCESS,
    health_mask=fabric.HEALTHY_MASK,
    health_summary=fabric.HEALTH_HEALTHY,
)

# The same capture's GPU fabric answer, on every GPU: state Completed, status Success, cliqueId
# 32766, health summary Healthy with full bandwidth and no route, timeout or configuration
# problem (the healthy mask). Its clusterUuid is the capture's scrubbed placeholder (the real one
# is not public): a cluster of its own, so a GB300 rack is never a GB200 rack's clique.
GB300_NVL72_RACK: Final = FabricInfo(
    cluster_uuid="00000001-0000-0000-0000-000000000001",
    clique_id=32766,
    state=fabric.STATE_COMPLETED,
    status=codes.SUCCESS,
    health_mask=fabric.HEALTHY_MASK,
    health_summary=fabric.HEALTH_HEALTHY,
)

_DGX_A100_BUSES = (0x07, 0x0F, 0x47, 0x4E, 0x87, 0x90, 0xB7, 0xBD)
_DGX_H100_BUSES = (0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF)
_GENERIC_BUSES = (0x18, 0x3B, 0x5E, 0x86, 0xAF, 0xD8)
# The captured GB300 node's four GPUs, (PCI domain, bus): 00000008:06:00.0, 00000009:06:00.0,
# 00000018:06:00.0, 00000019:06:00.0 (qx-gb300.xml `pci_bus_id`): a PCI segment per GPU.
_GB300_ADDRESSES = ((0x0008, 0x06), (0x0009, 0x06), (0x0018, 0x06), (0x0019, 0x06))


@dataclass(frozen=True)
class MigDevice:
    """A MIG device an admin created before the node (re)booted: GI profile and placement."""

    profile: GiProfileSpec
    placement: Placement


@dataclass(frozen=True)
class ShapeGpu:
    """One GPU slot of a node shape."""

    model: GpuModel
    mig_enabled: bool  # MIG mode when the node is first created
    pci_bus_id: str  # normalized "0000:18:00.0"
    numa_node: int
    pcie_root: str  # "pci0000:10"
    mig_devices: tuple[MigDevice, ...] = ()  # in creation order


@dataclass(frozen=True)
class NodeShape:
    """The GPUs of a simulated node, in NVML index order, and its driver."""

    name: str
    gpus: tuple[ShapeGpu, ...]
    driver_version: str
    cuda_driver_version: int
    fabric: FabricInfo | None = None  # every GPU's NVLink fabric answer; None: no fabric

    @property
    def model_keys(self) -> tuple[str, ...]:
        return tuple(g.model.key for g in self.gpus)


@dataclass(frozen=True)
class _Group:
    """`count` GPUs of one model, MIG mode and admin-made MIG devices."""

    model: GpuModel
    mig_enabled: bool
    count: int
    mig_devices: tuple[MigDevice, ...] = ()


def _layout(
    name: str,
    groups: list[_Group],
    driver: tuple[str, int],
    buses: tuple[int, ...] = _GENERIC_BUSES,
    *,
    nvlink_fabric: FabricInfo | None = None,
    addresses: tuple[tuple[int, int], ...] = (),
) -> NodeShape:
    """Lay out the groups on PCI buses, roots and NUMA nodes.

    `addresses` ((domain, bus) per GPU, in NVML index order) places the GPUs where a real
    node of that kind has them; otherwise every GPU is in its model's PCI domain on `buses`.
    """
    flat = [group for group in groups for _ in range(group.count)]
    n = len(flat)
    # More GPUs than listed buses: the next free buses above the listed ones, so that
    # PCI order (the order devices are published in) stays the NVML index order.
    above = list(range(max(buses) + 1, 0x100))
    all_buses = list(buses) + above + [b for b in range(0x01, max(buses)) if b not in buses]
    if addresses and len(addresses) != n:
        raise ConfigError(f"shape {name}: {len(addresses)} PCI addresses for {n} GPUs")
    gpus = []
    for i, group in enumerate(flat):
        model = group.model
        if addresses:
            domain, bus = addresses[i]
            root_bus = bus & 0xF0
        else:
            domain = model.pci_domain
            bus = all_buses[i]
            root_bus = all_buses[i - i % 2] & 0xF0
        gpus.append(
            ShapeGpu(
                model=model,
                mig_enabled=group.mig_enabled,
                pci_bus_id=f"{domain:04x}:{bus:02x}:00.0",
                numa_node=i * 2 // n,
                pcie_root=f"pci{domain:04x}:{root_bus:02x}",
                mig_devices=group.mig_devices,
            )
        )
    return NodeShape(name, tuple(gpus), driver[0], driver[1], nvlink_fabric)


def _builtin() -> Mapping[str, NodeShape]:
    m = MODELS
    shapes = [
        _layout(
            "dgx-a100-40gb", [_Group(m["A100-SXM4-40GB"], True, 8)], _AMPERE_DRIVER, _DGX_A100_BUSES
        ),
        _layout(
            "dgx-a100-80gb",
            [_Group(m["A100-SXM4-80GB"], False, 8)],
            _AMPERE_DRIVER,
            _DGX_A100_BUSES,
        ),
        _layout(
            "dgx-h100", [_Group(m["H100-SXM5-80GB"], False, 8)], DEFAULT_DRIVER, _DGX_H100_BUSES
        ),
        _layout("dgx-h200", [_Group(m["H200"], False, 8)], DEFAULT_DRIVER, _DGX_H100_BUSES),
        # DGX B200: eight B200 on an HGX board laid out like the DGX H100's (bus ids assumed).
        _layout("dgx-b200", [_Group(m["B200"], False, 8)], DEFAULT_DRIVER, _DGX_H100_BUSES),
        # A GB200 compute tray: four GB200 GPUs (PCI domain 0x0008, §3).
        _layout(
            "gb200-node", [_Group(m["GB200"], False, 4)], _GB200_DRIVER, nvlink_fabric=NVL72_RACK
        ),
        # A GB300 compute tray as captured (qx-gb300.xml): four GB300 GPUs, a PCI domain each,
        # driver 580.173.02, MIG off, in the capture's NVLink clique.
        _layout(
            "gb300-node",
            [_Group(m["GB300"], False, 4)],
            _GB300_DRIVER,
            nvlink_fabric=GB300_NVL72_RACK,
            addresses=_GB300_ADDRESSES,
        ),
        # Two GH200 96GB superchips (PCI domain 0x0009, §3), as in NVIDIA's MIG 1g.12gb spec.
        _layout("gh200-node", [_Group(m["GH200-96GB"], False, 2)], _GH200_DRIVER),
        _layout("a30-node", [_Group(m["A30"], True, 4)], _A30_DRIVER),
        _layout("l4-node", [_Group(m["L4"], False, 4)], DEFAULT_DRIVER),
        _layout("h100-pcie-node", [_Group(m["H100-PCIE"], False, 2)], DEFAULT_DRIVER),
    ]
    return MappingProxyType({s.name: s for s in shapes})


BUILTIN_SHAPES: Mapping[str, NodeShape] = _builtin()


def load_shape(spec: str) -> NodeShape:
    """A built-in shape by name, or a custom shape from a YAML file path."""
    if spec in BUILTIN_SHAPES:
        return BUILTIN_SHAPES[spec]
    path = Path(spec)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return load_shape_file(path)
    raise ConfigError(
        f"unknown simulated node shape {spec!r}: use one of {', '.join(BUILTIN_SHAPES)} "
        "or the path of a YAML shape file (*.yaml)"
    )


_TOP_KEYS = {"driverVersion", "cudaDriverVersion", "gpus", "fabric"}
_FABRIC_KEYS = {"clusterUuid", "cliqueId", "state", "healthSummary", "status"}
_FABRIC_STATES: Final = {
    "not_supported": fabric.STATE_NOT_SUPPORTED,
    "not_started": fabric.STATE_NOT_STARTED,
    "in_progress": fabric.STATE_IN_PROGRESS,
    "completed": fabric.STATE_COMPLETED,
}
# A health mask that agrees with each summary, as NVIDIA's mock derives the summary from the
# mask: healthy; route unhealthy TRUE (1 in bits 4-5); degraded bandwidth TRUE (1 in bits
# 0-1) for limited capacity; nothing reported.
HEALTH_MASKS: Final = {
    fabric.HEALTH_HEALTHY: fabric.HEALTHY_MASK,
    fabric.HEALTH_UNHEALTHY: (fabric.HEALTHY_MASK & ~(0x3 << 4)) | (1 << 4),
    fabric.HEALTH_LIMITED_CAPACITY: (fabric.HEALTHY_MASK & ~0x3) | 1,
    fabric.HEALTH_NOT_SUPPORTED: 0,
}
_FABRIC_HEALTH: Final = {
    "not_supported": fabric.HEALTH_NOT_SUPPORTED,
    "healthy": fabric.HEALTH_HEALTHY,
    "unhealthy": fabric.HEALTH_UNHEALTHY,
    "limited_capacity": fabric.HEALTH_LIMITED_CAPACITY,
}
_GPU_KEYS = {"model", "migEnabled", "count", "migDevices"}
_MIG_DEVICE_KEYS = {"profile", "placement"}


def load_shape_file(path: Path) -> NodeShape:
    """Parse a YAML shape file; every mistake is a ConfigError naming the file and field."""
    try:
        doc = yaml_io.load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"shape file {path}: cannot read: {exc.strerror or exc}") from exc
    except yaml_io.YAMLError as exc:
        raise ConfigError(f"shape file {path}: not valid YAML: {yaml_problem(exc)}") from exc
    if not isinstance(doc, dict):
        raise ConfigError(f"shape file {path}: must be a mapping with a 'gpus' list")
    _no_unknown_keys(doc, _TOP_KEYS, f"shape file {path}")
    driver = doc.get("driverVersion", DEFAULT_DRIVER[0])
    if not isinstance(driver, str) or not _is_version(driver):
        raise ConfigError(
            f"shape file {path}: driverVersion must be a string like '570.172.08', got {driver!r}"
        )
    cuda = doc.get("cudaDriverVersion", DEFAULT_DRIVER[1])
    if isinstance(cuda, bool) or not isinstance(cuda, int) or cuda < 1000 or cuda % 10:
        raise ConfigError(
            f"shape file {path}: cudaDriverVersion must be an integer major*1000 + minor*10 "
            f"(e.g. 12080 for CUDA 12.8), got {cuda!r}"
        )
    entries = doc.get("gpus")
    if not isinstance(entries, list) or not entries:
        raise ConfigError(f"shape file {path}: gpus must be a non-empty list")
    groups = [_gpu_group(path, i, entry) for i, entry in enumerate(entries)]
    total = sum(group.count for group in groups)
    if total > MAX_GPUS:
        raise ConfigError(f"shape file {path}: gpus: {total} GPUs, at most {MAX_GPUS} supported")
    nvlink = _fabric(path, doc["fabric"]) if "fabric" in doc else None
    return _layout(str(path), groups, (driver, cuda), nvlink_fabric=nvlink)


def _fabric(path: Path, doc: Any) -> FabricInfo:
    """A shape file's `fabric` block (NVIDIA's mock NVML vocabulary)."""
    where = f"shape file {path}: fabric"
    if not isinstance(doc, dict):
        raise ConfigError(f"{where}: must be a mapping with clusterUuid and cliqueId")
    _no_unknown_keys(doc, _FABRIC_KEYS, where)
    raw_uuid = doc.get("clusterUuid")
    try:
        cluster = str(uuid.UUID(str(raw_uuid)))
    except ValueError:
        cluster = ""
    if not isinstance(raw_uuid, str) or not cluster:
        raise ConfigError(f"{where}.clusterUuid: must be a UUID string, got {raw_uuid!r}")
    clique = doc.get("cliqueId")
    if isinstance(clique, bool) or not isinstance(clique, int) or not 0 <= clique < 2**32:
        raise ConfigError(f"{where}.cliqueId: must be an integer 0..4294967295, got {clique!r}")
    state = _choice(where, "state", doc.get("state", "completed"), _FABRIC_STATES)
    health = _choice(where, "healthSummary", doc.get("healthSummary", "healthy"), _FABRIC_HEALTH)
    status = doc.get("status", codes.SUCCESS)
    if isinstance(status, bool) or not isinstance(status, int) or status < 0:
        raise ConfigError(f"{where}.status: must be an NVML return code, got {status!r}")
    return FabricInfo(
        cluster_uuid=cluster,
        clique_id=clique,
        state=state,
        status=status,
        health_mask=HEALTH_MASKS[health],
        health_summary=health,
    )


def _choice(where: str, key: str, value: Any, choices: Mapping[str, int]) -> int:
    if not isinstance(value, str) or value.lower() not in choices:
        raise ConfigError(f"{where}.{key}: must be one of {', '.join(choices)}, got {value!r}")
    return choices[value.lower()]


def _gpu_group(path: Path, i: int, entry: Any) -> _Group:
    where = f"shape file {path}: gpus[{i}]"
    if not isinstance(entry, dict):
        raise ConfigError(f"{where}: must be a mapping with a 'model' key")
    _no_unknown_keys(entry, _GPU_KEYS, where)
    name = entry.get("model")
    if not isinstance(name, str):
        raise ConfigError(f"{where}.model: must be a GPU model name, got {name!r}")
    model = find_model(name)
    if model is None:
        raise ConfigError(f"{where}.model: unknown GPU model {name!r} (known: {', '.join(MODELS)})")
    devices = _mig_devices(where, model, entry.get("migDevices", []))
    mig = entry.get("migEnabled", bool(devices))
    if not isinstance(mig, bool):
        raise ConfigError(f"{where}.migEnabled: must be true or false, got {mig!r}")
    if mig and not model.mig_capable:
        raise ConfigError(f"{where}.migEnabled: {model.key} does not support MIG")
    if devices and not mig:
        raise ConfigError(f"{where}.migEnabled: false, but migDevices need MIG mode on")
    count = entry.get("count", 1)
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ConfigError(f"{where}.count: must be a positive integer, got {count!r}")
    return _Group(model, mig, count, devices)


def _mig_devices(where: str, model: GpuModel, entries: Any) -> tuple[MigDevice, ...]:
    """`migDevices`, checked against the model's profiles and placement table."""
    if not isinstance(entries, list):
        raise ConfigError(f"{where}.migDevices: must be a list of {{profile, placement}}")
    if entries and not model.mig_capable:
        raise ConfigError(f"{where}.migDevices: {model.key} does not support MIG")
    devices: list[MigDevice] = []
    for j, entry in enumerate(entries):
        at = f"{where}.migDevices[{j}]"
        if not isinstance(entry, dict):
            raise ConfigError(f"{at}: must be a mapping with profile and placement")
        _no_unknown_keys(entry, _MIG_DEVICE_KEYS, at)
        name = entry.get("profile")
        profile = next((p for p in model.gi_profiles if p.name == name), None)
        if profile is None:
            reasons = [f"profiles: {', '.join(p.name for p in model.gi_profiles)}"]
            if not model.gi_profiles:
                reasons = ["no MIG profile is simulated"]
            if model.unverified_note:
                reasons.append(model.unverified_note)
            raise ConfigError(
                f"{at}.profile: {model.key} has no MIG profile {name!r} ({'; '.join(reasons)})"
            )
        start = entry.get("placement")
        if isinstance(start, bool) or not isinstance(start, int):
            raise ConfigError(f"{at}.placement: must be the placement's start slice, got {start!r}")
        devices.append(MigDevice(profile, Placement(start, profile.memory_slice_count)))
    problem = rules.layout_problem(
        model, [(d.profile, d.placement) for d in devices], lambda j: f"migDevices[{j}]"
    )
    if problem is not None:
        index, reason = problem
        raise ConfigError(f"{where}.migDevices[{index}]: {reason}")
    return tuple(devices)


def _no_unknown_keys(doc: dict[Any, Any], allowed: set[str], where: str) -> None:
    unknown = sorted(str(k) for k in doc if k not in allowed)
    if unknown:
        raise ConfigError(
            f"{where}: unknown field(s) {', '.join(unknown)} "
            f"(allowed: {', '.join(sorted(allowed))})"
        )


def _is_version(text: str) -> bool:
    parts = text.split(".")
    return 2 <= len(parts) <= 3 and all(p.isdigit() for p in parts)
