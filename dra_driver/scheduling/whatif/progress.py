"""A progress bar on stderr for simulations that take a while.

Placing thousands of pods takes seconds; a silent terminal looks hung. The bar
only appears when stderr is a terminal and the run is large (so piped output
and tests stay clean), redraws at most ten times a second, and erases itself
when done.
"""

from __future__ import annotations

import time
from typing import TextIO

MIN_ITEMS = 200
_WIDTH = 30
_INTERVAL = 0.1


class ProgressBar:
    """`bar(done)` after each item; `bar.close()` at the end."""

    def __init__(
        self, total: int, stream: TextIO, *, label: str = "pods", force: bool = False
    ) -> None:
        self.total = total
        self.stream = stream
        self.label = label
        self.enabled = force or (total > MIN_ITEMS and _is_tty(stream))
        self._started = time.monotonic()
        self._drawn = 0.0
        self._shown = False

    def __call__(self, done: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if done < self.total and now - self._drawn < _INTERVAL:
            return
        self._drawn = now
        filled = _WIDTH * done // max(self.total, 1)
        rate = done / max(now - self._started, 1e-9)
        self.stream.write(
            f"\r[{'#' * filled}{'.' * (_WIDTH - filled)}] {done}/{self.total} {self.label} "
            f"{rate:,.0f}/s"
        )
        self.stream.flush()
        self._shown = True

    def close(self) -> None:
        if self._shown:
            self.stream.write("\r\033[K")
            self.stream.flush()
            self._shown = False


def _is_tty(stream: TextIO) -> bool:
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())
