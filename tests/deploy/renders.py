"""What the deploy tests render: the Kustomize tree with kubectl, the chart with Helm.

Both are the real tools (`tests.deploy.k8s_tools`). The chart is rendered for
many values sets in one `helm template` process: a throw-away parent chart
lists `deploy/helm/dra-gpu` once per values set under an alias (c0, c1, ...),
each with `nameOverride: dra-gpu` so the objects keep the names a release
`dra-gpu` gets, and the output is split by its `# Source: all/charts/cN/`
lines. Each alias is validated against values.schema.json and rendered as a
release of its own would be; dozens of values sets take one process, not dozens.

`comparable` is how "the chart renders the same objects as Kustomize" is
judged: Helm's own bookkeeping labels are dropped, and the lists the API
server merges by key (env, volumes, volumeMounts, ports, containers) are
sorted by it, because Kustomize's strategic-merge patches move the entries
they touch to the front. Everything else must be equal, value for value.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import re
import shutil
import subprocess
import tempfile
import tomllib
from collections.abc import Iterator, Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from dra_driver.kube.strict_schema import describe, strict_errors
from tests.deploy.k8s_tools import tool

# libyaml's loader where PyYAML has it: the chart renders thousands of objects.
_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

ROOT = Path(__file__).resolve().parents[2]
BASE = ROOT / "deploy/base"
CHART = ROOT / "deploy/helm/dra-gpu"
VERSION = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
KUBERNETES = ("1.35.0", "1.37.0")  # strict schemas: the oldest release users run, the newest
RELEASE = NAMESPACE = "dra-gpu"
# Every Kustomize Component, and the chart values that install the same.
COMPONENT_VALUES: Mapping[str, Mapping[str, Any]] = {
    "dynamic-mig": {"dynamicMig": True},
    "sharing": {"consumableShares": "4"},
    "extended-resources": {"extendedResources": True},
    "gpu-operator": {
        "nvidiaDriverRoot": "/run/nvidia/driver",
        "nvidiaCDIHookPath": "/usr/local/nvidia/toolkit/nvidia-cdi-hook",
    },
    "openshift": {"openshift": True},
    "webhook": {"webhook": {"enabled": True}},
    # NVIDIA's value, as a values file written for NVIDIA's chart turns VFIO on.
    "passthrough": {"featureGates": {"PassthroughSupport": True}},
    # NVIDIA's value (its default is true, the chart's false).
    "compute-domains": {"resources": {"computeDomains": {"enabled": True}}},
}
COMPONENTS = tuple(COMPONENT_VALUES)
# The chart leaves the namespace to `helm install --create-namespace` unless asked.
BASE_VALUES: Mapping[str, Any] = {"createNamespace": True}
HELM_LABELS = frozenset(
    {
        "helm.sh/chart",
        "app.kubernetes.io/managed-by",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/version",
    }
)
_MERGE_KEYS = {
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "containers": "name",
}
# No schema of cert-manager's CRDs is at hand offline: the tests assert these objects' fields.
UNSCHEMED_GROUPS = frozenset({"cert-manager.io"})


def documents(text: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.load_all(text, Loader=_LOADER) if doc]


def validate(doc: Mapping[str, Any], version: str) -> None:
    """The release's strict schema (kubernetes-validate's, through the validators
    `dra_driver.kube.strict_schema` caches); one already found valid is not checked again."""
    if doc["apiVersion"].split("/")[0] in UNSCHEMED_GROUPS:
        return
    _validate_json(json.dumps(doc, sort_keys=True), version)


@cache
def _validate_json(doc: str, version: str) -> None:
    obj = json.loads(doc)
    errors = strict_errors(obj, version)
    name = f"{obj['kind']} {obj['metadata'].get('name')}"
    assert errors is not None, f"{name}: Kubernetes {version} has no schema for it"
    assert not errors, f"{name} is not valid for Kubernetes {version}: " + "; ".join(
        describe(error) for error in errors
    )


@cache
def render_kustomization(directory: Path) -> tuple[dict[str, Any], ...]:
    out = subprocess.run(
        [tool("kubectl"), "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return tuple(documents(out))


def render_users_kustomization(components: Sequence[str], extra: str = "") -> list[dict[str, Any]]:
    """What a user's own kustomization over the base with `components` renders to."""
    with tempfile.TemporaryDirectory(prefix="dra-gpu-kustomize-") as work:

        def rel(path: Path) -> str:  # kustomize takes relative paths only
            return os.path.relpath(path, work)

        lines = [
            "apiVersion: kustomize.config.k8s.io/v1beta1",
            "kind: Kustomization",
            f"resources: [{rel(BASE)}]",
            f"components: [{', '.join(rel(ROOT / 'deploy/components' / c) for c in components)}]",
            extra,
        ]
        (Path(work) / "kustomization.yaml").write_text("\n".join(lines) + "\n")
        return list(render_kustomization(Path(work)))


def values_for(components: Sequence[str]) -> dict[str, Any]:
    """The chart values that install what the base with `components` installs."""
    values = copy.deepcopy(dict(BASE_VALUES))
    for component in components:
        values = merge(values, COMPONENT_VALUES[component])
    return values


def merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """`override` over `base`, maps merged key by key (as Helm merges values files)."""
    out = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


@contextlib.contextmanager
def _parent_chart(values_sets: Mapping[str, Mapping[str, Any]]) -> Iterator[tuple[Path, list[str]]]:
    """A parent chart listing the chart once per values set (module docstring), and the keys
    in alias order (c0 is the first key)."""
    keys = list(values_sets)
    with tempfile.TemporaryDirectory(prefix="dra-gpu-helm-") as work:
        parent = Path(work) / "all"
        shutil.copytree(CHART, parent / "charts/dra-gpu", ignore=shutil.ignore_patterns("ci"))
        (parent / "templates").mkdir()
        chart = {
            "apiVersion": "v2",
            "name": "all",
            "version": "0.0.0",
            "dependencies": [
                {"name": "dra-gpu", "version": VERSION, "alias": f"c{i}"} for i in range(len(keys))
            ],
        }
        values = {
            f"c{i}": merge({"nameOverride": "dra-gpu"}, values_sets[key])
            for i, key in enumerate(keys)
        }
        (parent / "Chart.yaml").write_text(yaml.safe_dump(chart))
        (parent / "values.yaml").write_text(yaml.safe_dump(values))
        yield parent, keys


def render_chart(values_sets: Mapping[str, Mapping[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Each values set's rendered objects (`helm template`, release and namespace dra-gpu)."""
    with _parent_chart(values_sets) as (parent, keys):
        done = helm("template", RELEASE, str(parent), "--namespace", NAMESPACE)
    assert done.returncode == 0, f"helm template failed:\n{done.stderr}"
    rendered: dict[str, list[dict[str, Any]]] = {key: [] for key in keys}
    for chunk in re.split(r"^---\n", done.stdout, flags=re.MULTILINE):
        source = re.search(r"^# Source: all/charts/c(\d+)/", chunk, flags=re.MULTILINE)
        docs = documents(chunk)
        if docs:
            assert source, f"a rendered object without its source:\n{chunk}"
            rendered[keys[int(source.group(1))]].extend(docs)
    return rendered


def lint_chart(values_sets: Mapping[str, Mapping[str, Any]]) -> subprocess.CompletedProcess[str]:
    """`helm lint --strict` of the chart with every values set, in one process: linting
    the parent chart checks each alias's values against the schema and lints its render."""
    with _parent_chart(values_sets) as (parent, _):
        return helm("lint", "--strict", str(parent), "--namespace", NAMESPACE)


def helm(*args: str) -> subprocess.CompletedProcess[str]:
    """One Helm command on the chart's directory as users run it (no check of the status)."""
    return subprocess.run(
        [tool("helm"), *args], check=False, capture_output=True, text=True, cwd=ROOT
    )


def comparable(doc: Mapping[str, Any]) -> dict[str, Any]:
    """`doc` without Helm's labels and with keyed lists in key order (module docstring)."""
    out: dict[str, Any] = _sorted_lists(copy.deepcopy(dict(doc)))
    labels = out.get("metadata", {}).get("labels")
    if labels is not None:
        for label in HELM_LABELS:
            labels.pop(label, None)
        if not labels:
            del out["metadata"]["labels"]
    return out


def _sorted_lists(value: Any) -> Any:
    if isinstance(value, dict):
        for key, item in value.items():
            value[key] = _sorted_lists(item)
            merge_key = _MERGE_KEYS.get(key)
            if merge_key and isinstance(value[key], list):
                value[key] = sorted(value[key], key=lambda entry: str(entry.get(merge_key)))
        return value
    if isinstance(value, list):
        return [_sorted_lists(item) for item in value]
    return value


def by_identity(docs: Sequence[Mapping[str, Any]]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """Objects keyed by (kind, namespace, name), each once."""
    out: dict[tuple[str, str, str], dict[str, Any]] = {}
    for doc in docs:
        meta = doc["metadata"]
        key = (doc["kind"], meta.get("namespace", ""), meta["name"])
        assert key not in out, f"{key} rendered twice"
        out[key] = comparable(doc)
    return out
