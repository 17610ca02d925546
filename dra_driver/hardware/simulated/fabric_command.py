"""`dra-gpu sim fabric`: change a simulated node's answer to `nvmlDeviceGetGpuFabricInfoV`.

The ComputeDomain plugin must publish a channel only on a settled fabric and
follow it without a restart (computedomain.md §3.8, §8.2 E6), so a test or a
demo needs to move a running node's fabric: IN_PROGRESS at boot, COMPLETED
later, unhealthy, another clique. This command writes the new answer into the
node's state file (`SimHardware.set_fabric`), where the running plugin's
simulated NVML reads it:

    dra-gpu sim fabric --state-file S [--gpu I] --state completed|in_progress|
        not_started|not_supported [--clique N] [--cluster-uuid U]
        [--health healthy|degraded|unhealthy]
    dra-gpu sim fabric --state-file S --topology FILE --node NAME

Fields not given keep the GPU's current answer (a GPU without one starts from
a zero cluster UUID, clique 0, healthy). `--health degraded` is NVML's
LIMITED_CAPACITY summary with degraded bandwidth in the mask; the masks are
those the shape files use (`shapes.HEALTH_MASKS`).

`--topology` reads NVIDIA's mock NVML cluster topology document (§6.3):

    domains:
      - name: rack-a
        uuid: 00000000-0000-0000-0000-000000000001
        cliques:
          - id: 0
            nodes: [gb-0, gb-1]

and gives every GPU of node `--node` the domain's UUID as cluster UUID and
the clique's id, as the mock does by `NODE_NAME`; like the mock, only GPUs
that have a fabric answer take it (the others stay NOT_SUPPORTED). A node the
document does not place is an error. (The reference gives GB200's numbers,
one clique per rack; `gb300-node` boots with the answer a real GB300 node
printed, which this command changes the same way.)
"""

from __future__ import annotations

import dataclasses
import uuid
from pathlib import Path
from typing import Any, Final

from dra_driver.errors import ConfigError, yaml_problem
from dra_driver.hardware.nvml import fabric
from dra_driver.hardware.nvml.fabric import FabricInfo
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.shapes import HEALTH_MASKS
from dra_driver.kube import yaml_io

STATES: Final = {
    "completed": fabric.STATE_COMPLETED,
    "in_progress": fabric.STATE_IN_PROGRESS,
    "not_started": fabric.STATE_NOT_STARTED,
    "not_supported": fabric.STATE_NOT_SUPPORTED,
}
HEALTH: Final = {
    "healthy": fabric.HEALTH_HEALTHY,
    "degraded": fabric.HEALTH_LIMITED_CAPACITY,
    "unhealthy": fabric.HEALTH_UNHEALTHY,
}
_START: Final = FabricInfo(
    cluster_uuid=fabric.ZERO_CLUSTER,
    clique_id=0,
    state=fabric.STATE_NOT_STARTED,
    health_mask=fabric.HEALTHY_MASK,
    health_summary=fabric.HEALTH_HEALTHY,
)


def _uuid(text: Any, where: str) -> str:
    try:
        return str(uuid.UUID(str(text)))
    except ValueError:
        raise ConfigError(f"{where}: {text!r} is not a UUID") from None


def _clique_id(value: Any, where: str) -> int:
    if isinstance(value, str) and value.isdigit():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < 2**32:
        raise ConfigError(f"{where}: a clique id is an integer 0..4294967295, got {value!r}")
    return value


def topology_place(path: Path, node: str) -> tuple[str, int]:
    """(cluster UUID, clique id) of `node` in the topology document at `path`."""
    try:
        doc = yaml_io.load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--topology {path}: cannot read: {exc.strerror or exc}") from exc
    except yaml_io.YAMLError as exc:
        raise ConfigError(f"--topology {path}: not valid YAML: {yaml_problem(exc)}") from exc
    domains = doc.get("domains") if isinstance(doc, dict) else None
    if not isinstance(domains, list):
        raise ConfigError(f"--topology {path}: must be a mapping with a 'domains' list")
    for d, domain in enumerate(domains):
        where = f"--topology {path}: domains[{d}]"
        if not isinstance(domain, dict) or not isinstance(domain.get("cliques"), list):
            raise ConfigError(f"{where}: must be a mapping with uuid and a 'cliques' list")
        for c, clique in enumerate(domain["cliques"]):
            at = f"{where}.cliques[{c}]"
            if not isinstance(clique, dict) or not isinstance(clique.get("nodes"), list):
                raise ConfigError(f"{at}: must be a mapping with id and a 'nodes' list")
            if node in clique["nodes"]:
                return _uuid(domain.get("uuid"), f"{where}.uuid"), _clique_id(
                    clique.get("id"), f"{at}.id"
                )
    raise ConfigError(f"--topology {path}: node {node!r} is in no clique of any domain")


def set_fabric(
    state_file: Path,
    *,
    gpu: int | None = None,
    state: str | None = None,
    clique: int | None = None,
    cluster_uuid: str | None = None,
    health: str | None = None,
    topology: Path | None = None,
    node: str | None = None,
) -> int:
    """Apply the change to the GPUs (all, or `gpu`) of the node; prints each new answer."""
    if not state_file.is_file():
        raise ConfigError(f"--state-file {state_file}: no such state file (is the node running?)")
    if topology is not None and not node:
        raise ConfigError("--topology: give --node, the node's name in the topology")
    if topology is None and state is None:
        raise ConfigError("--state: required unless --topology places the node")
    changes: dict[str, Any] = {}
    if topology is not None and node:
        changes["cluster_uuid"], changes["clique_id"] = topology_place(topology, node)
    if state is not None:
        if state not in STATES:
            raise ConfigError(f"--state {state!r}: expected one of {', '.join(STATES)}")
        changes["state"] = STATES[state]
    if clique is not None:
        changes["clique_id"] = _clique_id(clique, "--clique")
    if cluster_uuid is not None:
        changes["cluster_uuid"] = _uuid(cluster_uuid, "--cluster-uuid")
    if health is not None:
        if health not in HEALTH:
            raise ConfigError(f"--health {health!r}: expected one of {', '.join(HEALTH)}")
        changes["health_summary"] = HEALTH[health]
        changes["health_mask"] = HEALTH_MASKS[HEALTH[health]]
    hw = SimHardware(state_path=state_file)
    count = hw.gpu_count()
    if gpu is not None and not 0 <= gpu < count:
        raise ConfigError(f"--gpu {gpu}: the node has GPUs 0..{count - 1}")
    for index in range(count) if gpu is None else (gpu,):
        current = hw.gpu(index).fabric
        if current is None and topology is not None and state is None:
            print(f"GPU {index}: no fabric (NOT_SUPPORTED), the topology does not apply")
            continue
        info = dataclasses.replace(current or _START, **changes)
        hw.set_fabric(index, info)
        print(f"GPU {index}: {fabric.describe(info)}")
    return 0
