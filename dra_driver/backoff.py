"""Exponential back-off with jitter for retrying the API server and NVML.

Written here because it is four lines; the retry libraries on PyPI bring
decorators and policies the plugin's loops do not need. Jitter ("full
jitter" between half and all of the delay) keeps the plugins of many nodes
from hitting a recovering API server in lock-step.
"""

from __future__ import annotations

import random

BASE_SECONDS = 0.5
MAX_SECONDS = 30.0


def backoff_delay(
    failures: int,
    *,
    base: float = BASE_SECONDS,
    cap: float = MAX_SECONDS,
    rand: random.Random | None = None,
) -> float:
    """Seconds to wait after `failures` consecutive failures (1 = the first)."""
    ceiling = min(cap, base * 2 ** max(failures - 1, 0))
    fraction = float((rand or random).random())
    return float(ceiling * (0.5 + 0.5 * fraction))
