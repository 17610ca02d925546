"""The claims `dra-gpu demo` schedules, and how they get allocated.

Two pods' claims, written as an ML engineer would: a training job that
wants two H100s, and a notebook that wants one GPU. In a cluster the
scheduler fills `status.allocation`; the demo does it here.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME

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
    """Fill `status.allocation` of each claim with free whole GPUs, first fit.

    Returns the allocated claims and a sentence saying how it was done.
    """
    del classes  # the first-fit below only hands out whole GPUs of this node
    free = [
        (s["spec"]["pool"]["name"], device["name"])
        for s in slices
        for device in s["spec"]["devices"]
        if device["attributes"].get("type", {}).get("string") == "gpu"
    ]
    allocated: list[Obj] = []
    for claim in claims:
        results = []
        for request in claim["spec"]["devices"]["requests"]:
            for _ in range(int(request["exactly"].get("count", 1))):
                pool, device = free.pop(0)
                results.append(
                    {
                        "request": request["name"],
                        "driver": DEFAULT_DRIVER_NAME,
                        "pool": pool,
                        "device": device,
                    }
                )
        done = copy.deepcopy(claim)
        done["status"] = {
            "allocation": {
                "devices": {"results": results},
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [node]}
                            ]
                        }
                    ]
                },
            }
        }
        allocated.append(done)
    return allocated, (
        "the demo picks free whole GPUs itself, first fit (the scheduler-compatible "
        "allocator replaces this step once it exists)"
    )


def _claim(namespace: str, name: str, uid: str, requests: list[Obj]) -> Obj:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": requests}},
    }
