"""What the plugin found and did at start-up (`GpuDriver.recover`), for its log and the tests."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class RecoveryReport:
    """Claim UIDs, file paths or device UUIDs, one list per kind of repair.

    The driver fills in the checkpoint's and the CDI directory's; each
    sharing strategy (`kubelet_plugin.sharing`) its own: time-slicing
    `sharing_problems`, MPS the `mps_*` lists.
    """

    checkpoint_rebuilt: bool = False
    """The checkpoint was damaged or unreadable and rebuilt: it may lack held claims."""
    discarded_after_reboot: int = 0
    quarantined: list[str] = field(default_factory=list)
    rebuilt: list[str] = field(default_factory=list)
    rebuilt_but_gone: list[str] = field(default_factory=list)
    temp_files_removed: list[str] = field(default_factory=list)
    orphan_cdi_specs_removed: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    unprepare_finished: list[str] = field(default_factory=list)
    missing_mig_devices: list[str] = field(default_factory=list)
    rollback_failed: list[str] = field(default_factory=list)
    sharing_problems: list[str] = field(default_factory=list)
    mps_adopted: list[str] = field(default_factory=list)
    mps_restarted: list[str] = field(default_factory=list)
    mps_orphans_stopped: list[str] = field(default_factory=list)
    mps_failed: list[str] = field(default_factory=list)
