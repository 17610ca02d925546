"""The publish order makes the scheduler's first-fit pack MIG devices without fragmenting.

The end-to-end checks run our slices through `dra_driver.scheduling.allocator` (the port
of the scheduler's allocator, with real CEL), which takes the first device
in slice order whose counters fit, exactly as kube-scheduler does.
"""

from __future__ import annotations

import copy
import random
from fractions import Fraction
from typing import Any

from controller.slices import build_resource_slices
from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.composition.hardware import open_hardware
from dra_driver.hardware.nvml.interface import GpuInstanceProfile, Placement
from dra_driver.node.devices import AllocatableDevice, build_devices
from dra_driver.node.inventory import NodeInventory, discover
from dra_driver.node.placement_order import (
    gpu_placement_order,
    order_devices,
    placement_damage,
    profile_groups,
)
from dra_driver.scheduling.allocator import AllocatedState, Allocator, Features, Node, Release
from tests.fakes import (
    a100_40gb_gi_profiles,
    h100_80gb_gi_profiles,
    make_gpu_info,
    make_gpu_inventory,
    make_mig_device,
    make_system_info,
)

DOMAIN = DEFAULT_DRIVER_NAME
CLASSES = [
    {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"{kind}.nvidia.com"},
        "spec": {
            "selectors": [
                {
                    "cel": {
                        "expression": f"device.driver == '{DOMAIN}' && "
                        f"device.attributes['{DOMAIN}'].type == '{kind}'"
                    }
                }
            ]
        },
    }
    for kind in ("gpu", "mig")
]


def _offered(
    profiles: tuple[GpuInstanceProfile, ...],
) -> list[tuple[GpuInstanceProfile, Placement]]:
    return [(p, placement) for p in profiles for placement in p.placements]


def _order(profiles: tuple[GpuInstanceProfile, ...]) -> list[str]:
    return [f"{p.name}@{where.start}" for p, where in gpu_placement_order(_offered(profiles))]


def _h100_node(gpus: int = 1, *, migs: tuple[tuple[str, int, int], ...] = ()) -> NodeInventory:
    profiles = {p.name: p for p in h100_80gb_gi_profiles()}
    inventories = []
    for index in range(gpus):
        info = make_gpu_info(model="H100-SXM5-80GB", index=index, mig_enabled=bool(migs))
        devices = tuple(
            make_mig_device(info, profiles[name], start, gpu_instance_id=gi)
            for name, start, gi in (migs if index == 0 else ())
        )
        inventories.append(make_gpu_inventory(info, h100_80gb_gi_profiles(), devices))
    return NodeInventory(make_system_info("570.172.08", 12080), tuple(inventories))


def _slices(inventory: NodeInventory, layout: str = "v1.35") -> list[dict[str, Any]]:
    return build_resource_slices(
        build_devices(inventory, dynamic_mig=True),
        driver=DOMAIN,
        node_name="node-a",
        layout="v1.35" if layout == "v1.35" else "v1.34",
    )


def _by_name_inside_slices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The same slices with devices sorted by name: NVIDIA's order."""
    renamed = copy.deepcopy(slices)
    for obj in renamed:
        if "devices" in obj["spec"]:
            obj["spec"]["devices"].sort(key=lambda device: device["name"])
    return renamed


def _first_fit(
    slices: list[dict[str, Any]], requests: list[str], release: Release = "1.35"
) -> list[str | None]:
    """What the scheduler picks for one-device claims arriving one after another
    ("gpu" asks for a full GPU, anything else for that MIG profile)."""
    allocated = AllocatedState()
    allocator = Allocator(
        slices,
        CLASSES,
        features=Features(partitionable_devices=True, release=release),
        allocated=allocated,
    )
    picks: list[str | None] = []
    for index, request in enumerate(requests):
        exactly: dict[str, Any] = {"deviceClassName": "gpu.nvidia.com"}
        if request != "gpu":
            selector = f"device.attributes['{DOMAIN}'].profile == '{request}'"
            exactly = {
                "deviceClassName": "mig.nvidia.com",
                "selectors": [{"cel": {"expression": selector}}],
            }
        claim: dict[str, Any] = {
            "metadata": {"name": f"claim-{index}", "namespace": "default", "uid": f"uid-{index}"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": exactly}]}},
        }
        results = allocator.allocate(Node("node-a", {}), [claim])
        if results is None:
            picks.append(None)
            continue
        picks.append(results[0]["devices"]["results"][0]["device"])
        allocated.add({**claim, "status": {"allocation": results[0]}})
    return picks


# --- the order inside one GPU ---------------------------------------------------------


def test_h100_order_packs_small_profiles_from_the_end_of_the_grid() -> None:
    assert _order(h100_80gb_gi_profiles()) == [
        *(f"1g.10gb@{s}" for s in (6, 5, 4, 3, 2, 1, 0)),
        *(f"1g.10gb+me@{s}" for s in (6, 5, 4, 3, 2, 1, 0)),
        *(f"1g.20gb@{s}" for s in (6, 4, 2, 0)),
        *(f"2g.20gb@{s}" for s in (4, 2, 0)),
        "3g.40gb@4",  # 0 is the only 4g placement
        "3g.40gb@0",
        "4g.40gb@0",
        "7g.80gb@0",
    ]


def test_a100_order_matches_the_h100_grid() -> None:
    assert _order(a100_40gb_gi_profiles())[:7] == [f"1g.5gb@{s}" for s in (6, 5, 4, 3, 2, 1, 0)]
    assert [o for o in _order(a100_40gb_gi_profiles()) if o.startswith("3g")] == [
        "3g.20gb@4",
        "3g.20gb@0",
    ]


def test_a30_fills_its_four_slices_from_the_end() -> None:
    a30 = discover(open_hardware("sim:a30-node").nvml).gpus[0]
    order = _order(a30.gi_profiles)
    assert [o for o in order if o.startswith("1g.6gb@")] == [f"1g.6gb@{s}" for s in (3, 2, 1, 0)]
    assert [o for o in order if o.startswith("2g.12gb@")] == ["2g.12gb@2", "2g.12gb@0"]


def test_damage_counts_what_a_placement_takes_from_larger_profiles() -> None:
    profiles = {p.name: p for p in h100_80gb_gi_profiles()}
    offered = _offered(h100_80gb_gi_profiles())
    one = profiles["1g.10gb"]
    # slot 6: 1g.20gb@6 (2/4), 3g@4 (4/2), 7g (8/1); +me@6 (1/7)
    expected = Fraction(2, 4) + Fraction(4, 2) + 8 + Fraction(1, 7)
    assert placement_damage(one, Placement(6, 1), offered) == expected
    # slot 0 also breaks 2g@0 (2/3), the other 3g and the only 4g (4/1)
    assert placement_damage(one, Placement(0, 1), offered) > placement_damage(
        one, Placement(6, 1), offered
    )
    assert placement_damage(profiles["7g.80gb"], Placement(0, 8), offered) == 0


# --- the order of a node ------------------------------------------------------------


def test_order_is_gpu_major_with_static_first_and_the_full_gpu_last() -> None:
    node = _h100_node(2, migs=(("3g.40gb", 4, 2),))
    devices = build_devices(node, dynamic_mig=True)
    ordered = order_devices(devices)
    names = [d.name for d in ordered]
    assert names[0] == "gpu-0-mig-3g40gb-9-4"  # the admin's instance, tried before creating one
    assert names[1:5] == [f"gpu-0-mig-1g10gb-19-{s}" for s in (3, 2, 1, 0)]
    gpu1 = names.index("gpu-1-mig-1g10gb-19-6")
    assert all(name.startswith("gpu-0-") for name in names[:gpu1])
    assert names[-1] == "gpu-1"
    for seed in range(3):
        shuffled = list(devices)
        random.Random(seed).shuffle(shuffled)
        assert order_devices(shuffled) == ordered


def test_profile_groups_hold_every_gpu_of_one_profile_and_plain_gpus_first(
    tmp_path: Any,
) -> None:
    shape = tmp_path / "mixed.yaml"
    shape.write_text("gpus:\n  - model: H100-SXM5-80GB\n    count: 2\n  - model: L4\n")
    devices = build_devices(discover(open_hardware(f"sim:{shape}").nvml), dynamic_mig=True)
    groups = profile_groups(devices)
    heads = [group[0] for group in groups]
    assert [_label(d) for d in heads] == [
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
        "gpu",
    ]
    assert [d.name for d in groups[0]] == [
        *(f"gpu-0-mig-1g10gb-19-{s}" for s in (6, 5, 4, 3, 2, 1, 0)),
        *(f"gpu-1-mig-1g10gb-19-{s}" for s in (6, 5, 4, 3, 2, 1, 0)),
    ]
    assert [d.name for d in groups[-1]] == ["gpu-2", "gpu-0", "gpu-1"]  # the L4 first
    assert sorted(d.name for group in groups for d in group) == sorted(d.name for d in devices)


def _label(device: AllocatableDevice) -> str:
    return "gpu" if device.kind == "gpu" else str(device.attributes["profile"].value)


# --- what the scheduler does with it --------------------------------------------------


def test_seven_1g_fill_an_empty_h100_from_the_end_and_an_eighth_is_refused() -> None:
    picks = _first_fit(_slices(_h100_node()), ["1g.10gb"] * 8)
    assert picks == [*(f"gpu-0-mig-1g10gb-19-{s}" for s in (6, 5, 4, 3, 2, 1, 0)), None]


def test_small_profiles_leave_the_4_slot_block_free_where_name_order_breaks_it() -> None:
    stream = ["1g.10gb", "1g.10gb", "1g.10gb", "4g.40gb"]
    ours = _first_fit(_slices(_h100_node()), stream)
    assert ours == [
        "gpu-0-mig-1g10gb-19-6",
        "gpu-0-mig-1g10gb-19-5",
        "gpu-0-mig-1g10gb-19-4",
        "gpu-0-mig-4g40gb-5-0",
    ]
    by_name = _first_fit(_by_name_inside_slices(_slices(_h100_node())), stream)
    assert by_name[:3] == [f"gpu-0-mig-1g10gb-19-{s}" for s in (0, 1, 2)]
    assert by_name[3] is None


def test_first_fit_fills_the_first_gpu_before_touching_the_next() -> None:
    picks = _first_fit(_slices(_h100_node(2)), ["2g.20gb", "1g.10gb", "3g.40gb", "7g.80gb"])
    assert picks == [
        "gpu-0-mig-2g20gb-14-4",
        "gpu-0-mig-1g10gb-19-6",
        "gpu-0-mig-3g40gb-9-0",
        "gpu-1-mig-7g80gb-0-0",
    ]


def test_full_gpu_and_mig_devices_exclude_each_other_in_the_scheduler() -> None:
    assert _first_fit(_slices(_h100_node()), ["1g.10gb", "gpu"]) == ["gpu-0-mig-1g10gb-19-6", None]
    assert _first_fit(_slices(_h100_node()), ["gpu", "1g.10gb"]) == ["gpu-0", None]


def test_v134_layout_gives_the_scheduler_the_same_choices() -> None:
    stream = ["1g.10gb", "3g.40gb", "2g.20gb", "1g.20gb", "4g.40gb", "gpu", "1g.10gb"]
    node = _h100_node(2)
    v134 = _first_fit(_slices(node, "v1.34"), stream, release="1.34")
    assert v134 == _first_fit(_slices(node), stream)
    assert v134[:2] == ["gpu-0-mig-1g10gb-19-6", "gpu-0-mig-3g40gb-9-0"]
