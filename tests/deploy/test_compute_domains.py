"""ComputeDomains as deployed: the `compute-domains` component and the chart's computeDomains.

test_combinations checks that the component and the chart install the same
objects beside the other components. This file checks what those objects
promise an admin (docs/compute-domains.md):

- the CRDs and DeviceClasses are the package's (`dra_driver/data`), in the
  component and in the chart's crds/ directory, byte for byte, and the
  members and cliques the code writes (`dra_driver.compute_domain.membership`)
  are valid for them;
- the three commands use only the flags of the CLI contract (CD-DESIGN.md),
  with the plugin directory, driver root, node IP and namespace they need;
- RBAC keeps one writer per object: only the controller writes cliques and
  ComputeDomain status, only the CD plugin creates and deletes members, only
  the IMEX host writes their status;
- the Node admission policy, run as the API server runs it, lets the plugin
  change only its own Node's nvidia.com/gpu.clique label;
- the IMEX host outlives upgrades (OnDelete, host network, no memory limit)
  and the controller is leader-elected;
- the chart's host-managed mode, leader-election switch and refusals.
"""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dra_driver.cli import build_parser
from dra_driver.compute_domain import membership, names
from dra_driver.scheduling.cel import DeviceView
from dra_driver.scheduling.cel.selector import CompiledExpression, compile_expression
from dra_driver.scheduling.cel.types import DYN
from tests.deploy.renders import (
    BASE_VALUES,
    CHART,
    KUBERNETES,
    NAMESPACE,
    ROOT,
    VERSION,
    by_identity,
    documents,
    helm,
    merge,
    render_chart,
    render_kustomization,
    render_users_kustomization,
    validate,
)

COMPONENT = ROOT / "deploy/components/compute-domains"
DATA = ROOT / "dra_driver/data"
CRDS = (
    "computedomains-crd.yaml",
    "computedomaincliques-crd.yaml",
    "computedomainmembers-crd.yaml",
)
CLASSES = "compute-domain-deviceclasses.yaml"
VARIANTS: dict[str, dict[str, Any]] = {
    "driver-managed": {"resources": {"computeDomains": {"enabled": True}}},
    "host-managed": {
        "resources": {
            "computeDomains": {
                "enabled": True,
                "maxNodesPerImexDomain": 8,
                "imex": {"mode": "hostManaged", "hostSocketPath": "/run/imex/ctl.sock"},
            }
        },
        "kubeletPlugin": {"containers": {"computeDomains": {"gpuCliqueLabelEnabled": True}}},
    },
    "no-leader-election": {
        "resources": {"computeDomains": {"enabled": True, "maxNodesPerImexDomain": 4}},
        "controller": {
            "leaderElection": {"enabled": False},
            "containers": {"computeDomain": {"env": [{"name": "X", "value": "1"}]}},
        },
    },
    "controller-metrics-off": {
        "resources": {"computeDomains": {"enabled": True}},
        "controller": {
            "metrics": {"enabled": False, "httpEndpoint": "0.0.0.0:9402"},
            # Where NVIDIA's chart takes it: the IMEX host must get it too.
            "containers": {
                "computeDomain": {"env": [{"name": "MAX_NODES_PER_IMEX_DOMAIN", "value": "9"}]}
            },
        },
    },
    "channel-isolation": {
        "resources": {"computeDomains": {"enabled": True, "imex": {"isolation": "channel"}}}
    },
    "election-in-seconds": {
        "resources": {"computeDomains": {"enabled": True}},
        "controller": {
            "replicas": 2,
            "leaderElection": {"leaseDuration": 30, "renewDeadline": "20s", "retryPeriod": 4},
        },
    },
}


@cache
def _component() -> tuple[dict[str, Any], ...]:
    return tuple(render_users_kustomization(("compute-domains",)))


@cache
def _charts() -> dict[str, list[dict[str, Any]]]:
    sets = {
        name: merge(BASE_VALUES, values) for name, values in {**VARIANTS, "defaults": {}}.items()
    }
    return render_chart(sets)


def _find(docs: Any, kind: str, name: str) -> dict[str, Any]:
    (doc,) = [d for d in docs if d["kind"] == kind and d["metadata"]["name"] == name]
    return dict(doc)


def _container(pod_owner: dict[str, Any], name: str) -> dict[str, Any]:
    (container,) = [
        c for c in pod_owner["spec"]["template"]["spec"]["containers"] if c["name"] == name
    ]
    return dict(container)


def _flags(container: dict[str, Any]) -> tuple[str, dict[str, str]]:
    """The dra-gpu subcommand and its --flag=value arguments (value "" for a switch)."""
    program, command, *argv = container["command"]
    assert program == "dra-gpu"
    flags = {}
    for arg in argv:
        flag, _, value = arg.partition("=")
        assert flag.startswith("--"), arg
        flags[flag] = value
    return command, flags


# ----------------------------------------------------------------- package data


@pytest.mark.parametrize("name", [*CRDS, CLASSES])
def test_the_crds_and_classes_are_the_packages_byte_for_byte(name: str) -> None:
    """dra_driver/data is the one source; the copies here exist because Kustomize and Helm
    read only files inside their own directories. A failure says which copy to refresh."""
    source = DATA / name
    assert source.exists(), f"{source} is missing (the package's copy, helper cd-store's)"
    assert (COMPONENT / name).read_text() == source.read_text(), (
        f"cp {source.relative_to(ROOT)} deploy/components/compute-domains/"
    )
    if name in CRDS:
        assert (CHART / "crds" / name).read_text() == source.read_text(), (
            f"cp {source.relative_to(ROOT)} deploy/helm/dra-gpu/crds/"
        )


def test_the_chart_ships_exactly_the_three_crds() -> None:
    assert sorted(p.name for p in (CHART / "crds").iterdir()) == sorted(CRDS)


def _schema(name: str) -> dict[str, Any]:
    (crd,) = documents((COMPONENT / name).read_text())
    (version,) = crd["spec"]["versions"]
    schema: dict[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def test_members_and_cliques_the_code_writes_are_valid_for_the_crds() -> None:
    spec = membership.MemberSpec(
        domain_uid="0f7c2d9e-1b1a-4c55-9d6f-2a8e7c1b3d40",
        domain_namespace="ml",
        domain_name="nvl72",
        node_name="gb200-rack1-n03",
        clique_id="00000000-0000-0000-0000-000000000001.0",
    )
    member = membership.build_member(spec, namespace=NAMESPACE)
    member["status"] = membership.member_status_body(
        membership.MemberStatus(
            state=membership.MemberState.READY,
            ip_address="10.0.3.3",
            imex_node_id=2,
            peers={"gb200-rack1-n01": membership.PeerState.CONNECTED},
            last_transition_time="2026-11-28T15:00:00Z",
        )
    )
    jsonschema.validate(member, _schema("computedomainmembers-crd.yaml"))
    assert membership.member_spec(member) == spec
    row = membership.CliqueRow("gb200-rack1-n03", "10.0.3.3", spec.clique_id, 2, "Ready")
    clique = membership.build_clique(spec.domain_uid, spec.clique_id, [row], namespace=NAMESPACE)
    jsonschema.validate(clique, _schema("computedomaincliques-crd.yaml"))
    assert membership.clique_rows(clique) == [row]
    # Channel isolation's: a member labelled with the mode, a clique-wide clique.
    channel_member = membership.build_member(spec, namespace=NAMESPACE, isolation_mode="channel")
    jsonschema.validate(channel_member, _schema("computedomainmembers-crd.yaml"))
    shared = membership.build_shared_clique(spec.clique_id, [row], namespace=NAMESPACE)
    jsonschema.validate(shared, _schema("computedomaincliques-crd.yaml"))
    assert membership.clique_rows(shared) == [row]
    # The CRDs name the kinds, group and version the code writes.
    for name, kind in (
        ("computedomainmembers-crd.yaml", membership.MEMBER_KIND),
        ("computedomaincliques-crd.yaml", membership.CLIQUE_KIND),
        ("computedomains-crd.yaml", names.KIND),
    ):
        (crd,) = documents((COMPONENT / name).read_text())
        assert crd["spec"]["names"]["kind"] == kind
        assert crd["spec"]["group"] == names.GROUP
        assert [v["name"] for v in crd["spec"]["versions"]] == [names.VERSION]
        assert crd["spec"]["scope"] == "Namespaced"


# ----------------------------------------------------------------- the component


def _parses(container: dict[str, Any]) -> None:
    """The container's command line is accepted by dra-gpu's own parser (a typo or a flag the
    program does not have would crash-loop the pod)."""
    _, *argv = container["command"]
    env = {e["name"]: "x" for e in container.get("env", [])}
    argv = [re.sub(r"\$\((\w+)\)", lambda m: env.get(m.group(1), m.group(0)), a) for a in argv]
    build_parser().parse_args(argv)


def test_the_three_commands_are_accepted_by_the_programs() -> None:
    docs = _component()
    plugin = _find(docs, "DaemonSet", "dra-gpu-kubelet-plugin")
    commands = {
        "compute-domain-controller": _container(
            _find(docs, "Deployment", "dra-gpu-compute-domain-controller"), "compute-domain"
        ),
        "compute-domain-kubelet-plugin": _container(plugin, "compute-domains"),
        "imex-host": _container(_find(docs, "DaemonSet", "dra-gpu-imex-host"), "imex-host"),
    }
    for expected, container in commands.items():
        command, flags = _flags(container)
        assert command == expected
        _parses(container)
        env = {e["name"]: e for e in container["env"]}
        # The driver namespace comes from the pod, so a `namespace:` override moves it.
        assert flags["--namespace"] == "$(NAMESPACE)"
        assert env["NAMESPACE"]["valueFrom"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
        assert flags["--cluster"] == "kube"
    _, cd = _flags(commands["compute-domain-kubelet-plugin"])
    assert (
        cd["--kubelet-root"] == "/var/lib/kubelet"
    )  # plugin dir .../plugins/compute-domain.nvidia.com
    assert cd["--nvml"] == "real"
    _, host = _flags(commands["imex-host"])
    assert host["--node-ip"] == "$(NODE_IP)"
    node_ip = {e["name"]: e for e in commands["imex-host"]["env"]}["NODE_IP"]
    assert node_ip["valueFrom"] == {"fieldRef": {"fieldPath": "status.hostIP"}}
    # Both read the driver where the pod mounts it, whichever host path the volume has.
    for container in (commands["compute-domain-kubelet-plugin"], commands["imex-host"]):
        mounts = {m["name"]: m for m in container["volumeMounts"]}
        assert _flags(container)[1]["--nvidia-driver-root"] == mounts["driver-root"]["mountPath"]
        assert mounts["driver-root"]["readOnly"] is True


def test_the_cd_plugin_shares_the_plugins_pod_without_colliding_with_it() -> None:
    plugin = _find(_component(), "DaemonSet", "dra-gpu-kubelet-plugin")
    gpu, cd = _container(plugin, "plugin"), _container(plugin, "compute-domains")
    gpu_ports = {p["containerPort"] for p in gpu["ports"]}
    cd_ports = {p["containerPort"] for p in cd["ports"]}
    assert not gpu_ports & cd_ports  # one network namespace
    port = int(_flags(cd)[1]["--healthcheck-port"])
    assert cd_ports == {port}
    assert cd["livenessProbe"]["grpc"]["port"] == cd["readinessProbe"]["grpc"]["port"] == port
    assert cd["securityContext"] == {"privileged": True}
    env = {e["name"]: e for e in cd["env"]}
    assert env["NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    mounts = {m["name"]: m["mountPath"] for m in cd["volumeMounts"]}
    assert mounts["plugins"] == "/var/lib/kubelet/plugins"
    assert mounts["plugins-registry"] == "/var/lib/kubelet/plugins_registry"
    assert mounts["cdi"] == "/var/run/cdi"


def test_the_imex_host_outlives_upgrades_on_the_nodes_network() -> None:
    host = _find(_component(), "DaemonSet", "dra-gpu-imex-host")
    pod = host["spec"]["template"]["spec"]
    assert host["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert pod["hostNetwork"] is True
    assert pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    assert pod["hostPID"] is True  # a host nvidia-imex is seen and reported
    assert pod["serviceAccountName"] == "dra-gpu-imex-host"
    (container,) = pod["containers"]
    assert "limits" not in container["resources"]  # an OOM kill would stop IMEX
    assert container["securityContext"] == {"privileged": True}
    assert {p["containerPort"] for p in container["ports"]} == {50000, 50005}
    volumes = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    state = _flags(container)[1]["--state-dir"]
    assert volumes["state"] == mounts["state"] == state == "/var/lib/dra-gpu/imex"


def test_the_controller_is_one_leader_elected_writer_near_the_control_plane() -> None:
    deployment = _find(_component(), "Deployment", "dra-gpu-compute-domain-controller")
    pod = deployment["spec"]["template"]["spec"]
    assert deployment["spec"]["replicas"] == 1
    assert pod["priorityClassName"] == "system-node-critical"
    (preferred,) = pod["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    (expression,) = preferred["preference"]["matchExpressions"]
    assert expression == {"key": "node-role.kubernetes.io/control-plane", "operator": "Exists"}
    _, flags = _flags(_container(deployment, "compute-domain"))
    assert flags["--leader-elect"] == ""
    assert (
        flags["--leader-elect-lease-duration"],
        flags["--leader-elect-renew-deadline"],
        flags["--leader-elect-retry-period"],
    ) == ("15", "10", "2")  # NVIDIA's 15s / 10s / 2s
    assert _container(deployment, "compute-domain")["securityContext"]["privileged"] is False


def _health_port(container: dict[str, Any]) -> int:
    """The controller's --healthcheck-port, checked against its probes and its named port."""
    port = int(_flags(container)[1]["--healthcheck-port"])
    for probe in ("livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": port}, probe
    assert container["ports"] == [{"name": "metrics", "containerPort": port}]
    return port


@pytest.mark.parametrize("source", ["component", "chart"])
def test_the_controller_is_probed_and_scraped_on_its_healthcheck_port(source: str) -> None:
    docs = _component() if source == "component" else _charts()["driver-managed"]
    deployment = _find(docs, "Deployment", "dra-gpu-compute-domain-controller")
    # NVIDIA's controller.metrics.httpEndpoint default, :8080.
    assert _health_port(_container(deployment, "compute-domain")) == 8080
    assert deployment["spec"]["template"]["metadata"]["annotations"] == {
        "prometheus.io/scrape": "true",
        "prometheus.io/port": "8080",
        "prometheus.io/path": "/metrics",
    }


def test_the_charts_controller_metrics_values_move_the_port_and_the_annotations() -> None:
    deployment = _find(
        _charts()["controller-metrics-off"], "Deployment", "dra-gpu-compute-domain-controller"
    )
    # The probes stay with metrics.enabled false: they need the port, not the scrape.
    assert _health_port(_container(deployment, "compute-domain")) == 9402
    assert "annotations" not in deployment["spec"]["template"]["metadata"]


def _rules_of(docs: Any, account: str) -> set[tuple[str, str, str, str]]:
    """(scope, resource, verb, resourceName) for every rule bound to ServiceAccount `account`."""
    roles = {
        (d["kind"], d["metadata"]["name"]): d for d in docs if d["kind"] in {"Role", "ClusterRole"}
    }
    out = set()
    for binding in (d for d in docs if d["kind"] in {"RoleBinding", "ClusterRoleBinding"}):
        if not any(s["name"] == account for s in binding["subjects"]):
            continue
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        if role is None:  # OpenShift's SCC role: not ours
            continue
        scope = "namespace" if role["kind"] == "Role" else "cluster"
        for rule in role["rules"]:
            for resource in rule["resources"]:
                for verb in rule["verbs"]:
                    for name in rule.get("resourceNames", ["*"]):
                        out.add((scope, resource, verb, name))
    return out


WRITES = {"create", "update", "patch", "delete"}


def test_rbac_keeps_one_writer_per_object() -> None:
    docs = _component()
    accounts = {
        "controller": "dra-gpu-compute-domain-controller",
        "plugin": "dra-gpu-kubelet-plugin",
        "imex-host": "dra-gpu-imex-host",
    }
    rules = {who: _rules_of(docs, account) for who, account in accounts.items()}

    def writers(resource: str) -> dict[str, set[str]]:
        found = {
            who: {verb for _, res, verb, _ in granted if res == resource and verb in WRITES}
            for who, granted in rules.items()
        }
        return {who: verbs for who, verbs in found.items() if verbs}

    assert writers("computedomaincliques") == {
        "controller": {"create", "update", "patch", "delete"}
    }
    assert writers("computedomains/status") == {"controller": {"update"}}
    assert writers("computedomains") == {"controller": {"update"}}  # the finalizer
    assert writers("computedomainmembers") == {"plugin": {"create", "delete"}}
    assert writers("computedomainmembers/status") == {"imex-host": {"update", "patch"}}
    assert writers("resourceclaimtemplates") == {"controller": {"create", "update", "delete"}}
    assert writers("nodes") == {"plugin": {"update", "patch"}}  # the clique label, own node
    # Cliques, members and the Lease are written in the driver namespace only; cliques and
    # members are read cluster-wide, because the stores watch a kind in every namespace.
    for who, granted in rules.items():
        for scope, resource, verb, _ in granted:
            if resource.startswith(("computedomaincliques", "computedomainmembers", "leases")):
                assert scope == "namespace" or verb in {"get", "list", "watch"}, (who, resource)
    leases = {(verb, name) for _, res, verb, name in rules["controller"] if res == "leases"}
    assert leases == {
        ("create", "*"),
        *{(v, "dra-gpu-compute-domain-controller") for v in ("get", "watch", "update", "patch")},
    }
    # The IMEX host reads only what it needs.
    assert {res for _, res, _, _ in rules["imex-host"]} == {
        "computedomainmembers",
        "computedomainmembers/status",
        "computedomaincliques",
        "events",
    }


# ----------------------------------------------------------------- the Node policy

_DEVICE = DeviceView(driver="", attributes={}, capacity={})
_DECLARED = {"object": DYN, "oldObject": DYN, "request": DYN, "variables": DYN}
CLIQUE = "nvidia.com/gpu.clique"


@cache
def _compiled(expression: str) -> CompiledExpression:
    return compile_expression(expression, variables=_DECLARED)


def _policy() -> dict[str, Any]:
    return _find(_component(), "ValidatingAdmissionPolicy", "dra-gpu-compute-domain-node-label")


def _admit(user: str, node_of_user: str, old: dict[str, Any], new: dict[str, Any]) -> str | None:
    """None when the policy lets the UPDATE through, else its message (as the API server would)."""
    spec = _policy()["spec"]
    extra = {"authentication.kubernetes.io/node-name": [node_of_user]} if node_of_user else {}
    request = {"operation": "UPDATE", "userInfo": {"username": user, "extra": extra}}
    bound: dict[str, Any] = {"object": new, "oldObject": old, "request": request, "variables": {}}
    for condition in spec["matchConditions"]:
        matched, _ = _compiled(condition["expression"]).evaluate(_DEVICE, bound)
        if matched is not True:
            return None
    for variable in spec["variables"]:
        value, _ = _compiled(variable["expression"]).evaluate(_DEVICE, bound)
        bound["variables"][variable["name"]] = value
    for check in spec["validations"]:
        allowed, _ = _compiled(check["expression"]).evaluate(_DEVICE, bound)
        if allowed is not True:
            if "messageExpression" in check:
                message, _ = _compiled(check["messageExpression"]).evaluate(_DEVICE, bound)
                return str(message)
            return str(check["message"])
    return None


def _node(name: str, labels: dict[str, str], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": labels, "annotations": {"a": "1"}},
        "spec": {"podCIDR": "10.244.3.0/24", **spec},
    }


PLUGIN = "system:serviceaccount:dra-gpu:dra-gpu-kubelet-plugin"
VALUE = "00000000-0000-0000-0000-000000000001.0"


def test_the_plugin_may_set_and_remove_its_own_nodes_clique_label() -> None:
    bare = _node("n1", {"kubernetes.io/hostname": "n1"})
    labelled = _node("n1", {"kubernetes.io/hostname": "n1", CLIQUE: VALUE})
    relabelled = _node("n1", {"kubernetes.io/hostname": "n1", CLIQUE: "x.1"})
    assert _admit(PLUGIN, "n1", bare, labelled) is None
    assert _admit(PLUGIN, "n1", labelled, relabelled) is None
    assert _admit(PLUGIN, "n1", labelled, bare) is None
    assert _admit(PLUGIN, "n1", _node("n1", {}), _node("n1", {CLIQUE: VALUE})) is None


@pytest.mark.parametrize(
    ("old", "new", "user_node", "says"),
    [
        (
            _node("n2", {}),
            _node("n2", {CLIQUE: VALUE}),
            "n1",
            "runs on node n1 and may not change Node n2",
        ),
        (_node("n1", {}), _node("n1", {CLIQUE: VALUE}), "", "may not change Node n1"),
        (_node("n1", {"a": "1"}), _node("n1", {"a": "2"}), "n1", "only the nvidia.com/gpu.clique"),
        (_node("n1", {"a": "1"}), _node("n1", {}), "n1", "only the nvidia.com/gpu.clique"),
        (
            _node("n1", {}),
            _node("n1", {"b": "1", CLIQUE: VALUE}),
            "n1",
            "only the nvidia.com/gpu.clique",
        ),
        (
            _node("n1", {}),
            _node("n1", {}, taints=[{"key": "k", "effect": "NoSchedule"}]),
            "n1",
            "only the nvidia.com/gpu.clique",
        ),
        (
            _node("n1", {}),
            _node("n1", {}, unschedulable=True),
            "n1",
            "only the nvidia.com/gpu.clique",
        ),
    ],
)
def test_the_plugin_may_change_nothing_else_of_any_node(
    old: dict[str, Any], new: dict[str, Any], user_node: str, says: str
) -> None:
    message = _admit(PLUGIN, user_node, old, new)
    assert message is not None
    assert says in message


def test_other_users_nodes_updates_are_not_the_policys_business() -> None:
    old, new = _node("n2", {"a": "1"}), _node("n2", {"a": "2"})
    assert _admit("system:node:n2", "", old, new) is None
    assert _admit("system:serviceaccount:dra-gpu:dra-gpu-imex-host", "n1", old, new) is None
    assert _admit("system:serviceaccount:gpu-system:dra-gpu-kubelet-plugin", "n1", old, new)
    rules = _policy()["spec"]["matchConstraints"]["resourceRules"]
    assert rules == [
        {"apiGroups": [""], "apiVersions": ["*"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]


# ----------------------------------------------------------------- the chart


def test_the_charts_defaults_leave_compute_domains_out_and_its_variants_are_valid() -> None:
    defaults = _charts()["defaults"]
    assert not [d for d in defaults if "compute-domain" in d["metadata"]["name"]]
    assert not [d for d in defaults if "imex" in d["metadata"]["name"]]
    for name in VARIANTS:
        for version in KUBERNETES:
            for doc in _charts()[name]:
                validate(doc, version)
    # driverManaged with the chart's defaults is the component's objects (test_combinations
    # checks it beside every other component; here with the chart's own default values).
    component = [d for d in _component() if d["kind"] != "CustomResourceDefinition"]
    base = render_kustomization(ROOT / "deploy/base")
    assert by_identity(_charts()["driver-managed"]).keys() == by_identity(component).keys()
    assert len(component) > len(base)


def test_host_managed_runs_no_imex_host_and_checks_the_hosts_socket() -> None:
    docs = _charts()["host-managed"]
    assert not [d for d in docs if d["metadata"]["name"].endswith("-imex-host")]
    classes = {d["metadata"]["name"] for d in docs if d["kind"] == "DeviceClass"}
    assert "compute-domain-daemon.nvidia.com" not in classes  # no daemon device, as NVIDIA's
    assert "compute-domain-default-channel.nvidia.com" in classes
    plugin = _find(docs, "DaemonSet", "dra-gpu-kubelet-plugin")
    cd = _container(plugin, "compute-domains")
    _, flags = _flags(cd)
    assert flags["--imex-mode"] == "hostManaged"
    assert flags["--imex-host-socket-path"] == "/run/imex/ctl.sock"
    assert flags["--gpu-clique-label"] == ""
    mounts = {m["name"]: m["mountPath"] for m in cd["volumeMounts"]}
    volumes = {
        v["name"]: v["hostPath"]["path"] for v in plugin["spec"]["template"]["spec"]["volumes"]
    }
    assert mounts["imex-socket"] == volumes["imex-socket"] == "/run/imex"
    controller = _find(docs, "Deployment", "dra-gpu-compute-domain-controller")
    _, flags = _flags(_container(controller, "compute-domain"))
    assert flags["--imex-mode"] == "hostManaged"
    assert flags["--max-nodes-per-imex-domain"] == "8"


def test_the_controller_and_imex_host_agree_on_the_clique_size() -> None:
    docs = _charts()["no-leader-election"]
    controller = _container(
        _find(docs, "Deployment", "dra-gpu-compute-domain-controller"), "compute-domain"
    )
    host = _container(_find(docs, "DaemonSet", "dra-gpu-imex-host"), "imex-host")
    assert _flags(controller)[1]["--max-nodes-per-imex-domain"] == "4"
    assert _flags(host)[1]["--max-nodes-per-imex-domain"] == "4"
    # The default, 18, is the commands' own: no flag, as in the component.
    default = _charts()["driver-managed"]
    default_host = _container(_find(default, "DaemonSet", "dra-gpu-imex-host"), "imex-host")
    assert "--max-nodes-per-imex-domain" not in _flags(default_host)[1]
    # NVIDIA's way, MAX_NODES_PER_IMEX_DOMAIN in the controller's env, reaches the IMEX host too.
    nvidia_way = _charts()["controller-metrics-off"]
    for kind, name, container in (
        ("Deployment", "dra-gpu-compute-domain-controller", "compute-domain"),
        ("DaemonSet", "dra-gpu-imex-host", "imex-host"),
    ):
        flags = _flags(_container(_find(nvidia_way, kind, name), container))[1]
        assert flags["--max-nodes-per-imex-domain"] == "9", name


def test_channel_isolation_reaches_all_three_programs_and_nothing_else_changes() -> None:
    docs = _charts()["channel-isolation"]
    commands = {
        "controller": _container(
            _find(docs, "Deployment", "dra-gpu-compute-domain-controller"), "compute-domain"
        ),
        "plugin": _container(_find(docs, "DaemonSet", "dra-gpu-kubelet-plugin"), "compute-domains"),
        "imex-host": _container(_find(docs, "DaemonSet", "dra-gpu-imex-host"), "imex-host"),
    }
    for container in commands.values():
        assert _flags(container)[1]["--imex-isolation"] == "channel"
        _parses(container)
    # The default mode passes no flag (the programs' own default is `domain`).
    default = _charts()["driver-managed"]
    for kind, name, container_name in (
        ("Deployment", "dra-gpu-compute-domain-controller", "compute-domain"),
        ("DaemonSet", "dra-gpu-kubelet-plugin", "compute-domains"),
        ("DaemonSet", "dra-gpu-imex-host", "imex-host"),
    ):
        flags = _flags(_container(_find(default, kind, name), container_name))[1]
        assert "--imex-isolation" not in flags
    # Otherwise the same objects as the default mode.
    assert by_identity(docs).keys() == by_identity(default).keys()


def test_without_leader_election_the_controller_is_recreated_never_doubled() -> None:
    docs = _charts()["no-leader-election"]
    deployment = _find(docs, "Deployment", "dra-gpu-compute-domain-controller")
    assert deployment["spec"]["strategy"] == {"type": "Recreate"}
    container = _container(deployment, "compute-domain")
    assert not {f for f in _flags(container)[1] if f.startswith("--leader-elect")}
    assert {"name": "X", "value": "1"} in container["env"]
    elected = _find(
        _charts()["election-in-seconds"], "Deployment", "dra-gpu-compute-domain-controller"
    )
    assert elected["spec"]["replicas"] == 2
    assert "strategy" not in elected["spec"]
    _, flags = _flags(_container(elected, "compute-domain"))
    assert (
        flags["--leader-elect-lease-duration"],
        flags["--leader-elect-renew-deadline"],
        flags["--leader-elect-retry-period"],
    ) == ("30", "20", "4")


@pytest.mark.parametrize(
    ("flags", "error"),
    [
        (
            ["--set", "resources.computeDomains.enabled=true,resources.gpus.enabled=false"],
            "needs resources.gpus.enabled=true",
        ),
        (
            [
                "--set",
                "resources.computeDomains.enabled=true,"
                "kubeletPlugin.containers.computeDomains.healthcheckPort=51515",
            ],
            "are both 51515: the two plugins listen in one pod",
        ),
        (
            [
                "--set",
                "resources.computeDomains.enabled=true,controller.replicas=2,"
                "controller.leaderElection.enabled=false",
            ],
            "controller.replicas=2 needs controller.leaderElection.enabled=true",
        ),
        (
            [
                "--set",
                "resources.computeDomains.enabled=true,"
                "resources.computeDomains.imex.isolation=channel,"
                "resources.computeDomains.imex.mode=hostManaged",
            ],
            "isolation=channel needs resources.computeDomains.imex.mode=driverManaged",
        ),
        (
            ["--set", "resources.computeDomains.imex.isolation=clique"],
            "at '/resources/computeDomains/imex/isolation'",
        ),
        (
            ["--set", "resources.computeDomains.imex.mode=hostmanaged"],
            "at '/resources/computeDomains/imex/mode'",
        ),
        (
            ["--set", "controller.leaderElection.leaseDuration=1m"],
            "at '/controller/leaderElection/leaseDuration'",
        ),
        (["--set", "controller.replicaz=2"], "additional properties 'replicaz' not allowed"),
        (
            [
                "--set",
                "resources.computeDomains.enabled=true,"
                "resources.computeDomains.maxNodesPerImexDomain=8,"
                "controller.containers.computeDomain.env[0].name=MAX_NODES_PER_IMEX_DOMAIN,"
                "controller.containers.computeDomain.env[0].value=9",
            ],
            "MAX_NODES_PER_IMEX_DOMAIN=9 and resources.computeDomains.maxNodesPerImexDomain=8"
            " disagree",
        ),
        (
            [
                "--set",
                "resources.computeDomains.enabled=true,"
                "controller.containers.computeDomain.env[0].name=MAX_NODES_PER_IMEX_DOMAIN,"
                "controller.containers.computeDomain.env[0].value=many",
            ],
            'MAX_NODES_PER_IMEX_DOMAIN "many": a whole number of nodes, at least 1',
        ),
    ],
)
def test_values_the_chart_cannot_honour_fail_naming_them(flags: list[str], error: str) -> None:
    done = helm("template", "dra-gpu", str(CHART), *flags)
    assert done.returncode != 0
    assert error in done.stderr, done.stderr


def test_the_component_says_what_it_installs_and_the_docs_say_how_to_use_it() -> None:
    text = (COMPONENT / "kustomization.yaml").read_text()
    (doc,) = documents(text)
    listed = set(doc["resources"]) | {p["path"] for p in doc["patches"]}
    on_disk = {p.name for p in COMPONENT.iterdir()} - {"kustomization.yaml"}
    assert listed == on_disk
    guide = (ROOT / "docs/compute-domains.md").read_text()
    for needed in ("compute-domains", "hostManaged", "ComputeDomainMember", "HostImexRunning"):
        assert needed in guide, needed
    assert re.search(r"kubectl apply -k", guide)
    assert Path(ROOT / "docs/migrating-compute-domains.md").exists()


def test_the_guides_kustomize_patches_render() -> None:
    """The host-managed, channel-isolation and clique-affinity recipes of
    docs/compute-domains.md, as a user pastes them into a kustomization over the base with
    the component."""
    guide = (ROOT / "docs/compute-domains.md").read_text()
    blocks = re.findall(r"<!-- kustomization-extra -->\n```yaml\n(.*?)```", guide, flags=re.DOTALL)
    assert len(blocks) == 3
    (host_managed_block,) = [b for b in blocks if "hostManaged" in b]
    (affinity_block,) = [b for b in blocks if "nodeAffinity" in b]
    (channel_block,) = [b for b in blocks if "--imex-isolation" in b]
    host_managed = render_users_kustomization(("compute-domains",), host_managed_block)
    assert not [
        d for d in host_managed if d["kind"] == "DaemonSet" and "imex" in d["metadata"]["name"]
    ]
    assert not [
        d for d in host_managed if d["metadata"]["name"] == "compute-domain-daemon.nvidia.com"
    ]
    plugin = _find(host_managed, "DaemonSet", "dra-gpu-kubelet-plugin")
    _, flags = _flags(_container(plugin, "compute-domains"))
    assert flags["--imex-mode"] == "hostManaged"
    controller = _find(host_managed, "Deployment", "dra-gpu-compute-domain-controller")
    assert _flags(_container(controller, "compute-domain"))[1]["--imex-mode"] == "hostManaged"
    # What the chart installs for hostManaged, less the daemon class and the host's RBAC.
    chart = by_identity(
        render_chart(
            {
                "h": merge(
                    BASE_VALUES,
                    {
                        "resources": {
                            "computeDomains": {"enabled": True, "imex": {"mode": "hostManaged"}}
                        }
                    },
                )
            }
        )["h"]
    )
    kustomized = by_identity([d for d in host_managed if d["kind"] != "CustomResourceDefinition"])
    assert (
        chart[("DaemonSet", "dra-gpu", "dra-gpu-kubelet-plugin")]
        == kustomized[("DaemonSet", "dra-gpu", "dra-gpu-kubelet-plugin")]
    )
    key = ("Deployment", "dra-gpu", "dra-gpu-compute-domain-controller")
    assert chart[key] == kustomized[key]
    # Channel isolation: the three programs as the chart renders them for it.
    channel = by_identity(
        [
            d
            for d in render_users_kustomization(("compute-domains",), channel_block)
            if d["kind"] != "CustomResourceDefinition"
        ]
    )
    chart_channel = by_identity(_charts()["channel-isolation"])
    for key in (
        ("Deployment", "dra-gpu", "dra-gpu-compute-domain-controller"),
        ("DaemonSet", "dra-gpu", "dra-gpu-kubelet-plugin"),
        ("DaemonSet", "dra-gpu", "dra-gpu-imex-host"),
    ):
        assert channel[key] == chart_channel[key], key
    affinity = render_users_kustomization(("compute-domains",), affinity_block)
    host = _find(affinity, "DaemonSet", "dra-gpu-imex-host")
    terms = host["spec"]["template"]["spec"]["affinity"]["nodeAffinity"][
        "requiredDuringSchedulingIgnoredDuringExecution"
    ]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": CLIQUE, "operator": "Exists"}]}]


def test_every_compute_domain_image_is_the_projects_version() -> None:
    """The component's objects are not under the base's `images:`; a user's own `images:`
    entry renames them all (test_manifests), so they carry the same name and tag."""
    images = {
        container["image"]
        for doc in _component()
        if doc["kind"] in {"DaemonSet", "Deployment"}
        for container in doc["spec"]["template"]["spec"]["containers"]
    }
    assert images == {f"ghcr.io/dra-gpu/dra-gpu:{VERSION}"}
    renamed = render_users_kustomization(
        ("compute-domains",),
        "images:\n- name: ghcr.io/dra-gpu/dra-gpu\n  newName: registry.example.com/dra-gpu\n",
    )
    assert {
        container["image"]
        for doc in renamed
        if doc["kind"] in {"DaemonSet", "Deployment"}
        for container in doc["spec"]["template"]["spec"]["containers"]
    } == {f"registry.example.com/dra-gpu:{VERSION}"}
