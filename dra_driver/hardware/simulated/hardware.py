"""`SimHardware`: a simulated GPU node that behaves like NVML says hardware does.

Every test, the demo and the benchmarks run the driver against this instead of
GPUs, so it refuses what hardware refuses, with NVML's return codes
(`dra_driver.errors.NvmlError(code, message)`, codes from
`dra_driver.hardware.nvml.codes`). It keeps NVML's vocabulary: GI profiles are looked
up by *enum* only in `gi_profile_by_enum`; everything else takes the profile
*id* (19, 14, ...). CI profile ids equal their enums.

Construction:
    SimHardware(shape: NodeShape | None = None, *, node_name="sim-node",
                state_path: Path | None = None, proc_root: Path | None = None,
                latency: Mapping[str, float] | None = None, sleep=time.sleep)
  `shape` may be None only when `state_path` exists; `sleep` is injectable for
  tests. Attributes: `state_path`, `proc_root`, `latency` (read-only mapping).

API (a GPU is named by NVML index `int` or `"GPU-..."` UUID `str`; a bad index
is INVALID_ARGUMENT, an unknown UUID NOT_FOUND; MIG calls on a GPU without
MIG are NOT_SUPPORTED):

  System and GPUs
    driver_version() -> str; cuda_driver_version() -> int (major*1000 + minor*10)
    boot_id() -> str
    gpu_count() -> int; gpu(gpu) -> GpuFacts; gpus() -> list[GpuFacts]
    index_of(uuid) -> int
    snapshot() -> NodeSnapshot (everything, read under one lock)
  MIG mode
    mig_mode(gpu) -> (current, pending), each 0/1
    set_mig_mode(gpu, enabled) -> activation status: 0; ERROR_RESET_REQUIRED (16)
        on Ampere, where the change stays pending until reset_gpu()/reboot();
        ERROR_IN_USE (19) while GPU instances exist or the GPU is busy
    reset_gpu(gpu): a GPU reset (applies a pending Ampere mode; Hopper+ MIG turns
        off; all instances are gone; IN_USE raised while busy)
    reboot(): a node reboot (new boot id; every GPU reset as above; not busy)
    set_busy(gpu, busy): pretend a process holds the GPU
  Profiles (static; answer with MIG on or off, like NVML's v1 calls)
    gi_profiles(gpu) -> tuple[GiProfileSpec, ...] (empty without MIG)
    gi_profile_by_enum(gpu, enum) -> GiProfileSpec: INVALID_ARGUMENT outside
        0..GPU_INSTANCE_PROFILE_COUNT-1, NOT_SUPPORTED if the model lacks it
    gi_profile_by_id(gpu, profile_id) -> GiProfileSpec: INVALID_ARGUMENT if unknown
    possible_placements(gpu, profile_id) -> tuple[Placement, ...] (all of them)
    ci_profiles(gpu, gi_profile_id) -> tuple[CiProfileSpec, ...]
    ci_profile_by_enum(gpu, gi_id, ci_enum) -> CiProfileSpec: INVALID_ARGUMENT
        outside 0..COMPUTE_INSTANCE_PROFILE_COUNT-1, NOT_SUPPORTED if not offered
  Instances (NOT_SUPPORTED while MIG is off; NOT_FOUND for a missing GI/CI)
    gpu_instances(gpu, profile_id=None) -> list[GpuInstanceView]
    gpu_instance(gpu, gi_id) -> GpuInstanceView
    gi_remaining_capacity(gpu, profile_id) -> int
    create_gpu_instance(gpu, profile_id, placement) -> GpuInstanceView:
        INVALID_ARGUMENT for a placement not in the profile's list;
        INSUFFICIENT_RESOURCES for overlap, count reached, or media engines taken
    destroy_gpu_instance(gpu, gi_id): IN_USE while it has compute instances
    compute_instances(gpu, gi_id, profile_id=None) -> list[ComputeInstanceView]
    compute_instance(gpu, gi_id, ci_id) -> ComputeInstanceView
    ci_remaining_capacity(gpu, gi_id, ci_profile_id) -> int
    create_compute_instance(gpu, gi_id, ci_profile_id) -> ComputeInstanceView:
        INSUFFICIENT_RESOURCES when the count is reached or no compute slices fit
    destroy_compute_instance(gpu, gi_id, ci_id)
  MIG devices (a compute instance is a MIG device)
    max_mig_devices(gpu) -> int (0 while MIG is off, else the compute slices)
    mig_device_by_index(gpu, index) -> ComputeInstanceView: INVALID_ARGUMENT out
        of range, NOT_FOUND for an empty slot
    mig_device_uuid(gpu, gi_id, ci_id) -> str; find_mig_device(uuid) -> ComputeInstanceView

GI ids follow the driver (`rules.assign_gi_id`); CI ids are the lowest free
from 0 in the GI; MIG UUIDs are new for every created CI. The optional state
file makes several processes share one node (see `store`); the optional
`proc_root` gets a fake `/proc` tree (see `proctree`). Latencies sleep before
the locked part, so operations on different GPUs overlap in time. When a state
file exists, it wins: the shape must list the same GPU models (else
ConfigError), and `node_name` only matters when the file is first created.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from dra_driver.errors import ConfigError, KernelModuleError, NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated import lookup, pci_bus, rules, views
from dra_driver.hardware.simulated.boot import booted_node_state
from dra_driver.hardware.simulated.latency import LATENCY_KEYS, check_latency, parse_latency
from dra_driver.hardware.simulated.lookup import GpuRef
from dra_driver.hardware.simulated.models import CiProfileSpec, GiProfileSpec
from dra_driver.hardware.simulated.pci_bus import PciTree
from dra_driver.hardware.simulated.proctree import ProcTree
from dra_driver.hardware.simulated.shapes import NodeShape
from dra_driver.hardware.simulated.state import (
    MAX_HEALTH_EVENTS,
    CiState,
    GiState,
    GpuState,
    HealthEventState,
    NodeState,
    WorkloadState,
    mig_uuid,
    new_boot_id,
)
from dra_driver.hardware.simulated.store import StateStore
from dra_driver.hardware.simulated.views import (
    ComputeInstanceView,
    GpuFacts,
    GpuInstanceView,
    NodeSnapshot,
    WorkloadView,
)

__all__ = ["LATENCY_KEYS", "GpuRef", "SimHardware", "parse_latency"]

COMPUTE_MODES = ("DEFAULT", "EXCLUSIVE_PROCESS", "PROHIBITED")
_MAX_CI_ID = 7  # CI ids range 0..7 (§2.13)


class SimHardware:
    """A simulated node; see the module docstring for the API and its NVML semantics."""

    def __init__(
        self,
        shape: NodeShape | None = None,
        *,
        node_name: str = "sim-node",
        state_path: Path | None = None,
        proc_root: Path | None = None,
        sys_root: Path | None = None,
        dev_root: Path | None = None,
        latency: Mapping[str, float] | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.proc_root = Path(proc_root) if proc_root is not None else None
        self.latency = check_latency(latency)
        self._sleep = sleep
        proc = ProcTree(self.proc_root) if self.proc_root is not None else None
        self._pci = (
            PciTree(sys_root, dev_root) if sys_root is not None and dev_root is not None else None
        )
        self._pci_timer: threading.Timer | None = None

        def on_change(state: NodeState) -> None:
            if proc is not None:
                proc.sync(state)
            self._sync_pci(state)

        self._store = StateStore(state_path, on_change=on_change)
        self.state_path = self._store.path

        def create() -> NodeState:
            if shape is None:
                where = f"state file {state_path} does not exist" if state_path else "no state file"
                raise ConfigError(
                    f"simulated hardware: {where} and no node shape was given to create it from"
                )
            return booted_node_state(shape, node_name)

        def check(state: NodeState) -> None:
            held = tuple(g.model_key for g in state.gpus)
            if shape is not None and held != shape.model_keys:
                raise ConfigError(
                    f"simulated hardware state {state_path}: holds a node with GPUs "
                    f"{', '.join(held)}, but shape {shape.name} has {', '.join(shape.model_keys)}; "
                    "delete the state file or use the shape it was created with"
                )

        self._store.open(create, check)

    # -- kernel modules --------------------------------------------------------

    def set_modules(self, *, unloaded: list[str], modprobe_error: str = "") -> None:
        """Which kernel modules are not loaded (their `/proc/devices` lines go), and what
        modprobe says when asked to load one ("" = it loads)."""
        with self._store.mutate() as st:
            st.unloaded_modules = sorted(set(unloaded))
            st.modprobe_error = modprobe_error

    def load_module(self, module: str) -> None:
        """`modprobe <module>`: its `/proc/devices` lines appear; KernelModuleError with
        modprobe's message if the node was set to refuse."""
        with self._store.mutate() as st:
            if module not in st.unloaded_modules:
                return
            if st.modprobe_error:
                raise KernelModuleError(f"`modprobe {module}` failed: {st.modprobe_error}")
            st.unloaded_modules.remove(module)

    # -- system and GPUs -----------------------------------------------------

    def driver_version(self) -> str:
        with self._store.read() as st:
            return st.driver_version

    def cuda_driver_version(self) -> int:
        with self._store.read() as st:
            return st.cuda_driver_version

    def boot_id(self) -> str:
        with self._store.read() as st:
            return st.boot_id

    def gpu_count(self) -> int:
        with self._store.read() as st:
            return len(st.gpus)

    def gpu(self, gpu: GpuRef) -> GpuFacts:
        with self._store.read() as st:
            return views.gpu_facts(lookup.find_gpu(st, gpu))

    def gpus(self) -> list[GpuFacts]:
        with self._store.read() as st:
            return [views.gpu_facts(g) for g in st.gpus]

    def index_of(self, uuid: str) -> int:
        with self._store.read() as st:
            return lookup.find_gpu(st, uuid).index

    def snapshot(self) -> NodeSnapshot:
        with self._store.read() as st:
            return views.snapshot(st)

    # -- MIG mode ------------------------------------------------------------

    def mig_mode(self, gpu: GpuRef) -> tuple[int, int]:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            return int(g.mig_current), int(g.mig_pending)

    def set_mig_mode(self, gpu: GpuRef, enabled: bool) -> int:
        self._delay("mig-mode")
        with self._store.mutate() as st:
            g = lookup.mig_gpu(st, gpu)
            if g.mig_current == enabled:
                g.mig_pending = enabled  # nothing to do, or a pending change cancelled
                return codes.SUCCESS
            if g.gis or g.busy:
                return codes.ERROR_IN_USE
            g.mig_pending = enabled
            if g.model.mig_toggle_supported:
                g.mig_current = enabled
                return codes.SUCCESS
            return codes.ERROR_RESET_REQUIRED

    def reset_gpu(self, gpu: GpuRef) -> None:
        with self._store.mutate() as st:
            g = lookup.find_gpu(st, gpu)
            if g.busy or _workloads_of(st, g):
                raise NvmlError(codes.ERROR_IN_USE, f"{lookup.gpu_name(g)}: in use, cannot reset")
            lookup.power_cycle(g)

    def reboot(self) -> None:
        with self._store.mutate() as st:
            st.boot_id = new_boot_id()
            st.workloads.clear()
            for g in st.gpus:
                g.busy = False
                lookup.power_cycle(g)
                # Boot binds every GPU to nvidia again; driver_override lives in memory only.
                g.pci_driver, g.driver_override, g.vfio_cdev = pci_bus.NVIDIA_DRIVER, "", None

    # -- the PCI side: kernel drivers, sysfs and /dev/vfio (`pci_bus`) ----------

    def write_sysfs(self, rel_path: str, text: str) -> None:
        """Write `text` to `<sys>/<rel_path>`; OSError with the kernel's errno (`pci_bus`)."""
        with self._store.mutate() as st:
            in_use = {g.index for g in st.gpus if g.busy or _workloads_of(st, g)}
            pci_bus.write(
                st,
                rel_path,
                text,
                in_use=in_use,
                now=time.time(),
                node_delay=self.latency.get("vfio-node", pci_bus.DEFAULT_NODE_DELAY_S),
            )

    def pci_driver(self, gpu: GpuRef) -> str:
        """The kernel driver bound to the GPU ("" for none)."""
        with self._store.read() as st:
            return lookup.find_gpu(st, gpu).pci_driver

    def set_iommufd(self, enabled: bool) -> None:
        """Give the node a kernel with (or without) iommufd (`/dev/iommu`)."""
        with self._store.mutate() as st:
            st.iommufd = enabled

    def _sync_pci(self, state: NodeState) -> None:
        """Materialize the PCI files; a device node udev has not made yet gets a timer."""
        if self._pci is None:
            return
        due = self._pci.sync(state, time.time())
        if due is not None and self._pci_timer is None:

            def later() -> None:
                self._pci_timer = None
                try:
                    with self._store.read() as st:
                        self._sync_pci(st)
                except (ConfigError, FileNotFoundError):
                    # The node is gone (its state file, or the directories its device
                    # nodes go in, removed while the timer waited): no node to make.
                    return

            timer = threading.Timer(max(due - time.time(), 0.0) + 0.001, later)
            timer.daemon = True
            self._pci_timer = timer
            timer.start()

    # -- compute mode and time-slicing (nvidia-smi, not NVML: see gpu-mig-nvml.md 6.1) --

    def compute_mode(self, gpu: GpuRef) -> str:
        with self._store.read() as st:
            return lookup.find_gpu(st, gpu).compute_mode

    def set_compute_mode(self, gpu: GpuRef, mode: str) -> None:
        """`nvidia-smi -i <gpu> -c <mode>`."""
        if mode not in COMPUTE_MODES:
            raise ConfigError(f"compute mode {mode!r}: expected one of {', '.join(COMPUTE_MODES)}")
        with self._store.mutate() as st:
            lookup.find_gpu(st, gpu).compute_mode = mode

    def time_slice(self, gpu: GpuRef) -> int:
        with self._store.read() as st:
            return lookup.find_gpu(st, gpu).time_slice

    def set_time_slice(self, gpu: GpuRef, level: int) -> None:
        """`nvidia-smi compute-policy -i <gpu> --set-timeslice <level>` (0 Default .. 3 Long)."""
        if level not in range(4):
            raise ConfigError(f"time-slice {level!r}: expected 0 (Default) to 3 (Long)")
        with self._store.mutate() as st:
            lookup.find_gpu(st, gpu).time_slice = level

    def set_busy(self, gpu: GpuRef, busy: bool) -> None:
        with self._store.mutate() as st:
            lookup.find_gpu(st, gpu).busy = busy

    def set_fabric(self, gpu: GpuRef, info: FabricInfo | None) -> None:
        """What the fabric manager reports for the GPU from now on (None: NOT_SUPPORTED), e.g.
        IN_PROGRESS at boot, then COMPLETED; another process sees it through the state file."""
        with self._store.mutate() as st:
            lookup.find_gpu(st, gpu).fabric = info

    # -- profiles ------------------------------------------------------------

    def gi_profiles(self, gpu: GpuRef) -> tuple[GiProfileSpec, ...]:
        with self._store.read() as st:
            return lookup.find_gpu(st, gpu).model.gi_profiles

    def gi_profile_by_enum(self, gpu: GpuRef, enum: int) -> GiProfileSpec:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            if not 0 <= enum < codes.GPU_INSTANCE_PROFILE_COUNT:
                raise NvmlError(
                    codes.ERROR_INVALID_ARGUMENT, f"GPU instance profile enum {enum} out of range"
                )
            profile = g.model.gi_profile_by_enum(enum)
            if profile is None:
                raise NvmlError(
                    codes.ERROR_NOT_SUPPORTED,
                    f"{lookup.gpu_name(g)}: GPU instance profile enum {enum:#x} is not supported",
                )
            return profile

    def gi_profile_by_id(self, gpu: GpuRef, profile_id: int) -> GiProfileSpec:
        with self._store.read() as st:
            return lookup.find_gi_profile(lookup.mig_gpu(st, gpu), profile_id)

    def possible_placements(self, gpu: GpuRef, profile_id: int) -> tuple[Placement, ...]:
        return self.gi_profile_by_id(gpu, profile_id).placements

    def ci_profiles(self, gpu: GpuRef, gi_profile_id: int) -> tuple[CiProfileSpec, ...]:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            return g.model.ci_profiles_for(lookup.find_gi_profile(g, gi_profile_id).id)

    def ci_profile_by_enum(self, gpu: GpuRef, gi_id: int, ci_enum: int) -> CiProfileSpec:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            return lookup.find_ci_profile(g, lookup.find_gi(g, gi_id), ci_enum)

    # -- GPU instances -------------------------------------------------------

    def gpu_instances(self, gpu: GpuRef, profile_id: int | None = None) -> list[GpuInstanceView]:
        with self._store.read() as st:
            g = lookup.mig_on_gpu(st, gpu)
            if profile_id is not None:
                lookup.find_gi_profile(g, profile_id)
            gis = sorted(g.gis, key=lambda gi: gi.id)
            return [
                views.gi_view(g, gi)
                for gi in gis
                if profile_id is None or gi.profile_id == profile_id
            ]

    def gpu_instance(self, gpu: GpuRef, gi_id: int) -> GpuInstanceView:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            return views.gi_view(g, lookup.find_gi(g, gi_id))

    def gi_remaining_capacity(self, gpu: GpuRef, profile_id: int) -> int:
        with self._store.read() as st:
            g = lookup.mig_on_gpu(st, gpu)
            return rules.gi_remaining_capacity(g, lookup.find_gi_profile(g, profile_id))

    def create_gpu_instance(
        self, gpu: GpuRef, profile_id: int, placement: Placement
    ) -> GpuInstanceView:
        self._delay("gi-create")
        with self._store.mutate() as st:
            g = lookup.mig_on_gpu(st, gpu)
            profile = lookup.find_gi_profile(g, profile_id)
            rules.check_gi_create(g, profile, placement)
            gi_id = rules.assign_gi_id(g.model.memory_slices, placement, (x.id for x in g.gis))
            gi = GiState(gi_id, profile.id, placement.start, placement.size)
            g.gis.append(gi)
            st.creations += 1
            return views.gi_view(g, gi)

    def destroy_gpu_instance(self, gpu: GpuRef, gi_id: int) -> None:
        self._delay("gi-destroy")
        with self._store.mutate() as st:
            g = lookup.mig_gpu(st, gpu)
            gi = lookup.find_gi(g, gi_id)
            if gi.cis:
                raise NvmlError(
                    codes.ERROR_IN_USE,
                    f"{lookup.gpu_name(g)}: GPU instance {gi_id} still has compute instance(s) "
                    f"{', '.join(str(c.id) for c in gi.cis)}",
                )
            g.gis.remove(gi)

    # -- compute instances ---------------------------------------------------

    def compute_instances(
        self, gpu: GpuRef, gi_id: int, profile_id: int | None = None
    ) -> list[ComputeInstanceView]:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            gi = lookup.find_gi(g, gi_id)
            if profile_id is not None:
                lookup.find_ci_profile(g, gi, profile_id)
            cis = views.ci_views(g, gi)
            return [c for c in cis if profile_id is None or c.profile_id == profile_id]

    def compute_instance(self, gpu: GpuRef, gi_id: int, ci_id: int) -> ComputeInstanceView:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            gi = lookup.find_gi(g, gi_id)
            return lookup.ci_view(g, gi, lookup.find_ci(g, gi, ci_id).id)

    def ci_remaining_capacity(self, gpu: GpuRef, gi_id: int, ci_profile_id: int) -> int:
        with self._store.read() as st:
            g = lookup.mig_gpu(st, gpu)
            gi = lookup.find_gi(g, gi_id)
            ci_profile = lookup.find_ci_profile(g, gi, ci_profile_id)
            return rules.ci_remaining_capacity(
                g.model, gi, lookup.find_gi_profile(g, gi.profile_id), ci_profile
            )

    def create_compute_instance(
        self, gpu: GpuRef, gi_id: int, ci_profile_id: int
    ) -> ComputeInstanceView:
        self._delay("ci-create")
        with self._store.mutate() as st:
            g = lookup.mig_gpu(st, gpu)
            gi = lookup.find_gi(g, gi_id)
            ci_profile = lookup.find_ci_profile(g, gi, ci_profile_id)
            start = rules.check_ci_create(
                g.model, gi, lookup.find_gi_profile(g, gi.profile_id), ci_profile
            )
            ci_id = rules.lowest_free((c.id for c in gi.cis), range(_MAX_CI_ID + 1))
            slots = (c.slot for x in g.gis for c in x.cis)
            slot = rules.lowest_free(slots, range(g.model.compute_slices))
            if ci_id is None or slot is None:
                raise NvmlError(
                    codes.ERROR_INSUFFICIENT_RESOURCES,
                    f"{lookup.gpu_name(g)}: no free compute instance id or MIG device slot",
                )
            st.creations += 1
            uuid = mig_uuid(g.uuid, gi.id, ci_id, st.creations)
            gi.cis.append(CiState(ci_id, ci_profile.id, start, slot, uuid))
            return lookup.ci_view(g, gi, ci_id)

    def destroy_compute_instance(self, gpu: GpuRef, gi_id: int, ci_id: int) -> None:
        self._delay("ci-destroy")
        with self._store.mutate() as st:
            g = lookup.mig_gpu(st, gpu)
            gi = lookup.find_gi(g, gi_id)
            ci = lookup.find_ci(g, gi, ci_id)
            running = [w.pid for w in st.workloads if w.device_uuid == ci.uuid]
            if running:
                raise NvmlError(
                    codes.ERROR_IN_USE,
                    f"{lookup.gpu_name(g)}: compute instance {gi_id}/{ci_id} runs process(es) "
                    f"{', '.join(map(str, running))}",
                )
            gi.cis.remove(ci)

    # -- MIG devices ---------------------------------------------------------

    def max_mig_devices(self, gpu: GpuRef) -> int:
        with self._store.read() as st:
            g = lookup.find_gpu(st, gpu)
            return g.model.compute_slices if g.model.mig_capable and g.mig_current else 0

    def mig_device_by_index(self, gpu: GpuRef, index: int) -> ComputeInstanceView:
        with self._store.read() as st:
            g = lookup.mig_on_gpu(st, gpu)
            if not 0 <= index < g.model.compute_slices:
                raise NvmlError(
                    codes.ERROR_INVALID_ARGUMENT,
                    f"{lookup.gpu_name(g)}: MIG device index {index} out of range",
                )
            for gi in g.gis:
                for ci in gi.cis:
                    if ci.slot == index:
                        return lookup.ci_view(g, gi, ci.id)
            raise NvmlError(
                codes.ERROR_NOT_FOUND, f"{lookup.gpu_name(g)}: no MIG device at index {index}"
            )

    def mig_device_uuid(self, gpu: GpuRef, gi_id: int, ci_id: int) -> str:
        return self.compute_instance(gpu, gi_id, ci_id).uuid

    def find_mig_device(self, uuid: str) -> ComputeInstanceView:
        with self._store.read() as st:
            for g in st.gpus:
                for gi in g.gis:
                    for ci in gi.cis:
                        if ci.uuid == uuid:
                            return lookup.ci_view(g, gi, ci.id)
        raise NvmlError(codes.ERROR_NOT_FOUND, f"no MIG device with UUID {uuid}")

    # -- device health events ----------------------------------------------------

    def inject_health_event(
        self,
        gpu: GpuRef,
        kind: str,
        xid: int | None = None,
        *,
        recovery_action: int | None = None,
    ) -> int:
        """Queue a health event of `gpu` (what `dra-gpu sim health` does); returns its seq.

        The GPU's recovery action follows, as the driver sets it: `recovery_action`
        when given, else `rules.recovery_action_of(kind, xid)`; a lost GPU stops
        answering; a "recovered" event clears both (a reset).
        """
        with self._store.mutate() as st:
            g = lookup.find_gpu(st, gpu)
            if kind == "recovered":
                g.recovery_action, g.lost = codes.RECOVERY_ACTION_NONE, False
            else:
                action = recovery_action
                if action is None:
                    action = rules.recovery_action_of(kind, xid)
                if g.recovery_action == codes.RECOVERY_ACTION_NONE:
                    g.recovery_action = action
                g.lost = g.lost or kind == "gpu-lost"
            st.health_seq += 1
            st.health_events.append(
                HealthEventState(seq=st.health_seq, gpu_index=g.index, kind=kind, xid=xid)
            )
            del st.health_events[:-MAX_HEALTH_EVENTS]
            return st.health_seq

    def health_events_after(self, seq: int) -> tuple[list[tuple[str, HealthEventState]], int]:
        """Events newer than `seq` as (GPU UUID, event), and the newest seq."""
        with self._store.read() as st:
            events = [(st.gpus[e.gpu_index].uuid, e) for e in st.health_events if e.seq > seq]
            return events, st.health_seq

    # -- recovery action (NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) -------------------

    def recovery_action(self, gpu: GpuRef) -> int:
        """What the driver asks for before the GPU can be used again (0: nothing).

        NvmlError GPU_IS_LOST while the GPU is lost (fallen off the bus).
        """
        with self._store.read() as st:
            g = lookup.find_gpu(st, gpu)
            if g.lost:
                raise NvmlError(codes.ERROR_GPU_IS_LOST, f"{lookup.gpu_name(g)}: GPU is lost")
            return g.recovery_action

    def need_recovery(self, gpu: GpuRef, action: int, *, lost: bool = False) -> None:
        """Record a fault's recovery action; a pending action stays until the GPU is reset."""
        with self._store.mutate() as st:
            g = lookup.find_gpu(st, gpu)
            if g.recovery_action == codes.RECOVERY_ACTION_NONE:
                g.recovery_action = action
            g.lost = g.lost or lost

    def recover(self, gpu: GpuRef) -> None:
        """The GPU was reset by the admin and answers again: no recovery action pending.

        Unlike `reset_gpu` this keeps MIG instances and settings (a simulated
        node has no processes to lose them for); its running workloads end.
        """
        with self._store.mutate() as st:
            g = lookup.find_gpu(st, gpu)
            g.recovery_action = codes.RECOVERY_ACTION_NONE
            g.lost = False
            ended = {w.pid for w in _workloads_of(st, g)}
            st.workloads = [w for w in st.workloads if w.pid not in ended]

    # -- workloads (simulated CUDA processes, `dra-gpu sim workload`) ------------

    def workloads(self) -> list[WorkloadView]:
        with self._store.read() as st:
            return [views.workload_view(w) for w in st.workloads]

    def run_workload(
        self, device_uuid: str, pod_uid: str, *, sm_percent: int, memory_bytes: int
    ) -> WorkloadView:
        """Start a process of pod `pod_uid` on a GPU or MIG device, or change the one it runs.

        The device must exist and hold the memory (a GPU with MIG on runs
        processes only on its MIG devices); `sm_percent` is 0..100.
        """
        if not 0 <= sm_percent <= 100:
            raise ConfigError(f"SM utilization {sm_percent}: expected 0 to 100 percent")
        if memory_bytes < 0:
            raise ConfigError(f"memory {memory_bytes}: must not be negative")
        with self._store.mutate() as st:
            capacity = _device_memory(st, device_uuid)
            for g in st.gpus:
                holds = g.uuid == device_uuid or any(
                    ci.uuid == device_uuid for gi in g.gis for ci in gi.cis
                )
                if holds and g.pci_driver != pci_bus.NVIDIA_DRIVER:
                    raise ConfigError(
                        f"device {device_uuid}: its GPU is bound to {g.pci_driver or 'no driver'}, "
                        "not nvidia: no CUDA process can run on it"
                    )
            others = sum(
                w.memory_bytes
                for w in st.workloads
                if w.device_uuid == device_uuid and w.pod_uid != pod_uid
            )
            if others + memory_bytes > capacity:
                raise ConfigError(
                    f"device {device_uuid}: out of memory ({memory_bytes} bytes asked, "
                    f"{capacity - others} of {capacity} free)"
                )
            for w in st.workloads:
                if w.device_uuid == device_uuid and w.pod_uid == pod_uid:
                    w.sm_percent, w.memory_bytes = sm_percent, memory_bytes
                    return views.workload_view(w)
            workload = WorkloadState(
                pid=st.next_pid,
                device_uuid=device_uuid,
                pod_uid=pod_uid,
                sm_percent=sm_percent,
                memory_bytes=memory_bytes,
            )
            st.next_pid += 1
            st.workloads.append(workload)
            return views.workload_view(workload)

    def processes_on(self, device_uuid: str) -> list[WorkloadView]:
        """What `nvmlDeviceGetComputeRunningProcesses` lists for a GPU or MIG device handle.

        A GPU with MIG on answers for all of its MIG devices (NVML's aggregate
        view); NOT_FOUND for an unknown UUID.
        """
        with self._store.read() as st:
            uuids = _device_uuids(st, device_uuid)
            return [views.workload_view(w) for w in st.workloads if w.device_uuid in uuids]

    def utilization_samples(self, device_uuid: str) -> list[WorkloadView]:
        """The processes `nvmlDeviceGetProcessUtilization` reports: those using SMs.

        NOT_SUPPORTED on a MIG device and on a GPU with MIG on, as NVML says.
        """
        with self._store.read() as st:
            if _under_mig(st, device_uuid):
                raise NvmlError(
                    codes.ERROR_NOT_SUPPORTED,
                    f"{device_uuid}: per-process utilization is not supported with MIG",
                )
            return [
                views.workload_view(w)
                for w in st.workloads
                if w.device_uuid == device_uuid and w.sm_percent > 0
            ]

    def stop_workload(self, device_uuid: str, pod_uid: str) -> int | None:
        """End the process of `pod_uid` on the device; its pid, or None if none ran."""
        with self._store.mutate() as st:
            for w in st.workloads:
                if w.device_uuid == device_uuid and w.pod_uid == pod_uid:
                    st.workloads.remove(w)
                    return w.pid
        return None

    # -- helpers -------------------------------------------------------------

    def _delay(self, operation: str) -> None:
        """Simulated latency; runs before the lock is taken so other GPUs are not held up."""
        seconds = self.latency.get(operation, 0.0)
        if seconds > 0:
            self._sleep(seconds)


def _workloads_of(st: NodeState, g: GpuState) -> list[WorkloadState]:
    """The workloads on GPU `g` or on one of its MIG devices."""
    uuids = {g.uuid} | {ci.uuid for gi in g.gis for ci in gi.cis}
    return [w for w in st.workloads if w.device_uuid in uuids]


def _device_memory(st: NodeState, device_uuid: str) -> int:
    """Memory of a GPU with MIG off, or of a MIG device; NOT_FOUND / ConfigError otherwise."""
    for g in st.gpus:
        if g.uuid == device_uuid:
            if g.model.mig_capable and g.mig_current:
                raise ConfigError(
                    f"{lookup.gpu_name(g)}: MIG is enabled; processes run on its MIG devices"
                )
            return g.model.memory_bytes
        for gi in g.gis:
            for ci in gi.cis:
                if ci.uuid == device_uuid:
                    return lookup.find_gi_profile(g, gi.profile_id).memory_mib * 2**20
    raise NvmlError(codes.ERROR_NOT_FOUND, f"no GPU or MIG device with UUID {device_uuid}")


def _device_uuids(st: NodeState, device_uuid: str) -> set[str]:
    """The device UUIDs a handle of `device_uuid` covers: itself, or a MIG-on GPU's MIG devices."""
    for g in st.gpus:
        if g.uuid == device_uuid:
            if g.model.mig_capable and g.mig_current:
                return {ci.uuid for gi in g.gis for ci in gi.cis} or {"-"}
            return {g.uuid}
        if any(ci.uuid == device_uuid for gi in g.gis for ci in gi.cis):
            return {device_uuid}
    raise NvmlError(codes.ERROR_NOT_FOUND, f"no GPU or MIG device with UUID {device_uuid}")


def _under_mig(st: NodeState, device_uuid: str) -> bool:
    """Whether `device_uuid` is a MIG device or a GPU with MIG on (NOT_FOUND if neither exists)."""
    _device_uuids(st, device_uuid)
    for g in st.gpus:
        if g.uuid == device_uuid:
            return g.model.mig_capable and g.mig_current
    return True
