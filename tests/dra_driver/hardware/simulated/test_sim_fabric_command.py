"""`dra-gpu sim fabric`: a running simulated node's fabric moves (state, clique, cluster,
health), and NVIDIA's mock cluster topology file places a node by its name."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cli import main
from dra_driver.hardware.nvml import fabric
from dra_driver.hardware.nvml.fabric import FabricCondition, classify
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape

RACK = "00000000-0000-0000-0000-000000000001"
TOPOLOGY = """\
domains:
  - name: rack-a
    uuid: 00000000-0000-0000-0000-00000000000a
    cliques:
      - id: 0
        nodes: [gb-0, gb-1]
      - id: 1
        nodes: [gb-2]
  - name: rack-b
    uuid: 0000000000000000000000000000000b
    cliques:
      - id: "7"
        nodes: [gb-3]
"""


def boot(tmp_path: Path, shape: str = "gb200-node") -> Path:
    state = tmp_path / "sim-state.json"
    SimHardware(load_shape(shape), node_name="gb-2", state_path=state)
    return state


def answers(state: Path) -> list[fabric.FabricInfo | None]:
    return [gpu.fabric for gpu in SimNvml(SimHardware(state_path=state)).gpus()]


def test_a_node_settles_and_degrades_without_a_restart(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    state = boot(tmp_path)
    assert main(["sim", "fabric", f"--state-file={state}", "--state=in_progress"]) == 0
    assert {classify(info) for info in answers(state)} == {FabricCondition.REGISTERING}
    assert "GPU 3: fabric registering (state in-progress" in capsys.readouterr().out
    main(["sim", "fabric", f"--state-file={state}", "--state=completed", "--gpu=1", "--clique=5"])
    now = answers(state)
    assert now[1] is not None
    assert now[1].clique == f"{RACK}.5"
    assert classify(now[1]) is FabricCondition.IN_CLIQUE
    assert classify(now[0]) is FabricCondition.REGISTERING
    main(["sim", "fabric", f"--sim-state={state}", "--state=completed", "--health=degraded"])
    info = answers(state)[0]
    assert info is not None
    assert info.health_summary == fabric.HEALTH_LIMITED_CAPACITY
    assert classify(info) is FabricCondition.UNHEALTHY
    other = "a1b2c3d4-e5f6-0718-293a-4b5c6d7e8f90"
    main(
        [
            "sim",
            "fabric",
            f"--state-file={state}",
            "--state=completed",
            "--health=healthy",
            f"--cluster-uuid={other.upper()}",
        ]
    )
    assert {info.clique for info in answers(state) if info} == {f"{other}.0", f"{other}.5"}


def test_the_topology_file_places_a_node_by_name(tmp_path: Path) -> None:
    state = boot(tmp_path)
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY)
    for node, clique in [
        ("gb-2", "00000000-0000-0000-0000-00000000000a.1"),
        ("gb-3", "00000000-0000-0000-0000-00000000000b.7"),
    ]:
        assert (
            main(
                [
                    "sim",
                    "fabric",
                    f"--state-file={state}",
                    f"--topology={topology}",
                    f"--node={node}",
                ]
            )
            == 0
        )
        assert {info.clique for info in answers(state) if info} == {clique}
    assert {classify(info) for info in answers(state)} == {FabricCondition.IN_CLIQUE}
    no_fabric = boot(tmp_path / "h100", "dgx-h100")
    main(["sim", "fabric", f"--state-file={no_fabric}", f"--topology={topology}", "--node=gb-0"])
    assert set(answers(no_fabric)) == {None}  # as the mock: only GPUs with a fabric block


@pytest.mark.parametrize(
    ("args", "problem"),
    [
        (["--topology=T", "--node=gb-9"], "node 'gb-9' is in no clique of any domain"),
        (["--topology=T"], "--topology: give --node"),
        ([], "--state: required unless --topology"),
        (["--state=completed", "--gpu=4"], "--gpu 4: the node has GPUs 0..3"),
        (["--state=completed", "--cluster-uuid=rack"], "--cluster-uuid: 'rack' is not a UUID"),
        (["--state=completed", "--clique=-1"], "--clique: a clique id is an integer"),
    ],
)
def test_mistakes_are_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], problem: str
) -> None:
    state = boot(tmp_path)
    topology = tmp_path / "topology.yaml"
    topology.write_text(TOPOLOGY)
    args = [a.replace("=T", f"={topology}") for a in args]
    assert main(["sim", "fabric", f"--state-file={state}", *args]) != 0
    assert problem in capsys.readouterr().err
