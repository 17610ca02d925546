"""Device health: from NVML events to per-device health, taints and messages.

Pure logic, no I/O: the kubelet plugin's monitor (`kubelet_plugin.health_monitor`)
feeds it the events an NVML backend reports and publishes what it decides.

Rules (NVIDIA's DRA driver, PR #1441, upstream-facts §5.3):

* An Xid event is classified by the GPU's recovery action, read from the
  physical GPU (`NVML_FI_DEV_GET_GPU_RECOVERY_ACTION`) when the event comes:
  an Xid the admin listed in `--additional-xids-to-ignore` is ignored; an
  action of NONE or RECOVER_IMEX_DOMAIN means the GPU needs nothing, so the
  Xid is ignored; any other action makes the GPU unhealthy. Where the driver
  cannot report the action (before R565), the old rule stands: Xids that
  application errors cause (13, 31, 43, 45, 68, 109) are ignored, others
  make the GPU unhealthy.
* A double-bit ECC error and a lost GPU (fallen off the bus) make it unhealthy.
* Recovery (`recovery_action_seen`, polled): a faulty GPU whose recovery
  action reads NONE again (it was reset, and answers) is healthy again, so
  its taint goes without a plugin restart; a GPU that reports an action
  other than NONE or RECOVER_IMEX_DOMAIN without an event (missed while the
  plugin was down) becomes unhealthy. A `RECOVERED` event (the simulator's)
  makes it healthy as well.
* The latest fault wins; one taint per device.
* Health belongs to the physical GPU: its MIG devices (static, or dynamic
  partitionable ones) share it, whatever GI/CI NVML attributes the event to,
  because a fatal Xid takes the whole GPU down.

An unhealthy device carries the taint `gpu.nvidia.com/unhealthy=<reason>` with
the configured effect (`NoSchedule` by default, `NoExecute` to also evict), and
its `timeAdded` is the time of the fault, so republishing does not change it.
"""

from __future__ import annotations

import datetime
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml import codes
from dra_driver.hardware.nvml.interface import HealthEvent, HealthEventKind
from dra_driver.node.devices import AllocatableDevice

TAINT_KEY: Final = "gpu.nvidia.com/unhealthy"

DEFAULT_IGNORED_XIDS: Final = frozenset({13, 31, 43, 45, 68, 109})
"""Xids caused by applications, not the GPU: ignored when the recovery action is unknown."""

HARMLESS_RECOVERY_ACTIONS: Final = frozenset(
    {codes.RECOVERY_ACTION_NONE, codes.RECOVERY_ACTION_RECOVER_IMEX_DOMAIN}
)
"""Recovery actions that leave the GPU usable (NVIDIA: non-fatal)."""


def recovery_action_name(action: int) -> str:
    return codes.RECOVERY_ACTION_NAMES.get(action, f"action {action}")


TAINT_EFFECTS: Final = ("NoSchedule", "NoExecute")

# What the well-known fatal Xids mean (NVIDIA's Xid catalogue), for messages.
XID_MEANINGS: Final[Mapping[int, str]] = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


@dataclass(frozen=True)
class Fault:
    """Why a GPU is unhealthy: `reason` is a taint value, `message` is for people."""

    reason: str
    message: str
    since: int  # Unix seconds

    @property
    def time_added(self) -> str:
        """`since` as the RFC 3339 time a taint's `timeAdded` holds."""
        moment = datetime.datetime.fromtimestamp(self.since, tz=datetime.UTC)
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class HealthPolicy:
    """The admin's choices: which Xids to ignore and what the taint does.

    `ignored_xids` are the admin's (`--additional-xids-to-ignore`); the
    application Xids of `DEFAULT_IGNORED_XIDS` apply only where the recovery
    action is unknown.
    """

    ignored_xids: frozenset[int] = frozenset()
    taint_effect: str = "NoSchedule"

    def __post_init__(self) -> None:
        if self.taint_effect not in TAINT_EFFECTS:
            raise ConfigError(
                f"taint effect {self.taint_effect!r}: must be one of {', '.join(TAINT_EFFECTS)}"
            )

    def fault_of(
        self, event: HealthEvent, now: int, recovery_action: int | None = None
    ) -> Fault | None:
        """The fault an event reports, or None when it reports none (ignored, recovered).

        `recovery_action` is the GPU's when the event came (None: unknown).
        """
        if event.kind is HealthEventKind.XID:
            xid = event.xid if event.xid is not None else 999
            if xid in self.ignored_xids:
                return None
            if recovery_action is None:
                if xid in DEFAULT_IGNORED_XIDS:
                    return None
            elif recovery_action in HARMLESS_RECOVERY_ACTIONS:
                return None
            meaning = XID_MEANINGS.get(xid)
            text = f"Xid {xid}" + (f" ({meaning})" if meaning else "")
            if recovery_action is not None:
                text += f"; the driver asks for {recovery_action_name(recovery_action)}"
            return Fault(reason=f"xid-{xid}", message=f"{text} on GPU {event.gpu_uuid}", since=now)
        if event.kind is HealthEventKind.DOUBLE_BIT_ECC:
            return Fault(
                reason="double-bit-ecc",
                message=f"double-bit ECC error on GPU {event.gpu_uuid}",
                since=now,
            )
        if event.kind is HealthEventKind.GPU_LOST:
            return Fault(
                reason="gpu-lost",
                message=f"GPU {event.gpu_uuid} is lost (fallen off the bus or unreachable)",
                since=now,
            )
        return None


def parse_xid_list(text: str) -> frozenset[int]:
    """`"13,31"` -> {13, 31}; ConfigError naming the bad entry."""
    out: set[int] = set()
    for raw in text.split(","):
        part = raw.strip()
        if not part:
            continue
        if not part.isdigit():
            raise ConfigError(f"Xid list {text!r}: {part!r} is not an Xid number")
        out.add(int(part))
    return frozenset(out)


class NodeHealth:
    """The faults of a node's GPUs, keyed by GPU UUID. Not thread-safe."""

    def __init__(self, policy: HealthPolicy) -> None:
        self.policy = policy
        self._faults: dict[str, Fault] = {}

    @property
    def faults(self) -> Mapping[str, Fault]:
        return dict(self._faults)

    def apply(self, event: HealthEvent, now: int, recovery_action: int | None = None) -> bool:
        """Take one event into account; True when a GPU's health changed.

        `recovery_action` is the GPU's when the event came (None: unknown).
        """
        if event.kind is HealthEventKind.RECOVERED:
            return self._faults.pop(event.gpu_uuid, None) is not None
        fault = self.policy.fault_of(event, now, recovery_action)
        if fault is None:
            return False
        current = self._faults.get(event.gpu_uuid)
        if current is not None and current.reason == fault.reason:
            return False  # the same fault again: keep its first time
        self._faults[event.gpu_uuid] = fault
        return True

    def recovery_action_seen(self, gpu_uuid: str, action: int, now: int) -> bool:
        """Take a polled recovery action into account; True when the GPU's health changed.

        NONE (or RECOVER_IMEX_DOMAIN) clears the GPU's fault: it was reset and
        answers. Any other action marks a healthy GPU unhealthy (an event was
        missed, e.g. while the plugin was down); an existing fault stays as it is.
        """
        if action in HARMLESS_RECOVERY_ACTIONS:
            return self._faults.pop(gpu_uuid, None) is not None
        if gpu_uuid in self._faults:
            return False
        name = recovery_action_name(action)
        self._faults[gpu_uuid] = Fault(
            reason=f"recovery-{name}" if action in codes.RECOVERY_ACTION_NAMES else "recovery",
            message=f"GPU {gpu_uuid} needs recovery: the driver asks for {name}",
            since=now,
        )
        return True


def device_faults(
    devices: Iterable[AllocatableDevice], faults: Mapping[str, Fault]
) -> dict[str, Fault]:
    """Device name -> fault of every device whose GPU (or parent GPU) is faulty."""
    return {device.name: faults[device.gpu.uuid] for device in devices if device.gpu.uuid in faults}


def device_taints(
    devices: Iterable[AllocatableDevice], faults: Mapping[str, Fault], effect: str
) -> dict[str, list[dict[str, Any]]]:
    """Device name -> the `taints` list its ResourceSlice entry carries."""
    return {
        name: [
            {
                "key": TAINT_KEY,
                "value": fault.reason,
                "effect": effect,
                "timeAdded": fault.time_added,
            }
        ]
        for name, fault in device_faults(devices, faults).items()
    }
