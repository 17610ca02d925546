"""The manifests we ship: every kustomization renders and is valid for 1.35 and 1.37 API servers.

`deploy/base/` is the one copy of the node daemon's manifests; each feature or
platform is a Kustomize Component in `deploy/components/` that any
kustomization may list over the base, and `deploy/overlays/` holds ready sets
of them. The tests render them with `kubectl kustomize` (as `kubectl apply -k`
would; test_combinations renders the components alone, in pairs and in the
largest accepted sets, and the chart beside them) and check what an admin
relies on: strict schema validity, the DaemonSet's flags are ones the plugin
accepts, its mounts, requests, probes and rolling update, the namespace's Pod
Security level, an admission policy that follows a namespace override, the
image named through `images:`, and that the DeviceClasses are the ones the
CLI ships.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import build_parser, main
from dra_driver.hardware.simulated.models import MODELS
from dra_driver.node.device_classes import device_classes_text, vfio_device_class_text
from kubelet_plugin.main import CLEAN_STOP_S
from tests.deploy.renders import (
    BASE,
    COMPONENTS,
    KUBERNETES,
    VERSION,
    documents,
    render_kustomization,
    render_users_kustomization,
    validate,
)

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = sorted(p.parent for p in ROOT.glob("deploy/overlays/*/kustomization.yaml"))
KUSTOMIZATIONS = [BASE, *OVERLAYS]
# examples/shapes/ holds node shapes for `dra-gpu simulate`, not Kubernetes objects.
EXAMPLES = sorted(p for p in ROOT.glob("examples/**/*.yaml") if "shapes" not in p.parts)


def _is_daemonset(doc: dict[str, Any], name: str) -> bool:
    return bool(doc["kind"] == "DaemonSet" and doc["metadata"]["name"] == name)


def _daemonset(directory: Path, name: str = "dra-gpu-kubelet-plugin") -> dict[str, Any]:
    (daemonset,) = [
        d
        for d in render_kustomization(directory)
        if d["kind"] == "DaemonSet" and d["metadata"]["name"] == name
    ]
    return daemonset


def _name(path: Path) -> str:
    return str(path.relative_to(ROOT))


def test_the_overlays_an_admin_needs_exist() -> None:
    assert {p.name for p in OVERLAYS} >= {
        "dynamic-mig",
        "gpu-operator",
        "openshift",
        "sharing",
        "extended-resources",
    }


def test_every_feature_is_a_component_and_the_overlays_only_combine_them() -> None:
    found = sorted(p.parent.name for p in ROOT.glob("deploy/components/*/kustomization.yaml"))
    assert found == sorted(COMPONENTS)
    for name in COMPONENTS:
        (doc,) = documents((ROOT / "deploy/components" / name / "kustomization.yaml").read_text())
        assert doc["kind"] == "Component"
    for overlay in OVERLAYS:
        (doc,) = documents((overlay / "kustomization.yaml").read_text())
        # Only the base as a resource: two overlays as resources clash on the Namespace.
        assert doc["resources"] == ["../../base"], overlay
        assert all(c.startswith("../../components/") for c in doc["components"]), overlay


def test_a_namespace_override_moves_everything_and_the_admission_policy_follows() -> None:
    docs = render_users_kustomization(COMPONENTS, "namespace: gpu-system")
    cluster_scoped = {
        "Namespace",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
        "ValidatingWebhookConfiguration",
        "DeviceClass",
        "CustomResourceDefinition",
    }
    for doc in docs:
        if doc["kind"] not in cluster_scoped:
            assert doc["metadata"]["namespace"] == "gpu-system", doc["kind"]
        for subject in doc.get("subjects", []):
            assert subject["namespace"] == "gpu-system"
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    assert namespace["metadata"]["name"] == "gpu-system"
    (policy,) = [
        d
        for d in docs
        if d["kind"] == "ValidatingAdmissionPolicy"
        and d["metadata"]["name"] == "dra-gpu-resourceslices-own-node"
    ]
    (condition,) = policy["spec"]["matchConditions"]
    match = re.fullmatch(r"request\.userInfo\.username\.matches\('(.+)'\)", condition["expression"])
    assert match, condition["expression"]
    plugin = re.compile(match.group(1))
    assert plugin.search("system:serviceaccount:gpu-system:dra-gpu-kubelet-plugin")
    assert plugin.search("system:serviceaccount:dra-gpu:dra-gpu-kubelet-plugin")
    assert not plugin.search("system:serviceaccount:gpu-system:default")
    assert not plugin.search("system:serviceaccount:a:b:dra-gpu-kubelet-plugin")
    assert not plugin.search("system:node:dra-gpu-kubelet-plugin")
    # The webhook's Service reference moves too (its certificate's names do not: the
    # component's comment says to patch them, the chart moves them).
    (webhook,) = [d for d in docs if d["kind"] == "ValidatingWebhookConfiguration"]
    assert webhook["webhooks"][0]["clientConfig"]["service"]["namespace"] == "gpu-system"


def test_the_namespace_admits_the_privileged_plugin_under_pod_security() -> None:
    (namespace,) = [d for d in render_kustomization(BASE) if d["kind"] == "Namespace"]
    labels = namespace["metadata"]["labels"]
    assert labels["pod-security.kubernetes.io/enforce"] == "privileged"


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_the_image_is_named_through_kustomize_images(directory: Path) -> None:
    (container,) = _daemonset(directory)["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"ghcr.io/dra-gpu/dra-gpu:{VERSION}"
    (doc,) = documents((BASE / "kustomization.yaml").read_text())
    assert doc["images"] == [{"name": "ghcr.io/dra-gpu/dra-gpu", "newTag": VERSION}]


def test_a_self_built_image_is_one_images_entry_away() -> None:
    """What docs/install.md tells the admin to write."""
    documents = render_users_kustomization(
        ("gpu-operator",),
        "images:\n- name: ghcr.io/dra-gpu/dra-gpu\n"
        "  newName: registry.example.com/gpu/dra-gpu\n  newTag: dev-1",
    )
    for daemonset in (d for d in documents if d["kind"] == "DaemonSet"):
        (container,) = daemonset["spec"]["template"]["spec"]["containers"]
        assert container["image"] == "registry.example.com/gpu/dra-gpu:dev-1"
    install = " ".join((ROOT / "docs/install.md").read_text().split())
    assert "newName: registry.example.com/gpu/dra-gpu" in (ROOT / "docs/install.md").read_text()
    assert "images:" in install


def test_there_is_one_copy_of_the_manifests() -> None:
    assert sorted(p.name for p in ROOT.glob("deploy/*.yaml")) == []


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_kustomization_renders_and_validates_against_strict_schemas(
    directory: Path, version: str
) -> None:
    documents = render_kustomization(directory)
    kinds = {doc["kind"] for doc in documents}
    assert {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding"} <= kinds
    assert {"ValidatingAdmissionPolicy", "DaemonSet", "DeviceClass"} <= kinds
    for doc in documents:
        validate(doc, version)


@pytest.mark.parametrize("version", KUBERNETES)
@pytest.mark.parametrize("path", EXAMPLES, ids=_name)
def test_example_validates_against_strict_schemas(path: Path, version: str) -> None:
    docs = documents(path.read_text())
    assert docs, f"{path} is empty"
    for doc in docs:
        if doc["kind"] != "List":
            validate(doc, version)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_the_daemonset_runs_a_command_the_plugin_accepts(directory: Path) -> None:
    (container,) = _daemonset(directory)["spec"]["template"]["spec"]["containers"]
    program, *argv = container["command"]
    assert program == "dra-gpu"
    args = build_parser().parse_args(argv)  # exits (fails the test) on an unknown flag
    assert args.command == "kubelet-plugin"
    assert args.nvml == "real"


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_the_daemonset_mounts_requests_and_rolls_with_a_surge_pod(directory: Path) -> None:
    daemonset = _daemonset(directory)
    pod = daemonset["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}

    assert mounts["driver-root"] == env["DRIVER_ROOT_CTR_PATH"] == "/driver-root"
    assert host_paths["driver-root"] == env["NVIDIA_DRIVER_ROOT"]
    assert mounts["cdi"] == host_paths["cdi"] == "/var/run/cdi"
    assert "--cdi-root=/var/run/cdi" in container["command"]
    assert mounts["plugins"] == "/var/lib/kubelet/plugins"
    assert mounts["plugins-registry"] == "/var/lib/kubelet/plugins_registry"
    assert set(container["resources"]["requests"]) == {"cpu", "memory"}
    # The driver installed after the pod started (GPU Operator) becomes visible.
    driver_root = next(m for m in container["volumeMounts"] if m["name"] == "driver-root")
    assert driver_root["mountPropagation"] == "HostToContainer"
    assert driver_root["readOnly"] is True
    # Rolling upgrades: a new pod beside the old one, each with sockets of its own.
    strategy = daemonset["spec"]["updateStrategy"]
    assert strategy["type"] == "RollingUpdate"
    # maxSurge counts nodes cluster-wide: a share of them, so one stuck node cannot stop it.
    assert strategy["rollingUpdate"] == {"maxSurge": "10%", "maxUnavailable": 0}
    pod_uid = next(e for e in container["env"] if e["name"] == "POD_UID")
    assert pod_uid["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.uid"}}
    node_name = next(e for e in container["env"] if e["name"] == "NODE_NAME")
    assert node_name["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # The old pod must get to remove its sockets before it is killed.
    assert pod["terminationGracePeriodSeconds"] >= CLEAN_STOP_S
    # No host port or host network: two pods of one node would collide.
    assert not pod.get("hostNetwork")
    assert all("hostPort" not in port for port in container["ports"])
    # GPU processes are host pids: usage per claim maps them to pods through /proc.
    assert pod["hostPID"] is True


def test_gpu_operator_overlay_uses_the_operators_driver_root_and_hook() -> None:
    daemonset = _daemonset(ROOT / "deploy/overlays/gpu-operator")
    (container,) = daemonset["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    assert env["NVIDIA_DRIVER_ROOT"] == "/run/nvidia/driver"
    assert env["NVIDIA_CDI_HOOK_PATH"] == "/usr/local/nvidia/toolkit/nvidia-cdi-hook"


def test_dynamic_mig_overlay_turns_dynamic_mig_on_and_the_base_does_not() -> None:
    def dynamic_mig(directory: Path) -> bool:
        (container,) = _daemonset(directory)["spec"]["template"]["spec"]["containers"]
        return bool(build_parser().parse_args(container["command"][1:]).dynamic_mig)

    assert dynamic_mig(ROOT / "deploy/overlays/dynamic-mig")
    assert not dynamic_mig(BASE)


def test_sharing_overlay_publishes_four_shares_per_device_and_the_base_does_not() -> None:
    def shares(directory: Path) -> object:
        (container,) = _daemonset(directory)["spec"]["template"]["spec"]["containers"]
        return build_parser().parse_args(container["command"][1:]).consumable_shares

    assert str(shares(ROOT / "deploy/overlays/sharing")) == "4"
    assert not shares(BASE)


def test_extended_resources_overlay_maps_every_mig_profile_the_device_plugin_names() -> None:
    """One class per MIG profile of the simulator's tables (the device plugin's
    mixed-strategy name `nvidia.com/mig-<profile>`), each selecting that profile."""
    plain = {
        p.name
        for model in MODELS.values()
        for p in model.gi_profiles
        if re.fullmatch(r"\d+g\.\d+gb", p.name)
    }
    classes = {
        d["spec"]["extendedResourceName"]: d
        for d in render_kustomization(ROOT / "deploy/overlays/extended-resources")
        if d["kind"] == "DeviceClass" and d["metadata"]["name"].startswith("mig-")
    }
    assert set(classes) == {f"nvidia.com/mig-{name}" for name in plain}
    for resource, device_class in classes.items():
        (selector,) = device_class["spec"]["selectors"]
        profile = resource.removeprefix("nvidia.com/mig-")
        assert f"profile == '{profile}'" in selector["cel"]["expression"]


def test_openshift_overlay_lets_the_plugin_use_the_privileged_scc() -> None:
    bindings = [
        d
        for d in render_kustomization(ROOT / "deploy/overlays/openshift")
        if d["kind"] == "RoleBinding"
    ]
    (binding,) = bindings
    assert binding["roleRef"]["name"] == "system:openshift:scc:privileged"
    assert binding["subjects"][0]["name"] == "dra-gpu-kubelet-plugin"


def test_deployed_deviceclasses_are_the_ones_the_cli_ships() -> None:
    assert (BASE / "deviceclasses.yaml").read_text() == device_classes_text()


def test_the_passthrough_component_deploys_the_vfio_class_the_cli_ships() -> None:
    component = ROOT / "deploy/components/passthrough/deviceclass-vfio.yaml"
    assert component.read_text() == vfio_device_class_text()
    (vfio,) = documents(vfio_device_class_text())
    assert vfio["metadata"]["name"] == "vfio.gpu.nvidia.com"
    assert vfio["spec"]["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'"
    )


def test_default_deviceclasses_match_nvidia_names_and_selectors() -> None:
    classes = {doc["metadata"]["name"]: doc for doc in documents(device_classes_text())}
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com"}
    for name, kind in (("gpu.nvidia.com", "gpu"), ("mig.nvidia.com", "mig")):
        expression = classes[name]["spec"]["selectors"][0]["cel"]["expression"]
        assert expression == (
            "device.driver == 'gpu.nvidia.com' && "
            f"device.attributes['gpu.nvidia.com'].type == '{kind}'"
        )
    # As NVIDIA's chart: pods asking for nvidia.com/gpu get GPUs through DRA (KEP-5004).
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"
    assert "extendedResourceName" not in classes["mig.nvidia.com"]["spec"]


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_the_daemonset_probes_and_scrapes_the_ports_the_plugin_serves(directory: Path) -> None:
    pod = _daemonset(directory)["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    args = container["command"]
    ports = {port["name"]: port["containerPort"] for port in container["ports"]}
    assert f"--healthcheck-port={ports['healthz']}" in args
    assert f"--metrics-address=:{ports['metrics']}" in args
    assert container["livenessProbe"]["grpc"] == {"port": ports["healthz"], "service": "liveness"}
    assert container["readinessProbe"]["grpc"] == {"port": ports["healthz"]}  # service ""
    assert pod["metadata"]["annotations"]["prometheus.io/port"] == str(ports["metrics"])


def test_the_plugin_may_create_events_and_read_nodes_but_no_more() -> None:
    role = next(doc for doc in render_kustomization(BASE) if doc["kind"] == "ClusterRole")
    rules = {
        (group, resource): sorted(rule["verbs"])
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
    }
    assert rules[("events.k8s.io", "events")] == ["create"]
    assert rules[("", "nodes")] == ["get"]


def test_a_device_plugin_mig_pod_places_through_the_overlays_classes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = tmp_path / "pod.yaml"
    pod.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata: {namespace: ml, name: trainer}\n"
        "spec:\n  containers:\n    - name: main\n      image: cuda\n"
        "      resources:\n        limits:\n          nvidia.com/mig-3g.40gb: 2\n"
    )
    classes = ROOT / "deploy/components/extended-resources/mig-classes.yaml"
    argv = [
        "simulate",
        "-f",
        str(classes),
        "-f",
        str(pod),
        "--nodes",
        "dgx-h100=1",
        "--mig",
        "dynamic",
    ]
    code = main([*argv, "--kubernetes", "1.37", "-o", "yaml"])

    (record,) = yaml.safe_load(capsys.readouterr().out)
    assert code == 0
    (claim,) = record["claims"]
    assert [r["device"].split("-mig-")[1][:6] for r in claim["results"]] == ["3g40gb"] * 2


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=_name)
def test_the_mps_host_outlives_plugin_upgrades_and_shares_the_plugins_mps_directory(
    directory: Path,
) -> None:
    host = _daemonset(directory, "dra-gpu-mps-host")
    plugin = _daemonset(directory)
    assert host["spec"]["updateStrategy"] == {"type": "OnDelete"}  # never rolled with the plugin
    pod = host["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert pod["automountServiceAccountToken"] is False
    (container,) = pod["containers"]
    program, *argv = container["command"]
    args = build_parser().parse_args(argv)
    assert (program, args.command, args.nvml) == ("dra-gpu", "mps-host", "real")
    assert "limits" not in container["resources"]  # an OOM kill would take every MPS client
    assert "livenessProbe" not in container
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    assert mounts["plugins"]["mountPath"] == "/var/lib/kubelet/plugins"
    assert mounts["plugins"]["mountPropagation"] == "Bidirectional"
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    (plugin_container,) = plugin["spec"]["template"]["spec"]["containers"]
    plugin_paths = {
        v["name"]: v["hostPath"]["path"] for v in plugin["spec"]["template"]["spec"]["volumes"]
    }
    assert host_paths["plugins"] == plugin_paths["plugins"]
    assert host_paths["driver-root"] == plugin_paths["driver-root"]
    env = {e["name"]: e.get("value") for e in container["env"]}
    plugin_env = {e["name"]: e.get("value") for e in plugin_container["env"]}
    for name in ("NVIDIA_DRIVER_ROOT", "DRIVER_ROOT_CTR_PATH"):
        assert env[name] == plugin_env[name], f"{name} differs from the plugin's"
