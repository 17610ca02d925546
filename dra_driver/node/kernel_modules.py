"""Loading `nvidia-uvm` and creating its device nodes, as NVIDIA's own stack does.

On a node whose driver was installed on the host after boot, before any
CUDA program ran, the `nvidia-uvm` module is not loaded yet: `/proc/devices`
has no `nvidia-uvm` line, and every claim's CDI spec needs that major for
`/dev/nvidia-uvm` and `/dev/nvidia-uvm-tools`. NVIDIA's stack loads the
module and creates the nodes: `nvidia-modprobe -u -c0` on the host, or
`nvidia-ctk system create-device-nodes --load-kernel-modules` in the
toolkit's and the GPU Operator's containers. The toolkit's `nvmodules` runs
`chroot <driver root> /sbin/modprobe <module>` (plain `/sbin/modprobe` for
the root `/`) for `nvidia`, `nvidia-uvm` and `nvidia-modeset`; its
`nvdevices` then makes the control nodes under `<driver root>/dev` with
mknod, leaving an existing node alone.

`KernelSetup.ensure()` does the same from the plugin's driver root, once at
start and again on first need (a Prepare that finds no `nvidia-uvm` major;
at most once every `RETRY_AFTER_S`): it loads `nvidia-uvm` (and
`nvidia-modeset`, whose node graphics containers use) where `/proc/devices`
lacks them, then creates what is missing of `/dev/nvidia-uvm` (minor 0),
`/dev/nvidia-uvm-tools` (minor 1) and the nvidia-caps `config`/`monitor`
nodes `/dev/nvidia-caps/nvidia-cap<minor>` (minors from
`/proc/driver/nvidia-caps/mig-minors`, modes from their capability files,
as `nvidia-modprobe -f` does). `SetupReport` says what was done and what
could not be; the plugin logs it, keeps serving when it failed, and posts a
node Event and a metric. `WHAT_TO_RUN` is what an admin runs instead.

The module loading and mknod stay behind narrow seams (`ModuleLoader`,
`make_node`): the real node runs modprobe, a simulated node changes its own
`/proc/devices` (`dra_driver.hardware.simulated`).
"""

from __future__ import annotations

import errno
import logging
import os
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from dra_driver.errors import CdiError, KernelModuleError
from dra_driver.node.host import HostInfo

log = logging.getLogger(__name__)

UVM: Final = "nvidia-uvm"
MODESET: Final = "nvidia-modeset"
RETRY_AFTER_S: Final = 60.0
MODPROBE: Final = "/sbin/modprobe"
MODPROBE_TIMEOUT_S: Final = 60.0
NODE_MODE: Final = 0o666  # the toolkit's mode for control nodes
WHAT_TO_RUN: Final = (
    "run `nvidia-modprobe -u -c0` on the node, or `nvidia-ctk system create-device-nodes "
    "--load-kernel-modules` (NVIDIA Container Toolkit), then retry"
)


class ModuleLoader(Protocol):
    """Loads one kernel module; raises `KernelModuleError` saying why it could not."""

    def load(self, module: str) -> None: ...


class Modprobe:
    """`ModuleLoader` of a real node: `[chroot <root>] /sbin/modprobe <module>` (nvmodules)."""

    def __init__(
        self,
        root: Path,
        run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run,
    ) -> None:
        self.root = Path(root)
        self._run = run

    def argv(self, module: str) -> list[str]:
        chroot = [] if self.root == Path("/") else ["chroot", str(self.root)]
        return [*chroot, MODPROBE, module]

    def load(self, module: str) -> None:
        if not module.startswith("nvidia"):
            raise KernelModuleError(f"{module!r}: not an NVIDIA kernel module")
        argv = self.argv(module)
        try:
            done = self._run(
                argv, capture_output=True, text=True, timeout=MODPROBE_TIMEOUT_S, check=False
            )
        except (OSError, subprocess.SubprocessError) as exc:
            raise KernelModuleError(f"`{' '.join(argv)}` could not run: {exc}") from exc
        if done.returncode != 0:
            said = " ".join((done.stderr or done.stdout or "").split())
            raise KernelModuleError(
                f"`{' '.join(argv)}` failed (exit status {done.returncode})"
                + (f": {said}" if said else "")
            )


@dataclass(frozen=True)
class NodeSpec:
    """A character device node to have under the dev root."""

    path: str  # below the dev root, e.g. "nvidia-uvm" or "nvidia-caps/nvidia-cap1"
    major: int
    minor: int
    mode: int


@dataclass(frozen=True)
class SetupReport:
    """What `KernelSetup.ensure()` found and did."""

    uvm_ready: bool  # `/proc/devices` lists nvidia-uvm now
    loaded: tuple[str, ...] = ()
    created: tuple[str, ...] = ()
    problems: tuple[str, ...] = ()

    @property
    def problem(self) -> str | None:
        """Why nvidia-uvm is not usable, for an error message (None when it is)."""
        if self.uvm_ready:
            return None
        return "; ".join(self.problems) or f"{UVM} is not loaded"

    def summary(self) -> str:
        done = [f"loaded {', '.join(self.loaded)}"] if self.loaded else []
        done += [f"created {', '.join(self.created)}"] if self.created else []
        text = "; ".join(done) or "nothing to do"
        return text + (f"; could not: {'; '.join(self.problems)}" if self.problems else "")


def control_nodes(host: HostInfo) -> list[NodeSpec]:
    """The nvidia-uvm and nvidia-caps control nodes the loaded modules call for."""
    majors = host.char_majors()
    nodes = []
    if UVM in majors:
        nodes += [
            NodeSpec(UVM, majors[UVM], 0, NODE_MODE),
            NodeSpec(f"{UVM}-tools", majors[UVM], 1, NODE_MODE),
        ]
    caps = majors.get("nvidia-caps")
    minors = host.mig_minors() if caps is not None else {}
    for cap in ("config", "monitor"):
        if cap not in minors or caps is None:
            continue
        mode = _cap_mode(host.proc_root / "driver" / "nvidia" / "capabilities" / "mig" / cap)
        nodes.append(NodeSpec(f"nvidia-caps/nvidia-cap{minors[cap]}", caps, minors[cap], mode))
    return nodes


def _cap_mode(path: Path) -> int:
    """`DeviceFileMode` of a capability file (0o444 where it cannot be read)."""
    try:
        for line in path.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition(":")
            if sep and key.strip() == "DeviceFileMode" and value.strip().isdigit():
                return int(value.strip()) & 0o777
    except (OSError, UnicodeDecodeError):
        pass
    return 0o444


def make_node(path: Path, major: int, minor: int, mode: int) -> None:
    """mknod a character device (mode exactly `mode`)."""
    os.mknod(path, stat.S_IFCHR | mode, os.makedev(major, minor))
    os.chmod(path, mode)


def create_nodes(
    dev_root: Path,
    nodes: Sequence[NodeSpec],
    mknod: Callable[[Path, int, int, int], None] = make_node,
) -> tuple[list[str], list[str]]:
    """Create the nodes missing under `dev_root`; (created paths, problems)."""
    created: list[str] = []
    problems: list[str] = []
    for node in nodes:
        path = dev_root / node.path
        if os.path.lexists(path):
            continue  # as the toolkit: an existing node is left alone
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            mknod(path, node.major, node.minor, node.mode)
        except OSError as exc:
            why = errno.errorcode.get(exc.errno or 0, "")
            problems.append(
                f"mknod {path} c {node.major} {node.minor}: {exc.strerror or exc} {why}"
            )
            continue
        created.append(str(path))
    return created, problems


class KernelSetup:
    """Loads nvidia-uvm and creates its nodes, at start and on first need (module docstring).

    `loader` None: this backend cannot load modules (nothing is tried).
    `dev_root` None: no device nodes are created. `on_report` is told each
    report of an attempt (the plugin's log, Event and metric).
    """

    def __init__(
        self,
        host: HostInfo,
        loader: ModuleLoader | None,
        dev_root: Path | None,
        *,
        mknod: Callable[[Path, int, int, int], None] = make_node,
        clock: Callable[[], float] = time.monotonic,
        on_report: Callable[[SetupReport], None] | None = None,
    ) -> None:
        self._host = host
        self._loader = loader
        self._dev_root = dev_root
        self._mknod = mknod
        self._clock = clock
        self._on_report = on_report
        self._lock = threading.Lock()
        self._last_try: float | None = None
        self._last: SetupReport | None = None

    def ensure(self) -> SetupReport:
        """Load what is missing and create the nodes; retried only after `RETRY_AFTER_S`."""
        with self._lock:
            if self._last is not None and self._last.uvm_ready and self.uvm_listed():
                return self._last
            if (
                self._last is not None
                and self._last_try is not None
                and self._clock() - self._last_try < RETRY_AFTER_S
                and not self.uvm_listed()
            ):
                return self._last
            self._last_try = self._clock()
            report = self._attempt()
            self._last = report
        if self._on_report is not None:
            self._on_report(report)
        return report

    def missing(self, name: str) -> str | None:
        """For `HostInfo.on_missing`: `name` is missing from /proc/devices. For nvidia-uvm,
        tries to load it (see `ensure`); returns why it is still missing and what to run,
        or None (loaded now, or not a module this class loads)."""
        if name != UVM:
            return None
        problem = self.ensure().problem
        return None if problem is None else f"{problem}; {WHAT_TO_RUN}"

    def uvm_listed(self) -> bool:
        """Whether /proc/devices lists nvidia-uvm now (one small read)."""
        try:
            return UVM in self._host.char_majors()
        except CdiError:
            return False

    def _attempt(self) -> SetupReport:
        try:
            majors = self._host.char_majors()
        except CdiError as exc:
            return SetupReport(uvm_ready=False, problems=(str(exc),))
        loaded: list[str] = []
        problems: list[str] = []
        if UVM not in majors:
            try:
                self._load(UVM)
                loaded.append(UVM)
            except KernelModuleError as exc:
                problems.append(str(exc))
        if MODESET not in majors and not self._modeset_loaded() and self._loader is not None:
            try:  # only graphics containers use /dev/nvidia-modeset: not a problem for Prepare
                self._loader.load(MODESET)
                loaded.append(MODESET)
            except KernelModuleError as exc:
                log.warning("%s is not loaded (graphics in containers needs it): %s", MODESET, exc)
        ready = self.uvm_listed()
        if UVM in loaded and not ready:
            problems.append(f"{UVM} was loaded but {self._host.proc_root}/devices does not list it")
        created: list[str] = []
        if self._dev_root is not None:
            try:
                nodes = control_nodes(self._host)
            except CdiError as exc:
                problems.append(str(exc))
                nodes = []
            made, node_problems = create_nodes(self._dev_root, nodes, self._mknod)
            created += made
            problems += node_problems
        return SetupReport(
            uvm_ready=ready, loaded=tuple(loaded), created=tuple(created), problems=tuple(problems)
        )

    def _load(self, module: str) -> None:
        if self._loader is None:
            raise KernelModuleError(f"{module} is not loaded, and this node cannot load modules")
        self._loader.load(module)

    def _modeset_loaded(self) -> bool:
        """nvidia-modeset registers no major of its own: /sys/module tells."""
        return (self._host.sys_root / "module" / "nvidia_modeset").exists()
