"""Every combination of Kustomize Components, and the Helm chart with the values that mean it.

The Kustomize tree (deploy/base and deploy/components) and the chart
(deploy/helm/dra-gpu) are two ways to install the same thing; neither is
generated from the other, so this is what keeps them from drifting: for the
base alone and for each of the 63 sets of the six components, a user's
kustomization over the base is rendered with kubectl 1.35, the chart with
Helm 4.1.4 and the values of `renders.COMPONENT_VALUES`, both are validated
against the 1.35 and 1.37 strict schemas, each component's effect is checked
where it shows, and the two must install the same objects (`renders.comparable`).
All 64 chart renders come from one `helm template` process, and one
`helm lint --strict` lints them all.
"""

from __future__ import annotations

import itertools
from functools import cache
from typing import Any

import pytest

from dra_driver.cli import build_parser
from tests.deploy.renders import (
    COMPONENTS,
    KUBERNETES,
    by_identity,
    lint_chart,
    render_chart,
    render_users_kustomization,
    validate,
    values_for,
)

COMBINATIONS = [
    combo
    for size in range(len(COMPONENTS) + 1)
    for combo in itertools.combinations(COMPONENTS, size)
]


def _key(components: tuple[str, ...]) -> str:
    return "+".join(components) or "base"


@cache
def _chart_renders() -> dict[str, list[dict[str, Any]]]:
    return render_chart({_key(combo): values_for(combo) for combo in COMBINATIONS})


def _one(docs: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return doc


@pytest.mark.parametrize("components", COMBINATIONS, ids=_key)
def test_kustomize_and_the_chart_install_the_same_valid_objects(
    components: tuple[str, ...],
) -> None:
    kustomized = render_users_kustomization(components)
    charted = _chart_renders()[_key(components)]
    for version in KUBERNETES:
        for doc in (*kustomized, *charted):
            validate(doc, version)

    # Each component does its part, whatever else is listed with it.
    plugin = _one(kustomized, "DaemonSet", "dra-gpu-kubelet-plugin")
    host = _one(kustomized, "DaemonSet", "dra-gpu-mps-host")
    (container,) = plugin["spec"]["template"]["spec"]["containers"]
    (host_container,) = host["spec"]["template"]["spec"]["containers"]
    args = build_parser().parse_args(container["command"][1:])
    env = {e["name"]: e.get("value") for e in container["env"]}
    host_env = {e["name"]: e.get("value") for e in host_container["env"]}
    assert args.dynamic_mig == ("dynamic-mig" in components)
    assert (str(args.consumable_shares) == "4") == ("sharing" in components)
    mig_classes = [d for d in kustomized if d["metadata"]["name"].startswith("mig-")]
    assert bool(mig_classes) == ("extended-resources" in components)
    operator = env["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert operator == ("gpu-operator" in components)
    assert host_env["NVIDIA_DRIVER_ROOT"] == env["NVIDIA_DRIVER_ROOT"]  # the MPS host's too
    scc = [d for d in kustomized if d["kind"] == "RoleBinding"]
    assert bool(scc) == ("openshift" in components)
    webhook = [d for d in kustomized if d["kind"] == "ValidatingWebhookConfiguration"]
    assert bool(webhook) == ("webhook" in components)
    (namespace,) = [d for d in kustomized if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "dra-gpu"

    # The chart, with the values that mean these components, installs exactly these objects.
    assert by_identity(charted) == by_identity(kustomized)


def test_helm_lint_passes_for_every_combination() -> None:
    done = lint_chart({_key(combo): values_for(combo) for combo in COMBINATIONS})
    assert done.returncode == 0, done.stdout + done.stderr
