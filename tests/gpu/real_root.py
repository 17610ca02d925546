"""The driver root the real-GPU tests use: `/`, or what `GPU_TEST_DRIVER_ROOT` names."""

from __future__ import annotations

import os

from dra_driver.container.driver_root import DriverRoot

DRIVER_ROOT_ENV = "GPU_TEST_DRIVER_ROOT"


def driver_root() -> DriverRoot:
    return DriverRoot(host_path=os.environ.get(DRIVER_ROOT_ENV) or "/")
