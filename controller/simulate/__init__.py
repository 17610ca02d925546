"""Offline scheduling: `dra-gpu simulate` and `dra-gpu explain`.

Users of DRA GPU drivers see pods Pending with "cannot allocate all claims"
and cannot ask "would this fit?" before deploying. This package answers both
questions with the project's port of kube-scheduler's structured allocator
(`dra_driver.allocator`): it places pods and claims from YAML files on
simulated nodes (published by our own node code) or on the slices a cluster
exports, and explains per node and device why a claim does not fit.

Why here, in `controller`, and not in `dra_driver`: a simulation builds the
ResourceSlices our publisher would publish, which `controller.slices` makes,
and it is a cluster-level tool like the publisher; `dra_driver` is the core
library that `controller` builds on and must not depend on it. The logic is
pure (`engine`, `diagnosis`, `claims`, `workloads`, `inputs`, `render`,
`explain`, `selector_text`); only `documents` (files), `nodes` (simulated
hardware), `default_classes` (the deploy file) and `live` (a cluster) read
anything, and `command` wires them to the CLI.
"""

from controller.simulate.command import load_scenario, parse_features, run_explain, run_simulate
from controller.simulate.diagnosis import Diagnoser, Diagnosis, NodeDiagnosis
from controller.simulate.engine import (
    ClaimOutcome,
    Placement,
    Simulation,
    WorkItem,
    Workload,
    build_workload,
)
from controller.simulate.render import placement_records

__all__ = [
    "ClaimOutcome",
    "Diagnoser",
    "Diagnosis",
    "NodeDiagnosis",
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
