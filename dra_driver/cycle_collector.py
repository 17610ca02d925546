"""`paused()`: Python's cycle collector paused for a batch command.

A 5,000-pod `simulate` keeps millions of small objects alive (slices, claims,
allocations, YAML nodes) and the collector scans them again and again: 40 %
of its CPU time at 500 nodes. Importing a command's modules (500 of them for
`simulate` and `explain`) triggers it too, for 8 % of a small `explain`. Such
runs make little cyclic garbage (a 5,000-pod run peaks at the same RSS, 140
MB, either way), so the collector is paused for them and runs again
afterwards. Long-running commands (the plugin) never pause it.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """The collector off for the `with` block, back on after it if it was on before."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
