"""Who a ResourceClaim is reserved for: its `status.reservedFor`, read in one place.

Until Kubernetes 1.36 every entry was a Pod. From 1.37 a claim may be
reserved for a workload instead (`DRAWorkloadResourceClaims`, beta): an
entry `{apiGroup: scheduling.k8s.io, resource: podgroups, name, uid}` for a
PodGroup whose pods share the claim, and the pods themselves are not listed.
Code that asks "is this claim still in use?" must count every entry, not
only Pods, or it treats a running gang's claim as gone; code that names the
pods (Events) must take Pods only and still say who else holds the claim.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

POD_GROUP_API_GROUP = "scheduling.k8s.io"
POD_GROUP_RESOURCE = "podgroups"


@dataclass(frozen=True, slots=True)
class Consumer:
    """One `ResourceClaimConsumerReference` (in the claim's namespace)."""

    api_group: str  # "" for the core group (Pods)
    resource: str
    name: str
    uid: str

    @property
    def is_pod(self) -> bool:
        return self.api_group == "" and self.resource == "pods"

    def __str__(self) -> str:
        """`pod trainer-0`, `podgroups.scheduling.k8s.io gang-1`."""
        if self.is_pod:
            return f"pod {self.name}"
        kind = f"{self.resource}.{self.api_group}" if self.api_group else self.resource
        return f"{kind} {self.name}"


def claim_consumers(claim: Mapping[str, Any]) -> list[Consumer]:
    """Every well-formed entry of `status.reservedFor`, Pods and others alike, in order.

    An entry without a resource or a name is skipped (the apiserver requires both).
    """
    status = claim.get("status")
    entries = status.get("reservedFor") if isinstance(status, Mapping) else None
    if not isinstance(entries, list):
        return []
    consumers = []
    for entry in entries:
        if not isinstance(entry, Mapping):
            continue
        resource, name = entry.get("resource"), entry.get("name")
        if not isinstance(resource, str) or not resource or not isinstance(name, str) or not name:
            continue
        consumers.append(
            Consumer(
                api_group=str(entry.get("apiGroup") or ""),
                resource=resource,
                name=name,
                uid=str(entry.get("uid") or ""),
            )
        )
    return consumers


def is_reserved(claim: Mapping[str, Any]) -> bool:
    """Whether anything (a Pod, a PodGroup, ...) holds the claim.

    Any entry counts, even one this reader cannot name: wrongly keeping a claim
    costs a CDI spec until its Unprepare, wrongly dropping it costs a running pod.
    """
    status = claim.get("status")
    entries = status.get("reservedFor") if isinstance(status, Mapping) else None
    return isinstance(entries, list) and bool(entries)
