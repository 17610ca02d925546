"""Creating and destroying dynamic MIG devices, one recorded step at a time.

A dynamic MIG device becomes real at Prepare: MIG mode on (Hopper and
newer switch it without a reset), a GPU instance at the allocated placement,
then the compute instance whose profile fills it. The filling CI profile is
looked up from NVML (`compute_instance_profiles`), never guessed from the GI
name, so asymmetric profiles such as the H100's 1g.20gb get their CI profile
7 with all 26 SMs (NVIDIA's driver creates a 16-SM CI there).

Each id is handed to `progress` as soon as NVML returns it, so the caller
can checkpoint it before the next step; a crash at any point leaves a record
from which `destroy` (by id) or `find_unrecorded` (by profile and placement,
for a GI created just before the crash) can clean up. Callers hold the GPU's
lock around every call here.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext

from dra_driver import failpoints
from dra_driver.claims.checkpoint import MigRecord
from dra_driver.errors import ClaimError, NvmlError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import MigDeviceInfo, Nvml, Placement
from dra_driver.planning.plan import MigTarget
from kubelet_plugin.metrics import PluginMetrics

log = logging.getLogger(__name__)


class MigLifecycle:
    """The MIG side effects of Prepare and Unprepare, through the NVML interface."""

    def __init__(
        self,
        nvml: Nvml,
        *,
        disable_mig_when_empty: bool = True,
        metrics: PluginMetrics | None = None,
    ) -> None:
        self._nvml = nvml
        self._disable_mig_when_empty = disable_mig_when_empty
        self._metrics = metrics

    def _measured(self, operation: str) -> AbstractContextManager[None]:
        if self._metrics is None:
            return nullcontext()
        return self._metrics.mig_operation(operation)

    def create(
        self, target: MigTarget, progress: Callable[[MigRecord], None]
    ) -> tuple[MigRecord, MigDeviceInfo]:
        """Create the GI and CI of `target`; report each id through `progress`.

        Raises ClaimError (after undoing its own partial work) when the
        hardware refuses, naming the GPU, profile and placement.
        """
        with self._measured("create"):
            return self._create(target, progress)

    def _create(
        self, target: MigTarget, progress: Callable[[MigRecord], None]
    ) -> tuple[MigRecord, MigDeviceInfo]:
        where = (
            f"MIG device {target.device_name} ({target.profile_name} at memory slices "
            f"{target.placement.start}..{target.placement.start + target.placement.size - 1} "
            f"of GPU {target.parent_uuid})"
        )
        self.ensure_mig_mode(target.parent_uuid, enabled=True, where=where)
        record = target.planned_record()
        try:
            gi = self._nvml.create_gpu_instance(
                target.parent_uuid, target.gi_profile_id, target.placement
            )
        except NvmlError as exc:
            if exc.code == codes.ERROR_INSUFFICIENT_RESOURCES:
                raise ClaimError(
                    f"{where}: the placement is occupied by another GPU instance or the "
                    f"profile's instance count is used up ({exc})"
                ) from exc
            raise ClaimError(f"{where}: creating the GPU instance failed: {exc}") from exc
        failpoints.hit("mig-after-gi-created")
        record = record.with_gpu_instance(gi.id)
        try:
            progress(record)
        except Exception:
            self._destroy_gi(target.parent_uuid, gi.id)  # unrecorded: nobody else could find it
            raise
        try:
            mig = self._nvml.create_compute_instance(
                target.parent_uuid, gi.id, target.ci_profile_id
            )
        except NvmlError as exc:
            error = ClaimError(f"{where}: creating the compute instance failed: {exc}")
            try:
                self._destroy_gi(target.parent_uuid, gi.id)
            except NvmlError as undo:  # the GI is recorded: the caller's rollback retries it
                log.error("%s: destroying GI %d after the failure failed: %s", where, gi.id, undo)
            raise error from exc
        failpoints.hit("mig-after-ci-created")
        record = record.with_compute_instance(mig.compute_instance_id, mig.uuid)
        progress(record)
        log.info("%s: created GI %d, CI %d, %s", where, gi.id, mig.compute_instance_id, mig.uuid)
        return record, mig

    def find_unrecorded(self, record: MigRecord) -> MigRecord:
        """Fill in the GI id of a GI created just before a crash, if it exists."""
        if record.gi_id is not None or not record.created_by_us:
            return record
        placement = Placement(record.placement_start, record.placement_size)
        try:
            instances = self._nvml.gpu_instances(record.parent_uuid)
        except NvmlError as exc:
            if exc.code == codes.ERROR_NOT_SUPPORTED:  # MIG is off: nothing was created
                return record
            raise
        for gi in instances:
            if gi.profile_id == record.profile_id and gi.placement == placement:
                return record.with_gpu_instance(gi.id)
        return record

    def destroy(self, record: MigRecord) -> None:
        """Destroy what `record` says we created: every CI of its GI, then the GI.

        Missing instances count as destroyed, so repeating it is harmless. A GI
        whose id now names another profile or placement is not ours: it stays.
        """
        if not record.created_by_us or record.gi_id is None:
            return
        with self._measured("destroy"):
            self._destroy(record)

    def _destroy(self, record: MigRecord) -> None:
        if record.gi_id is None:
            return
        uuid, gi_id = record.parent_uuid, record.gi_id
        if not self._is_recorded_instance(record):
            return
        try:
            cis = self._nvml.compute_instances(uuid, gi_id)
        except NvmlError as exc:
            if exc.code in (codes.ERROR_NOT_FOUND, codes.ERROR_NOT_SUPPORTED):
                return  # the GI (or MIG mode) is already gone
            raise
        for ci in cis:
            try:
                self._nvml.destroy_compute_instance(uuid, gi_id, ci.id)
            except NvmlError as exc:
                if exc.code != codes.ERROR_NOT_FOUND:
                    raise
        failpoints.hit("mig-after-ci-destroyed")
        self._destroy_gi(uuid, gi_id)
        failpoints.hit("mig-after-gi-destroyed")
        log.info("destroyed GI %d on GPU %s", gi_id, uuid)

    def ensure_mig_mode(self, uuid: str, *, enabled: bool, where: str) -> None:
        """Switch MIG mode where the GPU allows it without a reset, or explain why not."""
        gpu = self._nvml.gpu(uuid)
        if gpu.mig_enabled == enabled:
            return
        action = "on" if enabled else "off"
        if not gpu.mig_toggle_supported:
            raise ClaimError(
                f"{where}: MIG mode is {'off' if enabled else 'on'} on this {gpu.architecture} GPU "
                f"({gpu.product_name}); switching it {action} needs a GPU reset, so dra-gpu leaves "
                f"it to the admin (nvidia-smi -i {gpu.index} -mig {int(enabled)}, then a reset)"
            )
        status = self._nvml.set_mig_mode(uuid, enabled)
        if status != codes.SUCCESS:
            raise ClaimError(
                f"{where}: switching MIG mode {action} returned "
                f"{codes.ERROR_STRINGS.get(status, str(status))} ({status})"
            )
        log.info("GPU %s: MIG mode %s", uuid, action)
        if enabled:
            failpoints.hit("mig-after-mig-enabled")

    def release_gpu(self, uuid: str) -> None:
        """After the last dynamic MIG device of a GPU is gone, turn MIG off (Hopper+)."""
        if not self._disable_mig_when_empty:
            return
        gpu = self._nvml.gpu(uuid)
        if not gpu.mig_enabled or not gpu.mig_toggle_supported:
            return
        if self._nvml.gpu_instances(uuid):
            return
        status = self._nvml.set_mig_mode(uuid, False)
        if status != codes.SUCCESS:
            log.warning(
                "GPU %s is empty but MIG mode stays on: %s (%d)",
                uuid,
                codes.ERROR_STRINGS.get(status, str(status)),
                status,
            )
        else:
            log.info("GPU %s: no MIG devices left, MIG mode off", uuid)
            failpoints.hit("mig-after-mig-disabled")

    def instances(self) -> list[tuple[str, int, str]]:
        """Every GPU instance on the node: (parent UUID, GI id, profile name)."""
        found = []
        for gpu in self._nvml.gpus():
            if not gpu.mig_enabled:
                continue
            names = {p.id: p.name for p in self._nvml.gpu_instance_profiles(gpu.uuid)}
            for gi in self._nvml.gpu_instances(gpu.uuid):
                found.append((gpu.uuid, gi.id, names.get(gi.profile_id, str(gi.profile_id))))
        return found

    def destroy_instance(self, uuid: str, gi_id: int) -> None:
        """Destroy a GPU instance and its compute instances, whoever made them."""
        for ci in self._nvml.compute_instances(uuid, gi_id):
            self._nvml.destroy_compute_instance(uuid, gi_id, ci.id)
        self._destroy_gi(uuid, gi_id)

    def _is_recorded_instance(self, record: MigRecord) -> bool:
        """Whether the GI `record` names still exists and is the one we created.

        A GI id is reused once its instance is gone: if someone else destroyed
        ours, the id may now name another profile or placement (an admin's
        instance), which must be left alone.
        """
        try:
            instances = self._nvml.gpu_instances(record.parent_uuid)
        except NvmlError as exc:
            if exc.code in (codes.ERROR_NOT_FOUND, codes.ERROR_NOT_SUPPORTED):
                return False  # MIG mode (and with it every instance) is gone
            raise
        found = next((gi for gi in instances if gi.id == record.gi_id), None)
        if found is None:
            return False
        placement = Placement(record.placement_start, record.placement_size)
        if found.profile_id != record.profile_id or found.placement != placement:
            log.warning(
                "GPU %s: GI %d is now profile %d at slices %d+%d, not the instance we created "
                "(profile %d at %d+%d); leaving it alone",
                record.parent_uuid,
                found.id,
                found.profile_id,
                found.placement.start,
                found.placement.size,
                record.profile_id,
                record.placement_start,
                record.placement_size,
            )
            return False
        return True

    def _destroy_gi(self, uuid: str, gi_id: int) -> None:
        try:
            self._nvml.destroy_gpu_instance(uuid, gi_id)
        except NvmlError as exc:
            if exc.code not in (codes.ERROR_NOT_FOUND, codes.ERROR_NOT_SUPPORTED):
                raise
