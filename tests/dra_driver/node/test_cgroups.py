"""PID -> pod: `/proc/<pid>/cgroup` as printed, cgroup v1 and v2, both kubelet cgroup drivers."""

from __future__ import annotations

import pytest

from dra_driver.node.cgroups import pod_uid_from_cgroup

UID = "0b7632a2-a56e-4278-987a-22de18008dbe"
CID = "6f3b0e8c1d2a4b5c9e7f0a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8a9b0c1d"

CGROUPFS_V1 = f"""12:pids:/kubepods/burstable/pod{UID}/{CID}
11:hugetlb:/kubepods/burstable/pod{UID}/{CID}
10:memory:/kubepods/burstable/pod{UID}/{CID}
9:devices:/kubepods/burstable/pod{UID}/{CID}
4:cpu,cpuacct:/kubepods/burstable/pod{UID}/{CID}
1:name=systemd:/kubepods/burstable/pod{UID}/{CID}
0::/
"""
CGROUPFS_V2 = f"0::/kubepods/besteffort/pod{UID}/{CID}\n"
_SLICE = (
    "/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/docker-{CID}.scope"
)
SYSTEMD_V1 = f"""11:devices:{_SLICE}
3:cpu,cpuacct:{_SLICE}
1:name=systemd:{_SLICE}
"""
SYSTEMD_V2 = (
    "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{UID.replace('-', '_')}.slice/cri-containerd-{CID}.scope\n"
)


@pytest.mark.parametrize(
    "text",
    [
        CGROUPFS_V1,
        CGROUPFS_V2,
        SYSTEMD_V1,
        SYSTEMD_V2,
        # Guaranteed pods have no QoS level.
        f"0::/kubepods/pod{UID}/{CID}\n",
        f"0::/kubepods.slice/kubepods-pod{UID.replace('-', '_')}.slice/crio-{CID}.scope\n",
        # CRI-O's conmon sits in the pod's cgroup too.
        f"0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod"
        f"{UID.replace('-', '_')}.slice/crio-conmon-{CID}.scope\n",
        # Read from inside a container with a private cgroup namespace.
        f"0::/../../kubepods-besteffort.slice/kubepods-besteffort-pod{UID.replace('-', '_')}"
        f".slice/cri-containerd-{CID}.scope\n",
        # The same with the cgroupfs driver: the kubepods levels are above the reader's own.
        f"0::/../../../pod{UID}/{CID}\n",
        f"0::/../../../besteffort/pod{UID}/{CID}\n",
    ],
    ids=[
        "cgroupfs-v1",
        "cgroupfs-v2",
        "systemd-v1",
        "systemd-v2",
        "cgroupfs-v2-guaranteed",
        "systemd-v2-guaranteed-crio",
        "crio-conmon",
        "private-cgroupns",
        "private-cgroupns-cgroupfs-guaranteed",
        "private-cgroupns-cgroupfs-besteffort",
    ],
)
def test_the_pod_uid_is_found_in_every_layout(text: str) -> None:
    assert pod_uid_from_cgroup(text) == UID


def test_a_static_pods_uid_is_a_hash_without_dashes() -> None:
    static = "6b2f1e0c9a8d7f6e5d4c3b2a19081726"
    assert pod_uid_from_cgroup(f"0::/kubepods/burstable/pod{static}/{CID}\n") == static


@pytest.mark.parametrize(
    "text",
    [
        "0::/system.slice/containerd.service\n",
        "0::/user.slice/user-1000.slice/session-3.scope\n",
        "0::/\n",
        "12:pids:/\n1:name=systemd:/init.scope\n",
        "",
        "garbage without colons\n",
        # "pod" followed by something that is not a UID is no pod.
        "0::/kubepods.slice/kubepods-podcast.slice/x.scope\n",
        # A sibling of the reader's cgroup that is no pod.
        "0::/../../system.slice/containerd.service\n",
    ],
)
def test_processes_outside_pods_have_none(text: str) -> None:
    assert pod_uid_from_cgroup(text) is None
