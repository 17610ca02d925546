"""Which pod a process belongs to, from its `/proc/<pid>/cgroup`.

NVML reports GPU processes by host pid; the kubelet puts every container of a
pod under a cgroup named after the pod's UID, so `/proc/<pid>/cgroup` says
whose a process is. The lines differ by cgroup version and by the kubelet's
cgroup driver (upstream-facts §5.2):

    cgroupfs, v1   4:memory:/kubepods/burstable/pod<uid>/<container id>
    cgroupfs, v2   0::/kubepods/besteffort/pod<uid>/<container id>
    systemd,  v1   3:cpu,cpuacct:/kubepods.slice/kubepods-burstable.slice/
                       kubepods-burstable-pod<uid_with_underscores>.slice/docker-<id>.scope
    systemd,  v2   0::/kubepods.slice/kubepods-pod<uid_with_underscores>.slice/
                       cri-containerd-<id>.scope          (Guaranteed pods: no QoS level)

A reader inside a container with a private cgroup namespace sees the same
names below `/../..` (cgroupfs: `0::/../../../pod<uid>/<id>`, without the
`kubepods` levels above its own). The pod level is a path segment `pod<uid>` (cgroupfs)
or `...-pod<uid>.slice` (systemd, dashes as underscores); a static pod's UID
is 32 hex digits without dashes. No Python library parses these (dcgm-exporter
uses containerd's Go package), hence this module. Pure: text in, UID out.
"""

from __future__ import annotations

import re
from typing import Final

_UID: Final = (
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}|[0-9a-f]{32}"
)
_POD_SEGMENT: Final = re.compile(rf"(?:^|/|-)pod(?P<uid>{_UID})(?:\.slice)?(?=/|$)")


def pod_uid_from_cgroup(text: str) -> str | None:
    """The UID of the pod whose cgroup the lines of a `/proc/<pid>/cgroup` name, or None.

    Every hierarchy line is looked at (cgroup v1 has one per controller, v2
    the single `0::` line); the first pod found wins. A process outside any
    pod (the host, a system service) gives None.
    """
    for line in text.splitlines():
        _hierarchy, sep, rest = line.partition(":")
        _controllers, sep2, path = rest.partition(":")
        # Seen from a private cgroup namespace, a cgroupfs path is relative to the reader's
        # own cgroup (`/../../../pod<uid>/<id>`) and loses "kubepods"; systemd's slice
        # names keep it.
        if not (sep and sep2) or ("kubepods" not in path and not path.startswith("/..")):
            continue
        match = _POD_SEGMENT.search(path)
        if match is not None:
            return match["uid"].replace("_", "-")
    return None


__all__ = ["pod_uid_from_cgroup"]
