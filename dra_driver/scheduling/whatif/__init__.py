"""Offline scheduling: `dra-gpu simulate` and `dra-gpu explain`.

Users of DRA GPU drivers see pods Pending with "cannot allocate all claims"
and cannot ask "would this fit?" before deploying. This package answers both
questions with the project's port of kube-scheduler's structured allocator
(`dra_driver.scheduling.allocator`): it places pods and claims from YAML files on
simulated nodes (published by our own node code) or on the slices a cluster
exports, and explains per node and device why a claim does not fit.

It sits beside the allocator in the core: it is the allocator's driver
loop, and it imports nothing from `controller` or `kubelet_plugin`. The one
piece that needs the controller, building the slices of simulated nodes, is
handed in by the CLI (`nodes.NodeBuilder`, made by
`dra_driver.composition.simulated_nodes`). The logic is pure (`engine`, `diagnosis`,
`claims`, `workloads`, `inputs`, `render`, `explain`, `selector_text`,
`nodes`); only `documents` (files) and
`live` (a cluster) read anything, and `command` wires them to the CLI.
"""

from dra_driver.scheduling.whatif.command import (
    ScenarioOptions,
    load_scenario,
    parse_features,
    run_explain,
    run_simulate,
)
from dra_driver.scheduling.whatif.diagnosis import Diagnoser, Diagnosis, NodeDiagnosis
from dra_driver.scheduling.whatif.engine import (
    ClaimOutcome,
    Placement,
    Simulation,
    WorkItem,
    Workload,
    build_workload,
)
from dra_driver.scheduling.whatif.render import placement_records

__all__ = [
    "ClaimOutcome",
    "Diagnoser",
    "Diagnosis",
    "NodeDiagnosis",
    "ScenarioOptions",
    "Placement",
    "Simulation",
    "WorkItem",
    "Workload",
    "build_workload",
    "load_scenario",
    "parse_features",
    "placement_records",
    "run_explain",
    "run_simulate",
]
