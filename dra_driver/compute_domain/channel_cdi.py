"""What a container gets for an IMEX channel claim: CDI device nodes (pure).

NVIDIA's CD plugin gives a workload container one device node per channel,
`/dev/nvidia-caps-imex-channels/channel<k>`, type `c`, major the
`nvidia-caps-imex-channels` line of `/proc/devices`, minor k, mode 0666, and
nothing else (no env, no mounts): `Single` is channel 0, `All` is channels
0..2047 (the count is hard-coded there too, "TODO: pull from
/proc/driver/nvidia/params"). A node without a clique ID gets nothing and the
claim still succeeds (computedomain.md §1.5; `kp/device_state.go:690-733`).

The spec is written through the GPU driver's builders and store
(`dra_driver.container.cdi.claim_spec`, `CdiStore`) with this driver's own
CDI kind, `k8s.compute-domain.nvidia.com/claim`, so the names are NVIDIA's:
`k8s.compute-domain.nvidia.com/claim=<claimUID>-channel-0`.

Pure: the major comes in as an argument (`kernel_files.imex_channels_major`
reads it from the node's `/proc/devices`).
"""

from __future__ import annotations

from typing import Any, Final, Literal

from dra_driver.container.cdi import CdiDevice, ClaimKind, ContainerEdits, DeviceNode, claim_spec

CHANNELS_DIR: Final = "/dev/nvidia-caps-imex-channels"
CHANNEL_COUNT: Final = 2048
"""Channels of an `All` claim (NVIDIA's hard-coded count)."""
CHANNEL_MODE: Final = 0o666

CLAIMS: Final = ClaimKind("k8s.compute-domain.nvidia.com")
"""NVIDIA's CDI kind for the ComputeDomain driver's claim specs."""

AllocationMode = Literal["Single", "All"]


def channel_count(mode: AllocationMode) -> int:
    """How many channels a claim with this `allocationMode` gets."""
    return CHANNEL_COUNT if mode == "All" else 1


def channel_nodes(major: int, count: int, first: int = 0) -> tuple[DeviceNode, ...]:
    """`channel<first>` .. `channel<first+count-1>`, as CDI device nodes (`first` is not 0
    only in channel isolation, `dra_driver.compute_domain.isolation`)."""
    return tuple(
        DeviceNode(
            path=f"{CHANNELS_DIR}/channel{minor}",
            major=major,
            minor=minor,
            type="c",
            file_mode=CHANNEL_MODE,
        )
        for minor in range(first, first + count)
    )


def channel_claim_spec(
    claim_uid: str, device_name: str, *, major: int, count: int, first: int = 0
) -> dict[str, Any]:
    """The claim's CDI spec: one CDI device `<claimUID>-<device>` with the channel nodes."""
    device = CdiDevice(
        name=device_name, edits=ContainerEdits(device_nodes=channel_nodes(major, count, first))
    )
    return claim_spec(claim_uid, [device], ContainerEdits(), kind=CLAIMS)


__all__ = [
    "CHANNELS_DIR",
    "CHANNEL_COUNT",
    "CLAIMS",
    "AllocationMode",
    "channel_claim_spec",
    "channel_count",
    "channel_nodes",
]
