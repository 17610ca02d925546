"""Named crash points for crash-recovery testing.

Prepare and Unprepare call `failpoints.hit("<name>")` between their side
effects. In production nothing is set and the call is a dictionary lookup.
When the environment variable `DRA_GPU_FAILPOINTS` names the point (a comma
separated list), the process kills itself with SIGKILL right there, the way
an OOM kill or a node crash would stop it. The crash tests start the real
plugin process with each point in turn and check that a restart recovers
without leaking anything. `PREPARE_STEPS` and `UNPREPARE_STEPS` list every
point, so a new step cannot be added without the tests covering it.
"""

from __future__ import annotations

import os
import signal
from typing import Final

ENV_VAR: Final = "DRA_GPU_FAILPOINTS"

PREPARE_STEPS: Final[tuple[str, ...]] = (
    "prepare-after-checkpoint-started",
    "prepare-after-cdi-written",
    "prepare-after-checkpoint-completed",
)
UNPREPARE_STEPS: Final[tuple[str, ...]] = (
    "unprepare-after-cdi-removed",
    "unprepare-after-checkpoint-removed",
)

_armed: frozenset[str] = frozenset(
    name.strip() for name in os.environ.get(ENV_VAR, "").split(",") if name.strip()
)


def hit(name: str) -> None:
    """Die with SIGKILL if the failpoint `name` is armed."""
    if name in _armed:
        os.kill(os.getpid(), signal.SIGKILL)
