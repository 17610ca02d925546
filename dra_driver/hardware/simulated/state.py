"""The simulated node's mutable state and its JSON form.

Everything that real hardware would remember lives here: which GPUs exist,
their MIG modes (current and pending), compute modes and time-slice
intervals, the GPU and compute instances, the MIG
UUID counter and the boot id. It is plain data so `SimHardware` can copy it,
validate a change against it, and persist it to a state file that several
processes share (`version` guards the format). Decoding is strict: a state
file that does not parse is reported as a `ConfigError` naming the file.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.simulated.models import MODELS, GpuModel

if TYPE_CHECKING:
    from dra_driver.hardware.simulated.shapes import NodeShape

STATE_VERSION = 1
_UUID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "https://github.com/dra-gpu/sim")


@dataclass
class CiState:
    """A compute instance."""

    id: int
    profile_id: int
    start: int  # first compute slice inside the GI
    slot: int  # MIG device index on the parent GPU
    uuid: str  # "MIG-..."


@dataclass
class GiState:
    """A GPU instance and its compute instances."""

    id: int
    profile_id: int
    start: int
    size: int
    cis: list[CiState] = field(default_factory=list)


@dataclass
class GpuState:
    """One physical GPU."""

    index: int
    minor: int
    uuid: str
    model_key: str
    pci_bus_id: str
    numa_node: int
    pcie_root: str
    mig_current: bool
    mig_pending: bool
    busy: bool = False  # a client (process) holds the GPU: MIG mode changes answer IN_USE
    gis: list[GiState] = field(default_factory=list)
    compute_mode: str = "DEFAULT"  # nvidia-smi -c: DEFAULT, EXCLUSIVE_PROCESS, PROHIBITED
    time_slice: int = 0  # nvidia-smi compute-policy --set-timeslice: 0 Default .. 3 Long
    recovery_action: int = 0  # NVML_FI_DEV_GET_GPU_RECOVERY_ACTION; 0 = none needed
    lost: bool = False  # fallen off the bus: NVML answers GPU_IS_LOST until a reset
    fabric: FabricInfo | None = None  # NVLink fabric answer; None: NOT_SUPPORTED (no fabric)
    # The PCI side (`dra_driver.hardware.simulated.pci_bus`): the kernel driver bound to the
    # GPU ("" for none), its sysfs driver_override ("" for none), and, while vfio-pci has it,
    # its iommufd cdev number (vfio<N>) and when udev has made its /dev/vfio nodes (epoch s).
    pci_driver: str = "nvidia"
    driver_override: str = ""
    vfio_cdev: int | None = None
    vfio_nodes_at: float = 0.0

    @property
    def iommu_group(self) -> int:
        """The GPU's IOMMU group: one per GPU, numbered in PCI order after the groups of the
        node's other devices (`pci_bus.FIRST_GPU_IOMMU_GROUP`)."""
        return FIRST_GPU_IOMMU_GROUP + self.index

    @property
    def model(self) -> GpuModel:
        return MODELS[self.model_key]


@dataclass
class HealthEventState:
    """An injected device-health event (`dra-gpu sim health`), as NVML would deliver it.

    `kind` is a `dra_driver.hardware.nvml.interface.HealthEventKind` value; `seq`
    orders events so each reader takes only the ones it has not seen.
    """

    seq: int
    gpu_index: int
    kind: str
    xid: int | None = None


@dataclass
class WorkloadState:
    """A simulated CUDA process (`dra-gpu sim workload`) on a GPU or MIG device.

    `pid` is a host pid of the simulated node (its fake `/proc/<pid>/cgroup`
    names the pod); `device_uuid` is the `GPU-...` or `MIG-...` it runs on.
    """

    pid: int
    device_uuid: str
    pod_uid: str
    sm_percent: int
    memory_bytes: int


FIRST_GPU_IOMMU_GROUP = 16
"""IOMMU group of the GPU at index 0; the lower groups belong to the node's other PCI devices."""

FIRST_WORKLOAD_PID = 40001
"""Simulated workload pids start here, far from the plugin's real children."""

MAX_HEALTH_EVENTS = 256
"""Injected events kept in the state file; older ones are dropped (readers keep up)."""


@dataclass
class NodeState:
    """The whole simulated node."""

    node_name: str
    shape_name: str
    driver_version: str
    cuda_driver_version: int
    boot_id: str
    creations: int  # GI/CI creations so far; feeds MIG UUIDs so a recreated device gets a new one
    gpus: list[GpuState]
    health_seq: int = 0  # seq of the last injected health event
    health_events: list[HealthEventState] = field(default_factory=list)
    workloads: list[WorkloadState] = field(default_factory=list)
    next_pid: int = FIRST_WORKLOAD_PID
    # Kernel modules not loaded (e.g. ["nvidia-uvm"] on a node whose driver was installed
    # after boot, before any CUDA program ran): `/proc/devices` lacks their lines.
    unloaded_modules: list[str] = field(default_factory=list)
    # What modprobe says when it cannot load one ("" = it can).
    modprobe_error: str = ""
    iommufd: bool = True  # the kernel has iommufd (/dev/iommu, /dev/vfio/devices/vfio<N>)


def gpu_uuid(node_name: str, index: int) -> str:
    """A stable `GPU-<uuid>` for GPU `index` of node `node_name`."""
    return f"GPU-{uuid.uuid5(_UUID_NAMESPACE, f'{node_name}/gpu/{index}')}"


def mig_uuid(parent_uuid: str, gi: int, ci: int, creation: int) -> str:
    """A version-5 `MIG-<uuid>`; `creation` makes a recreated GI/CI get a new one."""
    return f"MIG-{uuid.uuid5(_UUID_NAMESPACE, f'{parent_uuid}/gi{gi}/ci{ci}/{creation}')}"


def new_boot_id() -> str:
    return str(uuid.uuid4())


def new_node_state(shape: NodeShape, node_name: str) -> NodeState:
    """The node as it is right after its first boot."""
    gpus = [
        GpuState(
            index=i,
            minor=i,
            uuid=gpu_uuid(node_name, i),
            model_key=slot.model.key,
            pci_bus_id=slot.pci_bus_id,
            numa_node=slot.numa_node,
            pcie_root=slot.pcie_root,
            mig_current=slot.mig_enabled,
            mig_pending=slot.mig_enabled,
            fabric=shape.fabric,
        )
        for i, slot in enumerate(shape.gpus)
    ]
    return NodeState(
        node_name=node_name,
        shape_name=shape.name,
        driver_version=shape.driver_version,
        cuda_driver_version=shape.cuda_driver_version,
        boot_id=new_boot_id(),
        creations=0,
        gpus=gpus,
    )


def encode(state: NodeState) -> bytes:
    doc = {"version": STATE_VERSION, **asdict(state)}
    return (json.dumps(doc, indent=1, sort_keys=True) + "\n").encode()


def decode(data: bytes, source: str) -> NodeState:
    """Parse a state file's bytes; `source` names the file in errors."""
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"simulated hardware state {source}: not valid JSON: {exc}") from exc
    except RecursionError as exc:  # garbage nested deeper than the decoder goes
        raise ConfigError(
            f"simulated hardware state {source}: not a state file (nested too deep); "
            "delete it to start from a freshly booted node"
        ) from exc
    try:
        return _node(doc)
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigError(
            f"simulated hardware state {source}: corrupt ({type(exc).__name__}: {exc}); "
            "delete it to start from a freshly booted node"
        ) from exc


def _get(doc: Any, key: str, kind: type) -> Any:
    if not isinstance(doc, dict):
        raise TypeError(f"expected an object around {key!r}")
    value = doc[key]
    if kind is int and isinstance(value, bool):
        raise TypeError(f"{key} must be an integer, got {value!r}")
    if not isinstance(value, kind):
        raise TypeError(f"{key} must be {kind.__name__}, got {value!r}")
    return value


def _node(doc: Any) -> NodeState:
    version = _get(doc, "version", int)
    if version != STATE_VERSION:
        raise ValueError(f"version {version} is not the supported version {STATE_VERSION}")
    return NodeState(
        node_name=_get(doc, "node_name", str),
        shape_name=_get(doc, "shape_name", str),
        driver_version=_get(doc, "driver_version", str),
        cuda_driver_version=_get(doc, "cuda_driver_version", int),
        boot_id=_get(doc, "boot_id", str),
        creations=_get(doc, "creations", int),
        gpus=_gpus(_get(doc, "gpus", list)),
        # Optional: state files written before health events existed have none.
        health_seq=_get(doc, "health_seq", int) if "health_seq" in doc else 0,
        health_events=[_health_event(e) for e in _optional_list(doc, "health_events")],
        workloads=[_workload(w) for w in _optional_list(doc, "workloads")],
        next_pid=_get(doc, "next_pid", int) if "next_pid" in doc else FIRST_WORKLOAD_PID,
        unloaded_modules=[str(m) for m in _optional_list(doc, "unloaded_modules")],
        modprobe_error=_get(doc, "modprobe_error", str) if "modprobe_error" in doc else "",
        iommufd=_get(doc, "iommufd", bool) if "iommufd" in doc else True,
    )


def _workload(doc: Any) -> WorkloadState:
    return WorkloadState(
        pid=_get(doc, "pid", int),
        device_uuid=_get(doc, "device_uuid", str),
        pod_uid=_get(doc, "pod_uid", str),
        sm_percent=_get(doc, "sm_percent", int),
        memory_bytes=_get(doc, "memory_bytes", int),
    )


def _optional_int(doc: Any, key: str) -> int | None:
    value = doc.get(key) if isinstance(doc, dict) else None
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise TypeError(f"{key} must be an integer, got {value!r}")
    return value


def _optional_seconds(doc: Any, key: str) -> float:
    value = doc.get(key, 0.0) if isinstance(doc, dict) else 0.0
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{key} must be a number of seconds, got {value!r}")
    return float(value)


def _optional_list(doc: Any, key: str) -> list[Any]:
    return _get(doc, key, list) if key in doc else []


def _health_event(doc: Any) -> HealthEventState:
    xid = doc.get("xid") if isinstance(doc, dict) else None
    if xid is not None and (isinstance(xid, bool) or not isinstance(xid, int)):
        raise TypeError(f"xid must be an integer, got {xid!r}")
    return HealthEventState(
        seq=_get(doc, "seq", int),
        gpu_index=_get(doc, "gpu_index", int),
        kind=_get(doc, "kind", str),
        xid=xid,
    )


def _gpus(docs: list[Any]) -> list[GpuState]:
    gpus = [_gpu(d) for d in docs]
    for position, gpu in enumerate(gpus):
        if gpu.index != position:
            raise ValueError(f"GPU at position {position} has index {gpu.index}")
    if len({g.uuid for g in gpus}) != len(gpus):
        raise ValueError("two GPUs share a UUID")
    return gpus


def _gpu(doc: Any) -> GpuState:
    model_key = _get(doc, "model_key", str)
    if model_key not in MODELS:
        raise ValueError(f"unknown GPU model {model_key!r}")
    gpu = GpuState(
        index=_get(doc, "index", int),
        minor=_get(doc, "minor", int),
        uuid=_get(doc, "uuid", str),
        model_key=model_key,
        pci_bus_id=_get(doc, "pci_bus_id", str),
        numa_node=_get(doc, "numa_node", int),
        pcie_root=_get(doc, "pcie_root", str),
        mig_current=_get(doc, "mig_current", bool),
        mig_pending=_get(doc, "mig_pending", bool),
        busy=_get(doc, "busy", bool),
        gis=[_gi(g) for g in _get(doc, "gis", list)],
        # Added later: state files written before have the power-on defaults.
        compute_mode=_get(doc, "compute_mode", str) if "compute_mode" in doc else "DEFAULT",
        time_slice=_get(doc, "time_slice", int) if "time_slice" in doc else 0,
        recovery_action=_get(doc, "recovery_action", int) if "recovery_action" in doc else 0,
        lost=_get(doc, "lost", bool) if "lost" in doc else False,
        fabric=_fabric(doc["fabric"]) if doc.get("fabric") is not None else None,
        pci_driver=_get(doc, "pci_driver", str) if "pci_driver" in doc else "nvidia",
        driver_override=_get(doc, "driver_override", str) if "driver_override" in doc else "",
        vfio_cdev=_optional_int(doc, "vfio_cdev"),
        vfio_nodes_at=_optional_seconds(doc, "vfio_nodes_at"),
    )
    for gi in gpu.gis:
        if gpu.model.gi_profile_by_id(gi.profile_id) is None:
            raise ValueError(f"GPU {gpu.index}: GI {gi.id} has unknown profile {gi.profile_id}")
        ci_ids = {c.id for c in gpu.model.ci_profiles_for(gi.profile_id)}
        for ci in gi.cis:
            if ci.profile_id not in ci_ids:
                raise ValueError(
                    f"GPU {gpu.index}: CI {gi.id}/{ci.id} has unknown profile {ci.profile_id}"
                )
    return gpu


def _fabric(doc: Any) -> FabricInfo:
    summary = doc.get("health_summary") if isinstance(doc, dict) else None
    mask = doc.get("health_mask") if isinstance(doc, dict) else None
    for key, value in (("health_summary", summary), ("health_mask", mask)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
            raise TypeError(f"fabric {key} must be an integer, got {value!r}")
    return FabricInfo(
        cluster_uuid=str(uuid.UUID(_get(doc, "cluster_uuid", str))),
        clique_id=_get(doc, "clique_id", int),
        state=_get(doc, "state", int),
        status=_get(doc, "status", int),
        health_mask=mask,
        health_summary=summary,
    )


def _gi(doc: Any) -> GiState:
    return GiState(
        id=_get(doc, "id", int),
        profile_id=_get(doc, "profile_id", int),
        start=_get(doc, "start", int),
        size=_get(doc, "size", int),
        cis=[_ci(c) for c in _get(doc, "cis", list)],
    )


def _ci(doc: Any) -> CiState:
    return CiState(
        id=_get(doc, "id", int),
        profile_id=_get(doc, "profile_id", int),
        start=_get(doc, "start", int),
        slot=_get(doc, "slot", int),
        uuid=_get(doc, "uuid", str),
    )
