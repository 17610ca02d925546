"""`bench nvidia-prepare`: opt-in, says what is missing, and compares CDI as a runtime applies it.

The timing itself needs NVIDIA's build and is never run here; what is tested
is what a user of the harness sees without it, and the CDI comparison that
decides whether the two plugins give a container the same edits.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench import __main__ as bench_main
from bench.cdi_compare import differences, resolved_edits
from dra_driver.errors import CdiError

UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"


def test_make_bench_leaves_it_out_and_naming_it_without_the_build_says_what_is_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert "nvidia-prepare" in bench_main.BENCHMARKS
    assert "nvidia-prepare" in bench_main.OPT_IN
    monkeypatch.setenv("DRA_GPU_NVIDIA_BUILD", str(tmp_path))

    assert bench_main.main(["nvidia-prepare"]) == 2

    err = capsys.readouterr().err
    assert f"no {tmp_path}/bin/gpu-kubelet-plugin" in err
    assert f"{tmp_path}/mocknvml/libnvidia-ml.so.550.163.01" in err
    assert "docs/nvidia-comparison.md" in err


def _spec(path: Path, kind: str, devices: dict[str, dict[str, object]], **edits: object) -> None:
    spec: dict[str, object] = {
        "cdiVersion": "0.6.0",
        "kind": kind,
        "devices": [{"name": n, "containerEdits": e} for n, e in devices.items()],
    }
    if edits:
        spec["containerEdits"] = edits
    path.write_text(yaml.safe_dump(spec))


MOUNT = {"hostPath": "/usr/bin/nvidia-smi", "containerPath": "/usr/bin/nvidia-smi"}
GPU0 = {"path": "/dev/nvidia0"}


def test_a_base_spec_plus_a_claim_spec_equals_one_spec_with_everything(tmp_path: Path) -> None:
    one, split = tmp_path / "one", tmp_path / "split"
    one.mkdir()
    split.mkdir()
    everything = {"env": [f"CLAIM={UID}"], "deviceNodes": [GPU0], "mounts": [MOUNT]}
    _spec(one / "claim.yaml", "k8s.gpu.nvidia.com/claim", {f"{UID}-gpu-0": everything})
    _spec(
        split / "base.yaml",
        "k8s.gpu.nvidia.com/node",
        {"base": {}},
        mounts=[MOUNT],
        env=[f"CLAIM={UID}"],
    )
    _spec(split / "claim.yaml", "k8s.gpu.nvidia.com/claim", {"x-gpu-0": {"deviceNodes": [GPU0]}})

    whole = resolved_edits(one, [f"k8s.gpu.nvidia.com/claim={UID}-gpu-0"], {UID: "<uid>"})
    parts = resolved_edits(
        split,
        ["k8s.gpu.nvidia.com/node=base", "k8s.gpu.nvidia.com/claim=x-gpu-0"],
        {"x": "<uid>", UID: "<uid>"},
    )

    assert differences(whole, parts) == []
    assert whole.env == {"CLAIM=<uid>"}


def test_what_only_one_side_gets_is_listed(tmp_path: Path) -> None:
    ours, theirs = tmp_path / "ours", tmp_path / "theirs"
    ours.mkdir()
    theirs.mkdir()
    bind = {**MOUNT, "options": ["ro", "bind"]}
    rbind = {**MOUNT, "options": ["ro", "rbind", "rprivate"]}
    _spec(ours / "a.yaml", "v.com/c", {"d": {"mounts": [bind], "deviceNodes": [GPU0]}})
    _spec(theirs / "a.yaml", "v.com/c", {"d": {"mounts": [rbind]}})

    lines = differences(
        resolved_edits(ours, ["v.com/c=d"], {}), resolved_edits(theirs, ["v.com/c=d"], {})
    )

    assert lines == [
        "mount options of 1 mounts (e.g. /usr/bin/nvidia-smi): ours ro,bind, "
        "NVIDIA's ro,rbind,rprivate",
        "only ours device_nodes: ('/dev/nvidia0', '/dev/nvidia0')",
    ]


def test_an_id_no_spec_has_is_an_error(tmp_path: Path) -> None:
    _spec(tmp_path / "a.yaml", "v.com/c", {"d": {}})
    with pytest.raises(CdiError, match=r"v\.com/c=e: 0 devices of that name"):
        resolved_edits(tmp_path, ["v.com/c=e"], {})
