"""Readers for the host files the kubelet plugin needs besides NVML.

A CDI spec must name device nodes by major:minor, and those numbers come
only from procfs and sysfs: the dynamic majors of `nvidia-uvm` and
`nvidia-caps` (`/proc/devices`), the capability minors of MIG GPU and compute
instances (`/proc/driver/nvidia/capabilities/...`, checked against
`/proc/driver/nvidia-caps/mig-minors`, which NVIDIA's container toolkit
reads), and the DRM nodes of a GPU (`/sys/bus/pci/devices/<bus id>/drm/*/dev`).
The checkpoint also needs the boot id to notice a reboot. Everything is read
below a configurable `proc_root` and `sys_root`, so the simulated hardware
and the tests can serve fake trees with the same formats.

Failures are reported in the caller's layer: device lookups raise `CdiError`
(they only matter while building a CDI spec), the boot id raises
`CheckpointError`. Every message names the file.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from dra_driver.errors import CdiError, CheckpointError

_CHAR_SECTION = "Character devices:"
_BLOCK_SECTION = "Block devices:"
_ALIASES: dict[str, tuple[str, ...]] = {
    "nvidia": ("nvidia-frontend",),
    "nvidia-frontend": ("nvidia",),
}


class HostInfo:
    """Reads `/proc`-style files under `proc_root` (default the real `/proc`)."""

    def __init__(self, proc_root: Path = Path("/proc"), sys_root: Path = Path("/sys")) -> None:
        self.proc_root = Path(proc_root)
        self.sys_root = Path(sys_root)
        self._mig_minors: dict[str, int] = {}  # the table is fixed once the module is loaded
        # Told of a device missing from /proc/devices; may load its module (the plugin's
        # `kernel_modules.KernelSetup.missing`) and returns why it is still missing.
        self.on_missing: Callable[[str], str | None] | None = None

    # -- /proc/devices -------------------------------------------------------

    def char_majors(self) -> dict[str, int]:
        """Every character device driver in `<proc_root>/devices`, name -> major.

        A name registered under several majors keeps the first one listed.
        """
        path = self.proc_root / "devices"
        text = _read_text(path, CdiError)
        majors: dict[str, int] = {}
        in_char = False
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.strip()
            if not line:
                continue
            if line == _CHAR_SECTION:
                in_char = True
                continue
            if line == _BLOCK_SECTION:
                in_char = False
                continue
            if not in_char:
                continue
            number, _, name = line.partition(" ")
            name = name.strip()
            if not number.isdigit() or not name:
                raise CdiError(f"{path}: line {lineno} is not '<major> <name>': {raw!r}")
            majors.setdefault(name, int(number))
        return majors

    def char_major(self, name: str) -> int:
        """The major of the character device driver `name` (e.g. "nvidia-uvm").

        "nvidia" and "nvidia-frontend" are the same driver (the name depends
        on the kernel module's build), so either finds the other.
        """
        found = self._find_major(name)
        if found is not None:
            return found
        why = self.on_missing(name) if self.on_missing is not None else None
        found = self._find_major(name)  # the module may be loaded now
        if found is not None:
            return found
        path = self.proc_root / "devices"
        raise CdiError(
            f"{path}: no character device {name!r} in the {_CHAR_SECTION!r} section "
            + (f"({why})" if why else "(is the NVIDIA kernel module that provides it loaded?)")
        )

    def _find_major(self, name: str) -> int | None:
        majors = self.char_majors()
        for alias in _ALIASES.get(name, ()):
            if name not in majors and alias in majors:
                return majors[alias]
        return majors.get(name)

    # -- MIG capability files ------------------------------------------------

    def mig_cap_path(self, gpu_minor: int, gi: int, ci: int | None = None) -> Path:
        """Path of the `access` file of a GPU instance, or of a compute instance in it."""
        base = self.proc_root / "driver" / "nvidia" / "capabilities" / f"gpu{gpu_minor}"
        base = base / "mig" / f"gi{gi}"
        if ci is not None:
            base = base / f"ci{ci}"
        return base / "access"

    def mig_minors(self) -> dict[str, int]:
        """`/proc/driver/nvidia-caps/mig-minors`: capability -> minor ({} if absent).

        Lines are `config 1`, `monitor 2`, `gpu<m>/gi<g>/access <n>` and
        `gpu<m>/gi<g>/ci<c>/access <n>`; others are skipped, as nvcdi does.
        Read once: the nvidia-caps module writes the whole table when it loads.
        """
        if self._mig_minors:
            return self._mig_minors
        path = self.proc_root / "driver" / "nvidia-caps" / "mig-minors"
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}
        except (OSError, UnicodeDecodeError) as exc:
            raise CdiError(f"{path}: cannot read: {exc}") from exc
        minors: dict[str, int] = {}
        for line in text.splitlines():
            cap, sep, number = line.strip().partition(" ")
            if sep and number.isdigit():
                minors[cap] = int(number)
        self._mig_minors = minors
        return minors

    def mig_cap(self, gpu_minor: int, gi: int, ci: int | None = None) -> tuple[int, int]:
        """`(DeviceFileMinor, DeviceFileMode)` of a MIG GI (or CI) capability.

        The minor is N in `/dev/nvidia-caps/nvidia-cap<N>`; the mode is the
        decimal `DeviceFileMode` (e.g. 292 == 0o444) to give that node: a
        permission mode, so anything above 0o777 is rejected as garbage.
        Where `mig-minors` lists the capability (nvcdi's source), both must
        agree, or the node would grant another instance.
        """
        path = self.mig_cap_path(gpu_minor, gi, ci)
        fields: dict[str, str] = {}
        for raw in _read_text(path, CdiError).splitlines():
            key, sep, value = raw.partition(":")
            if sep:
                fields[key.strip()] = value.strip()
        try:
            minor = int(fields["DeviceFileMinor"])
            mode = int(fields["DeviceFileMode"])
        except KeyError as exc:
            raise CdiError(f"{path}: field {exc.args[0]} is missing") from exc
        except ValueError as exc:
            raise CdiError(
                f"{path}: DeviceFileMinor/DeviceFileMode are not decimal numbers: {exc}"
            ) from exc
        if minor < 0 or not 0 <= mode <= 0o777:
            raise CdiError(f"{path}: DeviceFileMinor {minor} / DeviceFileMode {mode} out of range")
        cap = f"gpu{gpu_minor}/gi{gi}" + (f"/ci{ci}" if ci is not None else "") + "/access"
        listed = self.mig_minors().get(cap)
        if listed is not None and listed != minor:
            raise CdiError(
                f"{path}: DeviceFileMinor {minor} differs from {cap} {listed} in "
                f"{self.proc_root / 'driver/nvidia-caps/mig-minors'}"
            )
        return minor, mode

    # -- DRM nodes -----------------------------------------------------------

    def drm_nodes(self, pci_bus_id: str) -> list[tuple[str, int, int]]:
        """`(name, major, minor)` of the `card*` and `renderD*` nodes of a PCI device.

        Read from `<sys_root>/bus/pci/devices/<bus id>/drm/<name>/dev` ("226:1").
        A GPU without DRM (the nvidia-drm module not loaded) has none. nvcdi
        maps every entry there to `/dev/dri/<name>` and keeps those that are
        character devices on the host: `card*` and `renderD*`.
        """
        folder = self.sys_root / "bus" / "pci" / "devices" / pci_bus_id / "drm"
        try:
            names = sorted(p.name for p in folder.iterdir())
        except OSError:
            return []
        nodes = []
        for name in names:
            if not name.startswith(("card", "renderD")):
                continue
            dev = folder / name / "dev"
            try:
                major, sep, minor = dev.read_text(encoding="utf-8").strip().partition(":")
            except FileNotFoundError:
                continue
            except (OSError, UnicodeDecodeError) as exc:
                raise CdiError(f"{dev}: cannot read: {exc}") from exc
            if not (sep and major.isdigit() and minor.isdigit()):
                raise CdiError(f"{dev}: not '<major>:<minor>'")
            nodes.append((name, int(major), int(minor)))
        return nodes

    # -- boot id -------------------------------------------------------------

    def boot_id(self) -> str:
        """The kernel's random boot id; changes on every reboot."""
        path = self.proc_root / "sys" / "kernel" / "random" / "boot_id"
        value = _read_text(path, CheckpointError).strip()
        if not value or any(c.isspace() for c in value):
            raise CheckpointError(f"{path}: not a boot id: {value!r}")
        return value


def _read_text(path: Path, error: type[CdiError] | type[CheckpointError]) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError as exc:
        raise error(f"{path}: file does not exist") from exc
    except UnicodeDecodeError as exc:
        raise error(f"{path}: not UTF-8 text") from exc
    except OSError as exc:
        raise error(f"{path}: cannot read: {exc.strerror or exc}") from exc
