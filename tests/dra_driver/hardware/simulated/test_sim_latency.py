"""Simulated latencies: parsing, and that they do not hold the hardware lock.

Overlap is shown with barriers and events, never with wall-clock thresholds: the
injected `sleep` blocks until the other operations are inside their own sleep,
which can only happen if no lock is held while sleeping.
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dra_driver.errors import ConfigError
from dra_driver.hardware.nvml.interface import Placement
from dra_driver.hardware.simulated.hardware import SimHardware, parse_latency
from dra_driver.hardware.simulated.shapes import load_shape


def test_parse_latency():
    assert parse_latency("gi-create=1,gi-destroy=1,ci-create=0.1") == {
        "gi-create": 1.0,
        "gi-destroy": 1.0,
        "ci-create": 0.1,
    }
    assert parse_latency(" ci-destroy = 0.5 , mig-mode=2 ,") == {"ci-destroy": 0.5, "mig-mode": 2.0}
    assert parse_latency("") == {}


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("gi-create", "expected <operation>=<seconds>"),
        ("gi-create=fast", "'fast' is not a number"),
        ("gi-create=-1", "not a number of seconds >= 0"),
        ("gi-create=nan", "not a number of seconds >= 0"),
        ("gpu-reset=1", "unknown operation 'gpu-reset'"),
        ("gi-create=1,gi-create=2", "given twice"),
    ],
)
def test_parse_latency_errors(text: str, fragment: str):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        parse_latency(text)


def test_unknown_latency_key_is_refused_by_the_constructor():
    with pytest.raises(ConfigError, match="unknown operation"):
        SimHardware(load_shape("dgx-h100"), latency={"gi-create": 1, "boot": 3})


def test_each_mutation_sleeps_its_configured_latency():
    slept: list[float] = []
    latency = {"gi-create": 1.0, "gi-destroy": 2.0, "ci-create": 0.1, "ci-destroy": 0.2}
    hw = SimHardware(load_shape("dgx-h100"), latency=latency, sleep=slept.append)
    hw.set_mig_mode(0, True)  # no mig-mode latency configured: no sleep
    gi = hw.create_gpu_instance(0, 19, Placement(0, 1))
    ci = hw.create_compute_instance(0, gi.id, 0)
    hw.gpu_instances(0)  # queries never sleep
    hw.destroy_compute_instance(0, gi.id, ci.id)
    hw.destroy_gpu_instance(0, gi.id)
    assert slept == [1.0, 0.1, 0.2, 2.0]


def test_eight_gi_creates_on_eight_gpus_sleep_at_the_same_time(tmp_path: Path):
    barrier = threading.Barrier(8, timeout=10)

    def sleep(_: float) -> None:
        barrier.wait()  # breaks (and fails the create) unless all 8 are sleeping together

    hw = SimHardware(
        load_shape("dgx-a100-40gb"),
        state_path=tmp_path / "node.json",
        latency={"gi-create": 1.0},
        sleep=sleep,
    )
    errors: list[BaseException] = []

    def create(gpu: int) -> None:
        try:
            hw.create_gpu_instance(gpu, 0, Placement(0, 8))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=create, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert errors == []
    assert [len(hw.gpu_instances(i)) for i in range(8)] == [1] * 8


def test_queries_are_answered_while_an_operation_sleeps():
    entered, release = threading.Event(), threading.Event()

    def sleep(_: float) -> None:
        entered.set()
        assert release.wait(timeout=10)

    hw = SimHardware(load_shape("dgx-h100"), latency={"mig-mode": 5.0}, sleep=sleep)
    worker = threading.Thread(target=hw.set_mig_mode, args=(0, True))
    worker.start()
    assert entered.wait(timeout=10)
    answered: list[tuple[int, int]] = []
    reader = threading.Thread(target=lambda: answered.append(hw.mig_mode(0)))
    reader.start()
    reader.join(timeout=10)
    assert answered == [(0, 0)]  # read while the change was still "in flight"
    release.set()
    worker.join(timeout=10)
    assert hw.mig_mode(0) == (1, 1)
