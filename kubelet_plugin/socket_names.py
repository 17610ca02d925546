"""Where the plugin's two Unix sockets live: one rule for the plugin, its probes and its tools.

The kubelet finds a DRA driver by its registration socket in
`<kubelet-root>/plugins_registry` and calls it on the DRA socket in the
plugin data directory `<kubelet-root>/plugins/<driver>`. Without a pod UID
the names are the Go helper's classic ones, `dra.sock` and
`<driver>-reg.sock`. With one (`--pod-uid`, the DaemonSet passes `POD_UID`
through the downward API) each plugin instance gets names of its own, as the
helper's `RollingUpdate` option does (kubelet 1.33+), so that an old and a
new plugin pod can serve side by side during a rolling upgrade:

- DRA socket: `<plugin data dir>/dra-<uid>.sock` (the UID hashed where that path
  would be too long, see `dra_socket_path`);
- registration socket: the first of `<driver>-<uid>-reg.sock`,
  `<driver>-<b64url(sha256(uid)[:8])>-reg.sock` and
  `dra-<b64url(sha256(driver NUL uid)[:16])>-reg.sock` whose path fits in
  108 bytes, else the last one (the helper's
  `RollingUpdateRegistrarSocketFile` of Kubernetes 1.37; base64 is the URL
  alphabet without padding, the path is cleaned as Go's `path.Join` does).

The readiness probe, `dra-gpu` tools and the tests compute the paths with
these functions and nothing else, so they always dial the sockets the plugin
actually serves. No Python library implements the helper's naming rule, so
it is written here (byte-exact; the helper's test vectors are in the tests).

A path may be computed at 108 bytes (the rule's bound), but gRPC binds and
dials at most 107 (`sun_path` with its NUL): `check_socket_path` is the one
check of that limit.
"""

from __future__ import annotations

import base64
import hashlib
import os
import posixpath
from pathlib import Path
from typing import Final

from dra_driver.errors import ConfigError
from dra_driver.kube.names import is_uid

UNIX_PATH_MAX: Final = 108
"""The helper's bound when it chooses a registration socket name (`unixPathMax`)."""
MAX_SOCKET_PATH_BYTES: Final = 107
"""The longest socket path gRPC can bind and dial (108 bytes of `sun_path` with the NUL)."""
_UID_HASH_BYTES: Final = 8
_DRIVER_UID_HASH_BYTES: Final = 16


def plugin_data_dir(kubelet_root: Path, driver_name: str) -> Path:
    """Where the plugin keeps its DRA socket and its state: `<root>/plugins/<driver>`."""
    return kubelet_root / "plugins" / driver_name


def registry_dir(kubelet_root: Path) -> Path:
    """The directory the kubelet's plugin watcher watches: `<root>/plugins_registry`."""
    return kubelet_root / "plugins_registry"


def dra_socket_path(kubelet_root: Path, driver_name: str, pod_uid: str | None = None) -> Path:
    """The DRA socket: `<data dir>/dra.sock`, or `<data dir>/dra-<uid>.sock` with a pod UID.

    Where `dra-<uid>.sock` would not fit in a socket path (107 bytes; MicroK8s' kubelet root
    `/var/snap/microk8s/common/var/lib/kubelet` makes it 110), the UID is hashed as for the
    registration socket: `dra-<b64url(sha256(uid)[:8])>.sock`. The helper has no such
    fallback, but nothing else needs the name: the kubelet dials the endpoint GetInfo gives.
    """
    directory = plugin_data_dir(kubelet_root, driver_name)
    if not pod_uid:
        return directory / "dra.sock"
    path = directory / f"dra-{pod_uid}.sock"
    if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES:
        return path
    return directory / f"dra-{_b64(_sha256(pod_uid.encode())[:_UID_HASH_BYTES])}.sock"


def registration_socket_path(
    kubelet_root: Path, driver_name: str, pod_uid: str | None = None
) -> Path:
    """The registration socket: `<driver>-reg.sock`, or the 1.37 rolling-update name."""
    directory = registry_dir(kubelet_root)
    if not pod_uid:
        return directory / f"{driver_name}-reg.sock"
    return directory / rolling_update_registrar_socket_file(str(directory), driver_name, pod_uid)


def rolling_update_registrar_socket_file(registry: str, driver_name: str, pod_uid: str) -> str:
    """The file name the 1.37 helper gives an instance's registration socket (see the module)."""
    candidates = (
        f"{driver_name}-{pod_uid}-reg.sock",
        f"{driver_name}-{_b64(_sha256(pod_uid.encode())[:_UID_HASH_BYTES])}-reg.sock",
        "dra-"
        + _b64(_sha256(f"{driver_name}\x00{pod_uid}".encode())[:_DRIVER_UID_HASH_BYTES])
        + "-reg.sock",
    )
    for name in candidates:
        if len(go_path_join(registry, name).encode()) <= UNIX_PATH_MAX:
            return name
    return candidates[-1]


def go_path_join(*parts: str) -> str:
    """Go's `path.Join`: joined, then cleaned (`a/./b/` -> `a/b`, and `//x` -> `/x`)."""
    joined = posixpath.normpath(posixpath.join(*parts))
    return "/" + joined.lstrip("/") if joined.startswith("//") else joined


def check_pod_uid(pod_uid: str) -> None:
    """A pod UID must be usable in a file name; ConfigError naming the flag otherwise."""
    if not is_uid(pod_uid):
        raise ConfigError(
            f"--pod-uid {pod_uid!r}: not a pod UID (letters, digits, '.', '_' and '-', "
            "starting and ending with a letter or digit, at most 128 characters; the "
            "DaemonSet passes metadata.uid as POD_UID)"
        )


def check_socket_path(path: Path, what: str) -> None:
    """ConfigError when `path` is too long to bind (the message names the length and limit)."""
    size = len(os.fsencode(path))
    if size > MAX_SOCKET_PATH_BYTES:
        raise ConfigError(
            f"{what} path {path} is {size} bytes; Unix sockets allow at most "
            f"{MAX_SOCKET_PATH_BYTES} (use a shorter --kubelet-root or --driver-name)"
        )


def _sha256(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
