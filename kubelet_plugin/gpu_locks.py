"""Per-GPU locks: claims on different GPUs prepare in parallel.

MIG creation and destruction take about a second per GPU instance on real
hardware. A node-wide lock (what NVIDIA's driver uses) would serialize eight
claims on eight GPUs into eight seconds. Here each GPU has its own lock:
a `threading.Lock` for this process plus an `flock` on
`<plugin-data-dir>/locks/<gpu-uuid>.lock`, so two plugin processes on one
node (a rolling update) cannot interleave on the same GPU either. Locks are
always taken in sorted UUID order, so a claim spanning several GPUs cannot
deadlock with another.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

from dra_driver.errors import PluginError
from dra_driver.files.flock import file_lock
from kubelet_plugin.keyed_locks import KeyedLocks

DEFAULT_TIMEOUT_S = 60.0


class GpuLocks:
    """A lock per GPU UUID, shared by threads and processes."""

    def __init__(self, directory: Path, *, timeout_s: float = DEFAULT_TIMEOUT_S) -> None:
        self._directory = directory
        self._timeout_s = timeout_s
        self._thread_locks = KeyedLocks()

    @contextmanager
    def hold(self, gpu_uuids: Iterable[str]) -> Iterator[None]:
        """Hold the locks of every GPU in `gpu_uuids` (in sorted order)."""
        with ExitStack() as stack:
            for uuid in sorted(set(gpu_uuids)):
                stack.enter_context(self._one(uuid))
            yield

    @contextmanager
    def _one(self, uuid: str) -> Iterator[None]:
        with ExitStack() as stack:
            try:
                stack.enter_context(self._thread_locks.hold(uuid, timeout=self._timeout_s))
            except TimeoutError:
                raise PluginError(
                    f"GPU {uuid}: another operation held its lock for {self._timeout_s:.0f} s"
                ) from None
            with file_lock(
                self._directory / f"{uuid}.lock",
                make_parent=True,
                timeout_s=self._timeout_s,
                error=PluginError,
                what=f"GPU {uuid}",
                timeout_message=f"GPU {uuid}: another plugin process held its lock for "
                f"{self._timeout_s:.0f} s",
            ):
                yield
