"""Every kustomization we ship lets the plugin write its claims' status.devices.

Server-side apply of `status.devices` is a PATCH of `resourceclaims/status`,
and Kubernetes 1.36+ also checks `associated-node:update`/`associated-node:patch`
on the synthetic `resourceclaims/driver` subresource, named after the driver
(`DRAResourceClaimGranularStatusAuthorization`). Without both, every write
fails with "changing status.devices requires extra permission".
"""

from __future__ import annotations

import subprocess
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.deploy.k8s_tools import tool

ROOT = Path(__file__).resolve().parents[2]


def _kustomizations() -> list[Path]:
    """Every directory kubectl can build on its own (Components only apply inside one)."""
    found = []
    for path in sorted(ROOT.glob("deploy/**/kustomization.yaml")):
        kind = (yaml.safe_load(path.read_text()) or {}).get("kind", "Kustomization")
        if kind == "Kustomization":
            found.append(path.parent)
    return found


@cache
def _render(directory: Path) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [tool("kubectl"), "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return tuple(doc for doc in yaml.safe_load_all(out) if doc)


def test_there_are_kustomizations_to_check() -> None:
    assert ROOT / "deploy/base" in _kustomizations()
    assert len(_kustomizations()) > 1


@pytest.mark.parametrize("directory", _kustomizations(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_plugins_role_may_apply_status_devices_for_its_driver_only(directory: Path) -> None:
    documents = _render(directory)
    daemonset = next(d for d in documents if d["kind"] == "DaemonSet")
    account = daemonset["spec"]["template"]["spec"]["serviceAccountName"]
    bound_roles = {
        doc["roleRef"]["name"]
        for doc in documents
        if doc["kind"] == "ClusterRoleBinding"
        and any(s.get("name") == account for s in doc.get("subjects") or [])
    }
    rules = [
        rule
        for doc in documents
        if doc["kind"] == "ClusterRole" and doc["metadata"]["name"] in bound_roles
        for rule in doc["rules"]
    ]

    def allowed(resource: str, verb: str) -> list[dict[str, Any]]:
        return [
            rule
            for rule in rules
            if "resource.k8s.io" in rule["apiGroups"]
            and resource in rule["resources"]
            and verb in rule["verbs"]
        ]

    assert allowed("resourceclaims/status", "patch")
    for verb in ("associated-node:update", "associated-node:patch"):
        (rule,) = allowed("resourceclaims/driver", verb)
        assert rule["resourceNames"] == ["gpu.nvidia.com"]
    assert not allowed("resourceclaims/driver", "arbitrary-node:patch")  # node-local only
