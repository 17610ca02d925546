"""VFIO passthrough survives a failure or a SIGKILL of the plugin at each of its steps.

The real plugin process on a simulated node is armed with each failpoint of
the claim transaction and of `dra_driver.failpoints.VFIO_PREPARE_STEPS` /
`VFIO_UNPREPARE_STEPS`: killed there (`<step>`), or made to fail there
(`fail:<step>`). Whatever step it reached, the GPU ends up on the nvidia
driver with no driver_override, no checkpoint entry or CDI spec is left, and
the GPU serves the next claim, whole or passed through (#1255 in NVIDIA's
driver: a failed VFIO prepare left the GPU half-configured).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest

from dra_driver import failpoints
from tests.fakes import PluginProcess
from tests.kubelet_plugin.test_vfio_passthrough import (
    PASSTHROUGH,
    SHAPE,
    address,
    assert_nothing_left,
    on_nvidia,
    pci,
    prepare_error,
    store,
    unprepare,
    vfio_config,
    whole_gpu,
)

pytestmark = pytest.mark.slow

PREPARE_STEPS = (*failpoints.PREPARE_STEPS, *failpoints.VFIO_PREPARE_STEPS)


@pytest.fixture
def plugin() -> Iterator[PluginProcess]:
    with PluginProcess(shape=SHAPE, extra_args=PASSTHROUGH, mps_host=False) as process:
        yield process


def assert_usable(plugin: PluginProcess, index: int) -> None:
    """The GPU at PCI index `index` serves a container claim, then a VM claim again."""
    container = store(plugin, 8, [("gpu", whole_gpu(plugin, index))])
    assert prepare_error(plugin, container) == ""
    unprepare(plugin, container)
    vm = store(plugin, 9, [("gpu", f"gpu-vfio-{index}")], (vfio_config("PreferIommuFD"),))
    assert prepare_error(plugin, vm) == ""
    assert pci(plugin).driver(address(plugin, index)) == "vfio-pci"
    unprepare(plugin, vm)
    assert_nothing_left(plugin)


@pytest.mark.parametrize("step", PREPARE_STEPS)
def test_a_crash_at_any_step_of_prepare_leaves_the_gpu_on_nvidia(
    plugin: PluginProcess, step: str
) -> None:
    victim = store(plugin, 1, [("gpu", "gpu-vfio-0")], (vfio_config(),))

    plugin.crash_during("prepare", victim, step)
    plugin.restart()

    if step == "prepare-after-checkpoint-completed":  # prepared: the VM keeps its GPU
        assert pci(plugin).driver(address(plugin, 0)) == "vfio-pci"
    else:
        assert on_nvidia(plugin, 0)  # rolled back at start-up
        checkpoint = plugin.checkpoint()
        assert checkpoint is None or victim.uid not in checkpoint.claims
        assert plugin.cdi_files() == []
    assert prepare_error(plugin, victim) == ""  # the kubelet retries
    assert pci(plugin).driver(address(plugin, 0)) == "vfio-pci"
    unprepare(plugin, victim)
    assert_nothing_left(plugin)
    assert_usable(plugin, 0)


@pytest.mark.parametrize("step", failpoints.VFIO_PREPARE_STEPS)
def test_a_failure_at_any_step_of_prepare_rolls_back_to_nvidia_with_a_clear_error(
    plugin: PluginProcess, step: str
) -> None:
    victim = store(plugin, 1, [("gpu", "gpu-vfio-1")])
    plugin.arm([f"fail:{step}"])

    error = prepare_error(plugin, victim)

    assert f"failpoint {step}: injected failure" in error
    assert on_nvidia(plugin, 1)
    assert_nothing_left(plugin)
    plugin.arm([])
    assert_usable(plugin, 1)


@pytest.mark.parametrize("retry", ["unprepare", "prepare"])
@pytest.mark.parametrize("step", [*failpoints.VFIO_UNPREPARE_STEPS, *failpoints.UNPREPARE_STEPS])
def test_a_crash_at_any_step_of_unprepare_is_finished_at_start_up(
    plugin: PluginProcess, step: str, retry: str
) -> None:
    victim = store(plugin, 1, [("gpu", "gpu-vfio-2")])
    assert prepare_error(plugin, victim) == ""

    plugin.crash_during("unprepare", victim, step)
    plugin.restart()

    assert on_nvidia(plugin, 2)  # recovery finished the Unprepare
    if retry == "prepare":  # or the kubelet prepares the claim again for a new pod
        assert prepare_error(plugin, victim) == ""
    unprepare(plugin, victim)
    assert_nothing_left(plugin)
    assert_usable(plugin, 2)


@pytest.mark.parametrize("step", failpoints.VFIO_UNPREPARE_STEPS)
def test_a_failed_unprepare_is_retried_until_the_gpu_is_back(
    plugin: PluginProcess, step: str
) -> None:
    victim = store(plugin, 1, [("gpu", "gpu-vfio-3")])
    assert prepare_error(plugin, victim) == ""
    plugin.arm([f"fail:{step}"])

    (result,) = plugin.client.unprepare([victim]).values()

    assert f"failpoint {step}: injected failure" in result.error
    plugin.arm([])
    unprepare(plugin, victim)  # the kubelet retries
    assert on_nvidia(plugin, 3)
    assert_nothing_left(plugin)
    assert_usable(plugin, 3)


def test_a_lost_checkpoint_is_rebuilt_and_the_gpu_still_comes_back(
    plugin: PluginProcess,
) -> None:
    vm = store(plugin, 1, [("gpu", "gpu-vfio-4")], (vfio_config("PreferIommuFD", True),))
    assert prepare_error(plugin, vm) == ""
    plugin.kill()
    shutil.rmtree(plugin.checkpoint_dir)  # the node lost the plugin's data directory

    plugin.start()  # rebuilt from the record in the claim's CDI spec

    checkpoint = plugin.checkpoint()
    assert checkpoint is not None
    (device,) = checkpoint.claims[vm.uid].devices
    assert device.vfio is not None
    assert device.vfio.taken
    assert device.vfio.iommufd_cdev == pci(plugin).iommufd_cdev(address(plugin, 4))
    unprepare(plugin, vm)
    assert on_nvidia(plugin, 4)
    assert_nothing_left(plugin)
