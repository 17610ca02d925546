"""A fake `/proc` tree that mirrors the simulated hardware.

The kubelet plugin reads four things from procfs that NVML does not tell it:
the dynamic majors in `/proc/devices` (the ComputeDomain plugin: that of
`nvidia-caps-imex-channels`, and the `fabric-imex-mgmt` capability), the MIG capability minors under
`/proc/driver/nvidia/capabilities/` (and the static table of every possible
one in `/proc/driver/nvidia-caps/mig-minors`), the boot id, and which pod a GPU
process belongs to (`/proc/<pid>/cgroup` of each simulated workload, as a
cgroup v2 node with the systemd driver, kubeadm's default, shows it). `dra_driver.node.host`
reads them below a configurable root, so the simulator writes the same files,
in the same formats as the kernel module, below its own root and keeps them in
step with the instances that exist (files appear on create and disappear on
destroy). Writes are atomic so a concurrent reader never sees half a file.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Collection
from pathlib import Path

from dra_driver.errors import ConfigError
from dra_driver.files.atomic import atomic_write, remove_file
from dra_driver.hardware.simulated import rules
from dra_driver.hardware.simulated.state import NodeState

# Dynamic majors as seen on real hosts (§5 examples and public /proc/devices dumps).
NVIDIA_MAJOR = 195
NVIDIA_CAPS_MAJOR = 236
NVIDIA_UVM_MAJOR = 511
CAP_MODE = 292  # 0o444, the default DeviceFileMode of MIG GI/CI capabilities
CONFIG_CAP = (1, 256)  # mig/config: minor 1, mode 0o400
MONITOR_CAP = (2, 292)  # mig/monitor: minor 2, mode 0o444
# The IMEX channels' major is not in the reference (computedomain.md §8.1 names only the
# line). Picked as the kernel gives dynamic majors out: downward from the top of the extended
# range, so the next free one below nvidia-uvm's 511.
NVIDIA_CAPS_IMEX_CHANNELS_MAJOR = 510
# /proc/driver/nvidia/capabilities/fabric-imex-mgmt: NVIDIA reads DeviceFileMinor/Mode/Modify
# there (§3.6); the reference gives no values. The minor is the first after every
# predetermined MIG capability minor (gpu31/gi14/ci7 is 4322, gpu-mig-nvml.md §5), so it
# cannot collide with one; the mode is that of mig/config, the other admin capability (0o400).
FABRIC_IMEX_MGMT_CAP = (4323, 256)

_CHAR_DEVICES = (
    (1, "mem"),
    (4, "/dev/vc/0"),
    (4, "tty"),
    (4, "ttyS"),
    (5, "/dev/tty"),
    (5, "/dev/console"),
    (5, "/dev/ptmx"),
    (7, "vcs"),
    (10, "misc"),
    (13, "input"),
    (29, "fb"),
    (128, "ptm"),
    (136, "pts"),
    (180, "usb"),
    (189, "usb_device"),
    (NVIDIA_MAJOR, "nvidia"),
    (NVIDIA_MAJOR, "nvidia-modeset"),
    (NVIDIA_MAJOR, "nvidiactl"),
    (226, "drm"),
    (NVIDIA_CAPS_MAJOR, "nvidia-caps"),
    (NVIDIA_CAPS_IMEX_CHANNELS_MAJOR, "nvidia-caps-imex-channels"),
    (NVIDIA_UVM_MAJOR, "nvidia-uvm"),
)
_BLOCK_DEVICES = ((7, "loop"), (8, "sd"), (9, "md"), (259, "blkext"))


def render_devices(unloaded: Collection[str] = ()) -> str:
    """`/proc/devices` as the kernel prints it (`"%3d %s"` per line, two sections), without
    the lines of the modules in `unloaded`."""
    lines = ["Character devices:"]
    lines += [f"{major:3d} {name}" for major, name in _CHAR_DEVICES if name not in unloaded]
    lines += ["", "Block devices:"]
    lines += [f"{major:3d} {name}" for major, name in _BLOCK_DEVICES]
    return "\n".join(lines) + "\n"


MAX_GPUS = 32  # mig-minors lists gpu0..gpu31, gi0..gi14, ci0..ci7 whatever is installed
MAX_GIS = 15
MAX_CIS = 8


def render_mig_minors() -> str:
    """`/proc/driver/nvidia-caps/mig-minors` as the nvidia-caps module prints it."""
    lines = [f"config {CONFIG_CAP[0]}", f"monitor {MONITOR_CAP[0]}"]
    for gpu in range(MAX_GPUS):
        for gi in range(MAX_GIS):
            lines.append(f"gpu{gpu}/gi{gi}/access {rules.gi_cap_minor(gpu, gi)}")
            lines += [
                f"gpu{gpu}/gi{gi}/ci{ci}/access {rules.ci_cap_minor(gpu, gi, ci)}"
                for ci in range(MAX_CIS)
            ]
    return "\n".join(lines) + "\n"


_MIG_MINORS = render_mig_minors()


def render_cgroup(pod_uid: str, pid: int) -> str:
    """`/proc/<pid>/cgroup` of a container process of a Burstable pod, cgroup v2, systemd driver."""
    container = hashlib.sha256(f"{pod_uid}/{pid}".encode()).hexdigest()
    pod = pod_uid.replace("-", "_")
    return (
        "0::/kubepods.slice/kubepods-burstable.slice/"
        f"kubepods-burstable-pod{pod}.slice/cri-containerd-{container}.scope\n"
    )


def render_cap(minor: int, mode: int) -> str:
    """A capability `access` file of the nvidia kernel module."""
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {mode}\nDeviceFileModify: 1\n"


class ProcTree:
    """Keeps the files below `root` equal to what a node in `state` would show."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.caps = self.root / "driver" / "nvidia" / "capabilities"

    def desired(self, state: NodeState) -> dict[Path, str]:
        files = {
            self.root / "devices": render_devices(state.unloaded_modules),
            self.caps / "mig" / "config": render_cap(*CONFIG_CAP),
            self.caps / "mig" / "monitor": render_cap(*MONITOR_CAP),
            self.caps / "fabric-imex-mgmt": render_cap(*FABRIC_IMEX_MGMT_CAP),
            self.root / "driver" / "nvidia-caps" / "mig-minors": _MIG_MINORS,
            self.root / "sys" / "kernel" / "random" / "boot_id": state.boot_id + "\n",
        }
        for gpu in state.gpus:
            base = self.caps / f"gpu{gpu.minor}" / "mig"
            for gi in gpu.gis:
                gi_dir = base / f"gi{gi.id}"
                files[gi_dir / "access"] = render_cap(
                    rules.gi_cap_minor(gpu.minor, gi.id), CAP_MODE
                )
                for ci in gi.cis:
                    minor = rules.ci_cap_minor(gpu.minor, gi.id, ci.id)
                    files[gi_dir / f"ci{ci.id}" / "access"] = render_cap(minor, CAP_MODE)
        for workload in state.workloads:
            files[self.root / str(workload.pid) / "cgroup"] = render_cgroup(
                workload.pod_uid, workload.pid
            )
        return files

    def sync(self, state: NodeState) -> None:
        """Write what changed and remove the capability files of instances that are gone."""
        try:
            self._sync(state)
        except OSError as exc:
            raise ConfigError(
                f"simulated /proc {self.root}: cannot update {exc.filename or 'it'}: "
                f"{exc.strerror or exc}"
            ) from exc

    def _sync(self, state: NodeState) -> None:
        want = self.desired(state)
        for stale in self._instance_files():
            if stale not in want:
                remove_file(stale)
                self._prune(stale.parent)
        for path, text in want.items():
            data = text.encode()
            try:
                if path.read_bytes() == data:
                    continue
            except FileNotFoundError:
                path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write(path, data, mode=0o444)

    def _instance_files(self) -> list[Path]:
        """The files that come and go with instances and workloads."""
        found = [p / "cgroup" for p in self._process_dirs() if (p / "cgroup").exists()]
        if not self.caps.is_dir():
            return found
        pattern = "gpu*/mig/gi*"
        found += [p / "access" for p in self.caps.glob(pattern) if (p / "access").exists()]
        found += [p / "access" for p in self.caps.glob(pattern + "/ci*") if (p / "access").exists()]
        return found

    def _process_dirs(self) -> list[Path]:
        if not self.root.is_dir():
            return []
        return [p for p in self.root.iterdir() if p.name.isdigit() and p.is_dir()]

    def _prune(self, directory: Path) -> None:
        """Remove `directory` and its emptied parents up to the `mig` directory (or a
        process directory, whose parent is the root)."""
        if directory.parent == self.root:
            with contextlib.suppress(OSError):
                directory.rmdir()
            return
        while directory.name != "mig" and directory != self.caps:
            with contextlib.suppress(OSError):  # not empty, or already gone
                directory.rmdir()
            if directory.exists():
                return
            directory = directory.parent
