"""A node host daemon waits for the NVIDIA driver before it can run anything.

Why this module exists: the MPS host and the IMEX host both start before the driver may be
there (a GPU Operator node installs it later), and both must then wait the same way: retry
on a fixed interval until what they need opens, say so once per distinct reason (not once a
retry), and give up cleanly when asked to stop. One loop, so the two cannot drift apart.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import TypeVar

from dra_driver.errors import DriverRootError, NvmlError

__all__ = ["wait_for_driver"]

T = TypeVar("T")


def wait_for_driver(
    open_: Callable[[], T],
    stop: threading.Event,
    *,
    retry_interval: float,
    what: str,
    log: logging.Logger,
) -> T | None:
    """What `open_` returns once it no longer raises `DriverRootError` or `NvmlError`; None
    when `stop` is set first. Each new reason is logged once on `log`, as
    "NVIDIA driver not ready, no <what> can run yet (retrying every <n>s): <reason>"."""
    last = ""
    while True:
        try:
            return open_()
        except (DriverRootError, NvmlError) as exc:
            if str(exc) != last:
                log.error(
                    "NVIDIA driver not ready, no %s can run yet (retrying every %gs): %s",
                    what,
                    retry_interval,
                    exc,
                )
                last = str(exc)
            if stop.wait(retry_interval):
                return None
