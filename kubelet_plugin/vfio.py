"""VFIO passthrough: a claimed GPU moves from the nvidia driver to vfio-pci and back, crash safe.

With `--passthrough` the node publishes a `gpu-vfio-<idx>` device per GPU
(`dra_driver.node.vfio_devices`); a claim for one gives a VM (KubeVirt) the
GPU's VFIO node instead of the NVIDIA driver. `VfioPassthrough` is driven by
the claim transaction (`kubelet_plugin.driver`) like a sharing strategy:

Prepare (`apply`), per GPU, under its lock, after the plan recorded the GPU
(`dra_driver.planning.vfio`):

1. refuse while NVML shows processes on the GPU, and refuse a GPU some other
   driver holds (one bound to vfio-pci by someone else is never touched);
2. record the GPU as `taken` (from here a rollback must bring it back);
3. NVIDIA's driver change (`nvpassthrough` `changeDriver`): clear
   `driver_override`, unbind from nvidia, set `driver_override` to vfio-pci,
   bind to vfio-pci;
4. wait for udev to make its node (`/dev/vfio/<group>`, or
   `/dev/vfio/devices/vfio<N>` with iommufd), then record the group and cdev,
   from which the CDI spec is built (`dra_driver.container.vfio_cdi`).

Unprepare and rollback (`release`): the same change back to nvidia, then
`driver_override` cleared, for every GPU the claim `taken`, whatever step
it reached. Each step is idempotent and starts from what sysfs shows, so a
crash between any two is repaired by running `release` again at start-up
(the driver rolls back half-prepared claims). A failure at any step makes
the claim fail with the step's error after the rollback.

While a GPU is passed through, its other devices (whole GPU, MIG, shares)
are refused to other claims (the plan sees the vfio device as the whole
GPU) and withdrawn from the slices (`hidden_siblings`); `on_change` tells
the publisher.

Not done (NVIDIA does them): turning persistence mode off while
nvidia-persistenced runs, checking SR-IOV VFs, picking a vfio-pci variant
module (nvgrace_gpu_vfio_pci) from modules.alias, and unbinding a VGA
GPU's audio function.

The nvidia driver does not let go of a GPU a process has open, and this
plugin keeps NVML initialized (NVIDIA's initializes it around each
operation): the driver changes run with NVML released
(`Hardware.release_nvml`, `RealNvml.released`), and `--passthrough` needs
the NVML health monitor off, as NVIDIA's gates do. Not yet run on a GPU node.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from dra_driver import failpoints
from dra_driver.claims.checkpoint import Checkpoint, ClaimEntry, ClaimState, VfioRecord
from dra_driver.errors import DraGpuError, NvmlError, PassthroughError
from dra_driver.hardware.nvml.interface import Nvml
from dra_driver.hardware.pci_sysfs import NVIDIA_DRIVER, VFIO_DRIVER, PciSysfs
from dra_driver.planning.plan import ClaimPlan
from dra_driver.planning.vfio import plan_vfio
from kubelet_plugin.gpu_locks import GpuLocks
from kubelet_plugin.recovery_report import RecoveryReport
from kubelet_plugin.sharing import SharingFactory
from kubelet_plugin.sharing.strategy import ClaimBook, SharingStrategy

log = logging.getLogger(__name__)

(
    TAKEN_FAILPOINT,
    OVERRIDE_CLEARED_FAILPOINT,
    UNBOUND_FAILPOINT,
    OVERRIDE_SET_FAILPOINT,
    BOUND_FAILPOINT,
    NODE_RECORDED_FAILPOINT,
) = failpoints.VFIO_PREPARE_STEPS
RELEASE_UNBOUND_FAILPOINT, RELEASE_BOUND_FAILPOINT = failpoints.VFIO_UNPREPARE_STEPS

NODE_TIMEOUT_S = 10.0
"""How long Prepare waits for udev to make a GPU's VFIO node after the bind."""
_FIRST_POLL_S = 0.005
_MAX_POLL_S = 0.1


class VfioPassthrough:
    """`SharingStrategy`-shaped driver of VFIO passthrough (see the module docstring)."""

    def __init__(
        self,
        pci: PciSysfs,
        nvml: Nvml,
        gpu_locks: GpuLocks,
        book: ClaimBook,
        *,
        on_change: Callable[[], None] | None = None,
        node_timeout: float = NODE_TIMEOUT_S,
        release_nvml: Callable[[], AbstractContextManager[None]] = nullcontext,
    ) -> None:
        self._pci = pci
        self._nvml = nvml
        self._release_nvml = release_nvml
        self._gpu_locks = gpu_locks
        self._book = book
        self._on_change = on_change
        self._node_timeout = node_timeout

    def plan(self, plan: ClaimPlan, placed: Checkpoint) -> ClaimPlan:
        return plan_vfio(plan, placed)

    def apply(self, plan: ClaimPlan, entry: ClaimEntry) -> None:  # noqa: ARG002 (protocol)
        for index, device in enumerate(entry.devices):
            if device.vfio is None:
                continue
            with self._gpu_locks.hold([device.vfio.gpu_uuid]):
                self._bind(entry, index, device.vfio)
            log.info(
                "%s: GPU %s (%s) bound to %s",
                entry.ref,
                device.vfio.pci_bus_id,
                device.device,
                VFIO_DRIVER,
            )
        self._changed()

    def release(self, entry: ClaimEntry) -> None:
        records = [d.vfio for d in entry.devices if d.vfio is not None and d.vfio.taken]
        for record in records:
            with self._gpu_locks.hold([record.gpu_uuid]):
                self._restore(record)
            log.info(
                "%s: GPU %s back on the %s driver", entry.ref, record.pci_bus_id, NVIDIA_DRIVER
            )
        if records:
            self._changed()

    def recover(self, checkpoint: Checkpoint, report: RecoveryReport) -> None:
        """Report prepared passthrough GPUs that vfio-pci no longer holds (a VM that lost its
        GPU must be restarted; nothing here can give it back)."""
        for entry in checkpoint.in_state(ClaimState.PrepareCompleted):
            for device in entry.devices:
                record = device.vfio
                if record is None or not record.taken:
                    continue
                driver = self._pci.driver(record.pci_bus_id)
                if driver != VFIO_DRIVER:
                    line = (
                        f"{entry.ref}: GPU {record.pci_bus_id} should be on {VFIO_DRIVER} for its "
                        f"VM but is on {driver or 'no driver'}"
                    )
                    log.error("%s", line)
                    report.sharing_problems.append(line)

    # -- Prepare ------------------------------------------------------------------

    def _bind(self, entry: ClaimEntry, index: int, record: VfioRecord) -> None:
        address = record.pci_bus_id
        where = f"{entry.ref}: GPU {address} ({record.gpu_uuid})"
        self._refuse_if_in_use(record, where)
        driver = self._pci.driver(address)
        if driver != NVIDIA_DRIVER:
            held = {
                VFIO_DRIVER: f"is bound to {VFIO_DRIVER} by someone else (not this plugin)",
                None: "is bound to no driver",
            }.get(driver, f"is bound to {driver}")
            raise PassthroughError(
                f"{where} {held}; dra-gpu only passes through GPUs it finds on the "
                f"{NVIDIA_DRIVER} driver and never touches others"
            )
        self._record(entry.uid, index, lambda vfio: dataclasses.replace(vfio, taken=True))
        failpoints.hit(TAKEN_FAILPOINT)
        try:
            with self._release_nvml():  # the nvidia driver lets go of no GPU a process has open
                self._pci.write_override(address, None)
                failpoints.hit(OVERRIDE_CLEARED_FAILPOINT)
                self._pci.unbind(address)
                failpoints.hit(UNBOUND_FAILPOINT)
                self._pci.write_override(address, VFIO_DRIVER)
                failpoints.hit(OVERRIDE_SET_FAILPOINT)
                self._pci.bind(address, VFIO_DRIVER)
        except PassthroughError as exc:
            raise PassthroughError(
                f"{where}: moving it to {VFIO_DRIVER} failed: {exc}", errno_code=exc.errno_code
            ) from exc
        failpoints.hit(BOUND_FAILPOINT)
        group, cdev = self._wait_for_node(record, where)
        self._record(
            entry.uid,
            index,
            lambda vfio: dataclasses.replace(vfio, iommu_group=group, iommufd_cdev=cdev),
        )
        failpoints.hit(NODE_RECORDED_FAILPOINT)

    def _refuse_if_in_use(self, record: VfioRecord, where: str) -> None:
        try:
            processes = self._nvml.running_compute_processes(record.gpu_uuid)
        except NvmlError as exc:
            raise PassthroughError(
                f"{where}: cannot tell whether processes use it ({exc}); not binding it away"
            ) from exc
        if processes:
            pids = ", ".join(str(p.pid) for p in sorted(processes, key=lambda p: p.pid))
            raise PassthroughError(
                f"{where} is in use by {len(processes)} process(es) (pid {pids}); a GPU in use "
                f"is never bound to {VFIO_DRIVER}: end them, or let the claim go elsewhere"
            )

    def _wait_for_node(self, record: VfioRecord, where: str) -> tuple[int, str | None]:
        """The GPU's IOMMU group and (with iommufd) cdev, once its node exists."""
        address = record.pci_bus_id
        group = self._pci.iommu_group(address)
        if group is None:
            raise PassthroughError(f"{where} has no IOMMU group: is the IOMMU on (intel_iommu=on)?")
        cdev = None
        if record.prefer_iommufd and self._pci.iommufd_enabled():
            cdev = self._pci.iommufd_cdev(address)
            if cdev is None:
                raise PassthroughError(f"{where}: bound to {VFIO_DRIVER} but has no iommufd cdev")
        node = self._pci.cdev_node(cdev) if cdev is not None else self._pci.group_node(group)
        deadline = time.monotonic() + self._node_timeout
        pause = _FIRST_POLL_S
        while not node.exists():
            if time.monotonic() >= deadline:
                raise PassthroughError(
                    f"{where}: bound to {VFIO_DRIVER}, but {node} did not appear within "
                    f"{self._node_timeout:g} s (is udev running?)"
                )
            time.sleep(pause)
            pause = min(pause * 2, _MAX_POLL_S)
        return group, cdev

    def _record(self, uid: str, index: int, change: Callable[[VfioRecord], VfioRecord]) -> None:
        def record_it(checkpoint: Checkpoint) -> Checkpoint:
            devices = list(checkpoint.claims[uid].devices)
            vfio = devices[index].vfio
            if vfio is None:
                raise PassthroughError(f"claim {uid}: device {index} has no passthrough record")
            devices[index] = dataclasses.replace(devices[index], vfio=change(vfio))
            return checkpoint.update_devices(uid, devices)

        self._book.update(record_it)

    # -- Unprepare and rollback ---------------------------------------------------

    def _restore(self, record: VfioRecord) -> None:
        """Bring the GPU back to nvidia from wherever a Prepare, Unprepare or crash left it."""
        address = record.pci_bus_id
        driver = self._pci.driver(address)
        if driver not in (None, NVIDIA_DRIVER, VFIO_DRIVER):
            raise PassthroughError(
                f"GPU {address} ({record.gpu_uuid}) is now bound to {driver}, which this plugin "
                "never binds: leaving it there"
            )
        with self._release_nvml():  # NVML sees the GPU again once initialized after the bind
            if driver == VFIO_DRIVER:
                self._pci.write_override(address, None)
                self._pci.unbind(address)
                failpoints.hit(RELEASE_UNBOUND_FAILPOINT)
            if self._pci.driver(address) is None:
                self._pci.write_override(address, NVIDIA_DRIVER)
                self._pci.bind(address, NVIDIA_DRIVER)
                failpoints.hit(RELEASE_BOUND_FAILPOINT)
            if self._pci.driver_override(address):
                self._pci.write_override(address, None)

    def _changed(self) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change()
        except DraGpuError as exc:  # republishing later is fine; the claim is done
            log.warning("could not announce a passthrough change: %s", exc)


def with_passthrough(
    sharing: SharingFactory,
    pci: PciSysfs,
    nvml: Nvml,
    gpu_locks: GpuLocks,
    *,
    on_change: Callable[[], None] | None = None,
    release_nvml: Callable[[], AbstractContextManager[None]] = nullcontext,
) -> SharingFactory:
    """The driver's strategies `sharing` builds, then VFIO passthrough (applied last, so a
    GPU leaves the nvidia driver only once every other step of the claim succeeded)."""

    def build(book: ClaimBook) -> tuple[SharingStrategy, ...]:
        return (
            *sharing(book),
            VfioPassthrough(
                pci, nvml, gpu_locks, book, on_change=on_change, release_nvml=release_nvml
            ),
        )

    return build
