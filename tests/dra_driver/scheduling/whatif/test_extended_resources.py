"""Extended resources through DRA (KEP-5004) in `simulate` and `explain`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from dra_driver.cli import main
from dra_driver.scheduling.allocator import Features
from dra_driver.scheduling.whatif.extended import (
    EXTENDED_RESOURCE_CLAIM_ANNOTATION,
    class_mapping,
    extended_resource_claim,
)

ROOT = Path(__file__).resolve().parents[4]
EXAMPLES = ROOT / "examples"
MIG_CLASS_EXPRESSION = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'mig' "
    "&& device.attributes['gpu.nvidia.com'].profile == '{profile}'"
)


def _pod(name: str, *containers: dict[str, Any], init: tuple[dict[str, Any], ...] = ()) -> Any:
    spec: dict[str, Any] = {"containers": list(containers)}
    if init:
        spec["initContainers"] = list(init)
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"namespace": "default", "name": name, "uid": f"uid-{name}"},
        "spec": spec,
    }


def _container(name: str, limits: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"name": name, "image": "busybox", "resources": {"limits": limits}, **extra}


def _mig_class(name: str, profile: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": f"mig-{profile}.nvidia.com"},
        "spec": {
            "extendedResourceName": name,
            "selectors": [{"cel": {"expression": MIG_CLASS_EXPRESSION.format(profile=profile)}}],
        },
    }


def _simulate(
    capsys: pytest.CaptureFixture[str], *args: str
) -> tuple[int, dict[str, dict[str, Any]]]:
    code = main(["simulate", *args, "-o", "yaml"])
    records = yaml.safe_load(capsys.readouterr().out)
    return code, {record["pod"]: record for record in records}


def _write(path: Path, *documents: Any) -> str:
    path.write_text(yaml.safe_dump_all(documents, sort_keys=False), encoding="utf-8")
    return str(path)


def _devices(record: dict[str, Any]) -> list[str]:
    return [result["device"] for claim in record["claims"] for result in claim["results"]]


# ---------------------------------------------------------------- the special claim


def test_request_names_follow_the_scheduler_container_and_sorted_resource_index() -> None:
    pod = _pod(
        "p",
        _container("a", {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": "2"}),
        _container("b", {"deviceclass.resource.kubernetes.io/mig.nvidia.com": 1, "cpu": "1"}),
    )
    mapping = class_mapping(
        [
            {
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"extendedResourceName": "nvidia.com/gpu"},
            },
            {"metadata": {"name": "mig.nvidia.com"}, "spec": {}},
        ]
    )

    made = extended_resource_claim(pod, mapping, taken={})

    assert made is not None
    meta = made.claim["metadata"]
    assert meta["generateName"] == "p-extended-resources-"
    assert meta["name"].startswith("p-extended-resources-")
    assert len(meta["name"]) == len("p-extended-resources-") + 5
    assert meta["annotations"] == {EXTENDED_RESOURCE_CLAIM_ANNOTATION: "true"}
    assert meta["ownerReferences"][0]["uid"] == "uid-p"
    assert meta["ownerReferences"][0]["controller"] is True
    # "a": cpu, memory, nvidia.com/gpu -> index 2; "b": cpu, deviceclass... -> index 1.
    assert made.claim["spec"]["devices"]["requests"] == [
        {
            "name": "container-0-request-2",
            "exactly": {
                "deviceClassName": "gpu.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 2,
            },
        },
        {
            "name": "container-1-request-1",
            "exactly": {
                "deviceClassName": "mig.nvidia.com",
                "allocationMode": "ExactCount",
                "count": 1,
            },
        },
    ]
    assert made.status == {
        "resourceClaimName": meta["name"],
        "requestMappings": [
            {
                "containerName": "b",
                "resourceName": "deviceclass.resource.kubernetes.io/mig.nvidia.com",
                "requestName": "container-1-request-1",
            },
            {
                "containerName": "a",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-2",
            },
        ],
    }


def test_init_containers_reuse_later_requests_and_share_the_largest_of_their_own() -> None:
    gpu = {"nvidia.com/gpu": 1}
    pod = _pod(
        "p",
        _container("main", {"nvidia.com/gpu": 2}),
        init=(
            _container("fits-in-main", gpu),
            _container("needs-three", {"nvidia.com/gpu": 3}),
            _container("sidecar", gpu, restartPolicy="Always"),
        ),
    )
    mapping = class_mapping(
        [
            {
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"extendedResourceName": "nvidia.com/gpu"},
            }
        ]
    )

    made = extended_resource_claim(pod, mapping, taken={})

    assert made is not None
    counts = {
        request["name"]: request["exactly"]["count"]
        for request in made.claim["spec"]["devices"]["requests"]
    }
    # Sidecar (index 2) and main (index 3) are long-lived; "needs-three" (index 1)
    # reuses the sidecar's 1 and main's 2 and needs nothing more.
    assert counts == {"container-2-request-0": 1, "container-3-request-0": 2}
    by_container: dict[str, list[str]] = {}
    for entry in made.status["requestMappings"]:
        by_container.setdefault(entry["containerName"], []).append(entry["requestName"])
    assert by_container == {
        "sidecar": ["container-2-request-0"],
        "main": ["container-3-request-0"],
        "fits-in-main": ["container-2-request-0"],
        "needs-three": ["container-2-request-0", "container-3-request-0"],
    }


def test_every_class_serves_its_implicit_name_and_its_extended_resource_name() -> None:
    mapping = class_mapping(
        [
            {
                "metadata": {"name": "gpu.nvidia.com"},
                "spec": {"extendedResourceName": "nvidia.com/gpu"},
            },
            {"metadata": {"name": "mig.nvidia.com"}, "spec": {}},
        ]
    )

    assert mapping == {
        "nvidia.com/gpu": "gpu.nvidia.com",
        "deviceclass.resource.kubernetes.io/gpu.nvidia.com": "gpu.nvidia.com",
        "deviceclass.resource.kubernetes.io/mig.nvidia.com": "mig.nvidia.com",
    }


def test_a_pod_without_extended_resources_gets_no_claim() -> None:
    pod = _pod("p", _container("a", {"cpu": "2", "hugepages-2Mi": "1Gi"}))

    assert extended_resource_claim(pod, {"nvidia.com/gpu": "gpu.nvidia.com"}, taken={}) is None


def test_the_special_claim_and_pod_status_validate_against_the_1_37_schema() -> None:
    pod = _pod("p", _container("a", {"nvidia.com/gpu": 2}))
    made = extended_resource_claim(pod, {"nvidia.com/gpu": "gpu.nvidia.com"}, taken={})
    assert made is not None

    kubernetes_validate.validate(made.claim, "1.37.0", strict=True)
    kubernetes_validate.validate(
        {**pod, "status": {"extendedResourceClaimStatus": made.status}}, "1.37.0", strict=True
    )


# ---------------------------------------------------------------- simulate and explain


def test_a_pod_asking_nvidia_com_gpu_2_gets_two_gpus_through_the_default_class(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "pod.yaml", _pod("p", _container("main", {"nvidia.com/gpu": 2})))

    code, pods = _simulate(capsys, "-f", path, "--nodes", "dgx-h100=1", "--kubernetes", "1.37")

    assert code == 0
    record = pods["default/p"]
    assert record["node"] == "dgx-h100-0"
    assert _devices(record) == ["gpu-0", "gpu-1"]
    claim_name = record["claims"][0]["claim"].partition("/")[2]
    assert record["extendedResourceClaimStatus"] == {
        "resourceClaimName": claim_name,
        "requestMappings": [
            {
                "containerName": "main",
                "resourceName": "nvidia.com/gpu",
                "requestName": "container-0-request-0",
            }
        ],
    }


def test_five_pods_of_two_gpus_on_eight_gpus_leave_the_fifth_unplaced_and_explain_says_why(
    capsys: pytest.CaptureFixture[str],
) -> None:
    example = str(EXAMPLES / "extended-resource-gpu.yaml")
    args = ["-f", example, "--nodes", "dgx-h100=1", "--kubernetes", "1.37"]

    code, pods = _simulate(capsys, *args)

    assert code == 1
    assert [pod for pod, record in pods.items() if not record["placed"]] == ["default/trainer-4"]
    placed = [device for record in pods.values() for device in _devices(record)]
    assert sorted(placed) == [f"gpu-{i}" for i in range(8)]

    assert main(["explain", *args]) == 1
    report = capsys.readouterr().out
    assert "Pod default/trainer-4" in report
    assert "request container-0-request-0: 2 x gpu.nvidia.com" in report
    assert "all 8 GPUs on dgx-h100-0 are taken by 4 claims" in report


def test_a_custom_mig_class_gets_a_1g_12gb_device_on_h100_nvl(
    capsys: pytest.CaptureFixture[str],
) -> None:
    shape = EXAMPLES / "shapes" / "h100-nvl-node.yaml"
    code, pods = _simulate(
        capsys,
        "-f",
        str(EXAMPLES / "extended-resource-mig.yaml"),
        "--nodes",
        f"{shape}=1",
        "--kubernetes",
        "1.37",
        "--mig",
        "dynamic",
    )

    assert code == 0
    (device,) = _devices(pods["default/small-inference"])
    assert device.startswith("gpu-0-mig-1g12gb-19-")


def test_on_an_h200_a_mig_class_gets_its_profile_and_1g_12gb_does_not_exist(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path / "h200.yaml",
        _mig_class("nvidia.com/mig-1g.18gb", "1g.18gb"),
        _mig_class("nvidia.com/mig-1g.12gb", "1g.12gb"),
        _pod("small", _container("main", {"nvidia.com/mig-1g.18gb": 1})),
        _pod("wrong-profile", _container("main", {"nvidia.com/mig-1g.12gb": 1})),
    )

    code, pods = _simulate(
        capsys, "-f", path, "--nodes", "dgx-h200=1", "--kubernetes", "1.37", "--mig", "dynamic"
    )

    assert code == 1
    (device,) = _devices(pods["default/small"])
    assert device.startswith("gpu-0-mig-1g18gb-19-")
    reason = pods["default/wrong-profile"]["reason"]
    assert "DeviceClass mig-1g.12gb.nvidia.com: no device satisfies" in reason
    assert "profile == '1g.12gb'" in reason


def test_the_implicit_class_name_serves_init_and_app_containers_from_one_request(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, pods = _simulate(
        capsys,
        "-f",
        str(EXAMPLES / "extended-resource-implicit.yaml"),
        "--nodes",
        "dgx-h200=1",
        "--kubernetes",
        "1.37",
        "--mig",
        "dynamic",
    )

    assert code == 0
    record = pods["default/any-mig"]
    assert len(_devices(record)) == 2
    mappings = record["extendedResourceClaimStatus"]["requestMappings"]
    assert {(m["containerName"], m["requestName"]) for m in mappings} == {
        ("main", "container-1-request-0"),
        ("warmup", "container-1-request-0"),
    }


def test_with_the_gate_off_the_pod_is_not_placed_and_the_reason_names_the_gate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "pod.yaml", _pod("p", _container("main", {"nvidia.com/gpu": 1})))

    code, pods = _simulate(capsys, "-f", path, "--nodes", "dgx-h100=1", "--kubernetes", "1.35")
    assert code == 1
    assert pods["default/p"]["reason"] == (
        "Insufficient nvidia.com/gpu: no simulated node has a device plugin for it and the "
        "DRAExtendedResource feature gate is off"
    )

    code, pods = _simulate(
        capsys,
        "-f",
        path,
        "--nodes",
        "dgx-h100=1",
        "--kubernetes",
        "1.35",
        "--feature-gates",
        "DRAExtendedResource=true",
    )
    assert code == 0
    assert _devices(pods["default/p"]) == ["gpu-0"]


def test_a_resource_no_class_maps_is_not_placed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path / "pod.yaml", _pod("p", _container("main", {"example.com/fpga": 1})))

    code, pods = _simulate(capsys, "-f", path, "--nodes", "dgx-h100=1", "--kubernetes", "1.37")

    assert code == 1
    assert pods["default/p"]["reason"].startswith(
        "Insufficient example.com/fpga: no simulated node has a device plugin for it and no "
        "DeviceClass has it as extendedResourceName"
    )


def test_a_bad_quantity_names_the_pod(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _write(tmp_path / "pod.yaml", _pod("p", _container("main", {"nvidia.com/gpu": "x"})))

    code, pods = _simulate(capsys, "-f", path, "--nodes", "dgx-h100=1", "--kubernetes", "1.37")

    assert code == 1
    assert pods["default/p"]["reason"].startswith("Pod default/p: container resources:")


# ---------------------------------------------------------------- releases


@pytest.mark.parametrize(
    ("release", "on"),
    [
        ("1.34", {"admin_access", "prioritized_list", "partitionable_devices", "device_taints"}),
        ("1.35", {"admin_access", "prioritized_list", "partitionable_devices", "device_taints"}),
        (
            "1.36",
            {
                "admin_access",
                "prioritized_list",
                "partitionable_devices",
                "device_taints",
                "consumable_capacity",
                "device_binding_conditions",
                "extended_resource",
            },
        ),
        (
            "1.37",
            {
                "admin_access",
                "prioritized_list",
                "partitionable_devices",
                "device_taints",
                "consumable_capacity",
                "device_binding_conditions",
                "extended_resource",
            },
        ),
    ],
)
def test_each_release_has_its_scheduler_gate_defaults(release: Any, on: set[str]) -> None:
    features = Features.for_release(release)
    gates = {name for name in Features.__slots__ if isinstance(getattr(features, name), bool)}

    assert {name for name in gates if getattr(features, name)} == on
    assert features.release == release
