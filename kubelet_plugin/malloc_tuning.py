"""Keep the plugin's memory flat under a flood of calls: glibc's malloc, tuned at start-up.

Measured with the fuzz benchmark (`bench/fuzz.py`, 20,000 hostile calls):
the Python heap stays flat (tracemalloc), but with glibc's defaults the
plugin's RSS climbed to 1.7x its value after the first 1,000 calls. The
cause is native: every gRPC worker and claim thread may get a malloc arena
of its own (up to 8 per core), each keeping freed memory, and after the
first large block (a multi-MiB claim name) is freed glibc raises its mmap
threshold, so later large blocks fragment the arenas instead of going back
to the system. Two `mallopt` settings fix both (the ratio stayed under 1.1):
at most `ARENA_MAX` arenas, and a fixed mmap threshold, so large blocks are
always mapped and unmapped. The same can be had with the environment
variables MALLOC_ARENA_MAX and MALLOC_MMAP_THRESHOLD_; doing it here makes
it hold wherever the plugin runs. No Python library exposes `mallopt`, hence
`ctypes`; on a C library without it (musl) nothing is changed.
"""

from __future__ import annotations

import ctypes
import logging
from typing import Final

log = logging.getLogger(__name__)

M_MMAP_THRESHOLD: Final = -3
M_ARENA_MAX: Final = -8
ARENA_MAX: Final = 2
MMAP_THRESHOLD_BYTES: Final = 128 * 1024


def tune_malloc() -> bool:
    """Apply the settings above (call it before threads start); False where not glibc."""
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes = (ctypes.c_int, ctypes.c_int)
    mallopt.restype = ctypes.c_int
    done = bool(mallopt(M_ARENA_MAX, ARENA_MAX)) and bool(
        mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
    )
    if not done:
        log.warning("could not tune malloc (mallopt refused); memory may grow under load")
    return done
