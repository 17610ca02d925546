"""The simulated NVLink fabric: what gb200-node's GPUs answer, shape files that set it, and the
state file that keeps it."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml import codes, fabric
from dra_driver.hardware.nvml.fabric import FabricCondition, FabricInfo, classify
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import BUILTIN_SHAPES, load_shape

RACK = "00000000-0000-0000-0000-000000000001"


def test_every_gb200_node_is_in_the_racks_clique() -> None:
    """NVIDIA's mock NVML GB200 profile: cluster ...0001, clique 0, COMPLETED, healthy."""
    for node in ("gb-0", "gb-1"):
        nvml = SimNvml(SimHardware(load_shape("gb200-node"), node_name=node))
        gpus = nvml.gpus()
        assert len(gpus) == 4
        for gpu in gpus:
            assert gpu.fabric == FabricInfo(
                cluster_uuid=RACK,
                clique_id=0,
                state=fabric.STATE_COMPLETED,
                status=codes.SUCCESS,
                health_mask=0x1AA,
                health_summary=fabric.HEALTH_HEALTHY,
            )
            assert nvml.fabric_info(gpu.uuid) == gpu.fabric
            assert classify(gpu.fabric) is FabricCondition.IN_CLIQUE


@pytest.mark.parametrize("name", sorted(set(BUILTIN_SHAPES) - {"gb200-node", "gb300-node"}))
def test_other_shapes_have_no_fabric(name: str) -> None:
    nvml = SimNvml(SimHardware(load_shape(name)))
    assert {gpu.fabric for gpu in nvml.gpus()} == {None}


def _shape(tmp_path: Path, fabric_block: str) -> Path:
    path = tmp_path / "tray.yaml"
    path.write_text(f"gpus:\n  - model: GB200\n    count: 2\nfabric:\n{fabric_block}")
    return path


def test_a_shape_file_sets_the_fabric_in_the_mocks_vocabulary(tmp_path: Path) -> None:
    path = _shape(
        tmp_path,
        "  clusterUuid: A1B2C3D4-E5F6-0718-293A-4B5C6D7E8F90\n  cliqueId: 3\n"
        "  state: in_progress\n  healthSummary: unhealthy\n",
    )
    info = load_shape(str(path)).fabric
    assert info is not None
    assert info.clique == "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90.3"
    assert (info.state, info.status) == (fabric.STATE_IN_PROGRESS, codes.SUCCESS)
    assert info.health_summary == fabric.HEALTH_UNHEALTHY
    assert info.health_mask == 0x19A  # route unhealthy TRUE
    defaults = load_shape(str(_shape(tmp_path, f"  clusterUuid: {RACK}\n  cliqueId: 0\n"))).fabric
    assert defaults is not None
    assert classify(defaults) is FabricCondition.IN_CLIQUE


@pytest.mark.parametrize(
    ("block", "field"),
    [
        ("  cliqueId: 0\n", "fabric.clusterUuid: must be a UUID"),
        ("  clusterUuid: rack-1\n  cliqueId: 0\n", "fabric.clusterUuid: must be a UUID"),
        (f"  clusterUuid: {RACK}\n  cliqueId: -1\n", "fabric.cliqueId"),
        (f"  clusterUuid: {RACK}\n  cliqueId: true\n", "fabric.cliqueId"),
        (f"  clusterUuid: {RACK}\n  cliqueId: 0\n  state: done\n", "fabric.state: must be one"),
        (f"  clusterUuid: {RACK}\n  cliqueId: 0\n  healthSummary: ok\n", "fabric.healthSummary"),
        (f"  clusterUuid: {RACK}\n  cliqueId: 0\n  status: -3\n", "fabric.status"),
        (f"  clusterUuid: {RACK}\n  cliqueId: 0\n  clique: 1\n", "unknown field(s) clique"),
        ("  - 1\n", "fabric: must be a mapping"),
    ],
)
def test_a_bad_fabric_block_names_the_file_and_the_field(
    tmp_path: Path, block: str, field: str
) -> None:
    path = _shape(tmp_path, block)
    with pytest.raises(ConfigError) as err:
        load_shape(str(path))
    assert str(path) in str(err.value)
    assert field in str(err.value)


def test_the_fabric_survives_the_state_file(tmp_path: Path) -> None:
    state = tmp_path / "node.json"
    first = SimHardware(load_shape("gb200-node"), node_name="gb-0", state_path=state)
    reopened = SimHardware(None, node_name="gb-0", state_path=state)
    assert [g.fabric for g in reopened.gpus()] == [g.fabric for g in first.gpus()]
    assert reopened.gpu(0).fabric is not None


def test_a_fabric_that_settles_is_seen_by_another_reader_of_the_state_file(tmp_path: Path) -> None:
    state = tmp_path / "node.json"
    manager = SimHardware(load_shape("gb200-node"), node_name="gb-0", state_path=state)
    settled = manager.gpu(1).fabric
    assert settled is not None
    registering = dataclasses.replace(settled, state=fabric.STATE_IN_PROGRESS)
    manager.set_fabric(1, registering)
    plugin = SimNvml(SimHardware(None, node_name="gb-0", state_path=state))
    uuid = plugin.gpus()[1].uuid
    assert classify(plugin.fabric_info(uuid)) is FabricCondition.REGISTERING
    manager.set_fabric(1, settled)
    assert classify(plugin.fabric_info(uuid)) is FabricCondition.IN_CLIQUE
    manager.set_fabric(1, None)
    assert plugin.fabric_info(uuid) is None
