"""The ComputeDomain CRD and DeviceClasses: NVIDIA's, valid, and in step with the decoder."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

import jsonschema
import pytest

from dra_driver.compute_domain import membership
from dra_driver.compute_domain.api import decode_compute_domain
from dra_driver.compute_domain.devices import compute_domain_devices
from dra_driver.compute_domain.manifests import (
    clique_resource_definition,
    custom_resource_definition,
    custom_resource_definitions,
    device_classes,
    member_resource_definition,
)
from dra_driver.errors import ConfigError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.nvml import SimNvml
from dra_driver.hardware.simulated.shapes import load_shape
from dra_driver.kube.object_store import (
    COMPUTE_DOMAIN,
    COMPUTE_DOMAIN_CLIQUE,
    COMPUTE_DOMAIN_MEMBER,
)
from dra_driver.kube.strict_schema import describe, strict_errors
from dra_driver.kube.validation import Context, validate_device_class_spec
from dra_driver.node.device_classes import default_device_classes
from dra_driver.node.inventory import discover
from dra_driver.scheduling.cel.device import DeviceView
from dra_driver.scheduling.cel.selector import compile_selector

RELEASES = ("1.35.0", "1.37.0")
NVIDIA_SELECTORS = {
    "compute-domain-daemon.nvidia.com": "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'daemon'",
    "compute-domain-default-channel.nvidia.com": "device.driver == 'compute-domain.nvidia.com' && "
    "device.attributes['compute-domain.nvidia.com'].type == 'channel' && "
    "device.attributes['compute-domain.nvidia.com'].id == 0",
}


def _classes() -> dict[str, dict[str, Any]]:
    return {doc["metadata"]["name"]: doc for doc in device_classes()}


def test_the_device_classes_are_nvidias() -> None:
    classes = _classes()
    assert set(classes) == set(NVIDIA_SELECTORS)
    for name, expression in NVIDIA_SELECTORS.items():
        assert classes[name]["spec"] == {"selectors": [{"cel": {"expression": expression}}]}


def test_the_gpu_drivers_default_classes_do_not_include_them() -> None:
    defaults = {doc["metadata"]["name"] for doc in default_device_classes()}
    assert {"gpu.nvidia.com", "mig.nvidia.com"} <= defaults
    assert not defaults & {doc["metadata"]["name"] for doc in device_classes()}


@pytest.mark.parametrize("release", RELEASES)
def test_the_manifests_are_valid_for_the_api_server(release: str) -> None:
    for doc in [*device_classes(), *custom_resource_definitions()]:
        errors = strict_errors(doc, release)
        assert errors == [], [describe(error) for error in errors or []]
    for doc in device_classes():
        assert validate_device_class_spec(doc["spec"], Context()) == []


def test_each_class_selects_its_published_device() -> None:
    node = discover(SimNvml(SimHardware(load_shape("gb200-node"), node_name="gb-0")))
    devices = compute_domain_devices(node).devices
    views = {
        d["name"]: DeviceView(
            driver="compute-domain.nvidia.com", attributes=d["attributes"], capacity={}
        )
        for d in devices
    }
    selected = {
        name: sorted(
            device
            for device, view in views.items()
            if compile_selector(doc["spec"]["selectors"][0]["cel"]["expression"]).matches(view)
        )
        for name, doc in _classes().items()
    }
    assert selected == {
        "compute-domain-daemon.nvidia.com": ["daemon-0"],
        "compute-domain-default-channel.nvidia.com": ["channel-0"],
    }


def _schema(crd: dict[str, Any] | None = None) -> dict[str, Any]:
    (version,) = (crd or custom_resource_definition())["spec"]["versions"]
    schema: dict[str, Any] = _strict(version["schema"]["openAPIV3Schema"])
    return schema


def _strict(schema: Any) -> Any:
    """The CRD schema as the API server applies it with strict field validation: an
    unknown field is an error (the server prunes or refuses it, never keeps it), and a
    required field with a default is filled in before it is checked."""
    if isinstance(schema, Mapping):
        out = {k: _strict(v) for k, v in schema.items() if not k.startswith("x-kubernetes")}
        if "properties" in schema and schema.get("type") == "object":
            properties = schema["properties"]
            out["properties"] = {k: _strict(v) for k, v in properties.items()}
            out["additionalProperties"] = False
            if "required" in schema:
                out["required"] = [
                    r for r in schema["required"] if "default" not in properties.get(r, {})
                ]
        return out
    if isinstance(schema, list):
        return [_strict(item) for item in schema]
    return schema


GOOD: dict[str, Any] = {
    "apiVersion": "resource.nvidia.com/v1beta1",
    "kind": "ComputeDomain",
    "metadata": {"name": "imex", "namespace": "team-a"},
    "spec": {"numNodes": 0, "channel": {"resourceClaimTemplate": {"name": "imex-channel-0"}}},
    "status": {
        "status": "NotReady",
        "nodes": [{"name": "n1", "ipAddress": "10.0.0.1", "cliqueID": "c.0", "index": 0}],
        "conditions": [
            {
                "type": "Ready",
                "status": "False",
                "reason": "WaitingForDaemons",
                "message": "0 of 2 nodes ready",
                "lastTransitionTime": "2026-11-28T12:00:00Z",
            }
        ],
    },
}


def _set(path: str, value: Any) -> dict[str, Any]:
    obj = copy.deepcopy(GOOD)
    *parents, last = path.split(".")
    target: Any = obj
    for part in parents:
        target = target[int(part)] if part.isdigit() else target[part]
    if value is None:
        del target[last]
    else:
        target[last] = value
    return obj


@pytest.mark.parametrize(
    "doc",
    [
        GOOD,
        _set("spec.numNodes", None),
        _set("spec.channel.allocationMode", "All"),
        _set("spec.numNodes", -1),
        _set("spec.numNodes", "1"),
        _set("spec.channel.allocationMode", "Every"),
        _set("spec.channel", None),
        _set("spec.channel.resourceClaimTemplate", None),
        _set("spec.channel.resourceClaimTemplate.name", None),
        _set("spec.extra", 1),
        _set("status.status", None),
        _set("status.status", "Done"),
        _set("status.nodes.0.cliqueID", None),
        _set("status.nodes.0.status", "Up"),
        _set("status.nodes.0.index", "0"),
        _set("status.conditions.0.reason", "not a reason"),
        _set("status.conditions.0.message", None),
        _set("status.conditions.0.status", "Yes"),
    ],
)
def test_the_crd_and_the_decoder_agree(doc: dict[str, Any]) -> None:
    """The CRD (what the API server stores) and `decode_compute_domain` (what the driver
    reads) accept and refuse the same objects."""
    schema_ok = not list(jsonschema.Draft202012Validator(_schema()).iter_errors(doc))
    try:
        decode_compute_domain(doc)
        decoder_ok = True
    except ConfigError:
        decoder_ok = False
    assert schema_ok == decoder_ok


def test_the_crd_has_nvidias_rules() -> None:
    crd = custom_resource_definition()
    assert crd["metadata"]["name"] == "computedomains.resource.nvidia.com"
    assert crd["spec"]["scope"] == "Namespaced"
    (version,) = crd["spec"]["versions"]
    assert (version["name"], version["served"], version["storage"]) == ("v1beta1", True, True)
    assert version["subresources"] == {"status": {}}
    assert "additionalPrinterColumns" not in version
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]
    assert spec["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "A computeDomain.spec is immutable"}
    ]
    assert spec["properties"]["numNodes"]["default"] == 0
    assert spec["properties"]["channel"]["properties"]["allocationMode"]["default"] == "Single"
    status = version["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    assert set(status) == {"status", "nodes", "conditions"}
    assert set(status["nodes"]["items"]["properties"]) == {
        "name",
        "ipAddress",
        "cliqueID",
        "index",
        "status",
    }


def test_every_crd_serves_its_object_store_kind() -> None:
    """The CRDs and the `ResourceKind`s the stores use (URL plural, scope, /status) agree."""
    crds = {crd["spec"]["names"]["kind"]: crd for crd in custom_resource_definitions()}
    assert list(crds) == ["ComputeDomain", "ComputeDomainClique", "ComputeDomainMember"]
    for kind in (COMPUTE_DOMAIN, COMPUTE_DOMAIN_CLIQUE, COMPUTE_DOMAIN_MEMBER):
        crd = crds[kind.kind]
        group, version_name = kind.api_version.split("/")
        assert crd["metadata"]["name"] == f"{kind.plural}.{group}"
        assert crd["spec"]["names"]["plural"] == kind.plural
        assert (crd["spec"]["scope"] == "Namespaced") == kind.namespaced
        (version,) = crd["spec"]["versions"]
        assert version["name"] == version_name
        assert ("status" in version.get("subresources", {})) == kind.has_status


def _member() -> dict[str, Any]:
    spec = membership.MemberSpec(
        domain_uid="3f1c0f4e-0000-4000-8000-000000000001",
        domain_namespace="team-a",
        domain_name="imex",
        node_name="gb-0",
        clique_id="00000000-0000-0000-0000-000000000001.0",
    )
    member = membership.build_member(spec, namespace="dra-gpu")
    member["status"] = membership.member_status_body(
        membership.MemberStatus(
            state=membership.MemberState.READY,
            ip_address="127.0.1.1",
            reason="ImexReady",
            message="IMEX is READY",
            imex_node_id=0,
            peers={"gb-1": membership.PeerState.CONNECTED},
            last_transition_time="2026-11-28T12:00:00Z",
        )
    )
    return member


def _valid(crd: dict[str, Any], doc: dict[str, Any]) -> bool:
    return not list(jsonschema.Draft202012Validator(_schema(crd)).iter_errors(doc))


def test_the_member_crd_takes_what_the_plugin_and_the_imex_host_write() -> None:
    crd = member_resource_definition()
    member = _member()
    assert _valid(crd, member)
    pending = copy.deepcopy(member)
    pending["status"] = membership.member_status_body(membership.MemberStatus())
    assert _valid(crd, pending)
    no_fabric = copy.deepcopy(member)
    no_fabric["spec"]["cliqueID"] = ""
    assert _valid(crd, no_fabric)
    # What neither writer writes is refused: an unknown state, a peer legend IMEX does not
    # print, a spec without its domain.
    for path, value in (
        (("status", "state"), "Up"),
        (("status", "peers", 0, "state"), "X"),
        (("spec", "domainUID"), None),
    ):
        bad = copy.deepcopy(member)
        target: Any = bad
        for part in path[:-1]:
            target = target[part]
        if value is None:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        assert not _valid(crd, bad), path
    (version,) = crd["spec"]["versions"]
    columns = {c["name"]: c["jsonPath"] for c in version["additionalPrinterColumns"]}
    assert columns["State"] == ".status.state"
    assert columns["IP"] == ".status.ipAddress"
    assert columns["Node"] == ".spec.nodeName"


def test_the_clique_crd_is_nvidias_shape_and_takes_what_the_controller_writes() -> None:
    crd = clique_resource_definition()
    (version,) = crd["spec"]["versions"]
    assert "subresources" not in version
    properties = version["schema"]["openAPIV3Schema"]["properties"]
    assert "spec" not in properties
    assert "status" not in properties
    daemons = properties["daemons"]
    assert daemons["x-kubernetes-list-type"] == "map"
    assert daemons["x-kubernetes-list-map-keys"] == ["nodeName"]
    assert set(daemons["items"]["properties"]) == {
        "nodeName",
        "ipAddress",
        "cliqueID",
        "index",
        "status",
    }
    clique_id = "00000000-0000-0000-0000-000000000001.0"
    clique = membership.build_clique(
        "3f1c0f4e-0000-4000-8000-000000000001",
        clique_id,
        [
            membership.CliqueRow("gb-0", "127.0.1.1", clique_id, 0, "Ready"),
            membership.CliqueRow("gb-1", "", clique_id, 1, "NotReady"),
        ],
        namespace="dra-gpu",
    )
    assert _valid(crd, clique)
    clique["daemons"][0]["status"] = "Up"
    assert not _valid(crd, clique)
