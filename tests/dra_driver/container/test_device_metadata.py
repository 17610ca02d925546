"""KEP-5304 device metadata: the upstream paths, stream format and CDI spec, and the generation."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dra_driver.container import cdi
from dra_driver.container import device_metadata as meta

SCHEMA = json.loads((Path(__file__).parent / "device_metadata.schema.json").read_text())
DRIVER = "gpu.nvidia.com"
DIRECT = meta.ClaimIdentity("ml", "train", "3f0c5b1e-8a57-4c5e-9d1b-2a6f7e0c4d21", None)
TEMPLATED = meta.ClaimIdentity("ml", "trainer-0-gpus-x7k2p", "71d9e0a4-2c3b-4f8e", "gpus")


def _device(name: str = "gpu-0") -> meta.MetadataDevice:
    return meta.MetadataDevice(
        driver=DRIVER,
        pool="node-1",
        name=name,
        attributes={
            "uuid": {"string": "GPU-a2b56268-9156-5930-a747-ffec552f8b3a"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:1b:00.0"},
            "driverVersion": {"version": "570.124.6"},
            "index": {"int": 0},
        },
    )


def test_the_object_validates_against_the_upstream_schema() -> None:
    for claim, request in ((DIRECT, "gpu"), (TEMPLATED, "gpus/large")):
        obj = meta.device_metadata(claim, request, [_device()], generation=1)
        jsonschema.validate(obj, SCHEMA)
        assert obj["requests"][0]["name"] == request  # subrequest kept in the content
    assert "podClaimName" not in meta.device_metadata(DIRECT, "gpu", [_device()], 1)
    assert meta.device_metadata(TEMPLATED, "gpu", [_device()], 1)["podClaimName"] == "gpus"


def test_the_upstream_example_line_validates_too() -> None:
    """The schema is not shaped after our output: upstream's own example passes it."""
    line = (
        '{"apiVersion":"metadata.resource.k8s.io/v1alpha1","kind":"DeviceMetadata","metadata":'
        '{"name":"my-claim","namespace":"default","uid":"uid-1234","generation":1},"requests":'
        '[{"name":"gpu","devices":[{"driver":"gpu.example.com","pool":"worker-0","name":"gpu-0",'
        '"attributes":{"model":{"string":"LATEST-GPU-MODEL"},"driverVersion":{"version":"1.0.0"},'
        '"type":{"string":"gpu"}}}]}]}'
    )
    jsonschema.validate(json.loads(line), SCHEMA)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate({**json.loads(line), "requestz": []}, SCHEMA)


def test_paths_follow_upstream() -> None:
    data = Path("/var/lib/kubelet/plugins/gpu.nvidia.com")
    assert meta.host_file(data, "ml", "train", "gpus/large") == Path(
        "/var/lib/kubelet/plugins/gpu.nvidia.com/dra-device-metadata/ml_train/gpus/metadata.json"
    )
    assert meta.container_file(DRIVER, DIRECT, "gpu") == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/train/gpu/"
        "gpu.nvidia.com-metadata.json"
    )
    assert meta.container_file(DRIVER, TEMPLATED, "gpus/large") == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpus/gpus/"
        "gpu.nvidia.com-metadata.json"
    )
    assert meta.cdi_spec_file_name(DRIVER, DIRECT.uid, "gpus/large") == (
        f"gpu.nvidia.com_metadata_{DIRECT.uid}_gpus.json"
    )
    assert (
        meta.cdi_device_id(DRIVER, DIRECT.uid, "gpu") == f"gpu.nvidia.com/metadata={DIRECT.uid}_gpu"
    )


def test_the_cdi_spec_mounts_the_file_read_only() -> None:
    host = Path("/k/dra-device-metadata/ml_train/gpu/metadata.json")
    spec = meta.cdi_spec(DRIVER, DIRECT, "gpu", host)
    cdi.validate_spec(spec)
    assert (spec["cdiVersion"], spec["kind"]) == ("0.5.0", "gpu.nvidia.com/metadata")
    (device,) = spec["devices"]
    assert device["name"] == f"{DIRECT.uid}_gpu"
    assert device["containerEdits"]["mounts"] == [
        {
            "hostPath": str(host),
            "containerPath": meta.container_file(DRIVER, DIRECT, "gpu"),
            "options": ["ro", "bind"],
        }
    ]


def test_the_stream_is_one_pretty_object_per_version_each_on_its_own_lines() -> None:
    obj = meta.device_metadata(DIRECT, "gpu", [_device()], generation=3)
    newer = {**obj, "apiVersion": "metadata.resource.k8s.io/v1beta1"}
    data = meta.encode_stream([newer, obj])
    assert data.endswith(b"}\n")
    assert b'\n  "apiVersion"' in data  # pretty-printed, as the helper's serializer writes it
    assert meta.decode_stream(data) == [newer, obj]
    with pytest.raises(ValueError, match="JSON objects only"):
        meta.decode_stream(b"[1]")


def _stream(obj: dict[str, Any]) -> bytes:
    return meta.encode_stream([obj])


def test_the_generation_rises_only_when_the_content_changes() -> None:
    first = meta.device_metadata(DIRECT, "gpu", [_device()], generation=1)
    assert meta.next_generation(None, first) == 1
    assert meta.next_generation(_stream(first), first) is None  # a repeated Prepare
    changed = meta.device_metadata(DIRECT, "gpu", [_device("gpu-1")], generation=1)
    assert meta.next_generation(_stream(first), changed) == 2
    at_seven = meta.device_metadata(DIRECT, "gpu", [_device()], generation=7)
    assert meta.next_generation(_stream(at_seven), changed) == 8
    assert meta.next_generation(b"not json", first) == 1
