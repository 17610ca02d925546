"""One owner per node: rolling-upgrade peers share it, anyone else is refused with a reason."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from dra_driver.container.cdi_store import owner_of_data_dir
from dra_driver.errors import PluginError
from kubelet_plugin.node_ownership import own_node

DRIVER = "gpu.nvidia.com"


@contextmanager
def instance(
    tmp_path: Path, *, kubelet: str = "kubelet", rolling: bool, wait_s: float = 0.3
) -> Iterator[bool]:
    data_dir = tmp_path / kubelet / "plugins" / DRIVER
    with own_node(
        data_dir=data_dir,
        cdi_root=tmp_path / "cdi",
        driver_name=DRIVER,
        owner=owner_of_data_dir(DRIVER, data_dir),
        rolling_peer=rolling,
        wait_s=wait_s,
    ) as held:
        yield held


def test_rolling_upgrade_peers_share_the_node(tmp_path: Path) -> None:
    with instance(tmp_path, rolling=True) as old, instance(tmp_path, rolling=True) as new:
        assert old
        assert new
    assert (tmp_path / "cdi" / f".{DRIVER}.owner").read_text() == owner_of_data_dir(
        DRIVER, tmp_path / "kubelet" / "plugins" / DRIVER
    )


def test_an_instance_without_a_pod_uid_is_refused_beside_another(tmp_path: Path) -> None:
    refusal = r"without --pod-uid \(POD_UID\) this one is no"
    with (
        instance(tmp_path, rolling=True),
        pytest.raises(PluginError, match=refusal),
        instance(tmp_path, rolling=False),
    ):
        pass
    refusal = "an instance without a pod UID holds it alone"
    with (
        instance(tmp_path, rolling=False),
        pytest.raises(PluginError, match=refusal),
        instance(tmp_path, rolling=True),
    ):
        pass


def test_another_installation_on_the_same_cdi_directory_is_refused(tmp_path: Path) -> None:
    with (
        instance(tmp_path, rolling=True),
        pytest.raises(PluginError) as refused,
        instance(tmp_path, kubelet="other-kubelet", rolling=True),
    ):
        pass
    message = str(refused.value)
    assert f"the CDI directory {tmp_path / 'cdi'} is in use by another dra-gpu installation" in (
        message
    )
    assert str(tmp_path / "kubelet") in message  # names the other one
    with instance(tmp_path, kubelet="other-kubelet", rolling=True) as later:
        assert later  # once the first is gone, the CDI directory is free


def test_a_waiting_instance_gets_in_when_the_other_exits(tmp_path: Path) -> None:
    stack = ExitStack()
    stack.enter_context(instance(tmp_path, rolling=False))
    timer = threading.Timer(0.3, stack.close)
    timer.start()
    with instance(tmp_path, rolling=False, wait_s=10) as held:
        assert held
    timer.join()


def test_a_stop_while_waiting_gives_up_quietly(tmp_path: Path) -> None:
    stop = threading.Event()
    with instance(tmp_path, rolling=False):
        threading.Timer(0.2, stop.set).start()
        data_dir = tmp_path / "kubelet" / "plugins" / DRIVER
        with own_node(
            data_dir=data_dir,
            cdi_root=tmp_path / "cdi",
            driver_name=DRIVER,
            owner=owner_of_data_dir(DRIVER, data_dir),
            rolling_peer=False,
            stop=stop,
            wait_s=10,
        ) as held:
            assert held is False
