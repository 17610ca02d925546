"""NVLink fabric facts of a GPU (`nvmlDeviceGetGpuFabricInfo`/`V`) and what they mean.

GB200/GB300 NVL72 racks join GPUs of several nodes into one NVLink domain:
the fabric manager registers each GPU with a cluster (a UUID) and a clique
(a number) inside it. NVIDIA names a node's place as
`<clusterUUID as RFC-4122>.<cliqueId decimal>`, the value of its node label
`nvidia.com/gpu.clique` and of `ComputeDomain.status.nodes[].cliqueID`
(computedomain.md §3.7, §3.8). Both backends return a `FabricInfo`; the rules
below (pure) say which GPUs are in a usable clique, so the GPU driver can
publish it as an attribute and the ComputeDomain driver can reuse them.

`classify` follows NVIDIA's decision table (§3.8), and also reads the v3
health summary, which NVIDIA leaves as a TODO: a GPU is in a clique only when
its fabric state is COMPLETED, the embedded status SUCCESS, the cluster UUID
non-zero (NVLink but not multi-node otherwise) and the health summary
HEALTHY, or NOT_SUPPORTED where the driver cannot summarise (v1/v2 answers).
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from enum import Enum
from typing import Final

from dra_driver.hardware.nvml import codes

# nvmlGpuFabricState_t
STATE_NOT_SUPPORTED: Final = 0
STATE_NOT_STARTED: Final = 1
STATE_IN_PROGRESS: Final = 2
STATE_COMPLETED: Final = 3
STATE_NAMES: Final[dict[int, str]] = {
    STATE_NOT_SUPPORTED: "not-supported",
    STATE_NOT_STARTED: "not-started",
    STATE_IN_PROGRESS: "in-progress",
    STATE_COMPLETED: "completed",
}

# NVML_GPU_FABRIC_HEALTH_SUMMARY_* (v3 `healthSummary`)
HEALTH_NOT_SUPPORTED: Final = 0
HEALTH_HEALTHY: Final = 1
HEALTH_UNHEALTHY: Final = 2
HEALTH_LIMITED_CAPACITY: Final = 3
HEALTH_NAMES: Final[dict[int, str]] = {
    HEALTH_NOT_SUPPORTED: "not-supported",
    HEALTH_HEALTHY: "healthy",
    HEALTH_UNHEALTHY: "unhealthy",
    HEALTH_LIMITED_CAPACITY: "limited-capacity",
}

# The v2/v3 `healthMask` of a fabric with nothing wrong: degraded bandwidth, route recovery,
# route unhealthy and access-timeout recovery all FALSE (2 in their 2-bit fields at shifts
# 0, 2, 4, 6), incorrect configuration NONE (1 in the 4-bit field at shift 8): 0x1AA. What
# NVIDIA's mock NVML answers for its default healthy fabric (`engine/fabric_health.go`).
HEALTHY_MASK: Final = 0x1AA

ZERO_CLUSTER: Final = "00000000-0000-0000-0000-000000000000"


@dataclass(frozen=True)
class FabricInfo:
    """One GPU's answer: `nvmlGpuFabricInfo_t` (v1) or `nvmlGpuFabricInfo_v2_t`/`_v3_t`.

    `cluster_uuid` is RFC-4122 text; `status` the NVML return code NVML embeds;
    `health_mask` is None in a v1 answer, `health_summary` None before v3.
    """

    cluster_uuid: str
    clique_id: int
    state: int
    status: int = codes.SUCCESS
    health_mask: int | None = None
    health_summary: int | None = None

    @property
    def clique(self) -> str:
        """`<clusterUUID>.<cliqueId>`, the format of NVIDIA's `nvidia.com/gpu.clique` label."""
        return f"{self.cluster_uuid}.{self.clique_id}"


class FabricCondition(Enum):
    """Where a GPU stands in the NVLink fabric (see the module docstring)."""

    NOT_SUPPORTED = "not-supported"  # no fabric (NVML NOT_SUPPORTED, or state NOT_SUPPORTED)
    NOT_MULTI_NODE = "not-multi-node"  # NVLink, but a zero cluster UUID: no multi-node domain
    REGISTERING = "registering"  # NOT_STARTED or IN_PROGRESS: the fabric manager is not done
    FAILED = "failed"  # COMPLETED with an error status
    UNHEALTHY = "unhealthy"  # COMPLETED, but the health summary is not healthy
    IN_CLIQUE = "in-clique"  # usable: publish its clique


def classify(info: FabricInfo | None) -> FabricCondition:
    """The condition of a GPU whose fabric answer is `info` (None: NOT_SUPPORTED)."""
    if info is None or info.state == STATE_NOT_SUPPORTED:
        return FabricCondition.NOT_SUPPORTED
    if info.state != STATE_COMPLETED:
        return FabricCondition.REGISTERING
    if info.status != codes.SUCCESS:
        return FabricCondition.FAILED
    if info.cluster_uuid == ZERO_CLUSTER:
        return FabricCondition.NOT_MULTI_NODE
    if info.health_summary not in (None, HEALTH_NOT_SUPPORTED, HEALTH_HEALTHY):
        return FabricCondition.UNHEALTHY
    return FabricCondition.IN_CLIQUE


def usable_clique(info: FabricInfo | None) -> str | None:
    """The GPU's clique (`<clusterUUID>.<cliqueId>`) when it is in one, else None."""
    if info is not None and classify(info) is FabricCondition.IN_CLIQUE:
        return info.clique
    return None


def cluster_uuid_text(raw: bytes) -> str:
    """NVML's 16-byte `clusterUuid` as RFC-4122 text (go's `uuid.UUID.String`)."""
    if len(raw) != 16:
        raise ValueError(f"cluster UUID must be 16 bytes, got {len(raw)}")
    return str(uuid.UUID(bytes=bytes(raw)))


def describe(info: FabricInfo | None) -> str:
    """One line for logs and errors: condition, state, status, health and clique."""
    condition = classify(info)
    if info is None:
        return f"fabric {condition.value}"
    summary = info.health_summary
    health = "unknown" if summary is None else HEALTH_NAMES.get(summary, str(summary))
    return (
        f"fabric {condition.value} (state {STATE_NAMES.get(info.state, str(info.state))}, "
        f"status {codes.ERROR_STRINGS.get(info.status, str(info.status))}, health "
        f"{health}, clique {info.clique})"
    )
