"""MPS (CUDA Multi-Process Service) sharing: the rules, without any I/O.

dra-gpu runs one MPS control daemon per GPU or MIG device, shared by every
claim that asks for MPS on that device (NVIDIA's driver runs one per claim,
so two claims can never share a device through MPS). Each claim gets its own
limits as client environment variables in its CDI spec; the daemon's
defaults are the ceiling: the largest limits any claim on the device may
use, so a process that drops its environment still cannot take more than
the most generous claim.

A claim's limits come from its `mpsConfig` (`defaultActiveThreadPercentage`,
`defaultPinnedDeviceMemoryLimit`, `defaultPerDevicePinnedMemoryLimit`) and,
with consumable shares, from what the allocation says it consumed: its
fraction of the device's `shares` becomes its thread percentage, its
`memory` its pinned-memory limit. When both apply, the smaller wins. This is
how shares become enforced rather than advisory.

A claim's container talks to exactly one daemon (one `CUDA_MPS_PIPE_DIRECTORY`),
so a claim may use MPS on one device only (refused otherwise, see
`one_mps_device_per_claim`). Inside the container the device is ordinal 0,
which is what `CUDA_MPS_PINNED_DEVICE_MEM_LIMIT` is keyed by.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final

from dra_driver.container import cdi
from dra_driver.errors import ClaimError
from dra_driver.kube.quantity import parse_quantity

if TYPE_CHECKING:
    from dra_driver.claims.device_config_models import MpsConfig

MPS_DIR: Final = "mps"
"""Sub-directory of the plugin's data directory that holds one directory per daemon."""
PID_FILE: Final = "nvidia-cuda-mps-control.pid"
"""Written by the control daemon into its pipe directory."""
CONTAINER_PIPE_DIR: Final = "/tmp/nvidia-mps"
CONTAINER_SHM_DIR: Final = "/dev/shm"
MIB: Final = 2**20
_MOUNT_OPTIONS: Final = ("rw", "nosuid", "nodev", "bind")


@dataclass(frozen=True)
class DaemonPaths:
    """Where the daemon serving one device keeps its files: `<root>/<device uuid>/...`."""

    root: Path

    @classmethod
    def of(cls, mps_root: Path, device_uuid: str) -> DaemonPaths:
        return cls(mps_root / device_uuid)

    @property
    def device_uuid(self) -> str:
        return self.root.name

    @property
    def pipe(self) -> Path:
        return self.root / "pipe"

    @property
    def log(self) -> Path:
        return self.root / "log"

    @property
    def shm(self) -> Path:
        return self.root / "shm"

    @property
    def pid_file(self) -> Path:
        return self.pipe / PID_FILE


@dataclass(frozen=True)
class MpsLimits:
    """What one MPS client may use: a share of the SMs and of the device memory.

    None means "no limit of this kind".
    """

    active_thread_percentage: int | None = None
    pinned_memory_mib: int | None = None

    def client_env(self) -> tuple[str, ...]:
        """The claim's own limits, as environment variables for its containers."""
        env = []
        if self.active_thread_percentage is not None:
            env.append(f"CUDA_MPS_ACTIVE_THREAD_PERCENTAGE={self.active_thread_percentage}")
        if self.pinned_memory_mib is not None:
            env.append(f"CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0={self.pinned_memory_mib}M")
        return tuple(env)


def daemon_ceiling(claims: Iterable[MpsLimits], device_memory_mib: int) -> MpsLimits:
    """The daemon's defaults for a device: the most any claim on it may use.

    A claim without a limit of a kind lifts that kind to the whole device
    (100 %, all its memory).
    """
    percentages = [c.active_thread_percentage or 100 for c in claims]
    memories = [c.pinned_memory_mib or device_memory_mib for c in claims]
    return MpsLimits(
        active_thread_percentage=max(percentages, default=100),
        pinned_memory_mib=max(memories, default=device_memory_mib),
    )


def control_commands(limits: MpsLimits, device_uuid: str) -> tuple[str, ...]:
    """The control-shell lines that set a daemon's defaults to `limits`."""
    lines = []
    if limits.active_thread_percentage is not None:
        lines.append(f"set_default_active_thread_percentage {limits.active_thread_percentage}")
    if limits.pinned_memory_mib is not None:
        limit = f"{limits.pinned_memory_mib}M"
        lines.append(f"set_default_device_pinned_mem_limit {device_uuid} {limit}")
    return tuple(lines)


def check_mps_config(config: MpsConfig, where: str) -> None:
    """Refuse what a decoded mpsConfig may hold but no device can apply (ClaimError naming
    `where`); the admission check runs it too, as no device is needed to tell."""
    if config.default_active_thread_percentage == 0:
        raise ClaimError(f"{where}: defaultActiveThreadPercentage must be 1..100, not 0")


def claim_limits(
    config: MpsConfig | None,
    *,
    device_uuid: str,
    device_index: int,
    capacity: Mapping[str, int],
    consumed: Mapping[str, str],
    where: str,
) -> MpsLimits:
    """A claim's limits on one device, from its mpsConfig and what it consumed.

    `device_index` is the device's position among the claim's results (the
    index `defaultPerDevicePinnedMemoryLimit` may be keyed by, as in NVIDIA's
    driver; a UUID key works too). `capacity` is the device's published
    capacity, `consumed` the result's `consumedCapacity`. ClaimError names
    `where` for values that cannot be applied.
    """
    percentage: int | None = None
    memory: int | None = None
    if config is not None:
        check_mps_config(config, where)
        percentage = config.default_active_thread_percentage
        if config.default_pinned_device_memory_limit is not None:
            memory = _mib(config.default_pinned_device_memory_limit)
        per_device = config.default_per_device_pinned_memory_limit or {}
        for key in (device_uuid, str(device_index)):
            if key in per_device:
                memory = _mib(per_device[key])
                break
    shares_total = capacity.get("shares")
    if "shares" in consumed and shares_total:
        share = math.floor(100 * parse_quantity(consumed["shares"]).value / shares_total)
        if share < 1:
            raise ClaimError(
                f"{where}: consumed {consumed['shares']} of {shares_total} shares, "
                "less than 1% of the device's threads"
            )
        percentage = share if percentage is None else min(percentage, share)
    if "memory" in consumed:
        consumed_mib = _mib(consumed["memory"])
        if consumed_mib > 0:
            memory = consumed_mib if memory is None else min(memory, consumed_mib)
    if percentage is not None:
        percentage = min(percentage, 100)
    return MpsLimits(active_thread_percentage=percentage, pinned_memory_mib=memory)


def container_edits(paths: DaemonPaths, limits: MpsLimits) -> cdi.ContainerEdits:
    """What a claim's containers need to be an MPS client of the daemon at `paths`."""
    return cdi.ContainerEdits(
        env=(f"CUDA_MPS_PIPE_DIRECTORY={CONTAINER_PIPE_DIR}", *limits.client_env()),
        mounts=(
            cdi.Mount(str(paths.shm), CONTAINER_SHM_DIR, options=_MOUNT_OPTIONS),
            cdi.Mount(str(paths.pipe), CONTAINER_PIPE_DIR, options=_MOUNT_OPTIONS),
        ),
    )


def one_mps_device_per_claim(ref: str, mps_devices: Iterable[str]) -> None:
    """Refuse a claim that asks for MPS on more than one device (see the module docstring)."""
    names = sorted(set(mps_devices))
    if len(names) > 1:
        raise ClaimError(
            f"{ref}: asks for MPS on {len(names)} devices ({', '.join(names)}); a container "
            "reaches one MPS control daemon, so request each MPS device in its own claim"
        )


def _mib(quantity: str) -> int:
    return math.floor(parse_quantity(quantity).value / MIB)
