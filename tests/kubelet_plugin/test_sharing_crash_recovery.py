"""Time-slicing survives the plugin being SIGKILLed at each of its steps.

The real plugin process is armed with a failpoint of
`dra_driver.failpoints.SHARING_PREPARE_STEPS` / `SHARING_UNPREPARE_STEPS`
and dies there mid-RPC. After a restart and the kubelet's retry, no
time-slice interval is leaked (left on a GPU no claim wants it on) or lost
(missing on a GPU a prepared claim wants it on), and nothing else is left.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_driver import failpoints
from tests.fakes import PluginProcess
from tests.kubelet_plugin.test_crash_recovery import _crash_during
from tests.kubelet_plugin.test_sharing_over_socket import (
    SHARE_A,
    SHARE_B,
    assert_nothing_left,
    gpu_uuid,
    hardware,
    prepare_error,
    share,
    store,
    time_slice,
    time_slicing,
    unprepare,
)

pytestmark = pytest.mark.slow

LONG = 3


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(  # time-slicing and shares only: no MPS host
        extra_args=["--consumable-shares=2"], mps_host=False
    ) as process:
        yield process


@pytest.mark.parametrize("step", failpoints.SHARING_PREPARE_STEPS)
def test_crash_after_setting_the_interval_leaks_nothing(plugin: PluginProcess, step: str) -> None:
    victim = store(plugin, 1, [("gpu", "gpu-0")], (time_slicing("Long"),))

    _crash_during(plugin, "prepare", victim, step)
    assert time_slice(plugin, 0) == LONG  # set, and the plugin died before answering
    plugin.restart()

    assert time_slice(plugin, 0) == 0  # the half-prepared claim was rolled back
    assert prepare_error(plugin, victim) == ""  # the kubelet retries
    assert time_slice(plugin, 0) == LONG
    unprepare(plugin, victim)
    assert time_slice(plugin, 0) == 0
    assert_nothing_left(plugin)


@pytest.mark.parametrize("step", failpoints.SHARING_PREPARE_STEPS)
def test_crash_while_sharing_a_gpu_keeps_the_other_claims_interval(
    plugin: PluginProcess, step: str
) -> None:
    survivor = store(plugin, 1, [share("gpu-0", SHARE_A)], (time_slicing("Long"),))
    victim = store(plugin, 2, [share("gpu-0", SHARE_B)], (time_slicing("Long"),))
    assert prepare_error(plugin, survivor) == ""

    _crash_during(plugin, "prepare", victim, step)
    plugin.restart()

    assert time_slice(plugin, 0) == LONG  # the survivor still wants it: not reset
    unprepare(plugin, victim)  # the kubelet gave up on the pod instead
    assert time_slice(plugin, 0) == LONG
    unprepare(plugin, survivor)
    assert time_slice(plugin, 0) == 0
    assert_nothing_left(plugin)


@pytest.mark.parametrize("retry", ["unprepare", "prepare"])
@pytest.mark.parametrize("step", failpoints.SHARING_UNPREPARE_STEPS)
def test_crash_after_resetting_the_interval_then_retry(
    plugin: PluginProcess, step: str, retry: str
) -> None:
    # The kubelet repeats Unprepare, or prepares the claim again for a new pod.
    victim = store(plugin, 1, [("gpu", "gpu-0")], (time_slicing("Short"),))
    assert prepare_error(plugin, victim) == ""

    _crash_during(plugin, "unprepare", victim, step)
    plugin.restart()

    assert time_slice(plugin, 0) == 0  # recovery finished the Unprepare
    if retry == "prepare":
        assert prepare_error(plugin, victim) == ""
        assert time_slice(plugin, 0) == 1  # Short
    unprepare(plugin, victim)
    assert time_slice(plugin, 0) == 0
    assert_nothing_left(plugin)


def test_an_interval_lost_while_the_plugin_was_down_is_restored(plugin: PluginProcess) -> None:
    ref = store(plugin, 1, [("gpu", "gpu-0")], (time_slicing("Medium"),))
    assert prepare_error(plugin, ref) == ""
    plugin.kill()
    hardware(plugin).set_time_slice(gpu_uuid(plugin, 0), 0)  # e.g. an admin ran nvidia-smi

    plugin.start()

    assert time_slice(plugin, 0) == 2
    unprepare(plugin, ref)
    assert time_slice(plugin, 0) == 0
    assert_nothing_left(plugin)
