"""Differential test: `simulate` places a claim exactly when the node's plugin prepares it.

A seeded corpus of claims and opaque configs, valid and invalid (misspelt
strategies, fields and intervals, wrong kinds and apiVersions, MPS on two
GPUs, a GpuConfig on a MIG device, time-slice intervals and MPS modes that
clash with a claim already on a shared GPU, out-of-range limits, VFIO
passthrough claims (KubeVirt's example among them) with good and bad
`VfioDeviceConfig`s, next to whole-GPU claims that may land on the same GPU), is
simulated on a simulated node. Every claim the scheduler could allocate is
then handed, with the allocation the simulation computed (placed, or refused
by the node), to the real kubelet plugin serving the same simulated node
(same shape and node name, so the same devices and UUIDs) over its gRPC
socket, in the same order. The plugin's Prepare must succeed exactly for the
claims the simulation placed, and fail with the reason the simulation gave
for the others: zero disagreements.

The plugin processes (one per node configuration) are reused: after each
case every claim is unprepared, which puts the node back as it was (MPS
daemons stopped, time-slices reset, dynamic MIG instances destroyed).
"""

from __future__ import annotations

import copy
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest
import yaml

from dra_driver.composition.simulated_nodes import build_simulated_nodes
from dra_driver.node.consumable_shares import parse_consumable_shares
from dra_driver.scheduling.whatif.claims import claim_uid
from dra_driver.scheduling.whatif.command import ScenarioOptions, load_scenario, parse_features
from dra_driver.scheduling.whatif.engine import Simulation, build_workload
from kubelet_plugin.service import ClaimRef
from tests.fakes import PluginProcess

pytestmark = pytest.mark.slow

ROOT: Final = Path(__file__).resolve().parents[4]
SEED: Final = 20261126
CASES: Final = 240
API: Final = "resource.nvidia.com/v1beta1"


@dataclass(frozen=True)
class NodeConfig:
    """A simulated node and the plugin flags it runs with (simulate's flags to match)."""

    name: str
    shape: str
    plugin_args: tuple[str, ...] = ()
    simulate_args: Mapping[str, Any] = field(default_factory=dict)

    @property
    def node_name(self) -> str:
        return f"{Path(self.shape).stem if self.shape.endswith('.yaml') else self.shape}-0"


NODES: Final = {
    "whole": NodeConfig("whole", "dgx-h100"),
    "shares": NodeConfig(
        "shares",
        "dgx-h100",
        ("--consumable-shares", "4"),
        {"consumable_shares": parse_consumable_shares("4"), "release": "1.36"},
    ),
    "dynamic": NodeConfig(
        "dynamic",
        "dgx-h100",
        ("--dynamic-mig",),
        {"mig": "dynamic", "feature_gates": "DRAPartitionableDevices=true"},
    ),
    "static": NodeConfig("static", str(ROOT / "examples/shapes/dgx-a100-40gb-balanced.yaml")),
    "vfio": NodeConfig(
        "vfio", "dgx-h100", ("--passthrough", "--no-device-health-checks"), {"passthrough": True}
    ),
}


# ---------------------------------------------------------------- the corpus


def _gpu_config(kind: str = "GpuConfig", **fields: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, **fields}


def _ts(interval: str | None = None, kind: str = "GpuConfig") -> dict[str, Any]:
    sharing: dict[str, Any] = {"strategy": "TimeSlicing"}
    if interval is not None:
        sharing["timeSlicingConfig"] = {"interval": interval}
    return _gpu_config(kind, sharing=sharing)


def _mps(kind: str = "GpuConfig", **mps: Any) -> dict[str, Any]:
    sharing: dict[str, Any] = {"strategy": "MPS"}
    if mps:
        sharing["mpsConfig"] = mps
    return _gpu_config(kind, sharing=sharing)


VALID_GPU: Final = [
    None,
    _gpu_config(),
    _ts(),
    _ts("Short"),
    _ts("Medium"),
    _ts("Long"),
    _mps(),
    _mps(defaultActiveThreadPercentage=50),
    _mps(defaultPinnedDeviceMemoryLimit="8Gi"),
    _mps(multiUser=True),
]
INVALID_GPU: Final = [  # what `kubectl apply` accepts (opaque) and the node refuses
    _gpu_config(sharing={"strategy": "TimeSliced"}),
    _gpu_config(sharing={"strategy": "TimeSlicing", "timeSlicingConfg": {"interval": "Long"}}),
    _ts("Longest"),
    {**_ts("Short"), "kind": "GpuConfigg"},
    {**_ts("Short"), "apiVersion": "v1"},
    {"kind": "GpuConfig", "sharing": {"strategy": "MPS"}},  # no apiVersion
    {**_gpu_config(), "sharingg": {"strategy": "MPS"}},
    _gpu_config(sharing={"timeSlicingConfig": {"interval": "Long"}}),  # no strategy
    _mps(defaultActiveThreadPercentage=150),
    _mps(defaultPinnedDeviceMemoryLimit="1Ki"),
    _mps(defaultPerDevicePinnedMemoryLimit={"0": "not-a-quantity"}),
    _mps(multiUser="maybe"),
    _ts("Short", kind="MigDeviceConfig"),  # a MigDeviceConfig naming a whole GPU's request
]
VALID_MIG: Final = [
    None,
    _gpu_config("MigDeviceConfig"),
    _mps("MigDeviceConfig"),
    _mps("MigDeviceConfig", defaultActiveThreadPercentage=30),
    _ts(kind="MigDeviceConfig"),  # accepted and ignored, as NVIDIA's driver does
]
INVALID_MIG: Final = [
    _ts("Long"),  # a GpuConfig naming a MIG device's request
    _mps(),
    {**_mps("MigDeviceConfig"), "apiVersion": "resource.nvidia.com/v1"},
    _mps("MigDeviceConfig", defaultActiveThreadPercentage=-1),
    _gpu_config("MigDeviceConfig", sharing={"strategy": "TimeSlicing", "mpsConfig": "x"}),
]


def _vfio(policy: str | None = None, api_device: Any = None, **fields: Any) -> dict[str, Any]:
    iommu: dict[str, Any] = {}
    if policy is not None:
        iommu["backendPolicy"] = policy
    if api_device is not None:
        iommu["enableAPIDevice"] = api_device
    return _gpu_config("VfioDeviceConfig", **({"iommu": iommu} if iommu else {}), **fields)


VALID_VFIO: Final = [
    None,
    _vfio(),
    _vfio("LegacyOnly", True),
    _vfio("PreferIommuFD"),
    _vfio("PreferIommuFD", True),
    _vfio("", False),
]
INVALID_VFIO: Final = [
    _vfio("IommuFDOnly"),
    _vfio("LegacyOnly", "yes"),
    _gpu_config("VfioDeviceConfig", iommu={"backend": "LegacyOnly"}),
    _vfio(sharing={"strategy": "TimeSlicing"}),
    _ts("Long"),  # a GpuConfig naming a vfio device's request
    {**_vfio(), "apiVersion": "resource.nvidia.com/v1"},
]


def _kubevirt_claim() -> dict[str, Any]:
    """KubeVirt's example claim (examples/vm-gpu-passthrough.yaml) as a ResourceClaim."""
    docs = yaml.safe_load_all((ROOT / "examples/vm-gpu-passthrough.yaml").read_text())
    (template,) = [d for d in docs if d and d["kind"] == "ResourceClaimTemplate"]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": "x"},
        "spec": copy.deepcopy(template["spec"]["spec"]),
    }


def _claim(
    name: str,
    device_class: str,
    *,
    count: int = 1,
    selector: str | None = None,
    config: Mapping[str, Any] | None = None,
    named: bool = True,
    capacity: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "count": count}
    if selector:
        exactly["selectors"] = [{"cel": {"expression": selector}}]
    if capacity:
        exactly["capacity"] = {"requests": dict(capacity)}
    devices: dict[str, Any] = {"requests": [{"name": "dev", "exactly": exactly}]}
    if config is not None:
        entry: dict[str, Any] = {"opaque": {"driver": "gpu.nvidia.com", "parameters": config}}
        if named:
            entry["requests"] = ["dev"]
        devices["config"] = [entry]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"namespace": "default", "name": name},
        "spec": {"devices": devices},
    }


def _profile(name: str) -> str:
    return f"device.attributes['gpu.nvidia.com'].profile == '{name}'"


@dataclass(frozen=True)
class Case:
    number: int
    node: NodeConfig
    claims: tuple[dict[str, Any], ...]
    what: str


def corpus(seed: int = SEED, size: int = CASES) -> list[Case]:
    """The seeded cases: every mutation above on every node type it applies to, then random."""
    rng = random.Random(seed)
    cases: list[Case] = []

    def add(node: str, what: str, *claims: dict[str, Any]) -> None:
        number = len(cases)
        named = []
        for index, original in enumerate(claims):
            claim = copy.deepcopy(original)
            claim["metadata"]["name"] = f"c{number}-{index}"
            named.append(claim)
        cases.append(Case(number, NODES[node], tuple(named), what))

    def gpu_case(node: str, config: Any, count: int, named: bool) -> None:
        add(
            node,
            f"{count} GPU(s), config {config}",
            _claim("x", "gpu.nvidia.com", count=count, config=config, named=named),
        )

    for config in VALID_GPU + INVALID_GPU:
        gpu_case("whole", config, 1, True)
        gpu_case("whole", config, 2, True)  # MPS on two GPUs: refused
        gpu_case("whole", config, 1, False)
    for config in VALID_MIG + INVALID_MIG:
        add(
            "dynamic",
            f"MIG 1g.10gb, config {config}",
            _claim("x", "mig.nvidia.com", selector=_profile("1g.10gb"), config=config),
        )
        add(
            "static",
            f"static MIG 1g.5gb, config {config}",
            _claim("x", "mig.nvidia.com", selector=_profile("1g.5gb"), config=config),
        )
        add(
            "dynamic",
            f"two MIG devices, config {config}",
            _claim("x", "mig.nvidia.com", count=2, selector=_profile("1g.10gb"), config=config),
        )
    intervals = ["Default", "Short", "Medium", "Long"]
    for first in intervals:  # two claims sharing one GPU through shares: one interval per GPU
        for second in intervals:
            add(
                "shares",
                f"time-slicing {first} then {second} on one shared GPU",
                _claim("x", "gpu.nvidia.com", capacity={"shares": "2"}, config=_ts(first)),
                _claim("y", "gpu.nvidia.com", capacity={"shares": "2"}, config=_ts(second)),
            )
    for first, second in [(False, True), (True, False), (True, True), (False, False)]:
        add(
            "shares",
            f"MPS multiUser {first} then {second} on one shared GPU",
            _claim("x", "gpu.nvidia.com", capacity={"shares": "2"}, config=_mps(multiUser=first)),
            _claim("y", "gpu.nvidia.com", capacity={"shares": "2"}, config=_mps(multiUser=second)),
        )
    add(
        "shares",
        "MPS then time-slicing on one shared GPU",
        _claim("x", "gpu.nvidia.com", capacity={"shares": "2"}, config=_mps()),
        _claim("y", "gpu.nvidia.com", capacity={"shares": "2"}, config=_ts("Long")),
    )
    add("vfio", "KubeVirt's example claim", _kubevirt_claim())
    for config in VALID_VFIO + INVALID_VFIO:
        add(
            "vfio",
            f"passthrough GPU, config {config}",
            _claim("x", "vfio.gpu.nvidia.com", config=config),
        )
    add("vfio", "two passthrough GPUs", _claim("x", "vfio.gpu.nvidia.com", count=2))
    for first, second in [("vfio", "gpu"), ("gpu", "vfio")]:  # the scheduler may pick one GPU
        add(
            "vfio",
            f"a {first} claim then a {second} claim",
            _claim("x", f"{first}.gpu.nvidia.com" if first == "vfio" else "gpu.nvidia.com"),
            _claim("y", f"{second}.gpu.nvidia.com" if second == "vfio" else "gpu.nvidia.com"),
        )
    add(
        "vfio",
        "a passthrough GPU next to four whole GPUs",
        _claim("x", "gpu.nvidia.com", count=4),
        _claim("y", "vfio.gpu.nvidia.com", config=_vfio("PreferIommuFD", True)),
    )
    while len(cases) < size:  # random mixes: a few claims, any configs, any node
        node = rng.choice(["whole", "shares", "dynamic", "static"])
        claims = []
        for _ in range(rng.randint(1, 3)):
            if node in ("dynamic", "static") and rng.random() < 0.6:
                profile = "1g.10gb" if node == "dynamic" else rng.choice(["1g.5gb", "2g.10gb"])
                config = rng.choice(VALID_MIG + INVALID_MIG + VALID_GPU[:3])
                claims.append(
                    _claim(
                        "x",
                        "mig.nvidia.com",
                        selector=_profile(profile),
                        config=config,
                        named=rng.random() < 0.8,
                    )
                )
            else:
                config = rng.choice(VALID_GPU + INVALID_GPU)
                capacity = {"shares": str(rng.randint(1, 3))} if node == "shares" else None
                claims.append(
                    _claim(
                        "x",
                        "gpu.nvidia.com",
                        count=rng.choice([1, 1, 2]),
                        config=config,
                        named=rng.random() < 0.8,
                        capacity=capacity,
                    )
                )
        add(node, "random mix", *claims)
    return cases  # fmt: skip


# ---------------------------------------------------------------- the two sides


@dataclass(frozen=True)
class Verdict:
    claim: str
    allocation: Mapping[str, Any] | None  # what the scheduler picked (placed or not)
    placed: bool
    reason: str


def simulate(case: Case, tmp_path: Path) -> list[Verdict]:
    """Each claim of `case` through `dra-gpu simulate`'s engine, with the scheduler's pick
    (which stays allocated when the node refuses the claim, as in a cluster)."""
    path = tmp_path / f"case-{case.number}.yaml"
    path.write_text(yaml.safe_dump_all(case.claims, sort_keys=False))
    options = ScenarioOptions(
        build_nodes=build_simulated_nodes,
        files=[str(path)],
        nodes=f"{case.node.shape}=1",
        **case.node.simulate_args,
    )
    features = parse_features(
        options.feature_gates, options.release, consumable_shares=options.consumable_shares
    )
    scenario = load_scenario(options)
    workload = build_workload(scenario.inputs, scenario.classes, features)
    simulation = Simulation(
        slices=scenario.slices,
        classes=scenario.classes,
        nodes=scenario.nodes,
        claims=workload.claims,
        features=features,
        node_checks=scenario.node_checks,
    )
    verdicts = []
    for placement in simulation.run(workload.items):
        (outcome,) = placement.claims  # one standalone claim per item
        verdicts.append(
            Verdict(outcome.key, outcome.allocation, placement.placed, placement.reason)
        )
    return verdicts


def _uid(key: str) -> str:
    namespace, name = key.split("/", 1)
    return claim_uid(namespace, name)


def prepare(plugin: PluginProcess, case: Case, verdicts: Sequence[Verdict]) -> list[str | None]:
    """The plugin's answer for each claim the scheduler could allocate (None: prepared)."""
    answers: list[str | None] = []
    refs = []
    for claim, verdict in zip(case.claims, verdicts, strict=True):
        if verdict.allocation is None:
            answers.append("not allocatable")
            continue
        uid = _uid(verdict.claim)
        stored = copy.deepcopy(claim)
        stored["metadata"]["uid"] = uid
        stored["status"] = {"allocation": copy.deepcopy(dict(verdict.allocation))}
        plugin.store_claim(stored)
        ref = ClaimRef("default", uid, stored["metadata"]["name"])
        refs.append(ref)
        result = plugin.client.prepare([ref])[uid]
        answers.append(result.error or None)
    for ref in reversed(refs):
        plugin.client.unprepare([ref])
        plugin.cluster.delete_resource_claim(ref.namespace, ref.name)
    return answers


@pytest.fixture(scope="module")
def plugins() -> Iterator[dict[str, PluginProcess]]:
    started: dict[str, PluginProcess] = {}
    try:
        for key, node in NODES.items():
            plugin = PluginProcess(
                node_name=node.node_name, shape=node.shape, extra_args=node.plugin_args,
                prefix=f"dra-diff-{key}-",
            )  # fmt: skip
            plugin.start()
            started[key] = plugin
        yield started
    finally:
        for plugin in started.values():
            plugin.kill_mps_daemons()
            plugin.close()


def test_the_corpus_is_large_and_covers_the_mutations() -> None:
    cases = corpus()
    assert len(cases) >= 200
    assert sum(len(case.claims) for case in cases) >= 300
    assert len({case.node.name for case in cases}) == len(NODES)


@pytest.mark.timeout(1200)
def test_simulate_places_exactly_what_the_plugin_prepares(
    plugins: dict[str, PluginProcess], tmp_path: Path
) -> None:
    disagreements: list[str] = []
    checked = refused = 0
    for case in corpus():
        verdicts = simulate(case, tmp_path)
        answers = prepare(plugins[case.node.name], case, verdicts)
        for verdict, answer in zip(verdicts, answers, strict=True):
            if answer == "not allocatable":
                continue
            checked += 1
            prepared = answer is None
            refused += not prepared
            if prepared != verdict.placed:
                disagreements.append(
                    f"case {case.number} ({case.node.name}: {case.what}) {verdict.claim}: "
                    f"simulate {'placed' if verdict.placed else 'refused: ' + verdict.reason}; "
                    f"plugin {'prepared' if prepared else 'refused: ' + str(answer)}"
                )
            elif not prepared and answer not in verdict.reason:
                disagreements.append(
                    f"case {case.number} {verdict.claim}: simulate says {verdict.reason!r}, "
                    f"the plugin {answer!r}"
                )
    print(f"{len(corpus())} cases, {checked} claims compared, {refused} refused by the node")
    assert checked >= 300, checked
    assert refused >= 60, refused
    assert disagreements == [], f"{len(disagreements)} disagreements:\n" + "\n".join(
        disagreements[:40]
    )
