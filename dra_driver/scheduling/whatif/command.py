"""`dra-gpu simulate` and `dra-gpu explain`: wiring files, nodes and cluster to the engine.

This module turns command-line choices into a `Simulation` (files read,
simulated nodes built, default DeviceClasses added, feature gates parsed),
runs it, and prints. Exit codes: 0 when everything was placed (simulate) or
the subject fits (explain), 1 when something does not fit, 2 for errors
(raised as `DraGpuError` and printed by the CLI).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Final, TextIO

from dra_driver import cycle_collector
from dra_driver.compute_domain.manifests import device_classes as compute_domain_device_classes
from dra_driver.errors import ConfigError
from dra_driver.kube.objects import Obj
from dra_driver.node.consumable_shares import ConsumableShares
from dra_driver.node.device_classes import default_device_classes
from dra_driver.scheduling.allocator import Features, Node, Release
from dra_driver.scheduling.whatif.admission import check_objects
from dra_driver.scheduling.whatif.claims import PodClaim
from dra_driver.scheduling.whatif.compute_domains import DomainRules
from dra_driver.scheduling.whatif.diagnosis import Diagnosis
from dra_driver.scheduling.whatif.documents import read_documents
from dra_driver.scheduling.whatif.engine import (
    ChainedChecks,
    NodeChecks,
    Simulation,
    WorkItem,
    Workload,
    build_workload,
)
from dra_driver.scheduling.whatif.explain import AllocatedClaim, render_report
from dra_driver.scheduling.whatif.extended import attach_extended_resource_claim, class_mapping
from dra_driver.scheduling.whatif.inputs import SimulationInputs, collect_inputs
from dra_driver.scheduling.whatif.node_checks import PluginChecks
from dra_driver.scheduling.whatif.nodes import (
    MigMode,
    NodeBuilder,
    nodes_from_objects,
    parse_node_spec,
)
from dra_driver.scheduling.whatif.progress import ProgressBar
from dra_driver.scheduling.whatif.render import render_json, render_table, render_yaml

FEATURE_GATES: Final = {
    "DRAAdminAccess": "admin_access",
    "DRAPrioritizedList": "prioritized_list",
    "DRAPartitionableDevices": "partitionable_devices",
    "DRADeviceTaints": "device_taints",
    "DRAConsumableCapacity": "consumable_capacity",
    "DRADeviceBindingConditions": "device_binding_conditions",
    "DRAExtendedResource": "extended_resource",
    "DRAListTypeAttributes": "list_type_attributes",
}
LIST_TYPE_ATTRIBUTES_GATE: Final = "DRAListTypeAttributes"


@dataclass
class Scenario:
    """What a simulation runs on: the sorted inputs, nodes, slices and classes."""

    inputs: SimulationInputs
    nodes: list[Node] = field(default_factory=list)
    slices: list[Obj] = field(default_factory=list)
    classes: list[Obj] = field(default_factory=list)
    node_checks: NodeChecks | None = None
    withheld: dict[str, tuple[str, ...]] = field(default_factory=dict)


PARTITIONABLE_GATE: Final = "DRAPartitionableDevices"
DYNAMIC_MIG_REFUSED: Final = (
    "the API server drops the counters that keep overlapping MIG devices apart "
    f"({PARTITIONABLE_GATE} is off), so the kubelet plugin refuses --dynamic-mig and publishes "
    "the existing MIG devices only"
)


def partitionable_fields_kept(gates: str, release: Release) -> bool:
    """Whether the API server stores sharedCounters/consumesCounters: `--feature-gates`
    DRAPartitionableDevices=..., else its default (alpha and off in 1.34/1.35, beta and on
    from 1.36; docs/kubernetes-versions.md). Without them dynamic MIG is unprotected."""
    for part in gates.split(","):
        name, _, value = part.partition("=")
        if name.strip() == PARTITIONABLE_GATE:
            return value.strip().lower() == "true"
    return release not in ("1.34", "1.35")


def parse_features(
    gates: str, release: Release, *, consumable_shares: ConsumableShares | None = None
) -> Features:
    """`--feature-gates Name=true,...` over kube-scheduler's defaults in `release`.

    `--consumable-shares` means the cluster runs with DRAConsumableCapacity
    (the apiserver drops `allowMultipleAllocations` without it), so it turns
    the gate on unless the gates say otherwise.
    """
    features = Features.for_release(release)
    if consumable_shares is not None:
        features = replace(features, consumable_capacity=True)
    for part in (p.strip() for p in gates.split(",")):
        if not part:
            continue
        name, sep, value = part.partition("=")
        field_name = FEATURE_GATES.get(name.strip())
        if not sep or field_name is None or value.strip().lower() not in ("true", "false"):
            raise ConfigError(
                f"--feature-gates {part!r}: expected NAME=true|false with NAME one of "
                f"{', '.join(FEATURE_GATES)}"
            )
        change: dict[str, Any] = {field_name: value.strip().lower() == "true"}
        features = replace(features, **change)
    if features.list_type_attributes and release in ("1.34", "1.35"):
        raise ConfigError(
            f"--feature-gates {LIST_TYPE_ATTRIBUTES_GATE}=true: Kubernetes {release} has no "
            "such gate (list-typed attributes exist from 1.36; use --kubernetes 1.36 or 1.37)"
        )
    return features


@dataclass(frozen=True)
class ScenarioOptions:
    """What `simulate` and `explain` read: the files, the `--nodes` and the defaults.

    `build_nodes` builds the `--nodes` and their slices (the CLI passes
    `dra_driver.composition.simulated_nodes.build_simulated_nodes`); `consumable_shares`
    is the kubelet plugin's `--consumable-shares` those nodes run with, `passthrough` its
    `--passthrough`.
    """

    build_nodes: NodeBuilder
    files: Sequence[str] = ()
    nodes: str | None = None
    namespace: str = "default"
    release: Release = "1.35"
    mig: MigMode = "static"
    feature_gates: str = ""
    consumable_shares: ConsumableShares | None = None
    recursive: bool = False
    passthrough: bool = False


def load_scenario(options: ScenarioOptions, err: TextIO | None = None) -> Scenario:
    """Read the files, build the `--nodes`, add our DeviceClasses where the files have none."""
    err = err or sys.stderr
    objects = read_documents(options.files, recursive=options.recursive)
    features = parse_features(
        options.feature_gates, options.release, consumable_shares=options.consumable_shares
    )
    check_objects(
        objects, release=options.release, features=features, default_namespace=options.namespace
    )
    inputs = collect_inputs(objects, default_namespace=options.namespace)
    if inputs.ignored:
        kinds = ", ".join(f"{kind} ({count})" for kind, count in sorted(inputs.ignored.items()))
        total = sum(inputs.ignored.values())
        err.write(f"note: ignored {total} object(s) the simulator does not use: {kinds}\n")
    scenario = Scenario(inputs)
    if options.nodes:
        mig = options.mig
        if mig == "dynamic" and not partitionable_fields_kept(
            options.feature_gates, options.release
        ):
            err.write(
                f"note: --mig dynamic on Kubernetes {options.release}: {DYNAMIC_MIG_REFUSED}, "
                f"as simulated here (--feature-gates {PARTITIONABLE_GATE}=true turns the gate "
                "on)\n"
            )
            mig = "static"
        built = options.build_nodes(
            parse_node_spec(options.nodes),
            mig=mig,
            release=options.release,
            consumable_shares=options.consumable_shares,
            list_attributes=features.list_type_attributes,
            passthrough=options.passthrough,
        )
        scenario.nodes, scenario.slices = built.nodes, built.slices
        scenario.node_checks = PluginChecks(built.devices)
        scenario.withheld = dict(built.compute_domain_withheld)
    scenario.slices = scenario.slices + inputs.slices
    by_name = {node.name: node for node in scenario.nodes}
    for node in nodes_from_objects(inputs.nodes, inputs.slices):
        known = by_name.get(node.name)
        if known is None:
            scenario.nodes.append(node)
            by_name[node.name] = node
        elif inputs.nodes:
            merged = Node(node.name, {**known.labels, **node.labels})
            scenario.nodes[scenario.nodes.index(known)] = merged
            by_name[node.name] = merged
    given = {str((c.get("metadata") or {}).get("name")) for c in inputs.classes}
    ours = default_device_classes()
    if inputs.compute_domains:  # the second driver's classes come with its ComputeDomains
        ours += compute_domain_device_classes()
    defaults = [c for c in ours if c["metadata"]["name"] not in given]
    # Our classes come with the driver, so the files' classes are newer: when both map
    # the same extended resource, the scheduler's cache keeps the later one (theirs).
    scenario.classes = defaults + inputs.classes
    return scenario


def run_simulate(
    options: ScenarioOptions,
    *,
    output: str = "table",
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`dra-gpu simulate`: place everything, print, 1 if anything was not placed."""
    out, err = out or sys.stdout, err or sys.stderr
    features = parse_features(
        options.feature_gates, options.release, consumable_shares=options.consumable_shares
    )
    with cycle_collector.paused():
        scenario = load_scenario(options, err)
        workload = build_workload(scenario.inputs, scenario.classes, features)
        simulation = _simulation(scenario, workload, features)
        bar = ProgressBar(len(workload.items), err)
        try:
            placements = simulation.run(workload.items, progress=bar)
        finally:
            bar.close()
        rules = simulation.unfit_reasons
        if isinstance(rules, DomainRules):
            for line in rules.split_domains():
                err.write(f"note: {line}\n")
        if output == "yaml":
            out.write(render_yaml(placements))
        elif output == "json":
            out.write(render_json(placements))
        else:
            out.write(
                render_table(placements, node_count=len(scenario.nodes), wide=output == "wide")
            )
    return 0 if all(placement.placed for placement in placements) else 1


def _simulation(scenario: Scenario, workload: Workload, features: Features) -> Simulation:
    """The simulation of a scenario; with ComputeDomains, their rules too (`compute_domains`)."""
    checks = scenario.node_checks
    rules = None
    if scenario.inputs.compute_domains:
        rules = DomainRules(
            domains=scenario.inputs.compute_domains,
            slices=scenario.slices,
            claims=workload.claims,
            withheld=scenario.withheld,
            features=features,
        )
        checks = rules if checks is None else ChainedChecks([checks, rules])
    return Simulation(
        slices=scenario.slices,
        classes=scenario.classes,
        nodes=scenario.nodes,
        claims=workload.claims,
        features=features,
        node_checks=checks,
        unfit_reasons=rules,
    )


def run_explain(
    options: ScenarioOptions,
    *,
    cluster: str | None = None,
    kubeconfig: str | None = None,
    claim: str | None = None,
    pod: str | None = None,
    node: str | None = None,
    verbose: bool = False,
    out: TextIO | None = None,
    err: TextIO | None = None,
) -> int:
    """`dra-gpu explain`: why a claim or a pod's claims fit or not; 1 if they do not."""
    out, err = out or sys.stdout, err or sys.stderr
    features = parse_features(
        options.feature_gates, options.release, consumable_shares=options.consumable_shares
    )
    namespace = options.namespace
    if claim and pod:
        raise ConfigError("give --claim or --pod, not both")
    if bool(options.files) == bool(cluster):
        raise ConfigError("give either -f FILE (a simulation) or --cluster")
    claim_key = _key(claim, namespace, "--claim") if claim else None
    pod_key = _key(pod, namespace, "--pod") if pod else None
    if cluster:
        if not claim_key and not pod_key:
            raise ConfigError("--cluster: name the subject with --claim or --pod")
        simulation, item = _from_cluster(cluster, kubeconfig, claim_key, pod_key, features)
    else:
        scenario = load_scenario(options, err)
        workload = build_workload(scenario.inputs, scenario.classes, features)
        found = _replay(scenario, workload, features, claim_key, pod_key)
        if found is None:
            count = len(workload.items)
            out.write(f"every one of the {count} pods and standalone claims is placed\n")
            return 0
        simulation, item = found
    return _explain(simulation, item, claim_key, node, verbose=verbose, out=out)


def _key(text: str, namespace: str, flag: str) -> str:
    if text.count("/") > 1 or not text.strip("/"):
        raise ConfigError(f"{flag} {text!r}: expected NAMESPACE/NAME or NAME")
    return text if "/" in text else f"{namespace}/{text}"


def _replay(
    scenario: Scenario,
    workload: Workload,
    features: Features,
    claim_key: str | None,
    pod_key: str | None,
) -> tuple[Simulation, WorkItem] | None:
    """The simulation as it stood just before the subject was placed, and the subject."""
    target: WorkItem | None = None
    if pod_key or claim_key:
        target = next(
            (item for item in workload.items if _is_subject(item, claim_key, pod_key)), None
        )
        if target is None:
            what = f"pod {pod_key}" if pod_key else f"ResourceClaim {claim_key}"
            raise ConfigError(f"no {what} in the files (after expanding workloads)")
    simulation = _simulation(scenario, workload, features)
    if target is not None:
        simulation.run(workload.items, stop_before=lambda item: item is target)
        return simulation, target
    # A placement that fails changes nothing, so the state after the first
    # failure is the state that item was tried against.
    for item in workload.items:
        if not simulation.place(item).placed:
            return simulation, item
    return None


def _is_subject(item: WorkItem, claim_key: str | None, pod_key: str | None) -> bool:
    if pod_key:
        return item.pod is not None and item.key == pod_key
    if item.pod is None:
        return f"{item.namespace}/{item.name}" == claim_key
    return any(claim.claim == claim_key for claim in item.claims)


def _from_cluster(
    spec: str,
    kubeconfig: str | None,
    claim_key: str | None,
    pod_key: str | None,
    features: Features,
) -> tuple[Simulation, WorkItem]:
    from dra_driver.scheduling.whatif.live import read_cluster

    pod_ref = tuple(pod_key.split("/", 1)) if pod_key else None
    objects = read_cluster(
        spec, kubeconfig=kubeconfig, pod=(pod_ref[0], pod_ref[1]) if pod_ref else None
    )
    claims = {
        f"{(c.get('metadata') or {}).get('namespace')}/{(c.get('metadata') or {}).get('name')}": c
        for c in objects.claims
    }
    classes = objects.classes or default_device_classes()
    # The cluster's channel claims and slices say which node serves which ComputeDomain
    # (named by UID: the domains themselves are not read).
    rules = DomainRules(domains=(), slices=objects.slices, claims=claims, features=features)
    simulation = Simulation(
        slices=objects.slices,
        classes=classes,
        nodes=objects.nodes,
        claims=claims,
        features=features,
        node_checks=rules,
        unfit_reasons=rules,
    )
    if pod_key and objects.pod is not None:
        namespace, name = pod_key.split("/", 1)
        pod_claims = [PodClaim(entry, key, False) for entry, key in objects.pod_claims]
        pod, problem = objects.pod, objects.pod_problem
        if not problem and features.extended_resource:
            pod, problem = attach_extended_resource_claim(
                pod,
                class_mapping(classes),
                simulation.claims,
                pod_claims,
                unserved_is_problem=False,
            )
        return simulation, WorkItem(namespace, name, pod, claims=tuple(pod_claims), problem=problem)
    assert claim_key is not None
    if claim_key not in claims:
        raise ConfigError(f"ResourceClaim {claim_key} not found in {spec}")
    namespace, name = claim_key.split("/", 1)
    return simulation, WorkItem(namespace, name, None)


def _explain(
    simulation: Simulation,
    item: WorkItem,
    claim_key: str | None,
    node: str | None,
    *,
    verbose: bool,
    out: TextIO,
) -> int:
    keys = simulation.claim_keys(item)
    if claim_key and item.pod is not None:
        keys = [key for key in keys if key == claim_key]
    subject = _subject(item)
    allocated = [
        AllocatedClaim(
            key, simulation.allocated_node(key), simulation.claims[key]["status"]["allocation"]
        )
        for key in keys
        if simulation.is_allocated(key)
    ]
    pending = [simulation.claims[key] for key in keys if not simulation.is_allocated(key)]
    problem = item.problem
    nodes: list[Node] = []
    if node:
        nodes = [n for n in simulation.nodes if n.name == node]
        if not nodes:
            names = ", ".join(n.name for n in simulation.nodes[:5])
            more = ", ..." if len(simulation.nodes) > 5 else ""
            raise ConfigError(f"--node {node}: no such node (nodes: {names}{more})")
    elif not problem:
        nodes, problem = simulation.candidate_nodes(item)
    diagnosis = None
    if pending and not problem:
        labels = {claim.claim: claim.name for claim in item.claims}
        diagnosis = simulation.diagnose(pending, nodes, labels=labels)
    refused = _refused(simulation, keys, pending, diagnosis)
    notes: list[str] = []
    rules = simulation.unfit_reasons
    if isinstance(rules, DomainRules) and diagnosis is not None and diagnosis.fitting:
        note = rules.clique_note(pending, diagnosis.fitting[0].node.name)
        if note:
            notes.append(note)
    out.write(
        render_report(
            subject=subject,
            claims=pending,
            allocated=allocated,
            diagnosis=diagnosis,
            diagnoser=simulation.diagnoser,
            verbose=verbose,
            problem=problem,
            refused=refused,
            notes=notes,
        )
    )
    if problem or refused or (diagnosis is not None and not diagnosis.fitting):
        return 1
    return 0


def _refused(
    simulation: Simulation,
    keys: Sequence[str],
    pending: Sequence[Obj],
    diagnosis: Diagnosis | None,
) -> tuple[str, str] | None:
    """(node, the plugin's error) when the node the subject lands on would refuse a claim:
    one refused already, or one of the allocations that fit on the first fitting node."""
    for key in keys:
        found = simulation.refused(key)
        if found is not None:
            return found
    checks = simulation.node_checks
    if checks is None or diagnosis is None or not diagnosis.fitting:
        return None
    first = diagnosis.fitting[0]
    for claim, allocation in zip(pending, first.results or [], strict=False):
        allocated = {**claim, "status": {**(claim.get("status") or {}), "allocation": allocation}}
        error = checks.refusal(first.node.name, allocated, commit=False)
        if error is not None:
            return first.node.name, error
    return None


def _subject(item: WorkItem) -> str:
    if item.pod is None:
        return f"ResourceClaim {item.namespace}/{item.name}"
    owner = f" (from {item.owner})" if item.owner else ""
    return f"Pod {item.namespace}/{item.name}{owner}"
