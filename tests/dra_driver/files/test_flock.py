"""The one file lock: exclusive, gives up after its timeout, stops when told."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from dra_driver.errors import CheckpointError, PluginError
from dra_driver.files.flock import file_lock


def test_a_held_lock_times_out_with_the_callers_error(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    with file_lock(path, timeout_s=5, error=PluginError) as held:
        assert held
        with (
            pytest.raises(CheckpointError, match=r"x\.lock: still locked by another process"),
            file_lock(path, timeout_s=0.05, error=CheckpointError),
        ):
            pass
    with file_lock(path, timeout_s=0, error=PluginError) as again:
        assert again  # released when the first block ended


def test_a_waiter_gets_the_lock_once_it_is_released(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    waiting = threading.Event()
    order: list[str] = []

    def second() -> None:
        with file_lock(path, timeout_s=10, error=PluginError, on_wait=waiting.set):
            order.append("second")

    with file_lock(path, timeout_s=1, error=PluginError):
        thread = threading.Thread(target=second)
        thread.start()
        assert waiting.wait(5)
        order.append("first")
    thread.join(10)
    assert order == ["first", "second"]


def test_a_stop_event_ends_an_unlimited_wait(tmp_path: Path) -> None:
    path = tmp_path / "x.lock"
    stop = threading.Event()
    with (
        file_lock(path, timeout_s=1, error=PluginError),
        file_lock(path, timeout_s=None, error=PluginError, stop=stop, on_wait=stop.set) as held,
    ):
        assert held is False


def test_an_unopenable_lock_file_is_the_callers_error(tmp_path: Path) -> None:
    with (
        pytest.raises(PluginError, match="cannot open lock file"),
        file_lock(tmp_path / "missing" / "x.lock", timeout_s=0, error=PluginError),
    ):
        pass
