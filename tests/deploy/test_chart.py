"""The Helm chart (deploy/helm/dra-gpu) with NVIDIA's values files and dra-gpu's own switches.

A user moving from NVIDIA's DRA driver brings a values file. The files in the
chart's ci/ directory are the ones NVIDIA's chart and docs give (GPU
Operator driver root, GKE, dynamic MIG, consumable shares, the webhook with
a Secret or a ClusterIssuer) and every NVIDIA value with its default. Each is
linted, rendered with the real Helm (one process for all of them and the
variants below), validated against the 1.35 and 1.37 strict schemas, and
checked for what makes an install work: the driver root mounted where the
plugin looks for it, the plugin's flags matching the values (parsed by the
plugin's own argument parser), and the DeviceClasses present or absent as
asked. Misspelt keys and values the chart cannot honour fail `helm template`
with Helm's error naming them. test_combinations checks that the chart and
the Kustomize tree install the same objects.
"""

from __future__ import annotations

import base64
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.cli import build_parser
from tests.deploy.renders import (
    CHART,
    KUBERNETES,
    NAMESPACE,
    VERSION,
    by_identity,
    helm,
    lint_chart,
    merge,
    render_chart,
    validate,
)

CI = sorted((CHART / "ci").glob("*-values.yaml"))
DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
# Values of dra-gpu's own beside the files, rendered in the same helm process.
VARIANTS: dict[str, dict[str, Any]] = {
    "defaults": {},
    "no-gpus": {"resources": {"gpus": {"enabled": False}}},
    "classes-owned-elsewhere": {"deviceClasses": False},
    "on-delete": {
        "kubeletPlugin": {"updateStrategy": {"type": "OnDelete"}},
        "webhook": {"enabled": True, "strategy": {"type": "Recreate"}},
    },
    "mig-classes-no-gpu-resource": {"extendedResources": True, "gpuExtendedResourceName": ""},
    "own-service-account": {"serviceAccount": {"create": False, "name": "gpu-plugin"}},
    "no-mps-no-metrics-no-probes": {
        "mps": {"enabled": False},
        "kubeletPlugin": {
            "metrics": {"enabled": False},
            "containers": {"gpus": {"healthcheckPort": 0}},
        },
    },
    # VFIO as NVIDIA's users turn it on, with NVIDIA's default health-check gate spelt out.
    "passthrough-gate": {
        "featureGates": {"PassthroughSupport": True, "NVMLDeviceHealthCheck": False}
    },
    "passthrough-switch": {"passthrough": True},
    "passthrough-classes-owned-elsewhere": {"passthrough": True, "deviceClasses": False},
    "switches": {
        "dynamicMig": True,
        "deviceMetadata": True,
        "consumableShares": 8,
        "logFormat": "json",
        "featureGates": {"NVMLDeviceHealthCheck": False},
        "kubeletPlugin": {
            "containers": {"gpus": {"env": [{"name": "NVIDIA_CDI_DISABLED_HOOKS", "value": "all"}]}}
        },
    },
}


def _values(name: str) -> dict[str, Any]:
    """What a values set asks for: the file or variant over the chart's defaults."""
    path = CHART / "ci" / name
    given = yaml.safe_load(path.read_text()) if path.exists() else VARIANTS[name]
    return merge(DEFAULTS, given)


@cache
def _renders() -> dict[str, list[dict[str, Any]]]:
    sets = {path.name: yaml.safe_load(path.read_text()) for path in CI}
    return render_chart({**sets, **VARIANTS})


def _objects(name: str, kind: str) -> list[dict[str, Any]]:
    return [doc for doc in _renders()[name] if doc["kind"] == kind]


def _one(name: str, kind: str, suffix: str = "") -> dict[str, Any]:
    (doc,) = [d for d in _objects(name, kind) if d["metadata"]["name"].endswith(suffix)]
    return doc


def _container(daemonset: dict[str, Any], name: str = "") -> dict[str, Any]:
    """The DaemonSet's container `name`; without one, the first (the GPU plugin, or the
    MPS host's only one)."""
    containers: list[dict[str, Any]] = daemonset["spec"]["template"]["spec"]["containers"]
    if not name:
        return containers[0]
    (container,) = [c for c in containers if c["name"] == name]
    return container


def _env(container: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value") for e in container["env"]}


def test_there_are_nvidia_style_values_files() -> None:
    assert {p.name for p in CI} >= {
        "gpu-operator-values.yaml",
        "gke-values.yaml",
        "dynamic-mig-values.yaml",
        "consumable-shares-values.yaml",
        "nvidia-defaults-values.yaml",
    }


def test_the_chart_carries_the_projects_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["version"] == chart["appVersion"] == VERSION
    (plugin,) = [d for d in _renders()["defaults"] if d["kind"] == "DaemonSet"][:1]
    assert _container(plugin)["image"] == f"ghcr.io/dra-gpu/dra-gpu:{VERSION}"


def test_helm_lint_passes_with_the_defaults_and_every_values_file() -> None:
    alone = helm("lint", "--strict", str(CHART))
    assert alone.returncode == 0, alone.stdout + alone.stderr
    sets = {path.name: yaml.safe_load(path.read_text()) for path in CI}
    linted = lint_chart({**sets, **VARIANTS})
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize("name", [p.name for p in CI] + list(VARIANTS))
def test_every_rendered_object_is_valid_for_1_35_and_1_37(name: str) -> None:
    for version in KUBERNETES:
        for doc in _renders()[name]:
            validate(doc, version)


@pytest.mark.parametrize(
    "name", [p.name for p in CI] + ["defaults", "switches", "passthrough-gate"]
)
def test_a_values_file_installs_a_plugin_configured_as_it_asks(name: str) -> None:
    values = _values(name)
    namespace = values["namespaceOverride"] or NAMESPACE
    plugin = _one(name, "DaemonSet", "-kubelet-plugin")
    host = _one(name, "DaemonSet", "-mps-host")
    for daemonset in (plugin, host):
        # The driver root: the host's path mounted at the path the plugin is told to read.
        pod = daemonset["spec"]["template"]["spec"]
        container = _container(daemonset)
        env = _env(container)
        volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert volumes["driver-root"] == env["NVIDIA_DRIVER_ROOT"] == values["nvidiaDriverRoot"]
        assert mounts["driver-root"]["mountPath"] == env["DRIVER_ROOT_CTR_PATH"]
        assert mounts["driver-root"]["mountPropagation"] == "HostToContainer"
        assert daemonset["metadata"]["namespace"] == namespace
        # NVIDIA's scheduling values reach both node daemons.
        placement = values["kubeletPlugin"]
        assert pod.get("tolerations") == placement["tolerations"]
        assert pod.get("priorityClassName") == (placement["priorityClassName"] or None)
        assert pod.get("nodeSelector") == (placement["nodeSelector"] or None)
        assert pod.get("affinity") == (placement["affinity"] or None)
        assert container["imagePullPolicy"] == values["image"]["pullPolicy"]

    container = _container(plugin)
    env = _env(container)
    args = build_parser().parse_args(container["command"][1:])
    gates = values["featureGates"] or {}
    assert args.command == "kubelet-plugin"
    assert args.nvml == "real"
    assert args.dynamic_mig == (values["dynamicMig"] or gates.get("DynamicMIG", False))
    assert args.device_metadata == (values["deviceMetadata"] or gates.get("DeviceMetadata", False))
    passthrough = values["passthrough"] or gates.get("PassthroughSupport", False)
    assert args.passthrough == passthrough
    assert args.device_health_checks == (
        gates.get("NVMLDeviceHealthCheck", True) and not passthrough
    )
    assert (args.consumable_shares or "") == str(values["consumableShares"])
    assert args.verbose == (int(values["logVerbosity"]) >= 6)
    assert args.log_format == values["logFormat"]
    # The hook: as given; else, on a GPU Operator node, the Operator's toolkit's.
    operator = values["nvidiaDriverRoot"] == "/run/nvidia/driver"
    hook = values["nvidiaCDIHookPath"] or (
        "/usr/local/nvidia/toolkit/nvidia-cdi-hook" if operator else None
    )
    assert env.get("NVIDIA_CDI_HOOK_PATH") == hook
    # The kubelet's directories, from NVIDIA's two paths.
    kubelet = values["kubeletPlugin"]
    assert str(args.kubelet_root) == str(Path(kubelet["kubeletPluginsDirectoryPath"]).parent)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["plugins"] == kubelet["kubeletPluginsDirectoryPath"]
    assert mounts["plugins-registry"] == kubelet["kubeletRegistrarDirectoryPath"]
    # VFIO: the host's /dev/vfio, where the group nodes made after a bind appear.
    assert ("/dev/vfio" in mounts.values()) == passthrough
    host_args = build_parser().parse_args(_container(host)["command"][1:])
    assert host_args.kubelet_root == args.kubelet_root
    # Probes and metrics on the ports the values name.
    port = kubelet["containers"]["gpus"]["healthcheckPort"]
    assert args.healthcheck_port == port
    assert container["livenessProbe"]["grpc"] == {"port": port, "service": "liveness"}
    assert container["readinessProbe"]["grpc"] == {"port": port}
    assert args.metrics_address == kubelet["metrics"]["gpuHttpEndpoint"]
    for extra in kubelet["containers"]["gpus"]["env"]:
        assert extra in container["env"]
    # The DeviceClasses NVIDIA's chart installs, and the extended resource of the GPU class.
    classes = {d["metadata"]["name"]: d for d in _objects(name, "DeviceClass")}
    vfio = {"vfio.gpu.nvidia.com"} if passthrough else set()
    cds = values["resources"]["computeDomains"]["enabled"]
    cd_classes = (
        {"compute-domain-daemon.nvidia.com", "compute-domain-default-channel.nvidia.com"}
        if cds
        else set()
    )
    assert set(classes) == {"gpu.nvidia.com", "mig.nvidia.com", *vfio, *cd_classes}
    # NVIDIA's own defaults say ComputeDomains on: its CD plugin container comes along.
    names = [c["name"] for c in plugin["spec"]["template"]["spec"]["containers"]]
    assert names == (["plugin", "compute-domains"] if cds else ["plugin"])
    assert classes["gpu.nvidia.com"]["spec"]["extendedResourceName"] == "nvidia.com/gpu"


def test_deviceclasses_are_present_or_absent_as_asked() -> None:
    assert _objects("no-gpus", "DeviceClass") == []
    assert _objects("no-gpus", "DaemonSet") == []
    assert _objects("classes-owned-elsewhere", "DeviceClass") == []
    assert len(_objects("classes-owned-elsewhere", "DaemonSet")) == 2
    classes = {
        d["metadata"]["name"]: d for d in _objects("mig-classes-no-gpu-resource", "DeviceClass")
    }
    assert "extendedResourceName" not in classes["gpu.nvidia.com"]["spec"]
    mig = {name for name in classes if name.startswith("mig-")}
    assert "mig-3g.40gb.nvidia.com" in mig
    assert len(mig) == 36
    assert all(
        classes[name]["spec"]["extendedResourceName"]
        == "nvidia.com/" + name.removesuffix(".nvidia.com")
        for name in mig
    )


def test_our_passthrough_switch_installs_what_nvidias_gate_installs() -> None:
    gate, switch = _renders()["passthrough-gate"], _renders()["passthrough-switch"]
    assert by_identity(switch) == by_identity(gate)
    (vfio,) = [
        d
        for d in _objects("passthrough-gate", "DeviceClass")
        if d["metadata"]["name"] == "vfio.gpu.nvidia.com"
    ]
    assert vfio["spec"]["selectors"][0]["cel"]["expression"] == (
        "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'vfio'"
    )
    # While NVIDIA's release still owns the DeviceClasses, it owns vfio.gpu.nvidia.com too.
    assert _objects("passthrough-classes-owned-elsewhere", "DeviceClass") == []
    plugin = _one("passthrough-classes-owned-elsewhere", "DaemonSet", "-kubelet-plugin")
    assert build_parser().parse_args(_container(plugin)["command"][1:]).passthrough


def test_switches_of_our_own_turn_off_what_they_name() -> None:
    name = "no-mps-no-metrics-no-probes"
    assert [d["metadata"]["name"] for d in _objects(name, "DaemonSet")] == [
        "dra-gpu-kubelet-plugin"
    ]
    plugin = _one(name, "DaemonSet")
    container = _container(plugin)
    args = build_parser().parse_args(container["command"][1:])
    assert args.metrics_address is None
    assert args.healthcheck_port is None
    assert "livenessProbe" not in container
    assert "ports" not in container
    assert "annotations" not in plugin["spec"]["template"]["metadata"]


def test_a_service_account_of_your_own_is_bound_and_named_in_the_slice_policy() -> None:
    name = "own-service-account"
    assert _objects(name, "ServiceAccount") == []
    (binding,) = _objects(name, "ClusterRoleBinding")
    assert binding["subjects"][0]["name"] == "gpu-plugin"
    for daemonset in _objects(name, "DaemonSet"):
        assert daemonset["spec"]["template"]["spec"]["serviceAccountName"] == "gpu-plugin"
    policy = _one(name, "ValidatingAdmissionPolicy", "-resourceslices-own-node")
    (condition,) = policy["spec"]["matchConditions"]
    pattern = re.fullmatch(
        r"request\.userInfo\.username\.matches\('(.+)'\)", condition["expression"]
    )
    assert pattern
    assert re.search(pattern.group(1), "system:serviceaccount:dra-gpu:gpu-plugin")
    assert not re.search(pattern.group(1), "system:serviceaccount:dra-gpu:dra-gpu-kubelet-plugin")


def test_the_webhook_is_configured_as_nvidias_chart_configures_it() -> None:
    name = "webhook-cluster-issuer-values.yaml"
    deployment = _one(name, "Deployment")
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    assert container["command"] == [
        "dra-gpu",
        "webhook",
        "--tls-cert-file=/cert/tls.crt",
        "--tls-private-key-file=/cert/tls.key",
        "--port=443",
    ]
    args = build_parser().parse_args(container["command"][1:])  # the webhook's own flags
    assert (str(args.tls_cert_file), args.port) == ("/cert/tls.crt", 443)
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts["cert"] == "/cert"
    assert container["readinessProbe"]["httpGet"] == {
        "path": "/readyz",
        "port": "webhook",
        "scheme": "HTTPS",
    }
    assert {"name": "webhook", "containerPort": 443} in container["ports"]
    (config,) = _objects(name, "ValidatingWebhookConfiguration")
    (webhook,) = config["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"  # docs/admission.md says why
    assert webhook["clientConfig"]["service"] == {
        "namespace": "gpu-system",
        "name": "dra-gpu-webhook",
        "port": 443,
        "path": "/validate-resource-claim-parameters",
    }
    assert webhook["rules"][0]["resources"] == ["resourceclaims", "resourceclaimtemplates"]
    # cert-manager: the ClusterIssuer signs a certificate for the Service's name in its namespace,
    # and the CA injector is pointed at it.
    (certificate,) = _objects(name, "Certificate")
    assert certificate["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "internal-ca"}
    assert certificate["spec"]["dnsNames"] == [
        "dra-gpu-webhook.gpu-system.svc",
        "dra-gpu-webhook.example.com",
    ]
    assert certificate["metadata"]["namespace"] == "gpu-system"
    secret = certificate["spec"]["secretName"]
    assert deployment["spec"]["template"]["spec"]["volumes"][0]["secret"]["secretName"] == secret
    assert (
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
        == f"gpu-system/{secret}"
    )
    assert _objects(name, "Issuer") == []


def test_the_webhook_takes_its_certificate_from_a_secret_of_yours() -> None:
    name = "webhook-secret-values.yaml"
    values = _values(name)
    assert _objects(name, "Certificate") == _objects(name, "Issuer") == []
    deployment = _one(name, "Deployment")
    volume = deployment["spec"]["template"]["spec"]["volumes"][0]
    assert volume["secret"]["secretName"] == "dra-gpu-webhook-tls"
    (config,) = _objects(name, "ValidatingWebhookConfiguration")
    (webhook,) = config["webhooks"]
    assert webhook["failurePolicy"] == "Fail"
    assert deployment["spec"]["replicas"] == 2
    (budget,) = _objects(name, "PodDisruptionBudget")  # a drain keeps one replica serving
    assert budget["spec"]["minAvailable"] == 1
    selector = deployment["spec"]["selector"]["matchLabels"]
    assert budget["spec"]["selector"]["matchLabels"] == selector
    assert _objects("webhook-cluster-issuer-values.yaml", "PodDisruptionBudget") == []
    bundle = webhook["clientConfig"]["caBundle"]
    assert bundle == values["webhook"]["tls"]["secret"]["caBundle"]
    assert base64.b64decode(bundle).startswith(b"-----BEGIN CERTIFICATE-----")
    assert "annotations" not in config["metadata"]


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (
            ["--set", "kubeletPlugin.tolerationz[0].key=a"],
            "additional properties 'tolerationz' not allowed",
        ),
        (
            ["--set", "nvidiaDriverRot=/run/nvidia/driver"],
            "additional properties 'nvidiaDriverRot' not allowed",
        ),
        (
            ["--set", "featureGates.DynamicMig=true"],
            "additional properties 'DynamicMig' not allowed",
        ),
        (["--set", "webhook.tls.mode=vault"], "at '/webhook/tls/mode'"),
        (["--set", "consumableShares=half"], "at '/consumableShares'"),
        (["--set", "maskNvidiaDriverParams=true"], "at '/maskNvidiaDriverParams'"),
    ],
)
def test_helm_refuses_a_misspelt_key_or_a_bad_value_naming_it(flags: list[str], error: str) -> None:
    done = helm("template", "dra-gpu", str(CHART), *flags)
    assert done.returncode != 0
    assert "values don't meet the specifications of the schema" in done.stderr
    assert error in done.stderr, done.stderr


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (
            ["--set", "featureGates.PassthroughSupport=true,featureGates.DynamicMIG=true"],
            "passthrough (featureGates.PassthroughSupport) and dynamicMig",
        ),
        (
            ["--set", "passthrough=true,dynamicMig=true"],
            "passthrough (featureGates.PassthroughSupport) and dynamicMig",
        ),
        (
            [
                "--set",
                "featureGates.PassthroughSupport=true,featureGates.NVMLDeviceHealthCheck=true",
            ],
            "and featureGates.NVMLDeviceHealthCheck=true cannot be combined",
        ),
        (
            ["--set", "kubeletPlugin.kubeletPluginsDirectoryPath=/var/lib/k0s/kubelet/plugins"],
            "must be ROOT/plugins and ROOT/plugins_registry",
        ),
        (["--set", "webhook.enabled=true,webhook.tls.mode=secret"], "set webhook.tls.secret.name"),
        (
            ["--set", "webhook.enabled=true,webhook.tls.certManager.issuerType=issuer"],
            "set webhook.tls.certManager.issuerName",
        ),
    ],
)
def test_values_the_chart_cannot_honour_fail_with_what_to_change(
    flags: list[str], error: str
) -> None:
    done = helm("template", "dra-gpu", str(CHART), *flags)
    assert done.returncode != 0
    assert error in done.stderr, done.stderr


def test_notes_say_which_nvidia_values_do_nothing_here() -> None:
    def notes(*flags: str) -> str:
        done = helm("install", "dra-gpu", str(CHART), "-n", "dra-gpu", "--dry-run=client", *flags)
        assert done.returncode == 0, done.stderr
        return done.stdout.partition("NOTES:")[2]

    quiet = notes()
    assert "ComputeDomains" not in quiet
    assert "gpuResourcesEnabledOverride" not in quiet
    assert "dra-gpu inventory --nvml real" in quiet  # how to verify a node
    told = notes("--set", "resources.computeDomains.enabled=true,gpuResourcesEnabledOverride=true")
    assert "ComputeDomains (compute-domain.nvidia.com, docs/compute-domains.md) are on" in told
    assert "kubectl apply -f crds/" in told  # helm upgrade leaves CRDs alone
    assert "nvidia-imex.service must be disabled" in told
    assert "gpuResourcesEnabledOverride is not needed" in told
    host = notes("--set", "resources.computeDomains.enabled=true")
    assert "nvidia-imex.service must be disabled" in host
    host = notes(
        "--set",
        "resources.computeDomains.enabled=true,resources.computeDomains.imex.mode=hostManaged",
    )
    assert "IMEX\nhostManaged" in host
    assert "nvidia-imex.service must be disabled" not in host
    assert "VFIO passthrough" not in quiet
    vfio = notes("--set", "featureGates.PassthroughSupport=true")
    assert "(intel_iommu=on or amd_iommu=on) and vfio-pci loaded (modprobe vfio-pci)" in vfio


def test_migrating_md_says_what_becomes_of_every_nvidia_value() -> None:
    nvidia = yaml.safe_load((CHART / "ci/nvidia-defaults-values.yaml").read_text())
    table = (
        (CHART.parents[2] / "docs/migrating.md")
        .read_text()
        .partition("### NVIDIA's Helm values")[2]
    )
    missing = [key for key in nvidia if f"`{key}" not in table]
    assert not missing, f"docs/migrating.md has no row for {missing}"
    schema = json.loads((CHART / "values.schema.json").read_text())
    gates = list(schema["properties"]["featureGates"]["properties"])
    assert gates
    assert [gate for gate in gates if f"`{gate}`" not in table] == []


def test_a_strategy_of_another_type_leaves_the_default_rolling_update_out() -> None:
    plugin = _one("on-delete", "DaemonSet", "-kubelet-plugin")
    assert plugin["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert _one("on-delete", "Deployment")["spec"]["strategy"] == {"type": "Recreate"}
