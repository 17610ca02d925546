"""`simulate` and `explain` with `--consumable-shares`: NVIDIA's own demo manifests, scaled up.

`data/consumable-shares/` holds NVIDIA's `demo/specs/consumable-shares/`
manifests unchanged; each test raises the Deployment's replicas past what
one simulated DGX H100 (8 x H100 80GB, 81559Mi each) can hold and checks
that exactly the pods the published capacity allows are placed, and that
the first one left over is explained by the exhausted capacity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main

DATA = Path(__file__).parent / "data" / "consumable-shares"
H100_MEMORY_MI = 81559
PODS_PER_GPU_AT_4GI = H100_MEMORY_MI // 4096  # 19
NODE = ("--nodes", "dgx-h100=1")


def _scaled(tmp_path: Path, manifest: str, replicas: int) -> str:
    documents = list(yaml.safe_load_all((DATA / manifest).read_text(encoding="utf-8")))
    for document in documents:
        if document and document["kind"] == "Deployment":
            document["spec"]["replicas"] = replicas
    path = tmp_path / manifest
    path.write_text(yaml.safe_dump_all(documents), encoding="utf-8")
    return str(path)


def _simulate(
    capsys: pytest.CaptureFixture[str], path: str, shares: str
) -> tuple[int, list[dict[str, Any]]]:
    code = main(["simulate", "-f", path, *NODE, "--consumable-shares", shares, "-o", "yaml"])
    return code, yaml.safe_load(capsys.readouterr().out)


def _devices(records: list[dict[str, Any]]) -> dict[str, int]:
    per_device: dict[str, int] = {}
    for record in records:
        for claim in record["claims"]:
            for result in claim["results"]:
                per_device[result["device"]] = per_device.get(result["device"], 0) + 1
    return per_device


def _explain(capsys: pytest.CaptureFixture[str], path: str, shares: str) -> tuple[int, str]:
    code = main(["explain", "-f", path, "--nodes", "dgx-h100=1", "--consumable-shares", shares])
    return code, capsys.readouterr().out


def test_integer_shares_place_four_pods_per_gpu_and_explain_the_33rd(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scaled(tmp_path, "integer-sharing.yaml", 33)

    code, records = _simulate(capsys, path, "4")

    assert code == 1
    placed = [r for r in records if r["placed"]]
    assert len(placed) == 32
    assert _devices(placed) == {f"gpu-{minor}": 4 for minor in range(8)}
    assert [r["pod"] for r in records if not r["placed"]] == [
        "gpu-share-integer/integer-sharing-32"
    ]
    code, out = _explain(capsys, path, "4")
    assert code == 1
    assert "Pod gpu-share-integer/integer-sharing-32" in out
    assert (
        "Why: request gpu: all 8 GPUs on dgx-h100-0 are shared to capacity (capacity shares: "
        "needs 1, 4 of 4 already consumed; 32 claims share them)" in out
    )


def test_memory_shares_place_as_many_4gi_pods_as_fit_in_gpu_memory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fit = 8 * PODS_PER_GPU_AT_4GI
    path = _scaled(tmp_path, "memory-sharing.yaml", fit + 1)

    code, records = _simulate(capsys, path, "memory")

    assert code == 1
    placed = [r for r in records if r["placed"]]
    assert len(placed) == fit == 152
    assert _devices(placed) == {f"gpu-{minor}": PODS_PER_GPU_AT_4GI for minor in range(8)}
    assert [r["pod"] for r in records if not r["placed"]] == [
        f"gpu-share-memory/memory-sharing-{fit}"
    ]
    code, out = _explain(capsys, path, "memory")
    assert code == 1
    assert (
        "are shared to capacity (capacity memory: needs 4Gi, 76Gi of 81559Mi already consumed; "
        "152 claims share them)" in out
    )


def test_memory_mode_without_a_memory_request_takes_the_whole_gpu(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # NVIDIA's `memory` mode: the request policy's default is all of the memory.
    path = _scaled(tmp_path, "integer-sharing.yaml", 9)

    code, records = _simulate(capsys, path, "memory")

    assert code == 1
    assert sum(1 for r in records if r["placed"]) == 8


def test_unlimited_shares_place_every_pod(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scaled(tmp_path, "unlimited-sharing.yaml", 100)

    code, records = _simulate(capsys, path, "unlimited")

    assert code == 0
    assert all(r["placed"] for r in records)
    assert len(records) == 100


def test_without_the_flag_each_pod_needs_a_gpu_of_its_own(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scaled(tmp_path, "unlimited-sharing.yaml", 9)

    code = main(["simulate", "-f", path, "--nodes", "dgx-h100=1", "-o", "yaml"])

    assert code == 1
    assert sum(1 for r in yaml.safe_load(capsys.readouterr().out) if r["placed"]) == 8


def test_the_gate_can_still_be_turned_off_explicitly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _scaled(tmp_path, "integer-sharing.yaml", 9)

    gate_off = ("--feature-gates", "DRAConsumableCapacity=false")
    shares = ("--consumable-shares", "4")
    code = main(["simulate", "-f", path, *NODE, *shares, *gate_off, "-o", "yaml"])

    assert code == 1
    assert sum(1 for r in yaml.safe_load(capsys.readouterr().out) if r["placed"]) == 8


def test_a_bad_flag_value_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "-f", "-", "--consumable-shares", "0"]) == 2
    assert "--consumable-shares '0': expected 'unlimited', 'memory' or a positive number" in (
        capsys.readouterr().err
    )


EXAMPLES = Path(__file__).resolve().parents[4] / "examples"


EVERY_GPU = range(8)


@pytest.mark.parametrize(
    ("example", "shares", "per_device", "unplaced"),
    [
        ("gpu-time-slicing.yaml", (), {"gpu-0": 3}, []),
        (
            "gpu-4-way-shares.yaml",
            ("--consumable-shares", "4"),
            {f"gpu-{m}": 4 for m in EVERY_GPU},
            ["quarter-gpu-workers-32"],
        ),
        (
            "gpu-memory-shares.yaml",
            ("--consumable-shares", "memory"),
            {f"gpu-{m}": 3 for m in EVERY_GPU},
            ["inference-24"],
        ),
    ],
)
def test_the_sharing_examples_place_what_their_comments_say(
    capsys: pytest.CaptureFixture[str],
    example: str,
    shares: tuple[str, ...],
    per_device: dict[str, int],
    unplaced: list[str],
) -> None:
    code = main(["simulate", "-f", str(EXAMPLES / example), *NODE, *shares, "-o", "yaml"])
    records = yaml.safe_load(capsys.readouterr().out)

    assert code == (1 if unplaced else 0)
    done = [r for r in records if r["placed"]]
    assert _devices(done) == per_device  # 3, 32 and 24 pods
    assert [r["pod"].split("/")[1] for r in records if not r["placed"]] == unplaced
    configs = [claim["config"] for r in done for claim in r["claims"]]
    if example != "gpu-memory-shares.yaml":  # both others ask for time-slicing
        assert all("TimeSlicing" in str(config) for config in configs)
