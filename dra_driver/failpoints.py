"""Named crash points for crash-recovery testing.

Prepare and Unprepare call `failpoints.hit("<name>")` between their side
effects. In production nothing is set and the call is a dictionary lookup.
When the environment variable `DRA_GPU_FAILPOINTS` names the point (a comma
separated list), the process kills itself with SIGKILL right there, the way
an OOM kill or a node crash would stop it; `fail:<name>` makes it raise
`InjectedFailure` there instead (a failing step, for the rollback tests).
`DRA_GPU_FAILPOINTS_FILE` names a file whose lines arm points too, read at
every hit, so that a test can arm a point in a plugin that already runs (a
start costs the suite half a second). The crash tests arm each point in turn
in the real plugin process and check that a restart recovers without leaking
anything. `PREPARE_STEPS` and `UNPREPARE_STEPS` list every point of the claim
transaction, `MIG_PREPARE_STEPS` and `MIG_UNPREPARE_STEPS` every point of
dynamic MIG creation and destruction, `MPS_PREPARE_STEPS` and
`MPS_UNPREPARE_STEPS` every point of an MPS daemon's life, `SHARING_*_STEPS`
those of time-slicing, `VFIO_*_STEPS` those of VFIO passthrough,
`CD_PREPARE_STEPS` and `CD_UNPREPARE_STEPS` those of an IMEX channel claim of
the ComputeDomain plugin, so a new step cannot be added without the tests
covering it.

`IMEX_STANDIN_POINTS` are switches, not crash points: the simulated
`nvidia-imex` (`dra_driver.hardware.simulated.imex`) asks `armed_value` whether
one is armed (and with which `name:<value>`), in the same environment variable
and file, and then misbehaves the way a real daemon can.
"""

from __future__ import annotations

import functools
import os
import signal
from typing import Final

from dra_driver.errors import DraGpuError

ENV_VAR: Final = "DRA_GPU_FAILPOINTS"
FILE_ENV_VAR: Final = "DRA_GPU_FAILPOINTS_FILE"

PREPARE_STEPS: Final[tuple[str, ...]] = (
    "prepare-after-checkpoint-started",
    "prepare-after-cdi-written",
    "prepare-after-checkpoint-completed",
)
UNPREPARE_STEPS: Final[tuple[str, ...]] = (
    "unprepare-after-cdi-removed",
    "unprepare-after-checkpoint-removed",
)

# Dynamic MIG, per device, in execution order: they run between
# "prepare-after-checkpoint-started" and "prepare-after-cdi-written" (MIG mode
# is switched on only on a Hopper+ GPU that has it off; the GI id is
# checkpointed, then the CI id with the MIG UUID) ...
MIG_PREPARE_STEPS: Final[tuple[str, ...]] = (
    "mig-after-mig-enabled",
    "mig-after-gi-created",
    "mig-after-gi-created-recorded",
    "mig-after-ci-created",
    "mig-after-complete-recorded",
)
# ... and between "unprepare-after-cdi-removed" and
# "unprepare-after-checkpoint-removed" (MIG mode goes off only on a Hopper+
# GPU left without GPU instances).
MIG_UNPREPARE_STEPS: Final[tuple[str, ...]] = (
    "mig-after-ci-destroyed",
    "mig-after-gi-destroyed",
    "mig-after-mig-disabled",
)

# MPS, per device, between the MIG steps and "prepare-after-cdi-written": the
# claim's daemon intent is checkpointed, the MPS host answers for the daemon,
# its pid is checkpointed ...
MPS_PREPARE_STEPS: Final[tuple[str, ...]] = (
    "mps-after-intent-recorded",
    "mps-after-daemon-started",
    "mps-after-daemon-recorded",
)
# ... and on Unprepare, before the MIG steps: the claim's record is dropped from
# the checkpoint, then the host is told the remaining users (none: stop).
MPS_UNPREPARE_STEPS: Final[tuple[str, ...]] = (
    "mps-after-release-recorded",
    "mps-after-daemon-stopped",
)
# Time-slicing, per GPU: after the interval is set (between the dynamic MIG
# steps and "prepare-after-cdi-written"), and after it is reset to Default
# (after the MIG steps of Unprepare, or while rolling back).
SHARING_PREPARE_STEPS: Final[tuple[str, ...]] = ("timeslice-after-set",)
SHARING_UNPREPARE_STEPS: Final[tuple[str, ...]] = ("timeslice-after-reset",)

# VFIO passthrough, per GPU, after the sharing steps of Prepare: the GPU is
# recorded as taken, then NVIDIA's driver change (driver_override cleared, unbound
# from nvidia, driver_override vfio-pci, bound to vfio-pci), then its VFIO node is
# recorded ...
VFIO_PREPARE_STEPS: Final[tuple[str, ...]] = (
    "vfio-after-taken-recorded",
    "vfio-after-override-cleared",
    "vfio-after-unbound",
    "vfio-after-override-set",
    "vfio-after-bound",
    "vfio-after-node-recorded",
)
# ... and on Unprepare (or a rollback), after the sharing steps: unbound from
# vfio-pci, bound to nvidia again (driver_override cleared after).
VFIO_UNPREPARE_STEPS: Final[tuple[str, ...]] = (
    "vfio-after-release-unbound",
    "vfio-after-release-bound",
)


# The ComputeDomain plugin's channel claim (`kubelet_plugin.compute_domain.driver`):
# PrepareStarted (with the domain) is recorded, the node's ComputeDomainMember is
# created, the member is Ready and the CDI spec written, PrepareCompleted recorded ...
CD_PREPARE_STEPS: Final[tuple[str, ...]] = (
    "cd-prepare-after-checkpoint-started",
    "cd-prepare-after-member-created",
    "cd-prepare-after-cdi-written",
    "cd-prepare-after-checkpoint-completed",
)
# ... and on Unprepare: the CDI spec removed, the member deleted (with the node's last
# claim of the domain), the claim's entry removed.
CD_UNPREPARE_STEPS: Final[tuple[str, ...]] = (
    "cd-unprepare-after-cdi-removed",
    "cd-unprepare-after-member-deleted",
    "cd-unprepare-after-checkpoint-removed",
)

# The simulated IMEX daemon's switches (`armed_value`), each a way a real one fails: refuse to
# start ("No matching network interface", #289), die after `imex-crash-after:<seconds>` without
# telling peers, never answer a command (`nvidia-imex-ctl` hangs), identify itself as the next
# node ID (#1418), talk to a daemon of another domain (#1447: what the guard prevents), and
# start slowly (`imex-slow-start:<seconds>`, a loaded node).
IMEX_STANDIN_POINTS: Final[tuple[str, ...]] = (
    "imex-refuse-start",
    "imex-crash-after",
    "imex-hang-query",
    "imex-wrong-node-id",
    "imex-accept-foreign",
    "imex-slow-start",
)


@functools.cache
def _from_environment() -> tuple[frozenset[str], str | None]:
    """The points armed by `DRA_GPU_FAILPOINTS` and the file `DRA_GPU_FAILPOINTS_FILE` names,
    read at the first hit (not at import: a process forked after the import reads its own)."""
    armed = frozenset(
        name.strip() for name in os.environ.get(ENV_VAR, "").split(",") if name.strip()
    )
    return armed, os.environ.get(FILE_ENV_VAR) or None


FAIL_PREFIX: Final = "fail:"
"""An armed `fail:<name>` makes the point raise `InjectedFailure` instead of killing the
process: the step is done and the next one fails, as a refused write or a timeout would."""


class InjectedFailure(DraGpuError):
    """The error an armed `fail:<name>` failpoint raises."""


def hit(name: str) -> None:
    """Die with SIGKILL if the failpoint `name` is armed; raise InjectedFailure if
    `fail:<name>` is."""
    armed, armed_file = _from_environment()
    if not armed and armed_file is None:
        return
    every = armed | (_read_armed_file(armed_file) if armed_file is not None else set())
    if name in every:
        os.kill(os.getpid(), signal.SIGKILL)
    if FAIL_PREFIX + name in every:
        raise InjectedFailure(f"failpoint {name}: injected failure")


def _read_armed_file(path: str) -> set[str]:
    try:
        with open(path, encoding="utf-8") as armed:
            return {line.strip() for line in armed if line.strip()}
    except OSError:  # no file: nothing armed
        return set()


def armed_value(name: str) -> str | None:
    """A switch: None when `name` is not armed, "" when armed as `name`, and `value` when
    armed as `name:<value>` (the environment first, then the file, read at every call)."""
    armed, armed_file = _from_environment()
    if not armed and armed_file is None:
        return None
    every = sorted(armed) + sorted(_read_armed_file(armed_file) if armed_file is not None else ())
    for entry in every:
        if entry == name:
            return ""
        if entry.startswith(name + ":"):
            return entry[len(name) + 1 :]
    return None
