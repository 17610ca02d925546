"""`explain`/`simulate` say why a pod gets no IMEX channel, in the words an admin needs.

Each reason of issue #24: no node has a multi-node fabric, the fabric is not
ready, the clique is full (18 nodes of one domain), the domain (or another
one) is on the nodes the pod may use; and the one-domain-per-node rule, with
and without DRAConsumableCapacity.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import main
from dra_driver.compute_domain.manifests import device_classes
from dra_driver.kube.access import LocalCluster

DATA = Path(__file__).parent / "data" / "compute-domains"
IN_PROGRESS = DATA / "gb200-fabric-in-progress.yaml"
RACK_B = DATA / "gb200-rack-b.yaml"
CLIQUE = "00000000-0000-0000-0000-000000000001.0"
DRIVER = "compute-domain.nvidia.com"
CHANNEL_CLASS = "compute-domain-default-channel.nvidia.com"


def _domain(name: str) -> str:
    return (
        "---\napiVersion: resource.nvidia.com/v1beta1\nkind: ComputeDomain\n"
        f"metadata:\n  name: {name}\nspec:\n  channel:\n    resourceClaimTemplate:\n"
        f"      name: {name}-channel\n"
    )


def _pod(name: str, domain: str, node: str = "") -> str:
    pinned = f"  nodeName: {node}\n" if node else ""
    return (
        f"---\napiVersion: v1\nkind: Pod\nmetadata:\n  name: {name}\nspec:\n{pinned}"
        "  containers:\n  - name: ctr\n    image: ubuntu:22.04\n    resources:\n"
        "      claims:\n      - name: channel\n  resourceClaims:\n  - name: channel\n"
        f"    resourceClaimTemplateName: {domain}-channel\n"
    )


def _channel_slice(node: str, clique: str = CLIQUE) -> str:
    """A node's compute-domain.nvidia.com slice with channel-0 shareable by several claims
    (what the CD plugin publishes where the cluster keeps `allowMultipleAllocations`)."""
    return yaml.safe_dump(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": f"{node}-compute-domain.nvidia.com"},
            "spec": {
                "driver": "compute-domain.nvidia.com",
                "nodeName": node,
                "pool": {"name": node, "generation": 0, "resourceSliceCount": 1},
                "devices": [
                    {
                        "name": "channel-0",
                        "allowMultipleAllocations": True,
                        "attributes": {
                            "type": {"string": "channel"},
                            "id": {"int": 0},
                            "cliqueID": {"string": clique},
                        },
                    }
                ],
            },
        },
        explicit_start=True,
    )


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "workload.yaml"
    path.write_text(text)
    return str(path)


def _simulate(
    capsys: pytest.CaptureFixture[str], path: str, *args: str
) -> tuple[int, list[dict[str, Any]]]:
    code = main(["simulate", "-f", path, "-o", "yaml", *args])
    return code, yaml.safe_load(capsys.readouterr().out) or []


def _explain(capsys: pytest.CaptureFixture[str], path: str, *args: str) -> tuple[int, str, str]:
    code = main(["explain", *(["-f", path] if path else []), *args])
    out = capsys.readouterr().out
    why = next(
        (line.removeprefix("Why: ") for line in out.splitlines() if line.startswith("Why:")), ""
    )
    return code, out, why


def test_no_multi_node_fabric_names_the_nodes_and_the_hardware_they_lack(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _domain("train") + _pod("worker-0", "train"))
    code, out, why = _explain(capsys, path, "--nodes", "dgx-h100=2")
    assert code == 1
    assert "Outcome: does not fit on any of 2 nodes" in out
    assert why == (
        "no node publishes compute-domain.nvidia.com devices: dgx-h100-0, dgx-h100-1 (2 nodes): "
        "no GPU is in a multi-node NVLink clique (no fabric, or NVLink without a cluster): "
        "ComputeDomains need GB200/GB300-class multi-node NVLink"
    )
    code, placements = _simulate(capsys, path, "--nodes", "dgx-h100=2")
    assert code == 1
    assert placements[0]["reason"] == why


def test_a_fabric_still_registering_says_which_gpu_and_that_it_will_publish_once_settled(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, _domain("train") + _pod("worker-0", "train"))
    code, _, why = _explain(capsys, path, "--nodes", f"{IN_PROGRESS}=1")
    assert code == 1
    assert why.startswith(
        "the node publishes no compute-domain.nvidia.com devices: gb200-fabric-in-progress-0: "
        "gpu-0 (GPU-"
    )
    assert "has an NVLink fabric registering (state in-progress" in why
    assert why.endswith(
        "the node publishes its channel once the fabric manager reports it completed and "
        "healthy (and 3 more like it)"
    )


def test_mixed_reasons_name_each_group_of_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One node busy with another domain, one still registering, one without a fabric."""
    text = _domain("a") + _domain("b") + _pod("a-0", "a") + _pod("b-0", "b")
    path = _write(tmp_path, text)
    nodes = f"gb200-node=1,{IN_PROGRESS}=1,dgx-h100=1"
    code, placements = _simulate(capsys, path, "--nodes", nodes)
    assert code == 1
    assert [(p["pod"], p["node"]) for p in placements] == [
        ("default/a-0", "gb200-node-0"),
        ("default/b-0", ""),
    ]
    reason = placements[1]["reason"]
    assert reason.startswith(
        "no node can give ComputeDomain default/b's pod an IMEX channel: gb200-node-0 already "
        "serves ComputeDomain default/a (one IMEX daemon per node: one ComputeDomain at a time); "
        "gb200-fabric-in-progress-0: gpu-0 (GPU-"
    )
    assert reason.endswith(
        "; dgx-h100-0: no GPU is in a multi-node NVLink clique (no fabric, or NVLink without a "
        "cluster): ComputeDomains need GB200/GB300-class multi-node NVLink"
    )


def test_a_19th_node_of_one_domain_in_a_clique_is_refused_naming_the_clique_and_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _domain("big") + "".join(_pod(f"w-{i}", "big") for i in range(19))
    path = _write(tmp_path, text)
    code, placements = _simulate(capsys, path, "--nodes", "gb200-node=19")
    assert code == 1
    assert all(p["placed"] for p in placements[:18])
    last = placements[18]
    assert (last["pod"], last["placed"]) == ("default/w-18", False)
    expected = (
        f"clique {CLIQUE} already has 18 nodes of ComputeDomain default/big (gb200-node-0, "
        "gb200-node-1, gb200-node-2 and 15 more), the most one IMEX domain spans "
        "(--max-nodes-per-imex-domain 18): the controller gives gb200-node-18 no IMEX index, "
        "so its channel never becomes ready (condition CliqueFull)"
    )
    assert expected in last["reason"]
    code, out, why = _explain(capsys, path, "--nodes", "gb200-node=19", "--pod", "w-18")
    assert code == 1
    assert "Outcome: the scheduler allocates it on gb200-node-18" in out
    assert why.startswith(expected)


def test_a_second_clique_takes_the_19th_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """IMEX domains are per clique: a node of another rack starts the domain's second one."""
    text = _domain("big") + "".join(_pod(f"w-{i}", "big") for i in range(19))
    path = _write(tmp_path, text)
    code, placements = _simulate(capsys, path, "--nodes", f"gb200-node=18,{RACK_B}=1")
    assert code == 0
    assert placements[18]["node"] == "gb200-rack-b-0"


def test_a_pod_pinned_to_a_node_of_another_domain_is_told_which_domain_holds_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _domain("a") + _domain("b") + _pod("a-0", "a") + _pod("b-0", "b", "gb200-node-0")
    path = _write(tmp_path, text)
    code, out, why = _explain(capsys, path, "--nodes", "gb200-node=2", "--pod", "b-0")
    assert code == 1
    assert "Outcome: does not fit on gb200-node-0" in out
    assert why == (
        "no node can give ComputeDomain default/b's pod an IMEX channel: gb200-node-0 already "
        "serves ComputeDomain default/a (one IMEX daemon per node: one ComputeDomain at a time)"
    )


def test_pods_of_two_domains_use_different_nodes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _domain("a") + _domain("b") + _pod("a-0", "a") + _pod("b-0", "b")
    code, placements = _simulate(capsys, _write(tmp_path, text), "--nodes", "gb200-node=2")
    assert code == 0
    assert [p["node"] for p in placements] == ["gb200-node-0", "gb200-node-1"]


def test_more_pods_than_nodes_without_consumable_capacity_says_one_claim_per_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _domain("a") + "".join(_pod(f"a-{i}", "a") for i in range(3))
    path = _write(tmp_path, text)
    code, _, why = _explain(capsys, path, "--nodes", "gb200-node=2")
    assert code == 1
    assert why == (
        "no node can give ComputeDomain default/a's pod an IMEX channel: gb200-node-0, "
        "gb200-node-1 (2 nodes) already give ComputeDomain default/a's other pods their channel "
        "(channel-0 takes one claim per node without DRAConsumableCapacity (on from Kubernetes "
        "1.36, where a domain's pods share their node's channel))"
    )


def test_on_kubernetes_1_36_a_domains_pods_share_gb200_nodes_and_another_domain_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CD plugin publishes channel-0 with allowMultipleAllocations; 1.36 keeps it."""
    text = _domain("a") + _domain("b") + "".join(_pod(f"a-{i}", "a") for i in range(3))
    path = _write(tmp_path, text + _pod("b-0", "b"))
    code, placements = _simulate(capsys, path, "--nodes", "gb200-node=2", "--kubernetes", "1.36")
    assert code == 1
    assert [(p["pod"], p["node"]) for p in placements] == [
        ("default/a-0", "gb200-node-0"),
        ("default/a-1", "gb200-node-0"),
        ("default/a-2", "gb200-node-0"),
        ("default/b-0", ""),
    ]
    assert placements[3]["reason"].startswith(
        "allocated on gb200-node-0, but the node's kubelet plugin refuses to prepare it: "
        "gb200-node-0 already serves ComputeDomain default/a (channel claims default/a-0-channel-"
    )
    pinned = _write(tmp_path, text + _pod("b-0", "b", "gb200-node-1"))
    code, placements = _simulate(capsys, pinned, "--nodes", "gb200-node=2", "--kubernetes", "1.36")
    assert code == 0
    assert placements[3]["node"] == "gb200-node-1"


def test_with_consumable_capacity_one_domains_pods_share_a_node_and_another_domain_never(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """channel-0 with allowMultipleAllocations on Kubernetes 1.36 (DRAConsumableCapacity on):
    the scheduler packs a domain's pods on one node, and would put the other domain's pod
    there too, where the CD plugin refuses it."""
    text = (
        _channel_slice("n0")
        + _channel_slice("n1")
        + _domain("a")
        + _domain("b")
        + _pod("a-0", "a")
        + _pod("a-1", "a")
        + _pod("b-0", "b")
    )
    path = _write(tmp_path, text)
    code, placements = _simulate(capsys, path, "--kubernetes", "1.36")
    assert code == 1
    assert [(p["pod"], p["node"]) for p in placements] == [
        ("default/a-0", "n0"),
        ("default/a-1", "n0"),
        ("default/b-0", ""),
    ]
    reason = placements[2]["reason"]
    assert reason.startswith(
        "allocated on n0, but the node's kubelet plugin refuses to prepare it: n0 already "
        "serves ComputeDomain default/a (channel claims default/a-0-channel-"
    )
    assert "a node runs one IMEX daemon, so it serves one ComputeDomain at a time" in reason
    assert "keep domains apart with node affinity" in reason
    # Pinned apart, both domains run.
    pinned = text.replace(_pod("b-0", "b"), _pod("b-0", "b", "n1"))
    code, placements = _simulate(capsys, _write(tmp_path, pinned), "--kubernetes", "1.36")
    assert code == 0
    assert [p["node"] for p in placements] == ["n0", "n0", "n1"]


def test_without_consumable_capacity_a_shareable_channel_still_takes_one_claim(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = _channel_slice("n0") + _domain("a") + _domain("b") + _pod("a-0", "a") + _pod("a-1", "a")
    path = _write(tmp_path, text)
    code, _, why = _explain(capsys, path, "--kubernetes", "1.35")
    assert code == 1
    assert why == (
        "no node can give ComputeDomain default/a's pod an IMEX channel: n0 already gives "
        "ComputeDomain default/a's other pods their channel (channel-0 takes one claim per node "
        "without DRAConsumableCapacity (on from Kubernetes 1.36, where a domain's pods share "
        "their node's channel))"
    )


def test_a_pod_pinned_to_another_clique_gets_a_channel_and_is_told_it_has_no_nvlink_to_the_rest(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One IMEX domain per clique: placed, and both commands say the domain is split."""
    text = _domain("x") + _pod("x-0", "x") + _pod("x-1", "x", "gb200-rack-b-0")
    path = _write(tmp_path, text)
    nodes = f"gb200-node=2,{RACK_B}=1"
    assert main(["simulate", "-f", path, "--nodes", nodes]) == 0
    assert capsys.readouterr().err == (
        f"note: ComputeDomain default/x spans 2 NVLink cliques ({CLIQUE}: gb200-node-0; "
        "00000000-0000-0000-0000-000000000001.1: gb200-rack-b-0): its pods in different cliques "
        "have no NVLink between them (one IMEX domain per clique)\n"
    )
    code, out, _ = _explain(capsys, path, "--nodes", nodes, "--pod", "x-1")
    assert code == 0
    assert (
        f"Note: ComputeDomain default/x's other pods are in another NVLink clique (clique "
        f"{CLIQUE}: gb200-node-0); on gb200-rack-b-0 (clique "
        "00000000-0000-0000-0000-000000000001.1) this pod gets a channel of the domain's IMEX "
        "domain in that clique, with no NVLink to them (one IMEX domain per clique)"
    ) in out.splitlines()


def test_explain_on_a_cluster_store_names_the_domain_a_node_serves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`--cluster`: the allocated channel claims say which node serves which domain (by UID)."""
    store = LocalCluster(tmp_path / "store")
    store.create_resource_slice(yaml.safe_load(_channel_slice("n0")))
    for device_class in device_classes():  # installed with the CD driver
        store.put_device_class(device_class)

    def claim(name: str, domain: str) -> dict[str, Any]:
        config = {
            "requests": ["channel"],
            "opaque": {
                "driver": "compute-domain.nvidia.com",
                "parameters": {
                    "apiVersion": "resource.nvidia.com/v1beta1",
                    "kind": "ComputeDomainChannelConfig",
                    "domainID": domain,
                },
            },
        }
        request = {"name": "channel", "exactly": {"deviceClassName": CHANNEL_CLASS}}
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"namespace": "ml", "name": name, "uid": f"uid-{name}"},
            "spec": {"devices": {"requests": [request], "config": [config]}},
        }

    held = claim("a-0-channel", "11111111-1111-1111-1111-111111111111")
    result = {"request": "channel", "driver": DRIVER, "pool": "n0", "device": "channel-0"}
    held["status"] = {"allocation": {"devices": {"results": [result], "config": []}}}
    store.put_resource_claim(held)
    store.update_resource_claim_status(held)
    store.put_resource_claim(claim("b-0-channel", "22222222-2222-2222-2222-222222222222"))
    spec = f"local:{tmp_path / 'store'}"
    code, _, why = _explain(capsys, "", "--cluster", spec, "--claim", "ml/b-0-channel")
    assert code == 1
    assert why == (
        "no node can give the ComputeDomain with UID 22222222-2222-2222-2222-222222222222's pod "
        "an IMEX channel: n0 already serves the ComputeDomain with UID "
        "11111111-1111-1111-1111-111111111111 (one IMEX daemon per node: one ComputeDomain at a "
        "time)"
    )
