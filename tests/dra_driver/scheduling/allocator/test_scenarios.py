"""Runs every YAML scenario under scenarios/ against the allocator with the real CEL.

Each scenario file holds ResourceSlices, DeviceClasses, already-allocated
claims, the claims to allocate, a node, feature gates, and what the scheduler
would do: the exact `status.allocation` per claim, "does not fit", or an error.
Most are ports of upstream's allocatortesting cases (named in `upstream:`).
"""

from __future__ import annotations

import copy
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.errors import AllocationError
from dra_driver.scheduling.allocator import (
    AllocatedState,
    Allocator,
    ExplainRecorder,
    Features,
    Node,
)

SCENARIO_DIR = Path(__file__).parent / "scenarios"
SCENARIOS = sorted(SCENARIO_DIR.glob("*.yaml"))


def share_ids() -> Any:
    counter = itertools.count(1)
    return lambda: f"00000000-0000-4000-8000-{next(counter):012d}"


def expand_slices(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """`x-generate-devices: N` in a slice spec stands for devices device-0..device-N-1."""
    expanded = []
    for raw in slices:
        spec = dict(raw["spec"])
        count = spec.pop("x-generate-devices", None)
        if count is not None:
            spec["devices"] = [{"name": f"device-{i}"} for i in range(count)]
        expanded.append({**raw, "spec": spec})
    return expanded


def make_allocator(doc: dict[str, Any]) -> Allocator:
    return Allocator(
        expand_slices(doc["slices"]),
        doc["classes"],
        features=Features(**doc.get("features", {})),
        allocated=AllocatedState(doc.get("allocated", [])),
        share_id_factory=share_ids(),
    )


@pytest.mark.parametrize("path", SCENARIOS, ids=[p.stem for p in SCENARIOS])
def test_scenario(path: Path) -> None:
    doc = yaml.safe_load(path.read_text())
    pristine = copy.deepcopy(doc)
    node = Node(doc["node"]["name"], doc["node"].get("labels", {}))
    expect = doc["expect"]

    if "error" in expect:
        with pytest.raises(AllocationError) as info:
            make_allocator(doc).allocate(node, doc["claims"])
        assert expect["error"] in str(info.value)
        if "error_type" in expect:
            assert type(info.value).__name__ == expect["error_type"]
        return

    results = make_allocator(doc).allocate(node, doc["claims"])
    if expect.get("unsatisfiable"):
        assert results is None
    else:
        assert results == expect["results"]

    # Tracing must not change the outcome, and the inputs are never modified.
    recorder = ExplainRecorder()
    assert make_allocator(doc).allocate(node, doc["claims"], tracer=recorder) == results
    assert recorder.explanation.success is (results is not None)
    assert doc == pristine

    # The results are valid allocations: they can be recorded as allocated state.
    if results is not None:
        state = AllocatedState(doc.get("allocated", []))
        for claim, allocation in zip(doc["claims"], results, strict=True):
            state.add({**claim, "status": {"allocation": allocation}})


def test_scenarios_are_present() -> None:
    assert len(SCENARIOS) >= 100
