"""The fixed identifiers of NVIDIA's ComputeDomain driver, in one place.

Every value is NVIDIA's (computedomain.md §1-§3; `cmd/compute-domain-controller/
computedomain.go:50-60`, `main.go:53`, `cmd/compute-domain-kubelet-plugin/
deviceinfo.go`), so manifests, labels and selectors written for NVIDIA's
driver keep working.
"""

from __future__ import annotations

from typing import Final

DRIVER_NAME: Final = "compute-domain.nvidia.com"
GROUP: Final = "resource.nvidia.com"
VERSION: Final = "v1beta1"
API_VERSION: Final = f"{GROUP}/{VERSION}"
KIND: Final = "ComputeDomain"

CHANNEL_DEVICE_CLASS: Final = "compute-domain-default-channel.nvidia.com"
DAEMON_DEVICE_CLASS: Final = "compute-domain-daemon.nvidia.com"

# On ComputeDomain-owned objects (and, in NVIDIA's design, on nodes): the domain's UID.
DOMAIN_LABEL: Final = "resource.nvidia.com/computeDomain"
# On the ResourceClaimTemplates the controller creates: Workload or Daemon.
TARGET_LABEL: Final = "resource.nvidia.com/computeDomainTarget"
TARGET_WORKLOAD: Final = "Workload"
TARGET_DAEMON: Final = "Daemon"
FINALIZER: Final = DOMAIN_LABEL

# The request name in the workload ResourceClaimTemplate.
CHANNEL_REQUEST: Final = "channel"

# Device types (the `type` attribute) and names (`<type>-<id>`) a node publishes.
CHANNEL_TYPE: Final = "channel"
DAEMON_TYPE: Final = "daemon"

# NVIDIA's node label for a node's NVLink clique, `<clusterUUID>.<cliqueId>` (§3.7).
CLIQUE_NODE_LABEL: Final = "nvidia.com/gpu.clique"

# Ours, not NVIDIA's: on `channel-0` while the node serves a ComputeDomain, that
# domain's UID, so the workload template's selector keeps other domains off the
# node (one IMEX daemon per node). Absent while the node serves none.
DOMAIN_ATTRIBUTE: Final = "domain"
