"""What a node publishes for compute-domain.nvidia.com: NVIDIA's devices, on a settled fabric."""

from __future__ import annotations

import dataclasses

import pytest

from dra_driver.compute_domain.devices import compute_domain_devices
from dra_driver.hardware.nvml import codes, fabric
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import NVL72_RACK, load_shape
from dra_driver.node.inventory import NodeInventory, discover

CLIQUE = "00000000-0000-0000-0000-000000000001.0"


def _node(shape: str = "gb200-node") -> NodeInventory:
    return discover(SimNvml(SimHardware(load_shape(shape), node_name="gb-0")))


def _with_fabric(inventory: NodeInventory, index: int, info: FabricInfo | None) -> NodeInventory:
    gpus = list(inventory.gpus)
    gpu = gpus[index]
    gpus[index] = dataclasses.replace(gpu, info=dataclasses.replace(gpu.info, fabric=info))
    return dataclasses.replace(inventory, gpus=tuple(gpus))


def test_a_gb200_node_publishes_nvidias_channel_and_daemon() -> None:
    """NVIDIA's two devices; channel-0 may be allocated to several claims (one per pod of the
    domain on the node, where the cluster has DRAConsumableCapacity), daemon-0 may not."""
    published = compute_domain_devices(_node())
    assert published.clique == CLIQUE
    assert published.withheld == ()
    assert list(published.devices) == [
        {
            "name": "channel-0",
            "attributes": {
                "type": {"string": "channel"},
                "id": {"int": 0},
                "cliqueID": {"string": CLIQUE},
            },
            "allowMultipleAllocations": True,
        },
        {
            "name": "daemon-0",
            "attributes": {
                "type": {"string": "daemon"},
                "id": {"int": 0},
                "cliqueID": {"string": CLIQUE},
            },
        },
    ]


def test_host_managed_imex_publishes_no_daemon() -> None:
    names = [d["name"] for d in compute_domain_devices(_node(), host_managed=True).devices]
    assert names == ["channel-0"]


@pytest.mark.parametrize(
    ("info", "why"),
    [
        (
            dataclasses.replace(NVL72_RACK, state=fabric.STATE_IN_PROGRESS),
            "fabric registering (state in-progress",
        ),
        (
            dataclasses.replace(NVL72_RACK, state=fabric.STATE_NOT_STARTED),
            "fabric registering (state not-started",
        ),
        (dataclasses.replace(NVL72_RACK, status=codes.ERROR_UNKNOWN), "fabric failed"),
        (
            dataclasses.replace(NVL72_RACK, health_summary=fabric.HEALTH_UNHEALTHY),
            "fabric unhealthy",
        ),
    ],
)
def test_one_unsettled_gpu_withholds_the_nodes_devices(info: FabricInfo, why: str) -> None:
    published = compute_domain_devices(_with_fabric(_node(), 2, info))
    assert published.devices == ()
    assert published.clique is None
    (reason,) = published.withheld
    assert reason.startswith("gpu-2 (GPU-")
    assert why in reason


def test_the_devices_come_back_when_the_fabric_settles() -> None:
    registering = dataclasses.replace(NVL72_RACK, state=fabric.STATE_IN_PROGRESS)
    assert compute_domain_devices(_with_fabric(_node(), 0, registering)).devices == ()
    assert len(compute_domain_devices(_with_fabric(_node(), 0, NVL72_RACK)).devices) == 2


def test_gpus_without_a_multi_node_fabric_are_skipped_as_nvidia_skips_them() -> None:
    single_node = dataclasses.replace(NVL72_RACK, cluster_uuid=fabric.ZERO_CLUSTER)
    published = compute_domain_devices(_with_fabric(_with_fabric(_node(), 0, None), 1, single_node))
    assert published.clique == CLIQUE
    assert len(published.devices) == 2


def test_a_node_without_fabric_publishes_nothing_and_says_why() -> None:
    published = compute_domain_devices(_node("dgx-h100"))
    assert published.devices == ()
    assert published.withheld == (
        "no GPU is in a multi-node NVLink clique (no fabric, or NVLink without a cluster): "
        "ComputeDomains need GB200/GB300-class multi-node NVLink",
    )


def test_gpus_in_two_cliques_withhold_the_devices() -> None:
    other = dataclasses.replace(NVL72_RACK, clique_id=1)
    published = compute_domain_devices(_with_fabric(_node(), 3, other))
    assert published.devices == ()
    assert published.withheld == (
        "the node's GPUs are in more than one NVLink clique ("
        f"{CLIQUE}: gpu-0, gpu-1, gpu-2; 00000000-0000-0000-0000-000000000001.1: gpu-3)",
    )
