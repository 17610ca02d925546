"""--device-metadata (KEP-5304) on the real plugin: files written, mounted through CDI, removed.

The plugin runs on a simulated dgx-h100 with dynamic MIG. A claim from a
template (annotation `resource.kubernetes.io/pod-claim-name`) with a
`firstAvailable` request and a dynamic MIG device, and a directly named claim
sharing a GPU through MPS, are prepared: each request gets a metadata file
that validates against the upstream schema and carries the live MIG UUID,
and a CDI spec that mounts it read-only at the upstream container path,
whose id the first device of the request returns.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from dra_driver.container import cdi
from dra_driver.container import device_metadata as meta
from kubelet_plugin.main import plugin_data_dir
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess, make_allocated_claim, make_opaque_config

pytestmark = pytest.mark.slow

SCHEMA = json.loads(
    (Path(__file__).parents[1] / "dra_driver/container/device_metadata.schema.json").read_text()
)
DRIVER = "gpu.nvidia.com"
TEMPLATED_UID = "71d9e0a4-2c3b-4f8e-b5a6-0e9d8c7b6a54"
DIRECT_UID = "3f0c5b1e-8a57-4c5e-9d1b-2a6f7e0c4d21"
MIG = "gpu-2-mig-1g10gb-19-0"


@pytest.fixture(scope="module")
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(extra_args=["--dynamic-mig", "--device-metadata"]) as running:
        templated = make_allocated_claim(
            "trainer-0-gpus-x7k2p",
            "ml",
            TEMPLATED_UID,
            [("gpus/large", "gpu-0"), ("gpus/large", "gpu-1"), ("slice", MIG)],
        )
        templated["metadata"]["annotations"] = {meta.POD_CLAIM_NAME_ANNOTATION: "gpus"}
        direct = make_allocated_claim(
            "notebook",
            "ml",
            DIRECT_UID,
            [
                {
                    "request": "gpu",
                    "device": "gpu-5",
                    "shareID": "0d5c7e9a-1b3f-4d6e-8a0c-00000000000a",
                }
            ],
            configs=[
                make_opaque_config(
                    {
                        "apiVersion": "resource.nvidia.com/v1beta1",
                        "kind": "GpuConfig",
                        "sharing": {"strategy": "MPS"},
                    }
                )
            ],
        )
        running.store_claim(templated)
        running.store_claim(direct)
        yield running


def _host_file(plugin: PluginProcess, claim: str, request: str) -> Path:
    data_dir = plugin_data_dir(plugin.kubelet_root, plugin.driver)
    return meta.host_file(data_dir, "ml", claim, request)


def _read(path: Path) -> dict[str, Any]:
    (obj,) = meta.decode_stream(path.read_bytes())
    jsonschema.validate(obj, SCHEMA)
    return obj


def _spec(plugin: PluginProcess, uid: str, request: str) -> dict[str, Any]:
    spec: dict[str, Any] = json.loads(
        (plugin.cdi_root / meta.cdi_spec_file_name(DRIVER, uid, request)).read_text()
    )
    cdi.validate_spec(spec)
    return spec


def test_each_request_gets_a_mounted_metadata_file(plugin: PluginProcess) -> None:
    ref = ClaimRef("ml", TEMPLATED_UID, "trainer-0-gpus-x7k2p")
    result = plugin.client.prepare([ref])[TEMPLATED_UID]
    assert not result.error
    ids = {d.device_name: d.cdi_device_ids for d in result.devices}
    metadata_id = f"{DRIVER}/metadata={TEMPLATED_UID}_gpus"
    # The first device of each request carries the request's metadata device.
    assert metadata_id in ids["gpu-0"]
    assert metadata_id not in ids["gpu-1"]
    assert f"{DRIVER}/metadata={TEMPLATED_UID}_slice" in ids[MIG]

    gpus = _read(_host_file(plugin, "trainer-0-gpus-x7k2p", "gpus"))
    assert gpus["metadata"] == {
        "name": "trainer-0-gpus-x7k2p",
        "namespace": "ml",
        "uid": TEMPLATED_UID,
        "generation": 1,
    }
    assert gpus["podClaimName"] == "gpus"
    (request,) = gpus["requests"]
    assert request["name"] == "gpus/large"  # the subrequest stays in the content
    assert [d["name"] for d in request["devices"]] == ["gpu-0", "gpu-1"]
    nvml_gpus = {g.minor: g.uuid for g in plugin.hardware().nvml.gpus()}
    assert request["devices"][0]["attributes"]["uuid"] == {"string": nvml_gpus[0]}
    assert "resource.kubernetes.io/pciBusID" in request["devices"][0]["attributes"]

    mig = _read(_host_file(plugin, "trainer-0-gpus-x7k2p", "slice"))["requests"][0]["devices"][0]
    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    record = next(d.mig for d in checkpoint.claims[TEMPLATED_UID].devices if d.device == MIG)
    assert record is not None
    assert mig["attributes"]["uuid"] == {"string": record.uuid}  # the live MIG UUID

    (device,) = _spec(plugin, TEMPLATED_UID, "gpus")["devices"]
    (mount,) = device["containerEdits"]["mounts"]
    assert mount == {
        "hostPath": str(_host_file(plugin, "trainer-0-gpus-x7k2p", "gpus")),
        "containerPath": "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/"
        "gpus/gpus/gpu.nvidia.com-metadata.json",
        "options": ["ro", "bind"],
    }


def test_an_mps_client_learns_its_pipe_directory(plugin: PluginProcess) -> None:
    ref = ClaimRef("ml", DIRECT_UID, "notebook")
    assert not plugin.client.prepare([ref])[DIRECT_UID].error
    obj = _read(_host_file(plugin, "notebook", "gpu"))
    assert "podClaimName" not in obj
    attributes = obj["requests"][0]["devices"][0]["attributes"]
    assert attributes["mpsPipeDirectory"] == {"string": "/tmp/nvidia-mps"}
    (device,) = _spec(plugin, DIRECT_UID, "gpu")["devices"]
    assert device["containerEdits"]["mounts"][0]["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/notebook/gpu/"
        "gpu.nvidia.com-metadata.json"
    )


def test_the_generation_rises_on_an_update_and_unprepare_removes_everything(
    plugin: PluginProcess,
) -> None:
    ref = ClaimRef("ml", DIRECT_UID, "notebook")
    assert not plugin.client.prepare([ref])[DIRECT_UID].error
    path = _host_file(plugin, "notebook", "gpu")
    assert _read(path)["metadata"]["generation"] == 1
    assert not plugin.client.prepare([ref])[DIRECT_UID].error  # the same: untouched
    assert _read(path)["metadata"]["generation"] == 1
    stale = _read(path)
    stale["requests"][0]["devices"][0]["attributes"]["uuid"] = {"string": "GPU-stale"}
    path.write_bytes(meta.encode_stream([stale]))
    assert not plugin.client.prepare([ref])[DIRECT_UID].error  # the content changes back
    updated = _read(path)
    assert updated["metadata"]["generation"] == 2
    assert updated["requests"][0]["devices"][0]["attributes"]["uuid"] != {"string": "GPU-stale"}

    refs = [ref, ClaimRef("ml", TEMPLATED_UID, "trainer-0-gpus-x7k2p")]
    answers = plugin.client.unprepare(refs)
    assert all(not answer.error for answer in answers.values())
    assert not [n for n in plugin.cdi_files() if n.startswith(f"{DRIVER}_metadata_")]
    data_dir = plugin_data_dir(plugin.kubelet_root, plugin.driver)
    assert list((data_dir / "dra-device-metadata").iterdir()) == []
