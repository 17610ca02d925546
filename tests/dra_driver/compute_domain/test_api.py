"""The ComputeDomain object: NVIDIA's fields and defaults, decoded strictly."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from dra_driver.compute_domain.api import decode_compute_domain, is_compute_domain, spec_changes
from dra_driver.errors import ConfigError

# NVIDIA's demo/specs/imex/channel-injection.yaml, first document, with a namespace and a UID.
DEMO: dict[str, Any] = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "imex-channel-injection", "namespace": "team-a", "uid": "cd-uid-1"},
    "spec": {"numNodes": 1, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
}


def _with(path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(DEMO)
    *parents, last = path.split(".")
    target = obj
    for part in parents:
        target = target.setdefault(part, {})
    if value is _DELETE:
        del target[last]
    else:
        target[last] = value
    return obj


_DELETE = object()


def test_nvidia_demo_decodes_with_nvidia_defaults() -> None:
    domain = decode_compute_domain(DEMO)
    assert domain.ref == "ComputeDomain team-a/imex-channel-injection"
    assert domain.uid == "cd-uid-1"
    assert domain.spec.num_nodes == 1
    assert domain.spec.channel.resource_claim_template.name == "imex-channel-0"
    assert domain.spec.channel.allocation_mode == "Single"
    assert domain.status is None
    assert domain.to_api()["spec"]["channel"]["allocationMode"] == "Single"


def test_num_nodes_is_optional_and_defaults_to_zero() -> None:
    domain = decode_compute_domain(_with("spec.numNodes", _DELETE))
    assert domain.spec.num_nodes == 0
    assert (
        decode_compute_domain(
            _with("spec.channel.allocationMode", "All")
        ).spec.channel.allocation_mode
        == "All"
    )


def test_no_namespace_means_default() -> None:
    obj = copy.deepcopy(DEMO)
    del obj["metadata"]["namespace"]
    assert decode_compute_domain(obj).ref == "ComputeDomain default/imex-channel-injection"


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("spec.chanel", {}, "spec.chanel: unknown field"),
        ("metadata.lables", {}, "metadata.lables: unknown field"),
        ("spec.numNodes", "2", "spec.numNodes: Input should be a valid integer"),
        ("spec.numNodes", True, "spec.numNodes: Input should be a valid integer"),
        ("spec.numNodes", -1, "spec.numNodes: Input should be greater than or equal to 0"),
        (
            "spec.channel.allocationMode",
            "all",
            "spec.channel.allocationMode: Input should be 'Single' or 'All'",
        ),
        ("spec.channel", _DELETE, "spec.channel: required"),
        (
            "spec.channel.resourceClaimTemplate",
            _DELETE,
            "spec.channel.resourceClaimTemplate: required",
        ),
        (
            "spec.channel.resourceClaimTemplate.name",
            _DELETE,
            "spec.channel.resourceClaimTemplate.name: required",
        ),
        (
            "spec.channel.resourceClaimTemplate.name",
            "Imex_0",
            "spec.channel.resourceClaimTemplate.name: 'Imex_0' is not a DNS subdomain",
        ),
        (
            "spec.channel.resourceClaimTemplate.name",
            7,
            "spec.channel.resourceClaimTemplate.name: Input should be a valid string",
        ),
        ("metadata.namespace", "Team.A", "metadata.namespace: 'Team.A' is not a DNS label"),
        ("status.status", "Bogus", "status.status: Input should be 'Ready' or 'NotReady'"),
        ("kind", "ComputeDomains", "kind: Input should be 'ComputeDomain'"),
    ],
)
def test_bad_fields_are_errors_naming_the_object_and_field(
    path: str, value: Any, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        decode_compute_domain(_with(path, value), "cd.yaml:")
    text = str(caught.value)
    assert text.startswith("cd.yaml: ComputeDomain ")
    assert message in text


def test_malformed_name_and_missing_name_are_errors() -> None:
    with pytest.raises(
        ConfigError,
        match=r"ComputeDomain team-a/IMEX: metadata.name: 'IMEX' is not a DNS subdomain",
    ):
        decode_compute_domain(_with("metadata.name", "IMEX"))
    with pytest.raises(
        ConfigError, match=r"ComputeDomain \(no metadata.name\): metadata.name: required"
    ):
        decode_compute_domain(_with("metadata.name", _DELETE))
    with pytest.raises(ConfigError, match="must be an object"):
        decode_compute_domain(["not", "a", "domain"])


def test_status_rows_and_conditions() -> None:
    obj = copy.deepcopy(DEMO)
    obj["status"] = {
        "status": "Ready",
        "nodes": [
            {
                "name": "n1",
                "ipAddress": "10.0.0.1",
                "cliqueID": "c1.0",
                "index": 0,
                "status": "Ready",
            },
            {"name": "n2", "ipAddress": "10.0.0.2", "cliqueID": ""},
        ],
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "DaemonsReady",
                "message": "",
                "lastTransitionTime": "2026-11-28T12:00:00Z",
            }
        ],
    }
    status = decode_compute_domain(obj).status
    assert status is not None
    assert [(n.name, n.index, n.status) for n in status.nodes] == [
        ("n1", 0, "Ready"),
        ("n2", 0, "NotReady"),
    ]
    assert status.conditions[0].reason == "DaemonsReady"
    obj["status"]["nodes"][1]["name"] = "n1"
    with pytest.raises(ConfigError, match=r"status\.nodes: node 'n1' is listed twice"):
        decode_compute_domain(obj)
    obj["status"]["nodes"][1]["name"] = "n2"
    obj["status"]["nodes"][1]["index"] = "1"
    with pytest.raises(ConfigError, match=r"status.nodes.1.index: Input should be a valid int"):
        decode_compute_domain(obj)


def test_status_fields_of_another_release_are_ignored_and_dropped() -> None:
    """A status an older (or newer) controller wrote: NVIDIA v25.3's rows (name, IP, clique
    only) and fields this release does not know decode; the spec stays strict."""
    obj = _with(
        "status",
        {
            "status": "Ready",
            "nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "imexVersion": 1}],
            "legacyPhase": "Running",
        },
    )
    status = decode_compute_domain(obj).status
    assert status is not None
    assert [(n.name, n.index, n.status) for n in status.nodes] == [("n1", 0, "NotReady")]
    assert "legacyPhase" not in decode_compute_domain(obj).to_api()["status"]
    assert "imexVersion" not in decode_compute_domain(obj).to_api()["status"]["nodes"][0]
    with pytest.raises(ConfigError, match=r"spec\.legacyField: unknown field"):
        decode_compute_domain(_with("spec.legacyField", 1))


def test_spec_changes_names_the_changed_fields() -> None:
    old = decode_compute_domain(DEMO)
    assert spec_changes(old, decode_compute_domain(DEMO)) == []
    new = decode_compute_domain(
        _with("spec.channel", {"resourceClaimTemplate": {"name": "other"}, "allocationMode": "All"})
    )
    assert spec_changes(old, new) == [
        "spec.channel.allocationMode",
        "spec.channel.resourceClaimTemplate.name",
    ]


def test_is_compute_domain() -> None:
    assert is_compute_domain(DEMO)
    assert not is_compute_domain({"apiVersion": "v1", "kind": "Pod"})
