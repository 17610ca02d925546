"""ResourceClaim builders: allocated claims and opaque configs, shaped like the API returns them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from dra_driver import DEFAULT_DRIVER_NAME

TEST_DRIVER = DEFAULT_DRIVER_NAME
TEST_POOL = "sim-node"
TEST_CLAIM_UID = "0b7cf0d2-5d1e-4c61-9a0e-3f5a1c2b7d90"  # starts with a digit, like many UIDs


def make_opaque_config(
    parameters: Mapping[str, Any],
    *,
    requests: Sequence[str] = (),
    source: str = "FromClaim",
    driver: str = TEST_DRIVER,
) -> dict[str, Any]:
    """One `status.allocation.devices.config[]` entry with an opaque config."""
    entry: dict[str, Any] = {
        "source": source,
        "opaque": {"driver": driver, "parameters": dict(parameters)},
    }
    if requests:
        entry["requests"] = list(requests)
    return entry


def make_allocated_claim(
    name: str = "claim-1",
    namespace: str = "default",
    uid: str = TEST_CLAIM_UID,
    results: Sequence[tuple[str, str] | Mapping[str, Any]] = (("gpu", "gpu-0"),),
    *,
    driver: str = TEST_DRIVER,
    pool: str = TEST_POOL,
    configs: Sequence[Mapping[str, Any]] = (),
    device_class: str = "gpu.nvidia.com",
) -> dict[str, Any]:
    """An allocated resource.k8s.io/v1 ResourceClaim as the API server returns it.

    `results` are `(request, device)` pairs for `driver`/`pool`, or dicts
    merged over those defaults for anything else (another driver,
    `adminAccess`, `shareID`, `consumedCapacity`, a "req/sub" request).
    `configs` are raw config entries (see `make_opaque_config`). The spec
    gets one request per base request name: `exactly`, or `firstAvailable`
    listing the subrequests the results name.
    """
    result_list: list[dict[str, Any]] = []
    for item in results:
        base = {"driver": driver, "pool": pool}
        if isinstance(item, tuple):
            request, device = item
            result_list.append({"request": request, **base, "device": device})
        else:
            result_list.append({**base, **item})
    # request -> subrequest ("" for none) -> device count
    counts: dict[str, dict[str, int]] = {}
    for r in result_list:
        base_request, _, sub = str(r.get("request", "")).partition("/")
        per_sub = counts.setdefault(base_request, {})
        per_sub[sub] = per_sub.get(sub, 0) + 1

    def spec_request(req: str, per_sub: dict[str, int]) -> dict[str, Any]:
        if "" in per_sub:
            return {"name": req, "exactly": {"deviceClassName": device_class, "count": per_sub[""]}}
        return {
            "name": req,
            "firstAvailable": [
                {"name": sub, "deviceClassName": device_class, "count": n}
                for sub, n in per_sub.items()
            ],
        }

    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {
            "name": name,
            "namespace": namespace,
            "uid": uid,
            "resourceVersion": "1",
            "finalizers": ["resource.kubernetes.io/delete-protection"],
        },
        "spec": {
            "devices": {"requests": [spec_request(req, per_sub) for req, per_sub in counts.items()]}
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": result_list,
                    "config": [dict(c) for c in configs],
                },
                "nodeSelector": {
                    "nodeSelectorTerms": [
                        {
                            "matchFields": [
                                {"key": "metadata.name", "operator": "In", "values": [pool]}
                            ]
                        }
                    ]
                },
            },
        },
    }
