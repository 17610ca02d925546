"""The ResourceClaims `dra-gpu demo` schedules, written as an ML engineer would.

Two pods' claims, a training job that wants two H100s and a notebook that
wants one GPU (`demo_claims`), and a claim for MIG slices by profile
(`mig_profile_claim`), which the demo's dynamic-MIG step uses. They are
unallocated, as the ResourceClaim controller creates them; the demo
allocates them as kube-scheduler would.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.kube.objects import Obj, ResourceClaim

MIG_DEVICE_CLASS: Final = "mig.nvidia.com"
PARENT_UUID_ATTRIBUTE: Final = f"{DEFAULT_DRIVER_NAME}/parentUUID"


def demo_claims() -> list[ResourceClaim]:
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


def mig_profile_claim(
    name: str,
    uid: str,
    profiles: Sequence[str],
    *,
    namespace: str = "default",
    same_gpu: bool = True,
) -> ResourceClaim:
    """An unallocated ResourceClaim with one `mig.nvidia.com` request per entry of
    `profiles` (named `mig-<i>`), each selecting
    `device.attributes['gpu.nvidia.com'].profile == '<profile>'`; with `same_gpu`
    a `matchAttribute: gpu.nvidia.com/parentUUID` constraint puts them on one GPU."""
    requests = [
        {
            "name": f"mig-{index}",
            "exactly": {
                "deviceClassName": MIG_DEVICE_CLASS,
                "selectors": [
                    {
                        "cel": {
                            "expression": f"device.attributes['{DEFAULT_DRIVER_NAME}']"
                            f".profile == '{profile}'"
                        }
                    }
                ],
            },
        }
        for index, profile in enumerate(profiles)
    ]
    devices: dict[str, Any] = {"requests": requests}
    if same_gpu:
        devices["constraints"] = [{"matchAttribute": PARENT_UUID_ATTRIBUTE}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid},
        "spec": {"devices": devices},
    }


def _claim(namespace: str, name: str, uid: str, requests: list[Obj]) -> ResourceClaim:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": namespace, "name": name, "uid": uid},
        "spec": {"devices": {"requests": requests}},
    }
