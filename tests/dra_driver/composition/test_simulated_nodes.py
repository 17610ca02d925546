"""Simulated nodes publish the slices our plugin would, however many of a shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.composition.hardware import open_hardware
from dra_driver.composition.simulated_nodes import build_simulated_nodes, node_slices
from dra_driver.node.devices import build_devices
from dra_driver.node.inventory import discover
from dra_driver.scheduling.whatif.nodes import NodeRequest


@pytest.mark.parametrize("release", ["1.34", "1.35"])
def test_derived_nodes_equal_a_full_build(release: str) -> None:
    built = build_simulated_nodes([NodeRequest("dgx-a100-40gb", 2)], release=release)  # type: ignore[arg-type]
    inventory = discover(open_hardware("sim:dgx-a100-40gb", node_name="dgx-a100-40gb-1").nvml)

    full = node_slices(inventory, "dgx-a100-40gb-1", release=release)  # type: ignore[arg-type]

    second = [s for s in built.slices if s["spec"]["nodeName"] == "dgx-a100-40gb-1"]
    first = [s for s in built.slices if s["spec"]["nodeName"] == "dgx-a100-40gb-0"]
    assert second == full
    assert first != second  # different names and GPU UUIDs


@pytest.mark.parametrize(
    ("shape", "mig"),
    [("dgx-a100-40gb", "dynamic"), ("dgx-h100", "static"), ("dgx-h100", "dynamic")],
)
def test_derived_devices_equal_a_full_build(shape: str, mig: str) -> None:
    """The devices node checks run against (the plugin's view), as cheap as the slices."""
    built = build_simulated_nodes([NodeRequest(shape, 3)], mig=mig)  # type: ignore[arg-type]
    inventory = discover(open_hardware(f"sim:{shape}", node_name=f"{shape}-2").nvml)

    full = build_devices(inventory, dynamic_mig=mig == "dynamic")

    assert built.devices[f"{shape}-2"]() == full
    assert built.devices[f"{shape}-0"]() != full  # other GPU UUIDs


def test_nodes_without_an_imex_channel_say_why_each_with_its_own_gpus() -> None:
    """What `explain` quotes: the CD plugin's reasons, per node, naming that node's GPUs."""
    shape = (
        Path(__file__).parents[1]
        / "scheduling/whatif/data/compute-domains/gb200-fabric-in-progress.yaml"
    )
    built = build_simulated_nodes(
        [NodeRequest("gb200-node", 1), NodeRequest(str(shape), 2), NodeRequest("dgx-h100", 1)]
    )
    withheld = built.compute_domain_withheld
    assert sorted(withheld) == [
        "dgx-h100-0",
        "gb200-fabric-in-progress-0",
        "gb200-fabric-in-progress-1",
    ]
    assert withheld["dgx-h100-0"] == (
        "no GPU is in a multi-node NVLink clique (no fabric, or NVLink without a cluster): "
        "ComputeDomains need GB200/GB300-class multi-node NVLink",
    )
    for name in ("gb200-fabric-in-progress-0", "gb200-fabric-in-progress-1"):
        uuids = [device.gpu.uuid for device in built.devices[name]()]
        reasons = withheld[name]
        assert len(reasons) == 4
        assert all(f"({uuid})" in reason for uuid, reason in zip(uuids, reasons, strict=True))
        assert all("NVLink fabric registering (state in-progress" in r for r in reasons)
