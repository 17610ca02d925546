"""`wait_until`: the one way a test waits for something another thread or process does.

A test never sleeps for a fixed time hoping something happened: it polls the
condition it needs, and fails with what it waited for (and whatever `details`
adds, e.g. a plugin's log) when the time is up.
"""

from __future__ import annotations

import time
from collections.abc import Callable

DEFAULT_TIMEOUT_S = 15.0


def wait_until(
    condition: Callable[[], bool],
    what: str = "the condition",
    *,
    timeout: float = DEFAULT_TIMEOUT_S,
    interval: float = 0.02,
    details: Callable[[], str] | None = None,
    required: bool = True,
) -> bool:
    """Poll `condition` until it is true; True then.

    When `timeout` seconds pass first: AssertionError naming `what` (and
    `details()`), or False with `required=False`.
    """
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            if not required:
                return False
            extra = f"\n{details()}" if details is not None else ""
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}{extra}")
        time.sleep(interval)
    return True
