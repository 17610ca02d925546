"""Which GPUs are in a usable NVLink clique: NVIDIA's decision table, plus the v3 health summary."""

from __future__ import annotations

import pytest

from dra_driver.hardware.nvml import codes, fabric
from dra_driver.hardware.nvml.fabric import FabricCondition, FabricInfo, classify, usable_clique

RACK = "00000000-0000-0000-0000-000000000001"


def _info(**changes: object) -> FabricInfo:
    fields: dict[str, object] = {
        "cluster_uuid": RACK,
        "clique_id": 7,
        "state": fabric.STATE_COMPLETED,
        "status": codes.SUCCESS,
        "health_mask": fabric.HEALTHY_MASK,
        "health_summary": fabric.HEALTH_HEALTHY,
    }
    fields.update(changes)
    return FabricInfo(**fields)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("info", "condition"),
    [
        (None, FabricCondition.NOT_SUPPORTED),  # NVML answered NOT_SUPPORTED
        (_info(state=fabric.STATE_NOT_SUPPORTED), FabricCondition.NOT_SUPPORTED),
        (_info(state=fabric.STATE_NOT_STARTED), FabricCondition.REGISTERING),
        (_info(state=fabric.STATE_IN_PROGRESS), FabricCondition.REGISTERING),
        (_info(status=codes.ERROR_UNKNOWN), FabricCondition.FAILED),
        (_info(cluster_uuid=fabric.ZERO_CLUSTER), FabricCondition.NOT_MULTI_NODE),
        (_info(health_summary=fabric.HEALTH_UNHEALTHY), FabricCondition.UNHEALTHY),
        (_info(health_summary=fabric.HEALTH_LIMITED_CAPACITY), FabricCondition.UNHEALTHY),
        (_info(health_summary=fabric.HEALTH_NOT_SUPPORTED), FabricCondition.IN_CLIQUE),
        (_info(health_mask=None, health_summary=None), FabricCondition.IN_CLIQUE),  # v1 answer
        (_info(), FabricCondition.IN_CLIQUE),
    ],
)
def test_the_decision_table(info: FabricInfo | None, condition: FabricCondition) -> None:
    assert classify(info) is condition
    expected = f"{RACK}.7" if condition is FabricCondition.IN_CLIQUE else None
    assert usable_clique(info) == expected


def test_the_clique_has_the_node_label_format() -> None:
    raw = bytes.fromhex("a1b2c3d4e5f60718293a4b5c6d7e8f90")
    info = _info(cluster_uuid=fabric.cluster_uuid_text(raw), clique_id=4294967295)
    assert info.clique == "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90.4294967295"
    assert len(info.clique) <= 64  # fits a DRA string attribute


def test_a_short_cluster_uuid_is_refused() -> None:
    with pytest.raises(ValueError, match="16 bytes"):
        fabric.cluster_uuid_text(b"\x01" * 15)


def test_describe_names_state_status_health_and_clique() -> None:
    text = fabric.describe(_info(state=fabric.STATE_IN_PROGRESS, health_summary=None))
    assert text == (
        f"fabric registering (state in-progress, status Success, health unknown, clique {RACK}.7)"
    )
    assert fabric.describe(None) == "fabric not-supported"
