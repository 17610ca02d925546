"""A fake DraService for server tests and deterministic claim references.

The kubelet-like client itself is production code (`kubelet_plugin.kubelet_client`,
used by `dra-gpu demo`); it is re-exported here for the tests.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence

from kubelet_plugin.kubelet_client import DRA_API_VERSIONS, KubeletClient
from kubelet_plugin.service import ClaimRef, PrepareResult, ResultDevice, UnprepareResult

__all__ = [
    "DRA_API_VERSIONS",
    "FakeDraService",
    "KubeletClient",
    "claim_ref",
    "fake_result_device",
]


def claim_ref(n: int, *, namespace: str = "default") -> ClaimRef:
    """A deterministic ClaimRef: `claim-<n>` with UID `uid-<n>`."""
    return ClaimRef(namespace=namespace, uid=f"uid-{n}", name=f"claim-{n}")


def fake_result_device(uid: str, index: int = 0) -> ResultDevice:
    """The device FakeDraService prepares for claim `uid` unless told otherwise."""
    return ResultDevice(
        request_names=("gpu",),
        pool_name="node-a",
        device_name=f"gpu-{index}",
        cdi_device_ids=(f"k8s.gpu.nvidia.com/claim={uid}-gpu-{index}",),
    )


class FakeDraService:
    """A `DraService` that answers from tables and records every call.

    - `results[uid]` is returned for that claim; otherwise one `fake_result_device(uid)`.
    - `unprepare_errors[uid]` is the unprepare error for that claim (default: success).
    - `omit` lists UIDs the service leaves out of its answer (a buggy service).
    - `raises`, when set, is raised by every call (a crashing service).
    - `gates[uid]`: prepare of that claim waits until the event is set; `entered[uid]`
      is set when such a call has started waiting.
    - `calls` records `(operation, claims)` for every call, in order.
    """

    def __init__(self) -> None:
        self.results: dict[str, PrepareResult] = {}
        self.unprepare_errors: dict[str, str] = {}
        self.omit: set[str] = set()
        self.raises: Exception | None = None
        self.gates: dict[str, threading.Event] = {}
        self.entered: dict[str, threading.Event] = {}
        self.calls: list[tuple[str, tuple[ClaimRef, ...]]] = []
        self._lock = threading.Lock()

    def gate(self, uid: str) -> threading.Event:
        """Make prepare of `uid` block until the returned event is set."""
        self.gates[uid] = threading.Event()
        self.entered[uid] = threading.Event()
        return self.gates[uid]

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        self._record("prepare", claims)
        for claim in claims:
            if claim.uid in self.gates:
                self.entered[claim.uid].set()
                self.gates[claim.uid].wait()
        return {
            c.uid: self.results.get(c.uid, PrepareResult(devices=(fake_result_device(c.uid),)))
            for c in claims
            if c.uid not in self.omit
        }

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        self._record("unprepare", claims)
        return {
            c.uid: UnprepareResult(error=self.unprepare_errors.get(c.uid, ""))
            for c in claims
            if c.uid not in self.omit
        }

    def _record(self, operation: str, claims: Sequence[ClaimRef]) -> None:
        with self._lock:
            self.calls.append((operation, tuple(claims)))
        if self.raises is not None:
            raise self.raises
