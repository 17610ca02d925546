"""Allocate claims on one node, one after another, as kube-scheduler would.

In a cluster kube-scheduler fills `status.allocation`; `dra-gpu demo` has no
scheduler, so it runs the same algorithm, the project's port of the
scheduler's structured allocator, against the ResourceSlices the plugin
published and the DeviceClasses in the store. A claim that does not fit gets
the reason `dra-gpu explain` would give (`diagnosis.Diagnoser`). It lives
with the simulator because it is scheduling; the CLI hands it to the demo,
so the daemon's package does not import the simulator.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver.errors import AllocationError
from dra_driver.kube.objects import Obj
from dra_driver.scheduling.allocator import AllocatedState, Allocator, Node, claim_key
from dra_driver.scheduling.whatif.diagnosis import Diagnoser


def allocate_on_node(
    claims: Sequence[Mapping[str, Any]],
    slices: Sequence[Obj],
    classes: Sequence[Obj],
    node: str,
) -> tuple[list[Obj], str]:
    """Allocate the claims one after another on `node`, as kube-scheduler would.

    Uses `dra_driver.scheduling.allocator` (the project's port of the scheduler's
    structured allocator) over the published `slices` and the `classes` from the
    store; each allocation is recorded before the next claim is tried, so no
    device is handed out twice. Returns the claims with `status.allocation` and
    a sentence saying how it was done. Raises AllocationError, with the reason
    `dra-gpu explain` would give, if a claim does not fit.
    """
    state = AllocatedState()
    allocator = Allocator(slices, classes, allocated=state)
    target = Node(node, {"kubernetes.io/hostname": node})
    allocated: list[Obj] = []
    for claim in claims:
        results = allocator.allocate(target, [claim])
        if results is None:
            why = Diagnoser(allocator, classes, state).diagnose([dict(claim)], [target]).summary
            raise AllocationError(
                f"ResourceClaim {claim_key(claim)} does not fit on node {node}: {why}"
            )
        done = copy.deepcopy(dict(claim))
        done["status"] = {"allocation": results[0]}
        state.add(done)
        allocated.append(done)
    slice_count = f"{len(slices)} ResourceSlice{'' if len(slices) == 1 else 's'}"
    class_count = f"{len(classes)} DeviceClass{'' if len(classes) == 1 else 'es'}"
    return allocated, (
        "kube-scheduler's structured allocator (dra_driver.scheduling.allocator) places them "
        f"one after the other, first fit, on the {slice_count} the plugin published and the "
        f"{class_count} in the store"
    )
