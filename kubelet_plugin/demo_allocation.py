"""The claims `dra-gpu demo` schedules, and how they get allocated.

Two pods' claims, written as an ML engineer would: a training job that
wants two H100s, and a notebook that wants one GPU. In a cluster
kube-scheduler fills `status.allocation`; the demo runs the same algorithm,
the project's port of the scheduler's structured allocator, against the
ResourceSlices the plugin published and the DeviceClasses in the store.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from dra_driver.allocator import AllocatedState, Allocator, Node, claim_key
from dra_driver.errors import AllocationError
from dra_driver.simulate.diagnosis import Diagnoser

Obj = dict[str, Any]


def demo_claims() -> list[Obj]:
    """The demo's ResourceClaims, unallocated (as the ResourceClaim controller creates them)."""
    return [
        _claim(
            "ml-team",
            "trainer-gpus",
            "3f0c5b1e-8a57-4c5e-9d1b-2a6f7e0c4d21",
            [
                {
                    "name": "gpus",
                    "exactly": {
                        "deviceClassName": "gpu.nvidia.com",
                        "count": 2,
                        "selectors": [
                            {
                                "cel": {
                                    "expression": "device.attributes['gpu.nvidia.com']"
                                    ".productName.lowerAscii().matches('^.*h100.*$')"
                                }
                            }
                        ],
                    },
                }
            ],
        ),
        _claim(
            "ml-team",
            "notebook-gpu",
            "71d9e0a4-2c3b-4f8e-b5a6-0e9d8c7b6a54",
            [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
        ),
    ]


def allocate_demo_claims(
    claims: Sequence[Obj], slices: Sequence[Obj], classes: Sequence[Obj], node: str
) -> tuple[list[Obj], str]:
    """Allocate the claims one after another on `node`, as kube-scheduler would.

    Uses `dra_driver.allocator` (the project's port of the scheduler's
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
            why = Diagnoser(allocator, classes, state).diagnose([claim], [target]).summary
            raise AllocationError(
                f"ResourceClaim {claim_key(claim)} does not fit on node {node}: {why}"
            )
        done = copy.deepcopy(claim)
        done["status"] = {"allocation": results[0]}
        state.add(done)
        allocated.append(done)
    slice_count = f"{len(slices)} ResourceSlice{'' if len(slices) == 1 else 's'}"
    class_count = f"{len(classes)} DeviceClass{'' if len(classes) == 1 else 'es'}"
    return allocated, (
        "kube-scheduler's structured allocator (dra_driver.allocator) places them one after "
        f"the other, first fit, on the {slice_count} the plugin published and the "
        f"{class_count} in the store"
    )


def _claim(namespace: str, name: str, uid: str, requests: list[Obj]) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": requests}},
    }
