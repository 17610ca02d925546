"""The plugin daemon in a child process, with the powers only tests need.

`dra_driver.composition.plugin_process.PluginProcess` (production code, used by
`dra-gpu demo`) runs the real daemon on a simulated node; this subclass adds
a node reboot, the plugin's peak memory and a crash at a failpoint for the tests and
benchmarks.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import grpc

from dra_driver.composition.child_process import Spawn
from dra_driver.composition.plugin_process import PLUGIN_START_TIMEOUT_S
from dra_driver.composition.plugin_process import PluginProcess as RuntimePluginProcess
from dra_driver.errors import PluginError
from dra_driver.hardware.simulated.hardware import SimHardware
from dra_driver.hardware.simulated.node_files import sim_proc_root
from kubelet_plugin.service import ClaimRef
from tests.fakes import zygote

__all__ = ["PLUGIN_START_TIMEOUT_S", "PluginProcess"]


class PluginProcess(RuntimePluginProcess):
    """`dra_driver.composition.plugin_process.PluginProcess` plus `reboot_node`, `rss_peak_kib` and
    `crash_during`; the plugin and its MPS host are forked from the test process's zygote
    (`tests.fakes.zygote`) unless `spawn` says otherwise, and failpoints can be armed while
    it runs (`armable`; the benchmarks that time calls turn it off)."""

    def __init__(
        self, *, spawn: Spawn = zygote.spawn, armable: bool = True, **options: Any
    ) -> None:
        super().__init__(spawn=spawn, armable=armable, **options)

    def crash_during(self, call: str, ref: ClaimRef, step: str) -> None:
        """Arm the failpoint `step` in the running plugin, make the `call` ("prepare" or
        "unprepare") for `ref`, and check that the plugin died right there: the kubelet saw
        UNAVAILABLE and the process was SIGKILLed. PluginError otherwise."""
        self.arm([step])
        rpc = self.client.prepare if call == "prepare" else self.client.unprepare
        try:
            rpc([ref])
        except grpc.RpcError as exc:
            if exc.code() != grpc.StatusCode.UNAVAILABLE:
                raise PluginError(
                    f"{call} at {step} failed with {exc.code()}, not UNAVAILABLE"
                ) from exc
        else:
            raise PluginError(f"{call} of {ref.name} succeeded although {step} was armed")
        code = self.wait_exit()
        if code != -signal.SIGKILL:
            raise PluginError(f"plugin exited with {code} at {step}; log:\n{self.log_tail()}")

    def reboot_node(self) -> str:
        """Simulate a node reboot; returns the new boot id.

        The plugin dies (SIGKILL) if it runs, and the simulated hardware gets
        a new boot id in its fake /proc (MIG instances are gone, as after a
        power cycle). Files under the work directory stay, as a persistent
        disk's would. Call `start()` to bring the plugin back.
        """
        if self.process is not None and self.process.poll() is None:
            self.kill()
        hardware = SimHardware(state_path=self.sim_state, proc_root=sim_proc_root(self.sim_state))
        hardware.reboot()
        return hardware.boot_id()

    def rss_peak_kib(self) -> int:
        """The plugin's peak resident set size so far (VmHWM in /proc/<pid>/status), in KiB."""
        status = Path(f"/proc/{self.pid}/status").read_text(encoding="ascii")
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise PluginError(f"/proc/{self.pid}/status has no VmHWM line")
