"""`dra-gpu sim modules`: a simulated node without nvidia-uvm, as after a host driver install.

A node whose driver was installed on the host after boot, before any CUDA
program ran, has no `nvidia-uvm` module loaded and no `nvidia-uvm` line in
`/proc/devices`. This command makes a simulated node so (`--unload
nvidia-uvm`), and says what modprobe answers when the plugin tries to load
it (`--modprobe-error`; by default it loads, as on a node where the plugin
may load modules). Without `--unload` every module is loaded again, as
after `nvidia-modprobe -u -c0` by the admin. A node that does not exist yet
is booted from `--shape` in that state.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.errors import ConfigError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import sim_proc_root
from dra_driver.hardware.simulated.shapes import load_shape

MODULES = ("nvidia-uvm",)  # the modules a simulated node can be without


def set_modules(
    sim_state: Path,
    *,
    unload: list[str],
    modprobe_error: str = "",
    shape: str | None = None,
    node_name: str = "sim-node",
) -> int:
    """Set which modules the node lacks and what modprobe says; prints the outcome."""
    if not sim_state.is_file() and shape is None:
        raise ConfigError(f"--sim-state {sim_state}: no such state file (give --shape to boot one)")
    for module in unload:
        if module not in MODULES:
            raise ConfigError(f"--unload {module!r}: expected one of {', '.join(MODULES)}")
    hw = SimHardware(
        load_shape(shape) if shape is not None else None,
        node_name=node_name,
        state_path=sim_state,
        proc_root=sim_proc_root(sim_state),
    )
    hw.set_modules(unloaded=unload, modprobe_error=modprobe_error)
    if not unload:
        print("every kernel module is loaded")
        return 0
    refusal = f"; modprobe fails: {modprobe_error}" if modprobe_error else "; modprobe loads them"
    print(f"not loaded: {', '.join(sorted(set(unload)))}{refusal}")
    return 0
