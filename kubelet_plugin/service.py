"""What the kubelet asks of a DRA driver, without gRPC.

The gRPC server (`kubelet_plugin.server`) turns the kubelet's
NodePrepareResources / NodeUnprepareResources calls into calls on a
`DraService`, and the service's plain results back into protobuf. Keeping this
interface free of gRPC and protobuf types lets the driver (MIG, CDI,
checkpoint) be written and tested as ordinary Python, and lets the server be
tested with a fake service.

Contract of a `DraService` (the server enforces the wire rules around it):

- It is called only with valid claims: non-empty namespace, uid and name, each
  UID at most once per call. It is called from gRPC worker threads, possibly
  concurrently; serialising its own work is its business.
- It returns a mapping keyed by claim UID with one entry per claim it was
  given. A missing entry is reported to the kubelet as an internal error for
  that claim; entries for UIDs it was not asked about are ignored.
- A per-claim failure is an entry with a non-empty `error`. Raising fails
  every claim of the call (the server catches it and keeps serving), so it is
  for failures that really concern the whole call.
- Both operations must be idempotent: the kubelet repeats them after restarts
  and retries, and unpreparing an unknown claim must succeed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """The identity of a ResourceClaim as the kubelet sends it."""

    namespace: str
    uid: str
    name: str

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.uid})"


@dataclass(frozen=True, slots=True)
class ResultDevice:
    """One prepared device the kubelet must hand to the container runtime.

    `request_names` are base request names (no `/subrequest` suffix); empty
    means the device belongs to every request of the claim. `share_id` is the
    allocation result's shareID for consumable devices; it is sent only over
    the v1 API (kubelet 1.35+), and only when set.
    """

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareResult:
    """The outcome of preparing one claim: its devices, or an error."""

    devices: tuple[ResultDevice, ...] = ()
    error: str = ""


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    """The outcome of unpreparing one claim: empty `error` means success."""

    error: str = ""


class DraService(Protocol):
    """The driver's side of the kubelet DRA API (see the module docstring for the contract)."""

    def prepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, PrepareResult]:
        """Prepare the claims; the result is keyed by claim UID."""
        ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> Mapping[str, UnprepareResult]:
        """Unprepare the claims; the result is keyed by claim UID."""
        ...
