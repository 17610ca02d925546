"""Flags first: every flag and path of `kubelet-plugin` checked before anything starts.

A plugin that publishes devices and then exits on a bad flag leaves the
scheduler allocating devices nobody prepares; one that dies with a
traceback tells the admin nothing. So `check_options` runs before the plugin
listens on a port, opens a socket or publishes a slice, and raises one
`ConfigError` naming the flag and what is wrong with it (the CLI prints that
one line and exits 2). It checks:

- names: the node name and driver name are DNS subdomains, the pod UID can be
  part of a file name, `--cluster` has a known form, a given kubeconfig is a
  readable file;
- addresses and ports: `--metrics-address` is HOST:PORT, `--healthcheck-port`
  is a port number (whether they are free is known only by listening, which
  the plugin does next, before anything is published);
- roots: the kubelet root's plugin data and registry directories and the CDI
  root exist or can be created, and a file can be written in each;
- sockets: both socket paths (`kubelet_plugin.socket_names`) fit in a Unix
  socket address, and nothing but a stale socket sits at either.

The hardware flags (`--nvml`, `--sim-state`, the driver root) belong to the
composition root, which opens the hardware: `dra_driver.cli` checks them
before it calls the daemon, with `check_writable_directory` from here.
"""

from __future__ import annotations

import os
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from dra_driver.errors import ConfigError
from dra_driver.kube.names import driver_name_errors, is_dns_subdomain
from kubelet_plugin.metrics import parse_address
from kubelet_plugin.socket_names import (
    check_pod_uid,
    check_socket_path,
    dra_socket_path,
    plugin_data_dir,
    registration_socket_path,
    registry_dir,
)

if TYPE_CHECKING:
    from kubelet_plugin.main import PluginOptions


@dataclass(frozen=True)
class PluginPaths:
    """Where the plugin keeps its state and serves, as checked."""

    data_dir: Path
    dra_socket: Path
    registration_socket: Path


def check_options(options: PluginOptions) -> PluginPaths:
    """Check every flag of the daemon (see the module docstring); ConfigError on the first bad one.

    Creates the plugin data, registry and CDI directories if they are missing
    (the plugin would do so next), and nothing else.
    """
    _check_names(options)
    _check_endpoints(options)
    kubelet_root = Path(os.path.abspath(options.kubelet_root))
    data_dir = plugin_data_dir(kubelet_root, options.driver_name)
    check_writable_directory(data_dir, "--kubelet-root", "the plugin data directory")
    check_writable_directory(registry_dir(kubelet_root), "--kubelet-root", "the plugin registry")
    check_writable_directory(
        Path(os.path.abspath(options.cdi_root)), "--cdi-root", "the CDI directory"
    )
    paths = PluginPaths(
        data_dir=data_dir,
        dra_socket=dra_socket_path(kubelet_root, options.driver_name, options.pod_uid),
        registration_socket=registration_socket_path(
            kubelet_root, options.driver_name, options.pod_uid
        ),
    )
    for path, what in (
        (paths.dra_socket, "the DRA socket"),
        (paths.registration_socket, "the registration socket"),
    ):
        check_socket_path(path, what)
        _nothing_but_a_socket_at(path, what)
    return paths


def _check_names(options: PluginOptions) -> None:
    if not options.node_name:
        raise ConfigError("--node-name is empty (the DaemonSet sets NODE_NAME from spec.nodeName)")
    if not is_dns_subdomain(options.node_name):
        raise ConfigError(f"--node-name {options.node_name!r}: not a valid node name")
    if errors := driver_name_errors(options.driver_name):
        raise ConfigError(f"--driver-name {options.driver_name!r}: {'; '.join(errors)}")
    if options.pod_uid:
        check_pod_uid(options.pod_uid)
    cluster = options.cluster
    if cluster != "kube" and not (cluster.startswith("local:") and cluster[6:]):
        raise ConfigError(f"--cluster {cluster!r}: expected 'kube' or 'local:DIR'")
    if options.kubeconfig is not None and not os.access(options.kubeconfig, os.R_OK):
        raise ConfigError(f"--kubeconfig {options.kubeconfig}: no readable file there")


def _check_endpoints(options: PluginOptions) -> None:
    if options.metrics_address is not None:
        try:
            parse_address(options.metrics_address)
        except ConfigError as exc:
            raise ConfigError(f"--metrics-address {exc}") from None
    port = options.healthcheck_port
    if port is not None and not 0 <= port <= 65535:
        raise ConfigError(f"--healthcheck-port {port}: not a port number (0..65535)")


def check_writable_directory(directory: Path, flag: str, what: str) -> None:
    """Create `directory` if missing and prove a file can be written there; ConfigError
    naming `flag` if not."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=directory, prefix=".dra-gpu-write-check-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise ConfigError(f"{flag}: {what} {directory} is not writable: {reason}") from None


def _nothing_but_a_socket_at(path: Path, what: str) -> None:
    """A stale socket is replaced when the server binds; anything else is someone's file."""
    try:
        info = path.lstat()
    except FileNotFoundError:
        return
    except OSError as exc:
        raise ConfigError(f"{what} path {path}: {exc.strerror or exc}") from None
    if stat.S_ISSOCK(info.st_mode) or (stat.S_ISLNK(info.st_mode) and not path.exists()):
        return
    kind = "a directory" if stat.S_ISDIR(info.st_mode) else "a file that is not a socket"
    raise ConfigError(f"{what} path {path} is {kind}; remove it (the plugin will not)")
