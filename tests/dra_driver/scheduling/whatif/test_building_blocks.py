"""The simulator's parts: inputs, workloads, claim naming, nodes, engine rules, texts."""

from __future__ import annotations

import io
from typing import Any

import pytest

from dra_driver.composition.simulated_nodes import build_simulated_nodes
from dra_driver.errors import ConfigError
from dra_driver.node.device_classes import default_device_classes
from dra_driver.scheduling.allocator import AllocatedState, Allocator
from dra_driver.scheduling.whatif.claims import generate_name, resolve_pod_claims
from dra_driver.scheduling.whatif.command import parse_features
from dra_driver.scheduling.whatif.documents import SourcedObject, parse_documents
from dra_driver.scheduling.whatif.engine import RESERVED_FOR_MAX_SIZE, Simulation, build_workload
from dra_driver.scheduling.whatif.inputs import collect_inputs
from dra_driver.scheduling.whatif.nodes import NodeRequest, parse_node_spec
from dra_driver.scheduling.whatif.progress import ProgressBar
from dra_driver.scheduling.whatif.selector_text import conjuncts, describe
from dra_driver.scheduling.whatif.workloads import expand_workload


def _sourced(*objects: dict[str, Any]) -> list[SourcedObject]:
    return [SourcedObject(obj, f"test#{i}") for i, obj in enumerate(objects)]


def _pod(name: str, claims: dict[str, dict[str, str]], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {"resourceClaims": [{"name": n, **ref} for n, ref in claims.items()], **spec},
    }


def _template(name: str, count: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"namespace": "ml", "name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {"deviceClassName": "gpu.nvidia.com", "count": count},
                        }
                    ]
                }
            }
        },
    }


def _simulation(objects: list[dict[str, Any]], nodes: str = "l4-node=2") -> tuple[Simulation, Any]:
    inputs = collect_inputs(_sourced(*objects))
    built = build_simulated_nodes(parse_node_spec(nodes))
    workload = build_workload(inputs)
    simulation = Simulation(
        slices=built.slices,
        classes=default_device_classes(),
        nodes=built.nodes,
        claims=workload.claims,
    )
    return simulation, workload


# ---------------------------------------------------------------- inputs


def test_documents_unwrap_typed_lists_and_skip_empty_documents() -> None:
    text = "---\n---\nkind: PodList\nitems:\n  - metadata: {name: a}\n  - metadata: {name: b}\n"

    objects = list(parse_documents(text, "pods.yaml"))

    assert [(o.obj["kind"], o.obj["metadata"]["name"]) for o in objects] == [
        ("Pod", "a"),
        ("Pod", "b"),
    ]
    assert objects[1].source == "pods.yaml#1.items[1]"


def test_a_scalar_document_is_refused_with_its_index() -> None:
    with pytest.raises(ConfigError, match=r"x.yaml#1: expected a Kubernetes object"):
        list(parse_documents("kind: Pod\n---\njust text\n", "x.yaml"))


def test_duplicate_objects_name_both_documents() -> None:
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "c"}}

    with pytest.raises(
        ConfigError, match=r"test#1: ResourceClaim default/c is also defined in test#0"
    ):
        collect_inputs(_sourced(claim, claim))


def test_v1beta1_claims_and_slices_are_converted() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceClaim",
        "metadata": {"name": "old"},
        "spec": {"devices": {"requests": [{"name": "gpu", "deviceClassName": "gpu.nvidia.com"}]}},
    }
    device_slice = {
        "apiVersion": "resource.k8s.io/v1beta1",
        "kind": "ResourceSlice",
        "metadata": {"name": "s"},
        "spec": {
            "devices": [{"name": "gpu-0", "basic": {"attributes": {"type": {"string": "gpu"}}}}]
        },
    }

    inputs = collect_inputs(_sourced(claim, device_slice))

    converted = inputs.claims[("default", "old")].obj
    assert converted["spec"]["devices"]["requests"] == [
        {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}
    ]
    assert inputs.slices[0]["spec"]["devices"] == [
        {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}}}
    ]


# ---------------------------------------------------------------- workloads and claims


@pytest.mark.parametrize(
    ("spec", "pods"),
    [
        ({"parallelism": 3}, 3),
        ({"parallelism": 4, "completions": 2}, 2),
        ({}, 1),
        ({"parallelism": 2, "suspend": True}, 0),
    ],
)
def test_jobs_run_their_parallelism(spec: dict[str, Any], pods: int) -> None:
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"namespace": "ml", "name": "j"},
        "spec": {**spec, "template": {"spec": {}}},
    }

    assert len(expand_workload(job, "test#0")) == pods


def test_a_negative_replica_count_is_refused() -> None:
    deployment = {
        "kind": "Deployment",
        "metadata": {"namespace": "ml", "name": "d"},
        "spec": {"replicas": -1, "template": {}},
    }

    with pytest.raises(ConfigError, match=r"test#0: Deployment ml/d: spec.replicas"):
        expand_workload(deployment, "test#0")


def test_long_claim_names_are_cut_in_proportion_like_the_controller() -> None:
    pod_name = "p" * 60
    claim_name = "c" * 30

    base = generate_name(pod_name, claim_name)

    # 57 * 60 // 92 = 37 and 57 * 30 // 92 = 18, joined by one hyphen, no trailing one
    assert base == "p" * 37 + "-" + "c" * 18
    assert generate_name("train-0", "gpu") == "train-0-gpu-"


def test_a_missing_template_is_the_pods_reason() -> None:
    claims: dict[str, dict[str, Any]] = {}

    resolved, problem = resolve_pod_claims(
        _pod("p", {"gpu": {"resourceClaimTemplateName": "nope"}}), claims, {}
    )

    assert resolved == []
    assert problem == "ResourceClaimTemplate ml/nope not found (spec.resourceClaims[0])"


# ---------------------------------------------------------------- nodes and classes


def test_node_spec_parsing() -> None:
    assert parse_node_spec("dgx-h100=2, l4-node") == [
        NodeRequest("dgx-h100", 2),
        NodeRequest("l4-node", 1),
    ]
    with pytest.raises(ConfigError) as err:
        parse_node_spec("dgx-h100=two")
    assert str(err.value) == "--nodes 'dgx-h100=two': the count must be an integer"
    with pytest.raises(ConfigError) as err:
        parse_node_spec("l4-node=1,dgx-h100=0")
    assert str(err.value) == (
        "--nodes 'l4-node=1,dgx-h100=0': 'dgx-h100=0': expected SHAPE=COUNT with COUNT >= 1"
    )
    with pytest.raises(ConfigError, match="named twice"):
        parse_node_spec("l4-node=1,l4-node=2")


def test_feature_gates_are_parsed() -> None:
    features = parse_features("DRAConsumableCapacity=true,DRADeviceTaints=false", "1.34")

    assert features.consumable_capacity is True
    assert features.device_taints is False
    assert features.release == "1.34"
    with pytest.raises(ConfigError, match="expected NAME=true"):
        parse_features("DRAUnknown=true", "1.35")


# ---------------------------------------------------------------- engine rules


def test_the_engine_places_exactly_like_first_fit_over_every_node() -> None:
    sizes = [3, 1, 2, 4, 1, 1, 2, 3, 1, 2, 1]
    objects: list[dict[str, Any]] = [_template(f"t{n}", n) for n in sorted(set(sizes))]
    objects += [
        _pod(f"p{i}", {"gpu": {"resourceClaimTemplateName": f"t{n}"}}) for i, n in enumerate(sizes)
    ]
    simulation, workload = _simulation(objects, "l4-node=3")
    placements = simulation.run(workload.items)

    state = AllocatedState()
    allocator = Allocator(
        build_simulated_nodes(parse_node_spec("l4-node=3")).slices,
        default_device_classes(),
        allocated=state,
    )
    expected: list[tuple[str, list[str]]] = []
    for item in workload.items:
        claim = dict(workload.claims[item.claims[0].claim])
        found = allocator.first_fit(simulation.nodes, [claim])
        if found is None:
            expected.append(("", []))
            continue
        claim["status"] = {"allocation": found[1][0]}
        state.add(claim)
        expected.append((found[0].name, [r["device"] for r in found[1][0]["devices"]["results"]]))

    actual = [
        (
            p.node,
            [
                r["device"]
                for c in p.claims
                for r in ((c.allocation or {}).get("devices") or {}).get("results") or []
            ]
            if p.placed
            else [],
        )
        for p in placements
    ]
    assert actual == expected
    assert any(not p.placed for p in placements)  # 21 GPUs asked of 12


def test_a_shared_claim_is_reserved_for_at_most_256_pods() -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "ml", "name": "shared"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]
            }
        },
    }
    pods = [
        _pod(f"p{i}", {"gpu": {"resourceClaimName": "shared"}})
        for i in range(RESERVED_FOR_MAX_SIZE + 1)
    ]
    simulation, workload = _simulation([claim, *pods], "l4-node=1")

    placements = simulation.run(workload.items)

    assert all(p.placed for p in placements[:-1])
    assert not placements[-1].placed
    assert placements[-1].reason == (
        "ResourceClaim ml/shared is already reserved for 256 pods (the limit of status.reservedFor)"
    )


def test_node_name_and_node_selector_restrict_the_nodes() -> None:
    objects = [
        _template("one"),
        _pod("pinned", {"gpu": {"resourceClaimTemplateName": "one"}}, nodeName="l4-node-1"),
        _pod("ghost", {"gpu": {"resourceClaimTemplateName": "one"}}, nodeName="nowhere"),
        _pod("picky", {}, nodeSelector={"gpu": "yes"}),
    ]
    simulation, workload = _simulation(objects)

    pinned, ghost, picky = simulation.run(workload.items)

    assert pinned.node == "l4-node-1"
    assert ghost.reason == "spec.nodeName nowhere is not one of the simulated nodes"
    assert picky.reason == "no node has the labels of spec.nodeSelector (gpu=yes)"


# ---------------------------------------------------------------- texts and progress


def test_selectors_are_split_and_described() -> None:
    expression = (
        "device.driver == 'gpu.nvidia.com' && (device.capacity['gpu.nvidia.com'].memory"
        ".compareTo(quantity('40Gi')) >= 0 && device.attributes['gpu.nvidia.com'].type == 'gpu')"
    )

    parts = conjuncts(expression)

    assert [describe(part) for part in parts] == [
        "driver == 'gpu.nvidia.com'",
        "memory >= 40Gi",
        "type == 'gpu'",
    ]
    assert conjuncts("a || b && c") == ["a || b && c"]
    assert describe("size(device.attributes) > 2") == "`size(device.attributes) > 2`"


def test_the_progress_bar_draws_and_erases_itself() -> None:
    stream = io.StringIO()
    bar = ProgressBar(1000, stream, force=True)

    bar(1000)
    bar.close()

    text = stream.getvalue()
    assert "1000/1000 pods" in text
    assert text.endswith("\r\033[K")
    quiet = io.StringIO()
    ProgressBar(1000, quiet)(1000)  # not a terminal: nothing
    assert quiet.getvalue() == ""
