"""Every manifest we ship must be accepted by a Kubernetes 1.35 API server's schema."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = sorted([*ROOT.glob("deploy/*.yaml"), *ROOT.glob("examples/*.yaml")])


def _documents(path: Path) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def test_there_are_manifests() -> None:
    assert any(p.parent.name == "deploy" for p in MANIFESTS)
    assert any(p.parent.name == "examples" for p in MANIFESTS)


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_manifest_validates_against_strict_1_35_schema(path: Path) -> None:
    documents = _documents(path)
    assert documents, f"{path} is empty"
    for doc in documents:
        kubernetes_validate.validate(doc, "1.35.0", strict=True)


def test_default_deviceclasses_match_nvidia_names_and_selectors() -> None:
    classes = {
        doc["metadata"]["name"]: doc for doc in _documents(ROOT / "deploy/deviceclasses.yaml")
    }
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        expression = classes[name]["spec"]["selectors"][0]["cel"]["expression"]
        assert expression == (
            "device.driver == 'gpu.nvidia.com' && "
            f"device.attributes['gpu.nvidia.com'].type == '{kind}'"
        )


def test_the_daemonset_probes_and_scrapes_the_ports_the_plugin_serves() -> None:
    (daemonset,) = _documents(ROOT / "deploy/kubelet-plugin.yaml")
    pod = daemonset["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    args = container["command"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert f"--healthcheck-port={ports['healthz']}" in args
    assert f"--metrics-address=:{ports['metrics']}" in args
    assert container["livenessProbe"]["grpc"]["port"] == ports["healthz"]
    assert container["readinessProbe"]["grpc"]["port"] == ports["healthz"]
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])


def test_the_plugin_may_create_events_and_read_nodes_but_no_more() -> None:
    role = next(
        doc for doc in _documents(ROOT / "deploy/rbac.yaml") if doc["kind"] == "ClusterRole"
    )
    rules = {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules[("events.k8s.io", "events")] == ["create"]
    assert rules[("", "nodes")] == ["get"]
