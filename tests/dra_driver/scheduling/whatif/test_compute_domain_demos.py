"""ComputeDomain workloads of the shapes NVIDIA's demos use, through `dra-gpu simulate` on GB200.

The manifests (data/compute-domain-demos/) are our own, one per shape that
NVIDIA's `demo/specs/imex` has (computedomain.md §1.4), with the outcome that
demo's authors expect: a pod gets its IMEX channel (one, or all with
`allocationMode: All`); an MPIJob runs its workers, 2 GPUs and the domain's
channel each, on nodes of one NVLink clique, and its launcher on a
control-plane node; two jobs with their own ComputeDomains run side by side on
separate nodes; queued all at once on 4 nodes, the big job runs and the others
wait for its nodes. NVIDIA's files themselves are checked, from a directory
given at run time, by `python -m bench.nvidia_imex_demos` (not part of the tests).

The workers ask for GPUs as `nvidia.com/gpu: 2`, a device-plugin resource:
simulated nodes have no device plugin, so the workers are placed where
DRAExtendedResource lets our `gpu.nvidia.com` DeviceClass serve it
(`--feature-gates DRAExtendedResource=true` on 1.35; on by default from 1.36).
The launcher's node affinity asks for `node-role.kubernetes.io/control-plane`:
the tests add that Node, as a real cluster has one.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main

DEMOS = Path(__file__).parent / "data" / "compute-domain-demos"
GATE = ("--feature-gates", "DRAExtendedResource=true")
CONTROL_PLANE = (
    "apiVersion: v1\nkind: Node\nmetadata:\n  name: control-plane\n  labels:\n"
    '    node-role.kubernetes.io/control-plane: ""\n'
)


def _uid(name: str) -> str:
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"resource.nvidia.com/default/{name}"))


def _simulate(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, files: list[str], *args: str
) -> tuple[int, dict[str, dict[str, Any]]]:
    node = tmp_path / "control-plane.yaml"
    node.write_text(CONTROL_PLANE)
    paths = [arg for name in files for arg in ("-f", str(DEMOS / name))]
    code = main(["simulate", *paths, "-f", str(node), "-o", "yaml", *args])
    placements = yaml.safe_load(capsys.readouterr().out) or []
    return code, {p["pod"]: p for p in placements}


def _channel(placement: dict[str, Any]) -> tuple[str, str, str]:
    """(node, device, domainID) of a pod's IMEX channel."""
    for claim in placement["claims"]:
        for result in claim["results"]:
            if result["driver"] == "compute-domain.nvidia.com":
                (config,) = claim["config"]
                domain = config["opaque"]["parameters"]["domainID"]
                return result["pool"], result["device"], domain
    raise AssertionError(f"{placement['pod']} has no channel")


def _gpus(placement: dict[str, Any]) -> list[str]:
    return [
        f"{result['pool']}/{result['device']}"
        for claim in placement["claims"]
        for result in claim["results"]
        if result["driver"] == "gpu.nvidia.com"
    ]


def _workers(job: str, count: int) -> list[str]:
    return [f"default/{job}-worker-{i}" for i in range(count)]


def test_a_pod_with_the_channel_claim_gets_channel_0(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, pods = _simulate(capsys, tmp_path, ["one-channel.yaml"], "--nodes", "gb200-node=1")
    assert code == 0
    placement = pods["default/channel-reader"]
    assert _channel(placement) == ("gb200-node-0", "channel-0", _uid("single-channel-domain"))
    (claim,) = placement["claims"]
    assert claim["config"][0]["opaque"]["parameters"]["allocationMode"] == "Single"


def test_with_allocation_mode_all_the_pod_gets_channel_0_marked_all(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, pods = _simulate(capsys, tmp_path, ["all-channels.yaml"], "--nodes", "gb200-node=1")
    assert code == 0
    placement = pods["default/every-channel-reader"]
    assert _channel(placement) == ("gb200-node-0", "channel-0", _uid("every-channel-domain"))
    (claim,) = placement["claims"]
    assert claim["config"][0]["opaque"]["parameters"]["allocationMode"] == "All"


def test_the_mpi_job_runs_4_workers_on_4_nodes_of_one_clique(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, pods = _simulate(
        capsys, tmp_path, ["mpi-job-four-workers.yaml"], "--nodes", "gb200-node=4", *GATE
    )
    assert code == 0
    domain = _uid("fabric-test-domain")
    workers = [pods[name] for name in _workers("fabric-test", 4)]
    assert [_channel(w) for w in workers] == [
        (f"gb200-node-{i}", "channel-0", domain) for i in range(4)
    ]
    assert [len(_gpus(w)) for w in workers] == [2, 2, 2, 2]
    assert pods["default/fabric-test-launcher"]["node"] == "control-plane"
    assert len(pods) == 5


@pytest.mark.parametrize("job", ["a", "b"])
def test_each_small_mpi_job_runs_2_workers_on_2_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, job: str
) -> None:
    files = [f"mpi-job-{job}.yaml"]
    code, pods = _simulate(capsys, tmp_path, files, "--nodes", "gb200-node=2", *GATE)
    assert code == 0
    domain = _uid(f"fabric-test-{job}-domain")
    workers = [pods[name] for name in _workers(f"fabric-test-{job}", 2)]
    assert [_channel(w) for w in workers] == [
        ("gb200-node-0", "channel-0", domain),
        ("gb200-node-1", "channel-0", domain),
    ]
    assert pods[f"default/fabric-test-{job}-launcher"]["node"] == "control-plane"


def test_two_jobs_with_their_own_compute_domains_run_on_separate_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = ["mpi-job-a.yaml", "mpi-job-b.yaml"]
    code, pods = _simulate(capsys, tmp_path, files, "--nodes", "gb200-node=4", *GATE)
    assert code == 0
    nodes = {
        job: {_channel(pods[name])[0] for name in _workers(f"fabric-test-{job}", 2)}
        for job in ("a", "b")
    }
    assert nodes == {"a": {"gb200-node-0", "gb200-node-1"}, "b": {"gb200-node-2", "gb200-node-3"}}


def test_three_jobs_queued_at_once_the_others_wait_for_the_first_ones_nodes(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = [
        "mpi-job-four-workers.yaml",
        "mpi-job-a.yaml",
        "mpi-job-b.yaml",
    ]
    code, pods = _simulate(capsys, tmp_path, files, "--nodes", "gb200-node=4", *GATE)
    assert code == 1
    assert all(pods[name]["placed"] for name in _workers("fabric-test", 4))
    waiting = _workers("fabric-test-a", 2) + _workers("fabric-test-b", 2)
    assert not any(pods[name]["placed"] for name in waiting)
    reason = pods["default/fabric-test-a-worker-0"]["reason"]
    assert reason == (
        "no node can give ComputeDomain default/fabric-test-a-domain's pod an IMEX "
        "channel: gb200-node-0, gb200-node-1, gb200-node-2 and 1 more (4 nodes) already serve "
        "ComputeDomain default/fabric-test-domain (one IMEX daemon per node: one "
        "ComputeDomain at a time); control-plane: publishes no compute-domain.nvidia.com devices"
    )


def test_the_job_without_a_compute_domain_needs_no_fabric(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    files = ["mpi-job-no-domain.yaml"]
    for nodes in ("gb200-node=2", "dgx-h100=1"):
        code, pods = _simulate(capsys, tmp_path, files, "--nodes", nodes, *GATE)
        assert code == 0, nodes
        workers = [pods[name] for name in _workers("gpu-only-test", 4)]
        assert [len(_gpus(w)) for w in workers] == [2, 2, 2, 2]
        assert all(len(w["claims"]) == 1 for w in workers)  # GPUs only, no channel


def test_without_dra_extended_resources_the_workers_say_what_serves_nvidia_com_gpu(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, pods = _simulate(
        capsys, tmp_path, ["mpi-job-four-workers.yaml"], "--nodes", "gb200-node=4"
    )
    assert code == 1
    assert pods["default/fabric-test-worker-0"]["reason"] == (
        "Insufficient nvidia.com/gpu: no simulated node has a device plugin for it and the "
        "DRAExtendedResource feature gate is off"
    )
    assert pods["default/fabric-test-launcher"]["node"] == "control-plane"


def test_on_kubernetes_1_36_the_workers_share_nodes_and_numnodes_4_is_not_reached(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """1.36 turns DRAExtendedResource and DRAConsumableCapacity on: two workers (2 GPUs each)
    share a 4-GPU node and its channel, so the domain's `numNodes: 4` is never reached."""
    node = tmp_path / "control-plane.yaml"
    node.write_text(CONTROL_PLANE)
    job = str(DEMOS / "mpi-job-four-workers.yaml")
    args = ["-f", job, "-f", str(node), "--nodes", "gb200-node=4", "--kubernetes", "1.36"]
    assert main(["simulate", *args, "-o", "yaml"]) == 0
    captured = capsys.readouterr()
    pods = {p["pod"]: p for p in yaml.safe_load(captured.out)}
    nodes = [_channel(pods[name])[0] for name in _workers("fabric-test", 4)]
    assert nodes == ["gb200-node-0", "gb200-node-0", "gb200-node-1", "gb200-node-1"]
    assert captured.err == (
        "note: ComputeDomain default/fabric-test-domain has numNodes 4, but its "
        "pods are on 2 nodes: its pods get their channels, and its Ready condition stays False "
        "(WaitingForNodes) until 4 nodes have joined (numNodes is deprecated; 0 waits for no "
        "count)\n"
    )
