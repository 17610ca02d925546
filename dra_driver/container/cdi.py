"""The CDI spec a prepared claim hands to the container runtime.

Prepare does not touch containers itself: it writes one transient CDI spec
per claim and returns the qualified CDI device ids to the kubelet, which
passes them to the runtime. This module builds that spec as plain data:
the device-node edits for full GPUs and MIG devices, the control nodes
every GPU container needs, and the spec document around them.

Two rules keep the written file loadable by every runtime:

* `cdiVersion` is the *minimum* version the content needs (the rules of the
  CDI Go library's `MinimumRequiredVersion`), never simply the newest one,
  because runtimes vendor older CDI parsers that reject versions they do not
  know. Claim UIDs usually start with a digit, which alone needs 0.5.0.
* Parsers reject unknown fields, so only fields of the CDI schema are ever
  emitted, and names are validated against the CDI rules before writing.

Names follow NVIDIA's driver: kind `k8s.gpu.nvidia.com/claim`, device
`<claimUID>-<deviceName>`, file `k8s.gpu.nvidia.com-claim_<claimUID>.yaml`.
The second driver (`compute-domain.nvidia.com`) writes the same kind of
claim specs under its own vendor (NVIDIA's `k8s.compute-domain.nvidia.com/
claim`): the names are one `ClaimKind` value (`GPU_CLAIMS` by default), so
both drivers share these builders and `CdiStore` instead of copying them.

The driver's user space (libraries, binaries, firmware, config files, IPC
sockets) comes from `driver_edits`: read-only bind mounts whose
`containerPath` is the path inside the driver root (the standard `/etc` or
`/usr/share` path for config files) and whose `hostPath` is the host's
driver root + that path. The hooks are nvcdi's (`CdiHooks`): `create-symlinks`,
`enable-cuda-compat`, `update-ldcache`, `disable-device-node-modification`
and `update-application-profile`, each of which can be disabled by name for
hosts whose nvidia-container-toolkit predates it (`HOOK_MIN_TOOLKIT`). With
`create-symlinks` disabled each library is also mounted at its link paths
(`libcuda.so.1`), so the loader finds it. Neither hooks nor mount options
raise the minimum `cdiVersion` (only a mount `type` would, to 0.4.0).

A full GPU gets `/dev/nvidia<minor>` and the DRM nodes of its PCI device
(`/dev/dri/card*`, `/dev/dri/renderD*`, as sysfs lists them under
`/sys/bus/pci/devices/<bus id>/drm`) with their `/dev/dri/by-path` links; a
MIG device gets its parent's node, its GPU- and compute-instance capability
nodes, and the parent's DRM nodes when its profile has graphics (`+gfx`),
as nvcdi's `dgpu` discoverer does.

Pure: major numbers and capability minors come in as arguments, DRM nodes
through the narrow `DrmNodes` reader (see `dra_driver.node.host.HostInfo`),
driver files as a `DriverFiles` record.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final, Protocol

from dra_driver.container.driver_files import DriverFiles
from dra_driver.errors import CdiError, ConfigError
from dra_driver.kube.names import is_uid

VENDOR: Final = "k8s.gpu.nvidia.com"
CLASS: Final = "claim"
KIND: Final = f"{VENDOR}/{CLASS}"
SPEC_FILE_PREFIX: Final = f"{VENDOR}-{CLASS}_"
SPEC_FILE_SUFFIX: Final = ".yaml"

NVIDIA_MAJOR: Final = 195
"""Major of `/dev/nvidia*` (the "nvidia"/"nvidia-frontend" driver); fixed by the kernel module."""
NVIDIACTL_MINOR: Final = 255
NVIDIA_MODESET_MINOR: Final = 254


@dataclass(frozen=True)
class ClaimKind:
    """The CDI kind `<vendor>/<class>` of one driver's claim specs, and the names it implies."""

    vendor: str
    cls: str = CLASS

    @property
    def kind(self) -> str:
        """`<vendor>/<class>`, e.g. `k8s.gpu.nvidia.com/claim`."""
        return f"{self.vendor}/{self.cls}"

    @property
    def spec_file_prefix(self) -> str:
        """`<vendor>-<class>_`, what every claim spec file of this kind starts with."""
        return f"{self.vendor}-{self.cls}_"

    def qualified_device_id(self, claim_uid: str, device_name: str) -> str:
        """The id returned to the kubelet: `<vendor>/<class>=<uid>-<device>`."""
        return f"{self.kind}={cdi_device_name(claim_uid, device_name)}"

    def spec_file_name(self, claim_uid: str) -> str:
        """The claim's transient spec file name: `<vendor>-<class>_<uid>.yaml`."""
        _check_claim_uid(claim_uid)
        return f"{self.spec_file_prefix}{claim_uid}{SPEC_FILE_SUFFIX}"

    def claim_uid_from_file_name(self, file_name: str) -> str | None:
        """The claim UID in one of this kind's spec file names, or None for any other file."""
        prefix = self.spec_file_prefix
        if not (file_name.startswith(prefix) and file_name.endswith(SPEC_FILE_SUFFIX)):
            return None
        uid = file_name[len(prefix) : -len(SPEC_FILE_SUFFIX)]
        return uid if is_uid(uid) else None


GPU_CLAIMS: Final = ClaimKind(VENDOR)
"""The GPU driver's claim specs (`k8s.gpu.nvidia.com/claim`)."""

KNOWN_VERSIONS: Final = (
    "0.1.0",
    "0.2.0",
    "0.3.0",
    "0.4.0",
    "0.5.0",
    "0.6.0",
    "0.7.0",
    "0.8.0",
    "1.0.0",
    "1.1.0",
)
BASELINE_VERSION: Final = "0.3.0"
HOOK_NAMES: Final = frozenset(
    {"prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"}
)
DEVICE_NODE_TYPES: Final = frozenset({"b", "c", "u", "p"})

_QUALIFIER = re.compile(r"[A-Za-z]([A-Za-z0-9_.-]*[A-Za-z0-9])?")
_DEVICE_NAME = re.compile(r"[A-Za-z0-9]([A-Za-z0-9_.:-]*[A-Za-z0-9])?")
_MAX_VENDOR = 253
_MAX_CLASS = 63

# The fields of the CDI schema (v1.1.0). Anything else makes parsers fail.
_SPEC_FIELDS: Final = frozenset({"cdiVersion", "kind", "annotations", "devices", "containerEdits"})
_DEVICE_FIELDS: Final = frozenset({"name", "annotations", "containerEdits"})
_EDIT_FIELDS: Final = frozenset(
    {"env", "deviceNodes", "mounts", "hooks", "intelRdt", "additionalGids", "netDevices"}
)
_NODE_FIELDS: Final = frozenset(
    {"path", "hostPath", "type", "major", "minor", "fileMode", "permissions", "uid", "gid"}
)
_MOUNT_FIELDS: Final = frozenset({"hostPath", "containerPath", "type", "options"})
_HOOK_FIELDS: Final = frozenset({"hookName", "path", "args", "env", "timeout"})


# -- names -------------------------------------------------------------------


def cdi_device_name(claim_uid: str, device_name: str) -> str:
    """The name of a claim's device inside its spec: `<claimUID>-<deviceName>`."""
    name = f"{claim_uid}-{device_name}"
    _check_device_name(name)
    return name


def qualified_device_id(claim_uid: str, device_name: str) -> str:
    """The id returned to the kubelet: `k8s.gpu.nvidia.com/claim=<uid>-<device>`."""
    return GPU_CLAIMS.qualified_device_id(claim_uid, device_name)


def spec_file_name(claim_uid: str) -> str:
    """The claim's transient spec file name: `k8s.gpu.nvidia.com-claim_<uid>.yaml`."""
    return GPU_CLAIMS.spec_file_name(claim_uid)


def claim_uid_from_file_name(file_name: str) -> str | None:
    """The claim UID in one of our spec file names, or None for any other file."""
    return GPU_CLAIMS.claim_uid_from_file_name(file_name)


def _check_claim_uid(claim_uid: str) -> None:
    if not is_uid(claim_uid):
        raise CdiError(
            f"claim UID {claim_uid!r} cannot be used in a CDI device name "
            "(letters, digits, '_', '-', '.'; starting and ending with a letter or digit)"
        )


def _check_device_name(name: str) -> None:
    if not _DEVICE_NAME.fullmatch(name):
        raise CdiError(
            f"CDI device name {name!r} is invalid: it must start and end with a letter or "
            "digit and contain only letters, digits, '_', '-', '.' and ':'"
        )


def _check_kind(kind: object) -> tuple[str, str]:
    if not isinstance(kind, str):
        raise CdiError(f"CDI spec kind must be a string, got {kind!r}")
    vendor, sep, cls = kind.partition("/")
    if not sep:
        raise CdiError(f"CDI spec kind {kind!r} is not '<vendor>/<class>'")
    for part, what, limit in ((vendor, "vendor", _MAX_VENDOR), (cls, "class", _MAX_CLASS)):
        if not _QUALIFIER.fullmatch(part) or len(part) > limit:
            raise CdiError(
                f"CDI spec kind {kind!r}: {what} {part!r} must start with a letter, end with "
                f"a letter or digit, contain only letters, digits, '_', '-', '.', and be at "
                f"most {limit} characters"
            )
    return vendor, cls


# -- container edits ---------------------------------------------------------


@dataclass(frozen=True)
class DeviceNode:
    """A device node the runtime creates in the container (`deviceNodes[]`)."""

    path: str
    major: int | None  # None (with minor): the runtime takes type and numbers from the host node
    minor: int | None
    type: str = "c"
    file_mode: int | None = None  # permission bits, e.g. 0o444; None: the host node's mode
    permissions: str | None = None  # cgroup access, subset of "rwm"; None: "rwm"
    host_path: str | None = None  # None: same as `path` (needs CDI 0.5.0 when set)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.host_path is not None:
            out["hostPath"] = self.host_path
        if self.major is not None and self.minor is not None:
            out.update(type=self.type, major=self.major, minor=self.minor)
        if self.file_mode is not None:
            out["fileMode"] = self.file_mode
        if self.permissions is not None:
            out["permissions"] = self.permissions
        return out


@dataclass(frozen=True)
class Mount:
    """A bind (or other) mount into the container (`mounts[]`)."""

    host_path: str
    container_path: str
    type: str | None = None  # needs CDI 0.4.0 when set
    options: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hostPath": self.host_path, "containerPath": self.container_path}
        if self.type is not None:
            out["type"] = self.type
        if self.options:
            out["options"] = list(self.options)
        return out


@dataclass(frozen=True)
class Hook:
    """An OCI hook the runtime runs (`hooks[]`)."""

    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"hookName": self.hook_name, "path": self.path}
        if self.args:
            out["args"] = list(self.args)
        if self.env:
            out["env"] = list(self.env)
        if self.timeout is not None:
            out["timeout"] = self.timeout
        return out


@dataclass(frozen=True)
class ContainerEdits:
    """What the runtime changes in the container for a device (or for the whole spec)."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()

    def is_empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks)

    def merged(self, other: ContainerEdits) -> ContainerEdits:
        """These edits followed by `other`'s; a device node path already present is not repeated."""
        paths = {n.path for n in self.device_nodes}
        return ContainerEdits(
            env=self.env + other.env,
            device_nodes=self.device_nodes
            + tuple(n for n in other.device_nodes if n.path not in paths),
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
        )

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.env:
            out["env"] = list(self.env)
        if self.device_nodes:
            out["deviceNodes"] = [n.to_dict() for n in self.device_nodes]
        if self.mounts:
            out["mounts"] = [m.to_dict() for m in self.mounts]
        if self.hooks:
            out["hooks"] = [h.to_dict() for h in self.hooks]
        return out


@dataclass(frozen=True)
class CdiDevice:
    """One allocated device of a claim: its DRA device name and its edits.

    `name` is the DRA device name (e.g. "gpu-0"); `claim_spec` prefixes it
    with the claim UID.
    """

    name: str
    edits: ContainerEdits = field(default_factory=ContainerEdits)


def gpu_node(minor: int, *, nvidia_major: int = NVIDIA_MAJOR) -> DeviceNode:
    """`/dev/nvidia<minor>`, the node of one physical GPU."""
    return DeviceNode(path=f"/dev/nvidia{minor}", major=nvidia_major, minor=minor)


class DrmNodes(Protocol):
    """Reads which DRM nodes belong to a PCI device (`HostInfo` on a node)."""

    def drm_nodes(self, pci_bus_id: str) -> Sequence[tuple[str, int, int]]:
        """`(name, major, minor)` of each `card*`/`renderD*` node of the device."""
        ...


def drm_edits(pci_bus_id: str, host: DrmNodes, hooks: CdiHooks | None) -> ContainerEdits:
    """The DRM nodes of a GPU and the hook that creates their `/dev/dri/by-path` links.

    nvcdi (`internal/platform-support/dgpu`) adds `/dev/dri/<name>` for each
    entry of `/sys/bus/pci/devices/<bus id>/drm` and links
    `/dev/dri/by-path/pci-<bus id>-card` and `-render` to them, as udev names
    them (`../card1`, `../renderD128`).
    """
    nodes: list[DeviceNode] = []
    links: list[str] = []
    for name, major, minor in host.drm_nodes(pci_bus_id):
        nodes.append(DeviceNode(path=f"/dev/dri/{name}", major=major, minor=minor))
        kind = "card" if name.startswith("card") else "render"
        links.append(f"../{name}::/dev/dri/by-path/pci-{pci_bus_id}-{kind}")
    hook = hooks.create(HOOK_CREATE_SYMLINKS, links) if hooks is not None else None
    return ContainerEdits(device_nodes=tuple(nodes), hooks=(hook,) if hook else ())


def gpu_edits(
    gpu_minor: int,
    *,
    nvidia_major: int = NVIDIA_MAJOR,
    pci_bus_id: str | None = None,
    host: DrmNodes | None = None,
    hooks: CdiHooks | None = None,
) -> ContainerEdits:
    """Per-device edits of a full GPU: `/dev/nvidia<minor>`, and with `pci_bus_id`
    and `host` its DRM nodes and their by-path links (a hook, unless `hooks`
    is None or has `create-symlinks` disabled)."""
    edits = ContainerEdits(device_nodes=(gpu_node(gpu_minor, nvidia_major=nvidia_major),))
    if pci_bus_id is not None and host is not None:
        edits = edits.merged(drm_edits(pci_bus_id, host, hooks))
    return edits


def common_edits(uvm_major: int, *, nvidia_major: int = NVIDIA_MAJOR) -> ContainerEdits:
    """Edits every GPU container needs once, whatever devices it got.

    The control nodes (`/dev/nvidiactl`, `/dev/nvidia-uvm`, `/dev/nvidia-uvm-tools`,
    `/dev/nvidia-modeset`) and `NVIDIA_VISIBLE_DEVICES=void`, which makes the
    legacy nvidia-container-runtime hook do nothing, as NVIDIA's driver does.
    `uvm_major` is the "nvidia-uvm" major from `/proc/devices`.
    """
    return ContainerEdits(
        env=("NVIDIA_VISIBLE_DEVICES=void",),
        device_nodes=(
            DeviceNode(path="/dev/nvidiactl", major=nvidia_major, minor=NVIDIACTL_MINOR),
            DeviceNode(path="/dev/nvidia-uvm", major=uvm_major, minor=0),
            DeviceNode(path="/dev/nvidia-uvm-tools", major=uvm_major, minor=1),
            DeviceNode(path="/dev/nvidia-modeset", major=nvidia_major, minor=NVIDIA_MODESET_MINOR),
        ),
    )


def mig_edits(
    parent_minor: int,
    caps_major: int,
    gi_cap: tuple[int, int],
    ci_cap: tuple[int, int],
    *,
    nvidia_major: int = NVIDIA_MAJOR,
    graphics: bool = False,
    pci_bus_id: str | None = None,
    host: DrmNodes | None = None,
    hooks: CdiHooks | None = None,
) -> ContainerEdits:
    """Per-device edits of a MIG device.

    The parent GPU's node plus the GPU-instance and compute-instance
    capability nodes `/dev/nvidia-caps/nvidia-cap<N>`. `gi_cap`/`ci_cap` are
    `(DeviceFileMinor, DeviceFileMode)` as `HostInfo.mig_cap` returns them;
    `caps_major` is the "nvidia-caps" major from `/proc/devices`. The nodes
    need not exist on the host: the runtime creates them from these numbers.
    A MIG device with graphics (`graphics`: a `+gfx` profile) also gets the
    parent's DRM nodes, as with nvcdi (`pci_bus_id` and `host` say which).
    """
    nodes = [gpu_node(parent_minor, nvidia_major=nvidia_major)]
    for what, (minor, mode) in (("GPU instance", gi_cap), ("compute instance", ci_cap)):
        if not 0 <= mode <= 0o777:
            raise CdiError(
                f"MIG {what} capability nvidia-cap{minor}: DeviceFileMode {mode} is not a "
                "permission mode (0..0o777)"
            )
        nodes.append(
            DeviceNode(
                path=f"/dev/nvidia-caps/nvidia-cap{minor}",
                major=caps_major,
                minor=minor,
                file_mode=mode,
            )
        )
    edits = ContainerEdits(device_nodes=tuple(nodes))
    if graphics and pci_bus_id is not None and host is not None:
        edits = edits.merged(drm_edits(pci_bus_id, host, hooks))
    return edits


def has_graphics(profile_name: str) -> bool:
    """Whether a MIG profile name ("1g.24gb+gfx") carries go-nvlib's "gfx" attribute."""
    _, _, attributes = profile_name.partition("+")
    return "gfx" in attributes.split("+")


# -- hooks -------------------------------------------------------------------

HOOK_CREATE_SYMLINKS: Final = "create-symlinks"
HOOK_ENABLE_CUDA_COMPAT: Final = "enable-cuda-compat"
HOOK_UPDATE_LDCACHE: Final = "update-ldcache"
HOOK_DISABLE_DEVICE_NODE_MODIFICATION: Final = "disable-device-node-modification"
HOOK_UPDATE_APPLICATION_PROFILE: Final = "update-application-profile"
ALL_HOOKS: Final = "all"
HOOK_MIN_TOOLKIT: Final = {
    HOOK_CREATE_SYMLINKS: "1.16.0",
    HOOK_ENABLE_CUDA_COMPAT: "1.17.5",
    HOOK_UPDATE_LDCACHE: "1.16.0",
    HOOK_DISABLE_DEVICE_NODE_MODIFICATION: "1.17.8",
    HOOK_UPDATE_APPLICATION_PROFILE: "1.20.0",
}
"""nvcdi's hooks, in the order it emits them, with the first nvidia-container-toolkit
release whose `nvidia-cdi-hook` has the subcommand (`nvidia-ctk hook` had the
first two before 1.16.0)."""
DEFAULT_CDI_HOOK_PATH: Final = "/usr/bin/nvidia-cdi-hook"
HOOK_STAGE: Final = "createContainer"  # nvcdi runs its hooks in the container's mount namespace


@dataclass(frozen=True)
class CdiHooks:
    """Which `nvidia-cdi-hook` runs which hooks (nvcdi's `HookCreator`).

    `path` is the binary on the host (`nvidia-cdi-hook`, or `nvidia-ctk`, whose
    hooks are under its `hook` subcommand); `disabled` holds hook names, or
    "all" for none.
    """

    path: str = DEFAULT_CDI_HOOK_PATH
    disabled: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if not self.path.startswith("/"):
            raise ConfigError(f"--nvidia-cdi-hook-path {self.path!r} must be absolute")
        known = {*HOOK_MIN_TOOLKIT, ALL_HOOKS}
        for name in sorted(self.disabled - known):
            raise ConfigError(
                f"--disable-cdi-hook {name!r}: not one of NVIDIA's hook names "
                f"({', '.join(sorted(known))})"
            )

    def enabled(self, name: str) -> bool:
        return ALL_HOOKS not in self.disabled and name not in self.disabled

    @property
    def active(self) -> tuple[str, ...]:
        """The hooks that are emitted, in nvcdi's order."""
        return tuple(name for name in HOOK_MIN_TOOLKIT if self.enabled(name))

    def create(self, name: str, args: Sequence[str] = ()) -> Hook | None:
        """The hook `name` with its arguments, or None when disabled.

        `create-symlinks` and `update-ldcache` without arguments are None too.
        """
        if not self.enabled(name):
            return None
        if name == HOOK_CREATE_SYMLINKS:
            flags = [arg for link in args for arg in ("--link", link)]
        elif name == HOOK_UPDATE_LDCACHE:
            flags = [arg for folder in args for arg in ("--folder", folder)]
        else:
            flags = list(args)
        if name in (HOOK_CREATE_SYMLINKS, HOOK_UPDATE_LDCACHE) and not flags:
            return None
        argv0 = posixpath.basename(self.path)
        fixed = (argv0, "hook") if argv0 == "nvidia-ctk" else (argv0,)
        return Hook(
            HOOK_STAGE,
            self.path,
            args=(*fixed, name, *flags),
            env=("NVIDIA_CTK_DEBUG=false",),
        )


NO_HOOKS: Final = CdiHooks(disabled=frozenset({ALL_HOOKS}))


FILE_MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "bind")
IPC_MOUNT_OPTIONS: Final = ("nosuid", "nodev", "rbind", "rprivate", "noexec")  # nvcdi's


def driver_edits(files: DriverFiles, *, host_root: str, hooks: CdiHooks) -> ContainerEdits:
    """Edits that put the driver's user space into a container, as nvcdi's common edits.

    Every file is bind-mounted read-only from `host_root` + its path inside the
    driver root (the file a symlink there resolves to): libraries, graphics
    libraries and X.Org modules, firmware and binaries at that path, config
    files at their standard container path, IPC sockets read-write.
    The hooks, in nvcdi's order: `create-symlinks` for the graphics links
    (`gbm/nvidia-drm_gbm.so`...), `create-symlinks` for the driver libraries'
    links (`libcuda.so`, the soname and `.so` links that exist on the host),
    `enable-cuda-compat --host-driver-version=<version>`, `update-ldcache`
    over the driver libraries' folders, `disable-device-node-modification`
    and `update-application-profile`. With `create-symlinks` disabled each
    library is mounted again at every link path that reaches it instead.
    `NVIDIA_CTK_LIBCUDA_DIR` names the driver library folders, as nvcdi sets it.
    """

    def mount(path: str, at: str | None = None) -> Mount:
        return Mount(
            host_path=posixpath.join(host_root, files.source(path).lstrip("/")),
            container_path=at or path,
            options=FILE_MOUNT_OPTIONS,
        )

    mounts = [mount(lib.path) for lib in files.libraries]
    mounts += [mount(lib.path) for lib in files.graphics]
    mounts += [mount(p) for p in (*files.firmware, *files.binaries)]
    mounts += [mount(src, at) for src, at in files.configs]
    mounts += [dataclasses.replace(mount(p), options=IPC_MOUNT_OPTIONS) for p in files.ipc]
    links: dict[str, str] = {}  # link path in the container -> target as written
    for lib in files.libraries:
        for name, target in lib.links:
            links.setdefault(posixpath.join(lib.directory, name), target)
    graphics_links = dict(files.graphics_links)

    hook_list: list[Hook | None] = []
    if hooks.enabled(HOOK_CREATE_SYMLINKS):
        for group in (graphics_links, links):
            hook_list.append(
                hooks.create(HOOK_CREATE_SYMLINKS, [f"{t}::{link}" for link, t in group.items()])
            )
    else:
        # No hook: the loader must find each file under its link names.
        by_path = {lib.path: lib for lib in (*files.libraries, *files.graphics)}
        every_link = {**links, **graphics_links}
        for lib in files.graphics:  # ldconfig would have made their soname links
            if lib.soname and lib.soname != lib.name:
                every_link.setdefault(posixpath.join(lib.directory, lib.soname), lib.name)
        for link in every_link:
            final = _link_target(link, every_link)
            if final in by_path:
                mounts.append(mount(final, at=link))
    hook_list.append(
        hooks.create(HOOK_ENABLE_CUDA_COMPAT, [f"--host-driver-version={files.version}"])
    )
    folders = list(dict.fromkeys(lib.directory for lib in files.libraries))
    hook_list.append(hooks.create(HOOK_UPDATE_LDCACHE, folders))
    hook_list.append(hooks.create(HOOK_DISABLE_DEVICE_NODE_MODIFICATION))
    hook_list.append(hooks.create(HOOK_UPDATE_APPLICATION_PROFILE))
    return ContainerEdits(
        env=(f"NVIDIA_CTK_LIBCUDA_DIR={':'.join(files.library_dirs)}",),
        mounts=tuple(mounts),
        hooks=tuple(h for h in hook_list if h is not None),
    )


def _link_target(link: str, links: Mapping[str, str]) -> str | None:
    """The path the chain of `links` starting at `link` ends at (None: a loop)."""
    seen = set()
    path = link
    while path in links:
        if path in seen:
            return None
        seen.add(path)
        path = posixpath.normpath(posixpath.join(posixpath.dirname(path), links[path]))
    return path


# -- the spec document -------------------------------------------------------


def claim_spec(
    claim_uid: str,
    devices: Sequence[CdiDevice],
    common: ContainerEdits,
    *,
    kind: ClaimKind = GPU_CLAIMS,
) -> dict[str, Any]:
    """The CDI spec of one claim, as the dict to write (YAML or JSON).

    Device names become `<claimUID>-<name>`; `common` goes into the
    spec-level `containerEdits`, which the runtime applies once when any of
    the claim's devices is injected. `cdiVersion` is the minimum the content
    needs. Raises `CdiError` for invalid names, duplicate or edit-less devices.
    """
    _check_claim_uid(claim_uid)
    spec: dict[str, Any] = {
        "cdiVersion": BASELINE_VERSION,
        "kind": kind.kind,
        "devices": [
            {"name": cdi_device_name(claim_uid, d.name), "containerEdits": d.edits.to_dict()}
            for d in devices
        ],
    }
    if not common.is_empty():
        spec["containerEdits"] = common.to_dict()
    spec["cdiVersion"] = minimum_cdi_version(spec)
    validate_spec(spec)
    return spec


def minimum_cdi_version(spec: Mapping[str, Any]) -> str:
    """The lowest `cdiVersion` that allows everything `spec` uses.

    mounts[].type -> 0.4.0; deviceNodes[].hostPath or a device name not
    starting with a letter -> 0.5.0; annotations or a '.' in the class ->
    0.6.0; intelRdt or additionalGids -> 0.7.0; netDevices or intelRdt
    schemata/enableMonitoring -> 1.1.0; otherwise 0.3.0.
    """
    devices = [d for d in _as_list(spec.get("devices")) if isinstance(d, Mapping)]
    all_edits = (spec.get("containerEdits"), *(d.get("containerEdits") for d in devices))
    edits_maps = [e for e in all_edits if isinstance(e, Mapping)]

    def nodes() -> Iterable[Mapping[str, Any]]:
        for e in edits_maps:
            yield from (n for n in _as_list(e.get("deviceNodes")) if isinstance(n, Mapping))

    def mounts() -> Iterable[Mapping[str, Any]]:
        for e in edits_maps:
            yield from (m for m in _as_list(e.get("mounts")) if isinstance(m, Mapping))

    version = BASELINE_VERSION
    if any(m.get("type") for m in mounts()):
        version = "0.4.0"
    names = [d.get("name") for d in devices]
    if any(n.get("hostPath") for n in nodes()) or any(
        isinstance(n, str) and n and not _is_ascii_letter(n[0]) for n in names
    ):
        version = "0.5.0"
    kind = spec.get("kind")
    cls = kind.partition("/")[2] if isinstance(kind, str) else ""
    if spec.get("annotations") or any(d.get("annotations") for d in devices) or "." in cls:
        version = "0.6.0"
    if any(e.get("intelRdt") is not None or e.get("additionalGids") for e in edits_maps):
        version = "0.7.0"
    rdt_new = any(
        isinstance(e.get("intelRdt"), Mapping)
        and ("schemata" in e["intelRdt"] or "enableMonitoring" in e["intelRdt"])
        for e in edits_maps
    )
    if rdt_new or any(e.get("netDevices") for e in edits_maps):
        version = "1.1.0"
    return version


def validate_spec(spec: Mapping[str, Any]) -> None:
    """Check `spec` the way CDI parsers will, raising `CdiError` on the first problem.

    Unknown fields, an unknown or too low `cdiVersion`, a bad kind, no or
    duplicate devices, bad device names, devices without edits, and
    malformed edits (env without "=", device nodes without path or with a
    bad type/permissions/fileMode, mounts without paths, hooks with an
    unknown name or no path).
    """
    _only_fields(spec, _SPEC_FIELDS, "CDI spec")
    version = spec.get("cdiVersion")
    if version not in KNOWN_VERSIONS:
        raise CdiError(
            f"CDI spec: cdiVersion {version!r} is not one of {', '.join(KNOWN_VERSIONS)}"
        )
    needed = minimum_cdi_version(spec)
    if _version_key(needed) > _version_key(str(version)):
        raise CdiError(f"CDI spec: cdiVersion {version} is too low, the content needs {needed}")
    _check_kind(spec.get("kind"))
    _string_map(spec.get("annotations"), "CDI spec annotations")
    devices = spec.get("devices")
    if not isinstance(devices, list) or not devices:
        raise CdiError("CDI spec: devices must be a non-empty list")
    seen: set[str] = set()
    for i, device in enumerate(devices):
        if not isinstance(device, Mapping):
            raise CdiError(f"CDI spec: devices[{i}] must be an object")
        _only_fields(device, _DEVICE_FIELDS, f"CDI spec devices[{i}]")
        name = device.get("name")
        if not isinstance(name, str):
            raise CdiError(f"CDI spec: devices[{i}].name must be a string")
        _check_device_name(name)
        if name in seen:
            raise CdiError(f"CDI spec: device name {name!r} appears twice")
        seen.add(name)
        _string_map(device.get("annotations"), f"CDI device {name!r} annotations")
        edits = device.get("containerEdits")
        if not isinstance(edits, Mapping) or not any(edits.get(k) for k in _EDIT_FIELDS):
            raise CdiError(f"CDI device {name!r}: empty device edits (runtimes reject it)")
        _validate_edits(edits, f"CDI device {name!r}")
    if "containerEdits" in spec:
        common = spec["containerEdits"]
        if not isinstance(common, Mapping):
            raise CdiError("CDI spec: containerEdits must be an object")
        _validate_edits(common, "CDI spec containerEdits")


def _validate_edits(edits: Mapping[str, Any], where: str) -> None:
    _only_fields(edits, _EDIT_FIELDS, where)
    for i, env in enumerate(_checked_list(edits.get("env"), f"{where} env")):
        if not isinstance(env, str) or env.partition("=")[1] != "=" or env.startswith("="):
            raise CdiError(f"{where}: env[{i}] {env!r} is not 'NAME=value'")
    for i, node in enumerate(_checked_list(edits.get("deviceNodes"), f"{where} deviceNodes")):
        at = f"{where} deviceNodes[{i}]"
        if not isinstance(node, Mapping):
            raise CdiError(f"{at} must be an object")
        _only_fields(node, _NODE_FIELDS, at)
        if not isinstance(node.get("path"), str) or not node["path"]:
            raise CdiError(f"{at}: path is required")
        if node.get("type", "c") not in DEVICE_NODE_TYPES:
            raise CdiError(f"{at}: type {node.get('type')!r} is not one of b, c, u, p")
        for num in ("major", "minor"):
            value = node.get(num, 0)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise CdiError(f"{at}: {num} must be a non-negative integer, got {value!r}")
        perms = node.get("permissions", "")
        if not isinstance(perms, str) or set(perms) - set("rwm"):
            raise CdiError(f"{at}: permissions {perms!r} must be a subset of 'rwm'")
        mode = node.get("fileMode", 0)
        if not isinstance(mode, int) or isinstance(mode, bool) or not 0 <= mode <= 0o777:
            raise CdiError(f"{at}: fileMode {mode!r} is not a permission mode (0..0o777)")
    for i, mount in enumerate(_checked_list(edits.get("mounts"), f"{where} mounts")):
        at = f"{where} mounts[{i}]"
        if not isinstance(mount, Mapping):
            raise CdiError(f"{at} must be an object")
        _only_fields(mount, _MOUNT_FIELDS, at)
        for key in ("hostPath", "containerPath"):
            if not isinstance(mount.get(key), str) or not mount[key]:
                raise CdiError(f"{at}: {key} is required")
    for i, hook in enumerate(_checked_list(edits.get("hooks"), f"{where} hooks")):
        at = f"{where} hooks[{i}]"
        if not isinstance(hook, Mapping):
            raise CdiError(f"{at} must be an object")
        _only_fields(hook, _HOOK_FIELDS, at)
        if hook.get("hookName") not in HOOK_NAMES:
            raise CdiError(
                f"{at}: hookName {hook.get('hookName')!r} is not one of "
                f"{', '.join(sorted(HOOK_NAMES))}"
            )
        if not isinstance(hook.get("path"), str) or not hook["path"]:
            raise CdiError(f"{at}: path is required")


def _only_fields(obj: Mapping[str, Any], allowed: frozenset[str], where: str) -> None:
    unknown = sorted(str(k) for k in obj if k not in allowed)
    if unknown:
        raise CdiError(f"{where}: unknown field(s) {', '.join(unknown)} (CDI parsers reject them)")


def _string_map(value: object, where: str) -> None:
    if value is None:
        return
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise CdiError(f"{where} must map strings to strings")


def _checked_list(value: object, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise CdiError(f"{where} must be a list")
    return value


def _as_list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_ascii_letter(char: str) -> bool:
    return "a" <= char <= "z" or "A" <= char <= "Z"


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))
