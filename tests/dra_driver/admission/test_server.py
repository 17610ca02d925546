"""`dra-gpu webhook` over real HTTPS, as the API server calls it.

One webhook process (the command a Deployment runs) serves the whole module
with a test CA's certificate; every test sends AdmissionReviews or abuse and
then checks that it still answers, and the last ones check its log (one line
per refusal, naming the object), a certificate renewed on disk, and SIGTERM.
"""

from __future__ import annotations

import copy
import http.client
import json
import signal
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest
import trustme

API: Final = "resource.nvidia.com/v1beta1"
PATH: Final = "/validate-resource-claim-parameters?timeout=10s"  # as kube-apiserver calls it


@dataclass
class Webhook:
    process: subprocess.Popen[bytes]
    port: int
    ca: trustme.CA
    log: Path
    cert_file: Path
    key_file: Path

    def connection(self, ca: trustme.CA | None = None) -> http.client.HTTPSConnection:
        context = ssl.create_default_context()
        (ca or self.ca).configure_trust(context)
        return http.client.HTTPSConnection("127.0.0.1", self.port, context=context, timeout=10)

    def post(self, body: bytes, content_type: str = "application/json") -> tuple[int, bytes]:
        connection = self.connection()
        try:
            connection.request("POST", PATH, body=body, headers={"Content-Type": content_type})
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def review(self, obj: dict[str, Any], **request: Any) -> dict[str, Any]:
        status, body = self.post(json.dumps(admission_review(obj, **request)).encode())
        assert status == 200, body
        answer = json.loads(body)
        assert answer["apiVersion"] == "admission.k8s.io/v1"
        assert answer["kind"] == "AdmissionReview"
        assert answer["response"]["uid"] == request.get("uid", "uid-1")
        response: dict[str, Any] = answer["response"]
        return response

    def ready(self) -> bool:
        connection = self.connection()
        try:
            connection.request("GET", "/readyz")
            response = connection.getresponse()
            return response.status == 200 and response.read() == b"ok"
        finally:
            connection.close()


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _write_certificate(ca: trustme.CA, cert_file: Path, key_file: Path) -> None:
    cert = ca.issue_cert("127.0.0.1", "localhost")
    key_file.write_bytes(cert.private_key_pem.bytes())
    cert_file.write_bytes(b"".join(blob.bytes() for blob in cert.cert_chain_pems))


@pytest.fixture(scope="module")
def webhook(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Webhook]:
    directory = tmp_path_factory.mktemp("webhook")
    ca = trustme.CA()
    cert_file, key_file = directory / "tls.crt", directory / "tls.key"
    _write_certificate(ca, cert_file, key_file)
    log = directory / "webhook.log"
    port = _free_port()
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "dra_driver.cli", "webhook",
             "--tls-cert-file", str(cert_file), "--tls-private-key-file", str(key_file),
             "--port", str(port)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    hook = Webhook(process, port, ca, log, cert_file, key_file)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert process.poll() is None, log.read_text()
            try:
                if hook.ready():
                    break
            except OSError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        yield hook
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()


@pytest.fixture(autouse=True)
def keeps_serving(webhook: Webhook) -> Iterator[None]:
    yield
    assert webhook.process.poll() is None, webhook.log.read_text()
    assert webhook.ready()


def admission_review(
    obj: dict[str, Any] | None,
    *,
    uid: str = "uid-1",
    resource: str = "resourceclaims",
    version: str = "v1",
    operation: str = "CREATE",
    old: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """An AdmissionReview as kube-apiserver sends it to a validating webhook."""
    kind = {"resourceclaims": "ResourceClaim", "resourceclaimtemplates": "ResourceClaimTemplate"}
    metadata = (obj or {}).get("metadata", {})
    request: dict[str, Any] = {
        "uid": uid,
        "kind": {"group": "resource.k8s.io", "version": version, "kind": kind.get(resource, "")},
        "resource": {"group": "resource.k8s.io", "version": version, "resource": resource},
        "requestKind": {"group": "resource.k8s.io", "version": version, "kind": kind.get(resource)},
        "requestResource": {"group": "resource.k8s.io", "version": version, "resource": resource},
        "name": metadata.get("name", ""),
        "namespace": metadata.get("namespace", "default"),
        "operation": operation,
        "userInfo": {"username": "kubernetes-admin", "groups": ["kubeadm:cluster-admins"]},
        "object": obj,
        "oldObject": old,
        "dryRun": False,
        "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
    }
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}


def claim(
    name: str,
    parameters: dict[str, Any] | None = None,
    *,
    device_class: str = "gpu.nvidia.com",
    count: int = 1,
    driver: str = "gpu.nvidia.com",
) -> dict[str, Any]:
    devices: dict[str, Any] = {
        "requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class, "count": count}}]
    }
    if parameters is not None:
        devices["config"] = [
            {"requests": ["gpu"], "opaque": {"driver": driver, "parameters": parameters}}
        ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"devices": devices},
    }


def template(name: str, parameters: dict[str, Any]) -> dict[str, Any]:
    inner = claim(name, parameters)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": inner["metadata"],
        "spec": {"spec": inner["spec"]},
    }


def mps(**settings: Any) -> dict[str, Any]:
    sharing: dict[str, Any] = {"strategy": "MPS"}
    if settings:
        sharing["mpsConfig"] = settings
    return {"apiVersion": API, "kind": "GpuConfig", "sharing": sharing}


# ---------------------------------------------------------------- allowed


def test_readyz_answers_ok(webhook: Webhook) -> None:
    assert webhook.ready()


def test_a_valid_claim_is_allowed(webhook: Webhook) -> None:
    config = {
        "apiVersion": API,
        "kind": "GpuConfig",
        "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}},
    }
    response = webhook.review(claim("good", config))
    assert response == {"uid": "uid-1", "allowed": True}
    assert webhook.review(claim("good-mps", mps(defaultActiveThreadPercentage=50)))["allowed"]
    assert webhook.review(claim("no-config"))["allowed"]


def test_a_claim_for_another_driver_is_allowed_untouched(webhook: Webhook) -> None:
    garbage = {"apiVersion": "gpu.example.com/v1", "kind": "Whatever", "sharing": "nope"}
    response = webhook.review(claim("other", garbage, driver="gpu.example.com"))
    assert response == {"uid": "uid-1", "allowed": True}


def test_a_valid_template_is_allowed(webhook: Webhook) -> None:
    response = webhook.review(template("tmpl-good", mps()), resource="resourceclaimtemplates")
    assert response["allowed"]


# ---------------------------------------------------------------- refused


BAD_CONFIGS: Final = {
    "misspelt strategy": (
        {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSliced"}},
        "ResourceClaim ml/bad: spec.devices.config[0]: invalid GpuConfig: sharing.strategy: "
        "Input should be 'TimeSlicing' or 'MPS'",
    ),
    "unknown field": (
        {"apiVersion": API, "kind": "GpuConfig", "sharingg": {"strategy": "MPS"}},
        "ResourceClaim ml/bad: spec.devices.config[0]: invalid GpuConfig: sharingg: "
        "Extra inputs are not permitted",
    ),
    "misspelt kind": (
        {"apiVersion": API, "kind": "GpuConfigg"},
        "ResourceClaim ml/bad: spec.devices.config[0]: kind is 'GpuConfigg'; dra-gpu "
        "understands resource.nvidia.com/v1beta1 GpuConfig, MigDeviceConfig and VfioDeviceConfig",
    ),
    "wrong apiVersion": (
        {"apiVersion": "resource.nvidia.com/v1", "kind": "GpuConfig"},
        "ResourceClaim ml/bad: spec.devices.config[0]: invalid GpuConfig: apiVersion: "
        "Input should be 'resource.nvidia.com/v1beta1'",
    ),
    "bad interval": (
        {
            "apiVersion": API,
            "kind": "GpuConfig",
            "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Longest"}},
        },
        "ResourceClaim ml/bad: spec.devices.config[0]: invalid GpuConfig: "
        "sharing.timeSlicingConfig.interval: Input should be 'Default', 'Short', 'Medium' or "
        "'Long'",
    ),
    "limit out of range": (
        mps(defaultActiveThreadPercentage=150),
        "ResourceClaim ml/bad: spec.devices.config[0]: invalid GpuConfig: "
        "sharing.mpsConfig.defaultActiveThreadPercentage: Input should be less than or equal "
        "to 100",
    ),
    "not a quantity": (
        mps(defaultPinnedDeviceMemoryLimit="lots"),
        "ResourceClaim ml/bad: spec.devices.config[0]: invalid GpuConfig: "
        "sharing.mpsConfig.defaultPinnedDeviceMemoryLimit: Value error, quantity 'lots': not a "
        "number with an optional unit suffix",
    ),
    "a limit no device can apply": (
        mps(defaultActiveThreadPercentage=0),
        "ResourceClaim ml/bad: request 'gpu' on (DeviceClass gpu.nvidia.com): "
        "defaultActiveThreadPercentage must be 1..100, not 0",
    ),
    "MigDeviceConfig for a GPU request": (
        {"apiVersion": API, "kind": "MigDeviceConfig"},
        "ResourceClaim ml/bad: a MigDeviceConfig names request 'gpu', but its device "
        "(DeviceClass gpu.nvidia.com) is a gpu device; use GpuConfig",
    ),
}


@pytest.mark.parametrize("case", list(BAD_CONFIGS))
def test_each_kind_of_bad_config_is_refused_with_the_plugins_message(
    webhook: Webhook, case: str
) -> None:
    parameters, message = BAD_CONFIGS[case]
    response = webhook.review(claim("bad", parameters), uid=f"uid-{case}")
    assert response == {
        "uid": f"uid-{case}",
        "allowed": False,
        "status": {"status": "Failure", "message": message, "reason": "Invalid", "code": 422},
    }


def test_mps_on_two_gpus_is_refused(webhook: Webhook) -> None:
    response = webhook.review(claim("two", mps(), count=2))
    assert not response["allowed"]
    assert response["status"]["message"] == (
        "ResourceClaim ml/two: asks for MPS on 2 devices (gpu[0], gpu[1]); a container reaches "
        "one MPS control daemon, so request each MPS device in its own claim"
    )


def test_a_template_with_a_bad_config_is_refused_naming_its_spec(webhook: Webhook) -> None:
    bad = {"apiVersion": API, "kind": "GpuConfig", "sharing": {"strategy": "TimeSliced"}}
    response = webhook.review(template("tmpl", bad), resource="resourceclaimtemplates")
    assert not response["allowed"]
    assert response["status"]["message"] == (
        "ResourceClaimTemplate ml/tmpl: spec.spec.devices.config[0]: invalid GpuConfig: "
        "sharing.strategy: Input should be 'TimeSlicing' or 'MPS'"
    )


@pytest.mark.parametrize("version", ["v1beta1", "v1beta2"])
def test_older_api_versions_are_checked_too(webhook: Webhook, version: str) -> None:
    obj = claim("old-api", {"apiVersion": API, "kind": "MigDeviceConfig"})
    obj["apiVersion"] = f"resource.k8s.io/{version}"
    if version == "v1beta1":  # v1beta1 has the class and count on the request itself
        request = obj["spec"]["devices"]["requests"][0]
        request.update(request.pop("exactly"))
    response = webhook.review(obj, version=version)
    assert not response["allowed"]
    assert "a MigDeviceConfig names request 'gpu'" in response["status"]["message"]


def test_an_update_is_checked_only_when_the_spec_changes(webhook: Webhook) -> None:
    bad = claim("legacy", {"apiVersion": API, "kind": "GpuConfigg"})
    finalizer_removed = copy.deepcopy(bad)
    finalizer_removed["metadata"]["finalizers"] = []
    response = webhook.review(finalizer_removed, operation="UPDATE", old=bad)
    assert response["allowed"]  # a claim from before the webhook can still be deleted
    changed = claim("legacy", {"apiVersion": API, "kind": "GpuConfiggg"})
    assert not webhook.review(changed, operation="UPDATE", old=bad)["allowed"]


def test_another_resource_is_a_bad_request(webhook: Webhook) -> None:
    response = webhook.review({"metadata": {"name": "p"}}, resource="pods")
    assert not response["allowed"]
    assert response["status"]["reason"] == "BadRequest"
    assert "got 'resource.k8s.io'/'v1'/'pods'" in response["status"]["message"]


# ---------------------------------------------------------------- abuse


def test_a_huge_object_gets_413_and_the_server_keeps_serving(webhook: Webhook) -> None:
    huge = claim("huge", mps())
    huge["metadata"]["annotations"] = {"blob": "x" * (9 * 2**20)}
    status, body = webhook.post(json.dumps(admission_review(huge)).encode())
    assert status == 413
    assert b"more than the 8388608 this webhook reads" in body
    large = claim("large", {"apiVersion": API, "kind": "GpuConfigg"})
    large["metadata"]["annotations"] = {"blob": "x" * (3 * 2**20)}  # within the limit
    assert not webhook.review(large)["allowed"]


def test_garbage_json_gets_a_clear_400(webhook: Webhook) -> None:
    status, body = webhook.post(b'{"apiVersion": "admission.k8s.io/v1", "kind": ')
    assert status == 400
    assert body.startswith(b"failed to read AdmissionReview from request body: not JSON: ")
    status, body = webhook.post(b"\xff\xfe garbage")
    assert status == 400
    status, body = webhook.post(b"[" * 100_000 + b"]" * 100_000)
    assert status == 400


def test_json_that_is_no_admission_review_gets_a_clear_400(webhook: Webhook) -> None:
    status, body = webhook.post(b'{"apiVersion": "v1", "kind": "Pod"}')
    assert status == 400
    assert b"expected apiVersion admission.k8s.io/v1, kind AdmissionReview" in body
    review = admission_review(claim("x"))
    del review["request"]["uid"]
    status, body = webhook.post(json.dumps(review).encode())
    assert (status, body) == (
        400,
        b"failed to read AdmissionReview from request body: AdmissionReview.request.uid is not set",
    )


def test_a_body_that_is_not_json_by_its_type_gets_415(webhook: Webhook) -> None:
    status, body = webhook.post(b"{}", content_type="application/yaml")
    assert (status, body) == (415, b"contentType=application/yaml, expected application/json")


def test_clients_that_hang_up_or_speak_no_tls_do_not_stop_it(webhook: Webhook) -> None:
    for payload in (b"", b"GET /readyz HTTP/1.1\r\n\r\n", b"\x16\x03\x01\x00\x05hello"):
        with socket.create_connection(("127.0.0.1", webhook.port), timeout=5) as sock:
            sock.sendall(payload)
    connection = webhook.connection()
    connection.connect()  # a TLS connection left idle while others are served
    try:
        assert webhook.review(claim("meanwhile"))["allowed"]
    finally:
        connection.close()


# ---------------------------------------------------------------- log, renewal, stop


def test_each_refusal_is_one_log_line_naming_the_object(webhook: Webhook) -> None:
    webhook.review(claim("logged", {"apiVersion": API, "kind": "GpuConfigg"}), uid="uid-log")
    time.sleep(0.2)
    lines = [line for line in webhook.log.read_text().splitlines() if "uid-log" in line]
    assert lines == [
        lines[0].split(" WARNING ")[0]
        + " WARNING dra_driver.admission.server: refused ResourceClaim ml/logged (uid uid-log): "
        "ResourceClaim ml/logged: spec.devices.config[0]: kind is 'GpuConfigg'; dra-gpu "
        "understands resource.nvidia.com/v1beta1 GpuConfig, MigDeviceConfig and VfioDeviceConfig"
    ]
    assert "Traceback" not in webhook.log.read_text()


def test_a_renewed_certificate_is_served_without_a_restart(webhook: Webhook) -> None:
    renewed = trustme.CA()
    _write_certificate(renewed, webhook.cert_file, webhook.key_file)
    connection = webhook.connection(ca=renewed)
    try:
        connection.request("GET", "/readyz")
        assert connection.getresponse().status == 200
    finally:
        connection.close()
    webhook.ca = renewed
    webhook.key_file.write_text("not a key")  # a broken renewal: the last good one stays
    assert webhook.ready()
    assert "still serving the previous certificate" in webhook.log.read_text()
    _write_certificate(renewed, webhook.cert_file, webhook.key_file)


def test_sigterm_stops_it_cleanly(webhook: Webhook) -> None:
    # a process of its own: the module's one must keep serving
    port = _free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "dra_driver.cli", "webhook",
         "--tls-cert-file", str(webhook.cert_file),
         "--tls-private-key-file", str(webhook.key_file), "--port", str(port)],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline
                time.sleep(0.1)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=10)
        assert process.returncode == 0, output
        assert b"stopping" in output
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_bad_certificate_is_one_line_and_exit_status_2(tmp_path: Path) -> None:
    (tmp_path / "tls.crt").write_text("nope")
    (tmp_path / "tls.key").write_text("nope")
    result = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli", "webhook",
         "--tls-cert-file", str(tmp_path / "tls.crt"),
         "--tls-private-key-file", str(tmp_path / "tls.key"), "--port", str(_free_port())],
        capture_output=True, text=True, timeout=30, check=False,
    )  # fmt: skip
    assert result.returncode == 2
    assert result.stderr.startswith(
        f"dra-gpu webhook: cannot load the TLS certificate {tmp_path / 'tls.crt'} with key "
    )
    assert len(result.stderr.splitlines()) == 1
