"""Where a simulated node keeps its files: next to its hardware state file.

Every process that opens the same simulated node (the plugin, `dra-gpu
status`, `mig status`, the tests) finds its fake `/proc` and its fake
driver root from the state file's path alone.
"""

from __future__ import annotations

from pathlib import Path


def sim_proc_root(sim_state: Path) -> Path:
    """Where the fake `/proc` of a simulated node with state file `sim_state` lives."""
    return sim_state.with_name(sim_state.name + ".proc")


def sim_sys_root(sim_state: Path) -> Path:
    """Where the fake `/sys` (DRM nodes) of a simulated node with state file `sim_state` lives."""
    return sim_state.with_name(sim_state.name + ".sys")


def sim_driver_root(sim_state: Path) -> Path:
    """Where the fake driver root of a simulated node with state file `sim_state` lives."""
    return sim_state.with_name(sim_state.name + ".driver-root")


def sim_dev_root(sim_state: Path) -> Path:
    """Where the fake `/dev` (the VFIO nodes) of a simulated node with state file `sim_state`
    lives."""
    return sim_state.with_name(sim_state.name + ".dev")
