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

The driver's user space (libraries, binaries, firmware, IPC sockets) comes
from `driver_edits`: read-only bind mounts whose `containerPath` is the path
inside the driver root and whose `hostPath` is the host's driver root + that
path. With an `nvidia-cdi-hook` path it adds nvcdi's `create-symlinks` and
`update-ldcache` hooks; without one it emits no hook and mounts each library
at its soname paths too (`libcuda.so.1`), so the loader finds it. Neither
hooks nor mount options raise the minimum `cdiVersion` (only a mount `type`
would, to 0.4.0).

Pure: major numbers and capability minors come in as arguments (see
`dra_driver.node.host.HostInfo`), driver files as a `DriverFiles` record.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from dra_driver.container.driver_files import MPS_PIPE_DIR, DriverFiles
from dra_driver.errors import CdiError
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
    return f"{KIND}={cdi_device_name(claim_uid, device_name)}"


def spec_file_name(claim_uid: str) -> str:
    """The claim's transient spec file name: `k8s.gpu.nvidia.com-claim_<uid>.yaml`."""
    _check_claim_uid(claim_uid)
    return f"{SPEC_FILE_PREFIX}{claim_uid}{SPEC_FILE_SUFFIX}"


def claim_uid_from_file_name(file_name: str) -> str | None:
    """The claim UID in one of our spec file names, or None for any other file."""
    if not (file_name.startswith(SPEC_FILE_PREFIX) and file_name.endswith(SPEC_FILE_SUFFIX)):
        return None
    uid = file_name[len(SPEC_FILE_PREFIX) : -len(SPEC_FILE_SUFFIX)]
    return uid if is_uid(uid) else None


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
    major: int
    minor: int
    type: str = "c"
    file_mode: int | None = None  # permission bits, e.g. 0o444; None: the host node's mode
    permissions: str | None = None  # cgroup access, subset of "rwm"; None: "rwm"
    host_path: str | None = None  # None: same as `path` (needs CDI 0.5.0 when set)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path}
        if self.host_path is not None:
            out["hostPath"] = self.host_path
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


def gpu_edits(gpu_minor: int, *, nvidia_major: int = NVIDIA_MAJOR) -> ContainerEdits:
    """Per-device edits of a full GPU: its `/dev/nvidia<minor>` node."""
    return ContainerEdits(device_nodes=(gpu_node(gpu_minor, nvidia_major=nvidia_major),))


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
) -> ContainerEdits:
    """Per-device edits of a MIG device.

    The parent GPU's node plus the GPU-instance and compute-instance
    capability nodes `/dev/nvidia-caps/nvidia-cap<N>`. `gi_cap`/`ci_cap` are
    `(DeviceFileMinor, DeviceFileMode)` as `HostInfo.mig_cap` returns them;
    `caps_major` is the "nvidia-caps" major from `/proc/devices`. The nodes
    need not exist on the host: the runtime creates them from these numbers.
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
    return ContainerEdits(device_nodes=tuple(nodes))


FILE_MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "bind")
DIR_MOUNT_OPTIONS: Final = ("ro", "nosuid", "nodev", "rbind")
HOOK_STAGE: Final = "createContainer"  # nvcdi runs its hooks in the container's mount namespace


def driver_edits(files: DriverFiles, *, host_root: str, hook_path: str | None) -> ContainerEdits:
    """Edits that put the driver's user space into a container, as nvcdi's common edits.

    Every file is bind-mounted read-only from `host_root` + its path inside the
    driver root (the file a symlink there resolves to) to that path.
    `hook_path` (nvidia-cdi-hook on the host) adds the `create-symlinks`
    hook (nvcdi's links: `libcuda.so`, and the soname and `.so` links that
    exist next to each library on the host) and the `update-ldcache` hook
    over the library folders. Without it no hook is
    emitted and each library is mounted again at every such link path.
    `NVIDIA_CTK_LIBCUDA_DIR` names the libcuda folders, as nvcdi sets it.
    """

    def mount(path: str, at: str | None = None) -> Mount:
        options = DIR_MOUNT_OPTIONS if path == MPS_PIPE_DIR else FILE_MOUNT_OPTIONS
        return Mount(
            host_path=posixpath.join(host_root, files.source(path).lstrip("/")),
            container_path=at or path,
            options=options,
        )

    mounts = [mount(lib.path) for lib in files.libraries]
    mounts += [mount(p) for p in (*files.firmware, *files.binaries, *files.ipc)]
    links: dict[str, str] = {}  # link path in the container -> target name
    for lib in files.libraries:
        if lib.name.startswith("libcuda.so."):
            # nvcdi: many applications dlopen("libcuda.so") though only the soname exists.
            links.setdefault(posixpath.join(lib.directory, "libcuda.so"), "libcuda.so.1")
        for name, target in lib.links:
            links.setdefault(posixpath.join(lib.directory, name), target)
    hooks: list[Hook] = []
    if hook_path is None:
        for lib in files.libraries:
            for link in links:
                if posixpath.dirname(link) != lib.directory:
                    continue
                if _link_reaches(link, lib.name, links):
                    mounts.append(mount(lib.path, at=link))
    else:
        argv0 = posixpath.basename(hook_path)
        fixed = (argv0, "hook") if argv0 == "nvidia-ctk" else (argv0,)
        env = ("NVIDIA_CTK_DEBUG=false",)
        if links:
            args = [
                arg for link, target in links.items() for arg in ("--link", f"{target}::{link}")
            ]
            hooks.append(
                Hook(HOOK_STAGE, hook_path, args=(*fixed, "create-symlinks", *args), env=env)
            )
        folders = dict.fromkeys(lib.directory for lib in files.libraries)
        args = [arg for folder in folders for arg in ("--folder", folder)]
        hooks.append(Hook(HOOK_STAGE, hook_path, args=(*fixed, "update-ldcache", *args), env=env))
    return ContainerEdits(
        env=(f"NVIDIA_CTK_LIBCUDA_DIR={':'.join(files.library_dirs)}",),
        mounts=tuple(mounts),
        hooks=tuple(hooks),
    )


def _link_reaches(link: str, library: str, links: Mapping[str, str]) -> bool:
    """Whether the chain of `links` starting at `link` ends at file `library`."""
    folder = posixpath.dirname(link)
    seen = set()
    target = links[link]
    while target != library:
        nxt = posixpath.join(folder, target)
        if nxt not in links or nxt in seen:
            return False
        seen.add(nxt)
        target = links[nxt]
    return True


# -- the spec document -------------------------------------------------------


def claim_spec(
    claim_uid: str, devices: Sequence[CdiDevice], common: ContainerEdits
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
        "kind": KIND,
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
