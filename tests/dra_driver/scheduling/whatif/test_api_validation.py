"""`simulate` refuses, as `kubectl apply` would, objects the API server refuses (exit 2)."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.cli import main

HEADER = """\
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {namespace: default, name: gpu}
spec:
  devices:
    requests:
"""


def _simulate(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, *args: str
) -> tuple[int, str]:
    path = tmp_path / "objects.yaml"
    path.write_text(text)
    code = main(["simulate", "-f", str(path), "--nodes", "l4-node=1", *args])
    captured = capsys.readouterr()
    return code, captured.err


@pytest.mark.parametrize(
    ("requests", "error"),
    [
        (  # a misspelt field is not dropped: strict decoding, as the API server does it
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, cout: 2}}\n",
            "objects.yaml:1: ResourceClaim/gpu: strict decoding error: unknown field "
            '"spec.devices.requests[0].exactly.cout"',
        ),
        (
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: two}}\n",
            "objects.yaml:1: ResourceClaim/gpu: spec.devices.requests[0].exactly.count: "
            'Invalid value: "two": must be an integer',
        ),
        (
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: -1}}\n",
            "objects.yaml:1: ResourceClaim/gpu: spec.devices.requests[0].exactly.count: "
            "Invalid value: -1: must be greater than zero",
        ),
        (
            "      - name: gpu\n"
            "        exactly: {deviceClassName: gpu.nvidia.com}\n"
            "        firstAvailable: [{name: a, deviceClassName: gpu.nvidia.com}]\n",
            "objects.yaml:1: ResourceClaim/gpu: spec.devices.requests[0]: Invalid value: null: "
            "exactly one of `exactly` or `firstAvailable` is required, but multiple fields are set",
        ),
        (
            "      - {name: gpu}\n",
            "objects.yaml:1: ResourceClaim/gpu: spec.devices.requests[0]: Required value: "
            "exactly one of `exactly` or `firstAvailable` is required",
        ),
        (
            "      - {name: GPU_1, exactly: {deviceClassName: gpu.nvidia.com}}\n",
            "objects.yaml:1: ResourceClaim/gpu: spec.devices.requests[0].name: Invalid value: "
            '"GPU_1": a lowercase RFC 1123 label must consist of lower case alphanumeric '
            "characters or '-', and must start and end with an alphanumeric character",
        ),
        (
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n"
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com}}\n",
            'spec.devices.requests[1].name: Duplicate value: "gpu"',
        ),
        (
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All,"
            " count: 2}}\n",
            "spec.devices.requests[0].exactly.count: Invalid value: 2: must not be specified "
            "when allocationMode is 'All'",
        ),
        (
            "      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n"
            "          selectors: [{cel: {expression: 'device.driver =='}}]\n",
            "spec.devices.requests[0].exactly.selectors[0].cel.expression: Invalid value: "
            '"device.driver ==": compilation failed: Syntax error',
        ),
        (
            "      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n"
            "          selectors:\n"
            + "".join("            - cel: {expression: 'true'}\n" for _ in range(33)),
            "spec.devices.requests[0].exactly.selectors: Too many: 33: must have at most 32 items",
        ),
        (  # a map where a list belongs: a one-line refusal, not a traceback
            "      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n"
            "          selectors: {cel: {expression: 'true'}}\n",
            "spec.devices.requests[0].exactly.selectors: Invalid value: "
            '{"cel":{"expression":"true"}}: must be a list',
        ),
        (  # a list where a number belongs
            "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: [2]}}\n",
            "spec.devices.requests[0].exactly.count: Invalid value: [2]: must be an integer",
        ),
    ],
)
def test_invalid_claims_are_refused_like_kubectl_apply(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], requests: str, error: str
) -> None:
    code, err = _simulate(tmp_path, capsys, HEADER + requests)

    assert code == 2
    assert "1 object the API server would refuse (as kubectl apply reports them)" in err
    assert error in err


def test_count_zero_is_defaulted_to_one_as_the_api_server_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """v1 defaulting (pkg/apis/resource/v1/defaults.go) turns ExactCount `count: 0` into 1."""
    text = HEADER + "      - {name: gpu, exactly: {deviceClassName: gpu.nvidia.com, count: 0}}\n"
    path = tmp_path / "objects.yaml"
    path.write_text(text)
    assert main(["simulate", "-f", str(path), "--nodes", "l4-node=1", "-o", "json"]) == 0
    assert capsys.readouterr().out.count('"device": "gpu-') == 1


def test_duplicate_keys_are_refused_with_their_lines(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        "apiVersion: v1\n"
        "kind: Pod\n"
        "metadata:\n"
        "  name: first\n"
        "  namespace: default\n"
        "  name: second\n"  # the last one would win: two pods merged into one
        "spec:\n"
        "  containers: [{name: main, image: busybox}]\n"
    )
    code, err = _simulate(tmp_path, capsys, text)

    assert code == 2
    assert (
        "objects.yaml: yaml: unmarshal errors:\n"
        '  line 6: mapping key "name" already defined at line 4'
    ) in err


def test_admin_access_needs_the_namespace_label_when_the_namespace_is_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    claim = (
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\n"
        "metadata: {namespace: monitoring, name: all-gpus}\n"
        "spec:\n  devices:\n    requests:\n"
        "      - {name: gpus, exactly: {deviceClassName: gpu.nvidia.com, allocationMode: All,"
        " adminAccess: true}}\n"
    )
    plain = "apiVersion: v1\nkind: Namespace\nmetadata: {name: monitoring}\n---\n"
    code, err = _simulate(tmp_path, capsys, plain + claim)
    assert code == 2
    assert (
        "objects.yaml:5: ResourceClaim/all-gpus: spec.devices.requests[0].exactly.adminAccess: "
        "Forbidden: admin access to devices requires the `resource.kubernetes.io/admin-access: "
        "true` label on the containing namespace"
    ) in err

    labelled = (
        "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: monitoring\n"
        "  labels: {resource.kubernetes.io/admin-access: 'true'}\n---\n"
    )
    code, err = _simulate(tmp_path, capsys, labelled + claim)
    assert code == 0, err
    code, err = _simulate(tmp_path, capsys, claim)  # Namespace unknown: not checked
    assert code == 0, err


def test_pods_naming_claims_wrongly_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {namespace: default, name: p}\n"
        "spec:\n"
        "  containers: [{name: main, image: busybox, resources: {claims: [{name: gpus}]}}]\n"
        "  resourceClaims:\n"
        "    - {name: gpu, resourceClaimName: a, resourceClaimTemplateName: b}\n"
    )
    code, err = _simulate(tmp_path, capsys, pod)
    assert code == 2
    assert (
        "spec.resourceClaims[0]: Invalid value: null: must specify one of: "
        "`resourceClaimName`, `resourceClaimTemplateName`"
    ) in err
    assert (
        'spec.containers[0].resources.claims[0]: Not found: "gpus": must be one of the names '
        "in pod.spec.resourceClaims: gpu"
    ) in err


def test_a_container_naming_a_claim_twice_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # core validation's validateResourceClaimNames: each name (or name/request) once.
    pod = (
        "apiVersion: v1\nkind: Pod\nmetadata: {namespace: default, name: p}\n"
        "spec:\n"
        "  containers: [{name: main, image: busybox, resources: {claims: [{name: g}, {name: g},"
        " {name: g, request: gpu}]}}]\n"
        "  resourceClaims: [{name: g, resourceClaimName: a}]\n"
    )
    code, err = _simulate(tmp_path, capsys, pod)
    assert code == 2
    assert 'spec.containers[0].resources.claims[1]: Duplicate value: "g"' in err
    assert "claims[2]" not in err  # g/gpu is another key


def test_every_refusal_is_listed_and_nothing_is_simulated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = (
        HEADER
        + "      - {name: GPU_1, exactly: {deviceClassName: gpu.nvidia.com, cout: 2}}\n"
        + "---\n"
        + "apiVersion: resource.k8s.io/v1\nkind: DeviceClass\nmetadata: {name: broken}\n"
        + "spec: {selectors: [{cel: {expression: '1 + 1'}}]}\n"
    )
    path = tmp_path / "objects.yaml"
    path.write_text(text)
    code = main(["simulate", "-f", str(path), "--nodes", "l4-node=1"])
    captured = capsys.readouterr()

    assert code == 2
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert lines[0] == (
        "dra-gpu simulate: 2 objects the API server would refuse (as kubectl apply reports "
        "them); nothing was simulated:"
    )
    assert len(lines) == 4
    assert lines[3] == str(
        path.parent
        / (
            "objects.yaml:9: DeviceClass/broken: spec.selectors[0].cel.expression: Invalid value: "
            '"1 + 1": must evaluate to bool or the unknown type, not int'
        )
    )


def test_explain_refuses_the_same_objects(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "objects.yaml"
    path.write_text(HEADER + "      - {name: GPU_1, exactly: {deviceClassName: gpu.nvidia.com}}\n")
    assert main(["explain", "-f", str(path), "--nodes", "l4-node=1"]) == 2
    assert "spec.devices.requests[0].name: Invalid value" in capsys.readouterr().err


def test_a_v1beta1_request_with_first_available_and_a_class_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The apiserver converts any main-request field of v1beta1 into `exactly`, beside
    # `firstAvailable`: both are then set, which validation refuses.
    claim = (
        "apiVersion: resource.k8s.io/v1beta1\nkind: ResourceClaim\n"
        "metadata: {namespace: default, name: gpu}\nspec:\n  devices:\n    requests:\n"
        "      - name: gpu\n        deviceClassName: gpu.nvidia.com\n"
        "        firstAvailable: [{name: a, deviceClassName: gpu.nvidia.com}]\n"
    )
    code, err = _simulate(tmp_path, capsys, claim)
    assert code == 2
    assert (
        "spec.devices.requests[0]: Invalid value: null: exactly one of `exactly` or "
        "`firstAvailable` is required, but multiple fields are set"
    ) in err


def _tolerating(toleration: str) -> str:
    return HEADER + (
        "      - name: gpu\n        exactly:\n          deviceClassName: gpu.nvidia.com\n"
        f"          tolerations: [{toleration}]\n"
    )


@pytest.mark.parametrize(
    ("toleration", "args", "error"),
    [
        (
            "{key: k, operator: Exists, effect: Bogus}",
            (),
            'tolerations[0].effect: Unsupported value: "Bogus": supported values: '
            '"NoExecute", "NoSchedule", "None"',
        ),
        (
            "{key: k, operator: Exists, value: v}",
            (),
            'tolerations[0].value: Invalid value: "v": must be empty for operator `Exists`',
        ),
        (
            "{key: k, operator: Matches, value: v}",
            (),
            'tolerations[0].operator: Unsupported value: "Matches": supported values: '
            '"Equal", "Exists"',
        ),
        (  # the None effect came with 1.35
            "{key: k, operator: Exists, effect: None}",
            ("--kubernetes", "1.34", "--feature-gates", "DRADeviceTaints=true"),
            'tolerations[0].effect: Unsupported value: "None": supported values: '
            '"NoExecute", "NoSchedule"',
        ),
    ],
)
def test_invalid_device_tolerations_are_refused(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    toleration: str,
    args: tuple[str, ...],
    error: str,
) -> None:
    code, err = _simulate(tmp_path, capsys, _tolerating(toleration), *args)
    assert code == 2
    assert error in err


def test_valid_tolerations_pass_and_the_gate_off_drops_them(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    good = _tolerating("{key: gpu.nvidia.com/unhealthy, operator: Exists, effect: NoExecute}")
    assert _simulate(tmp_path, capsys, good)[0] != 2
    assert (
        _simulate(tmp_path, capsys, _tolerating("{key: k, operator: Exists, effect: None}"))[0] != 2
    )
    # Without DRADeviceTaints the API server drops tolerations before validating them.
    bad = _tolerating("{key: k, operator: Exists, effect: Bogus}")
    assert _simulate(tmp_path, capsys, bad, "--feature-gates", "DRADeviceTaints=false")[0] != 2
