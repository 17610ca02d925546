"""Every file in examples/ places where it says, through `dra-gpu simulate`.

Each example names the command that simulates it in a comment
(`#   dra-gpu simulate -f examples/<file> ARGS`); the test runs exactly that
command and compares the placement with the table below. A new example must
be listed here with its expected placement (pod -> "node device,device", or
None when the example shows a pod that cannot be placed), so no example can
drift from what its comment promises.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
NOT_WORKLOADS = ("shapes/",)  # node shapes the examples use, not workloads

_MIG_SAME_GPU = (
    "gpu-{i}-mig-1g5gb-19-3,gpu-{i}-mig-1g5gb-19-2,gpu-{i}-mig-2g10gb-14-0,gpu-{i}-mig-3g20gb-9-4"
)

PLACEMENTS: dict[str, dict[str, str | None]] = {
    "gpu-single.yaml": {"gpu-single/cuda": "l4-node-0 gpu-0"},
    "gpu-by-memory.yaml": {"inference/server": "dgx-a100-80gb-0 gpu-0"},
    "gpu-by-driver-version.yaml": {"driver-version/cuda-12-4": "dgx-a100-80gb-0 gpu-0"},
    "gpu-h100-by-product.yaml": {"training/trainer": "dgx-h100-0 gpu-0,gpu-1"},
    "gpu-prioritized-list.yaml": {"prioritized/inference": "l4-node-0 gpu-0,gpu-1"},
    "gpu-shared-claim.yaml": {
        "shared/producer": "l4-node-0 gpu-0",
        "shared/consumer": "l4-node-0 gpu-0",
    },
    "gpu-admin-access.yaml": {
        "gpu-monitoring/dcgm-exporter": "l4-node-0 gpu-0,gpu-1,gpu-2,gpu-3",
        "gpu-monitoring/trainer": "l4-node-0 gpu-0",
    },
    "mig-static-same-gpu.yaml": {  # the admin-made devices of dgx-a100-40gb-balanced
        "mig-static/mig-pod": (
            "dgx-a100-40gb-balanced-0 "
            "gpu-0-mig-1g5gb-19-2,gpu-0-mig-1g5gb-19-3,gpu-0-mig-2g10gb-14-0"
        ),
    },
    "mig-dynamic.yaml": {
        "mig-dynamic/inference-0": "dgx-h100-0 gpu-0-mig-3g40gb-9-4",
        "mig-dynamic/inference-1": "dgx-h100-0 gpu-0-mig-3g40gb-9-0",
    },
    "gpu-mps.yaml": {f"mps/inference-{i}": "dgx-h100-0 gpu-0" for i in range(4)},
    "mig-mps.yaml": {
        f"mig-mps/small-models-{i}": "dgx-h100-0 gpu-0-mig-1g10gb-19-6" for i in range(3)
    },
    "extended-resource-gpu.yaml": {
        **{f"default/trainer-{i}": f"dgx-h100-0 gpu-{2 * i},gpu-{2 * i + 1}" for i in range(4)},
        "default/trainer-4": None,
    },
    "extended-resource-implicit.yaml": {
        "default/any-mig": "dgx-h200-0 gpu-0-mig-1g18gb-19-6,gpu-0-mig-1g18gb-19-5",
    },
    "extended-resource-mig.yaml": {
        "default/small-inference": "h100-nvl-node-0 gpu-0-mig-1g12gb-19-6",
    },
    "gpu-4-way-shares.yaml": {  # four quarter-GPU shares per H100, eight H100s
        **{f"shares/quarter-gpu-workers-{i}": f"dgx-h100-0 gpu-{i // 4}" for i in range(32)},
        "shares/quarter-gpu-workers-32": None,
    },
    "gpu-memory-shares.yaml": {  # three memory shares per H100
        **{f"memory-shares/inference-{i}": f"dgx-h100-0 gpu-{i // 3}" for i in range(24)},
        "memory-shares/inference-24": None,
    },
    "gpu-time-slicing.yaml": {f"timeslicing/ts-workers-{i}": "dgx-h100-0 gpu-0" for i in range(3)},
    "vm-gpu-passthrough.yaml": {"vm/virt-launcher-rhel-gpu": "dgx-h100-0 gpu-vfio-0"},
    "simulate/b200-training.yaml": {"ml/pretrain-0": None, "ml/pretrain-1": None},
    "simulate/from-cluster.yaml": {
        "team-a/producer": "gpu-node-1 gpu-0",
        "team-a/consumer": "gpu-node-1 gpu-0",
        "team-a/llm-0": "gpu-node-1 gpu-1,gpu-2",
        "team-a/llm-1": "gpu-node-2 gpu-0,gpu-1",
        "team-a/llm-2": "gpu-node-2 gpu-2,gpu-3",
        "team-a/llm-3": None,
    },
    "simulate/mig-same-gpu.yaml": {
        **{f"mig/inference-{i}": "dgx-a100-40gb-0 " + _MIG_SAME_GPU.format(i=i) for i in range(8)},
        "mig/inference-8": None,
    },
}


def _example_files() -> list[str]:
    return sorted(
        str(p.relative_to(EXAMPLES))
        for p in EXAMPLES.rglob("*.yaml")
        if not str(p.relative_to(EXAMPLES)).startswith(NOT_WORKLOADS)
    )


def _command(name: str) -> list[str]:
    """The arguments of the `dra-gpu simulate -f examples/<name> ...` line in the file."""
    text = (EXAMPLES / name).read_text()
    match = re.search(r"^#\s+dra-gpu simulate (.*)$", text, re.M)
    assert match, f"examples/{name} has no '#   dra-gpu simulate -f examples/{name} ...' line"
    args = shlex.split(match.group(1))
    assert args[:2] == ["-f", f"examples/{name}"], f"examples/{name} simulates another file"
    return [str(ROOT / args[1]), *args[2:]]


def _placement(record: dict[str, Any]) -> str | None:
    if not record["placed"]:
        return None
    devices = [r["device"] for claim in record["claims"] for r in claim["results"]]
    return f"{record['node']} {','.join(devices)}"


def test_every_example_has_an_expected_placement() -> None:
    assert sorted(PLACEMENTS) == _example_files()


@pytest.mark.parametrize("name", sorted(PLACEMENTS))
def test_example_places_as_expected(capsys: pytest.CaptureFixture[str], name: str) -> None:
    code = main(["simulate", "-f", *_command(name), "-o", "yaml"])
    records = yaml.safe_load(capsys.readouterr().out)

    placements = {record["pod"]: _placement(record) for record in records}
    assert placements == PLACEMENTS[name]
    assert code == (0 if all(placements.values()) else 1)
