"""Where the deploy tests find Helm and kubectl: the pinned builds `make k8s-tools` fetches.

The tests render the chart and the Kustomize tree with the real tools, the
versions the README states (Helm 4.1.4, kubectl 1.35.2 with kustomize v5.7.1),
not whatever a machine has on its PATH: `tests/deploy/fetch-k8s-tools.sh`
puts checksummed copies in `.cache/k8s-tools` (DRA_GPU_K8S_TOOLS names
another directory).
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TOOLS = Path(os.environ.get("DRA_GPU_K8S_TOOLS") or ROOT / ".cache/k8s-tools")


def tool(name: str) -> str:
    """The path of `helm` or `kubectl`; fails the test, saying what to run, when it is missing."""
    path = TOOLS / name
    assert os.access(path, os.X_OK), f"{path} is missing: run `make k8s-tools` (make test does)"
    return str(path)
