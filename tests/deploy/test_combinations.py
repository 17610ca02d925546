"""Combinations of Kustomize Components, and the Helm chart with the values that mean them.

The Kustomize tree (deploy/base and deploy/components) and the chart
(deploy/helm/dra-gpu) are two ways to install the same thing; neither is
generated from the other, so this is what keeps them from drifting: for each
set of components below, a user's kustomization over the base is rendered
with kubectl 1.35, the chart with Helm 4.1.4 and the values of
`renders.COMPONENT_VALUES`, both are validated against the 1.35 and 1.37
strict schemas, each component's effect is checked where it shows, and the
two must install the same objects (`renders.comparable`). All chart renders
come from one `helm template` process, and one `helm lint --strict` lints them.

Which sets: every one of the 2^7 = 128 sets of the seven GPU components that
the plugin accepts (96 renders, the base included). `dynamic-mig` and
`passthrough` are refused together (NVIDIA's driver refuses DynamicMIG with
PassthroughSupport): the 32 sets that hold both are left out, and the pair
itself is checked to be refused by the chart and by the plugin the Kustomize
tree installs.

`compute-domains` touches only what the others leave alone (its own objects,
a second container of the plugin's pod) except the driver root, so it is not
crossed with all 96 (that would double the suite's time) but rendered with a
representative 11: alone, beside each of the seven, with the two largest
accepted sets, and once listed after gpu-operator, whose driver root its IMEX
host must follow in either order (tests/deploy/test_compute_domains.py checks
the rest of it).
"""

from __future__ import annotations

import itertools
import tempfile
from functools import cache
from typing import Any

import pytest
import yaml

from dra_driver.cli import build_parser, main
from tests.deploy.renders import (
    CHART,
    COMPONENTS,
    KUBERNETES,
    NAMESPACE,
    RELEASE,
    by_identity,
    helm,
    lint_chart,
    render_chart,
    render_users_kustomization,
    validate,
    values_for,
)

# The plugin refuses --passthrough with --dynamic-mig (dra_driver.cli).
REFUSED_TOGETHER = ("dynamic-mig", "passthrough")
CD = "compute-domains"
GPU_COMPONENTS = tuple(c for c in COMPONENTS if c != CD)


def _accepted(combo: tuple[str, ...]) -> bool:
    return not set(REFUSED_TOGETHER) <= set(combo)


GPU_COMBINATIONS = [
    combo
    for size in range(len(GPU_COMPONENTS) + 1)
    for combo in itertools.combinations(GPU_COMPONENTS, size)
    if _accepted(combo)
]
_LARGEST = [tuple(c for c in GPU_COMPONENTS if c != left_out) for left_out in REFUSED_TOGETHER]
# The module docstring says why these: CD listed first, so the GPU components' patches
# come after it, and once after gpu-operator.
CD_COMBINATIONS = [
    (CD,),
    *[(CD, c) for c in GPU_COMPONENTS],
    *[(CD, *combo) for combo in _LARGEST],
    ("gpu-operator", CD),
]
COMBINATIONS = GPU_COMBINATIONS + CD_COMBINATIONS


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
    container, *others = plugin["spec"]["template"]["spec"]["containers"]
    (host_container,) = host["spec"]["template"]["spec"]["containers"]
    assert container["name"] == "plugin"  # first: the components' patches say containers/0
    assert [c["name"] for c in others] == (["compute-domains"] if CD in components else [])
    args = build_parser().parse_args(container["command"][1:])
    env = {e["name"]: e.get("value") for e in container["env"]}
    host_env = {e["name"]: e.get("value") for e in host_container["env"]}
    assert args.dynamic_mig == ("dynamic-mig" in components)
    assert args.passthrough == ("passthrough" in components)
    assert args.device_health_checks == ("passthrough" not in components)  # NVIDIA's rule
    vfio_class = [d for d in kustomized if d["metadata"]["name"] == "vfio.gpu.nvidia.com"]
    assert bool(vfio_class) == ("passthrough" in components)
    dev_vfio = [m for m in container["volumeMounts"] if m["mountPath"] == "/dev/vfio"]
    assert bool(dev_vfio) == ("passthrough" in components)
    assert (str(args.consumable_shares) == "4") == ("sharing" in components)
    mig_classes = [d for d in kustomized if d["metadata"]["name"].startswith("mig-")]
    assert bool(mig_classes) == ("extended-resources" in components)
    operator = env["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert operator == ("gpu-operator" in components)
    assert host_env["NVIDIA_DRIVER_ROOT"] == env["NVIDIA_DRIVER_ROOT"]  # the MPS host's too
    scc = [
        d
        for d in kustomized
        if d["kind"] == "RoleBinding" and d["roleRef"]["name"] == "system:openshift:scc:privileged"
    ]
    assert bool(scc) == ("openshift" in components)
    # ComputeDomains: the controller, the IMEX host (on the plugin's driver root,
    # whichever of the two components is listed first) and the CRDs.
    controllers = [
        d["metadata"]["name"]
        for d in kustomized
        if d["kind"] == "Deployment" and d["metadata"]["name"] != "dra-gpu-webhook"
    ]
    assert controllers == (["dra-gpu-compute-domain-controller"] if CD in components else [])
    crds = [d for d in kustomized if d["kind"] == "CustomResourceDefinition"]
    assert len(crds) == (3 if CD in components else 0)
    if CD in components:
        imex = _one(kustomized, "DaemonSet", "dra-gpu-imex-host")["spec"]["template"]["spec"]
        volumes = {v["name"]: v for v in plugin["spec"]["template"]["spec"]["volumes"]}
        assert {v["name"]: v for v in imex["volumes"]}["driver-root"] == volumes["driver-root"]
    webhook = [d for d in kustomized if d["kind"] == "ValidatingWebhookConfiguration"]
    assert bool(webhook) == ("webhook" in components)
    (namespace,) = [d for d in kustomized if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "dra-gpu"

    # The chart, with the values that mean these components, installs exactly these objects;
    # the CRDs are in its crds/ directory, which `helm template` leaves out and
    # test_compute_domains keeps identical to the component's.
    crd_free = [d for d in kustomized if d["kind"] != "CustomResourceDefinition"]
    assert by_identity(charted) == by_identity(crd_free)


def test_helm_lint_passes_for_every_combination() -> None:
    done = lint_chart({_key(combo): values_for(combo) for combo in COMBINATIONS})
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_component_is_rendered_beside_every_other_it_can_be_listed_with() -> None:
    together = {
        frozenset(pair) for combo in COMBINATIONS for pair in itertools.combinations(combo, 2)
    }
    pairs = {frozenset(pair) for pair in itertools.combinations(COMPONENTS, 2)}
    assert pairs - together == {frozenset(REFUSED_TOGETHER)}
    # Every set of the seven but the 32 that hold both of the refused pair, and 11 with CDs.
    assert len(GPU_COMBINATIONS) == len(set(GPU_COMBINATIONS)) == 2**7 - 2**5
    assert len(COMBINATIONS) == len(set(COMBINATIONS)) == 2**7 - 2**5 + 11
    assert len(GPU_COMPONENTS) == 7


def test_dynamic_mig_with_passthrough_is_refused_by_the_chart_and_the_plugin(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with tempfile.NamedTemporaryFile("w", suffix=".yaml") as values:
        yaml.safe_dump(values_for(REFUSED_TOGETHER), values)
        values.flush()
        done = helm("template", RELEASE, str(CHART), "--namespace", NAMESPACE, "-f", values.name)
    assert done.returncode != 0
    assert "passthrough (featureGates.PassthroughSupport) and dynamicMig" in done.stderr
    kustomized = render_users_kustomization(REFUSED_TOGETHER)
    (container,) = _one(kustomized, "DaemonSet", "dra-gpu-kubelet-plugin")["spec"]["template"][
        "spec"
    ]["containers"]
    # The plugin as the Kustomize tree starts it, on a simulated node instead of NVML's.
    argv = [
        "--nvml=sim:l4-node" if arg == "--nvml=real" else arg for arg in container["command"][1:]
    ]
    assert main(argv) == 2
    assert "--passthrough and --dynamic-mig cannot be combined" in capsys.readouterr().err
