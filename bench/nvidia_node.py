"""One simulated node for NVIDIA's kubelet plugin and ours: driver root, NVML, API servers.

`bench.nvidia_prepare` times NVIDIA's own `gpu-kubelet-plugin` (the Go binary
of NVIDIA/k8s-dra-driver-gpu) against `dra-gpu kubelet-plugin` on the same
node. What "the same node" means here:

* NVML: NVIDIA's plugin loads `libnvidia-ml.so.1` from the driver root, so
  the root holds NVIDIA's mock NVML (NVIDIA/k8s-test-infra
  `pkg/gpu/mocknvml`, a cgo library answering from a YAML profile) with its
  DGX A100 profile: eight A100-SXM4-40GB, MIG off, driver 550.163.01, CUDA
  12.4. Ours runs on its simulated NVML with a shape of the same GPUs and
  driver (`A100_SHAPE`); both publish the same eight `gpu-<i>` devices.
* Driver root: one directory laid out like a 550.163.01 install
  (`dra_driver.hardware.simulated.driver_root`: the compute, video and
  graphics libraries, ICDs, X.Org modules, binaries and firmware), with the
  mock library in place of the fake `libnvidia-ml.so.550.163.01`, and a
  `dev/` of real character device nodes (`/dev/nvidia0..7`, `nvidiactl`,
  `nvidia-uvm`, `nvidia-uvm-tools`, `nvidia-modeset`) with the simulated
  node's major and minor numbers: nvcdi stats the nodes it puts into a spec,
  and a driver root with a `dev/` is its device root. Both plugins read it as
  their container driver root; CDI host paths are written under `/`.
* PCI and DRM: the mock profile's bus ids are rewritten to the simulated
  node's (`load_shape_file`), and NVIDIA's plugin runs in a mount namespace of
  its own (`unshare`) where the simulated node's sysfs
  (`dra_driver.hardware.simulated.sysfs`: each GPU's `drm/card<N>` and
  `renderD<M>`) is bind-mounted over `/sys/bus/pci/devices`, which nvcdi
  reads to find a GPU's DRM nodes; the driver root's `dev/dri` has those nodes
  and their `by-path` links. Ours reads the same sysfs through its simulator.
* API: each plugin gets an API server of its own (`tests.fakes.FakeApiServer`
  over HTTP, in this process), with the same Node and the same allocated
  claim: two plugins of one driver on one node in one API server would each
  delete the other's ResourceSlices.

The NVIDIA binaries are not part of this repository: `NvidiaBuild.locate`
finds them (see `docs/nvidia-comparison.md`) or says what is missing.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Self

import yaml

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.container.cdi import NVIDIA_MAJOR, NVIDIA_MODESET_MINOR, NVIDIACTL_MINOR
from dra_driver.errors import ConfigError, PluginError
from dra_driver.hardware.simulated.driver_root import LIBRARY_DIRS, materialize_driver_root
from dra_driver.hardware.simulated.proctree import NVIDIA_UVM_MAJOR
from dra_driver.hardware.simulated.shapes import load_shape_file
from dra_driver.hardware.simulated.sysfs import DRM_MAJOR, drm_node_names, materialize_sysfs
from dra_driver.kube.api_store import KubeCluster
from kubelet_plugin.kubelet_client import KubeletClient
from kubelet_plugin.socket_names import dra_socket_path, registration_socket_path
from tests.fakes import FakeApiServer

DRIVER_VERSION: Final = "550.163.01"
"""The mock NVML's A100 profile's driver (and the library's file name version)."""
GPU_COUNT: Final = 8
A100_SHAPE: Final = f"""\
# The mock NVML's DGX A100 profile, as a simulated dra-gpu node.
driverVersion: "{DRIVER_VERSION}"
cudaDriverVersion: 12040
gpus:
  - model: A100-SXM4-40GB
    migEnabled: false
    count: {GPU_COUNT}
"""
MOCK_LIBRARY: Final = f"libnvidia-ml.so.{DRIVER_VERSION}"
MOCK_PROFILE: Final = "mock-nvml-config-a100.yaml"
PLUGIN_BINARY: Final = "gpu-kubelet-plugin"
BUILD_ENV: Final = "DRA_GPU_NVIDIA_BUILD"
"""Where the NVIDIA binaries are, when not in `<repo>/build/nvidia`."""
DEFAULT_BUILD_DIR: Final = Path(__file__).resolve().parent.parent / "build" / "nvidia"
NVIDIA_LOG_VERBOSITY: Final = 4
"""klog -v of NVIDIA's Helm chart (`logVerbosity: "4"`)."""
NVIDIA_KUBE_API_QPS: Final = 1000
"""client-go's limiter in NVIDIA's plugin allows 5 requests/s (burst 10) by default; every
Prepare GETs its claim, so a loop faster than that would time the limiter, not the plugin."""
START_TIMEOUT_S: Final = 60.0


@dataclass(frozen=True)
class NvidiaBuild:
    """NVIDIA's plugin binary and its mock NVML (library and profile) on this machine."""

    plugin: Path
    mock_library: Path
    mock_profile: Path

    @classmethod
    def locate(cls, directory: Path | None = None) -> NvidiaBuild:
        """The binaries under `directory` (default: $DRA_GPU_NVIDIA_BUILD, else
        `<repo>/build/nvidia`): `bin/gpu-kubelet-plugin` and `mocknvml/` with the library
        and the A100 profile. ConfigError naming each missing file and how to get it."""
        if directory is None:
            directory = Path(os.environ.get(BUILD_ENV) or DEFAULT_BUILD_DIR)
        build = cls(
            plugin=directory / "bin" / PLUGIN_BINARY,
            mock_library=directory / "mocknvml" / MOCK_LIBRARY,
            mock_profile=directory / "mocknvml" / MOCK_PROFILE,
        )
        missing = [str(p) for p in (build.plugin, build.mock_library, build.mock_profile)]
        missing = [p for p in missing if not os.path.isfile(p)]
        if missing:
            raise ConfigError(
                "NVIDIA's plugin build is missing: no "
                + ", ".join(missing)
                + ". This benchmark runs NVIDIA's gpu-kubelet-plugin (NVIDIA/k8s-dra-driver-gpu, "
                "cmd/gpu-kubelet-plugin) on NVIDIA's mock NVML (NVIDIA/k8s-test-infra, "
                f"pkg/gpu/mocknvml, built as {MOCK_LIBRARY}, with configs/{MOCK_PROFILE}), "
                "which are not part of this repository. Build them from their vendored "
                f"sources into {directory} (or point ${BUILD_ENV} at such a directory): "
                "docs/nvidia-comparison.md says what goes where."
            )
        return build


@dataclass(frozen=True)
class SharedNode:
    """The files both plugins run on (see the module docstring)."""

    work: Path
    driver_root: Path
    shape_file: Path
    mock_profile: Path
    pci_devices: Path  # the simulated sysfs's bus/pci/devices, for NVIDIA's /sys/bus/pci/devices


def make_node(work: Path, build: NvidiaBuild) -> SharedNode:
    """Lay out the shared driver root (with the mock NVML and device nodes), the shape, the
    mock's profile with the shape's PCI bus ids, and the node's sysfs."""
    root = materialize_driver_root(work / "driver-root", DRIVER_VERSION, "debian")
    library = root / LIBRARY_DIRS["debian"].lstrip("/") / MOCK_LIBRARY
    shutil.copyfile(build.mock_library, library)  # replaces the fake; links stay as they are
    library.chmod(0o755)
    shape_file = work / "a100-node.yaml"
    shape_file.write_text(A100_SHAPE, encoding="utf-8")
    bus_ids = [gpu.pci_bus_id for gpu in load_shape_file(shape_file).gpus]
    _device_nodes(root / "dev", bus_ids)
    profile = work / MOCK_PROFILE
    profile.write_text(_profile_on(build.mock_profile, bus_ids), encoding="utf-8")
    sysfs = materialize_sysfs(work / "sysfs", bus_ids)
    return SharedNode(
        work=work,
        driver_root=root,
        shape_file=shape_file,
        mock_profile=profile,
        pci_devices=sysfs / "bus" / "pci" / "devices",
    )


def _profile_on(profile: Path, bus_ids: list[str]) -> str:
    """The mock's profile with its GPUs at `bus_ids` (in index order, upper case as NVML
    reports them): every mention of a GPU's bus id, its topology included, is replaced."""
    text = profile.read_text(encoding="utf-8")
    devices = yaml.safe_load(text).get("devices") or []
    old = [str(d["pci"]["bus_id"]) for d in sorted(devices, key=lambda d: d["index"])]
    if len(old) != len(bus_ids):
        raise ConfigError(
            f"mock NVML profile {profile}: {len(old)} devices, the shape has {len(bus_ids)} GPUs"
        )
    new = dict(zip((o.upper() for o in old), (b.upper() for b in bus_ids), strict=True))
    pattern = re.compile("|".join(re.escape(o) for o in new), re.IGNORECASE)
    return pattern.sub(lambda m: new[m.group(0).upper()], text)


def _device_nodes(dev: Path, bus_ids: list[str]) -> None:
    """The character devices a GPU node's /dev has, with the simulated node's numbers, and
    the DRM nodes' by-path links."""
    nodes = [(f"nvidia{i}", NVIDIA_MAJOR, i) for i in range(GPU_COUNT)]
    nodes += [
        ("nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
        ("nvidia-modeset", NVIDIA_MAJOR, NVIDIA_MODESET_MINOR),
        ("nvidia-uvm", NVIDIA_UVM_MAJOR, 0),
        ("nvidia-uvm-tools", NVIDIA_UVM_MAJOR, 1),
    ]
    (dev / "dri" / "by-path").mkdir(parents=True, exist_ok=True)
    for index, bus_id in enumerate(bus_ids):
        for (name, minor), kind in zip(drm_node_names(index), ("card", "render"), strict=True):
            nodes.append((f"dri/{name}", DRM_MAJOR, minor))
            os.symlink(f"../{name}", dev / "dri" / "by-path" / f"pci-{bus_id}-{kind}")
    for name, major, minor in nodes:
        try:
            os.mknod(dev / name, stat.S_IFCHR | 0o666, os.makedev(major, minor))
        except PermissionError as exc:
            raise ConfigError(
                f"cannot create the device node {dev / name} ({major}:{minor}): {exc.strerror}; "
                "nvcdi only puts device nodes that exist into a spec, so this benchmark needs "
                "CAP_MKNOD (run it as root)"
            ) from exc


def kubeconfig(path: Path, server: FakeApiServer) -> Path:
    """A kubeconfig for `server` (plain HTTP, no auth)."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "bench", "cluster": {"server": server.url}}],
        "users": [{"name": "bench", "user": {}}],
        "contexts": [{"name": "bench", "context": {"cluster": "bench", "user": "bench"}}],
        "current-context": "bench",
    }
    path.write_text(json.dumps(config), encoding="utf-8")
    return path


def store_claim(server: FakeApiServer, claim: dict[str, object]) -> str:
    """Create `claim` and write its allocation through /status, over HTTP as a scheduler
    would; the UID the API server gave it."""
    body = json.loads(json.dumps(claim))
    status = body.pop("status")
    body["metadata"].pop("resourceVersion", None)
    body["metadata"].pop("uid", None)
    client = server.api_client()
    try:
        cluster = KubeCluster(client)
        stored = cluster.put_resource_claim(body)
        stored["status"] = status
        stored = cluster.update_resource_claim_status(stored)
    finally:
        client.close()
    return str(stored["metadata"]["uid"])


class NvidiaPluginProcess:
    """NVIDIA's `gpu-kubelet-plugin` on `node`, talking to the API server `kubeconfig_path`.

    Its kubelet root, CDI root and log live in a work directory of its own. It
    runs in a mount namespace where `node.pci_devices` is its
    `/sys/bus/pci/devices`, and as NVIDIA's Helm chart runs it (`-v 4`, default feature gates, no
    health-check port), except for the client-go rate limit
    (`NVIDIA_KUBE_API_QPS`). `start()` returns once its registration socket
    exists, or raises PluginError with the log's tail.
    """

    def __init__(
        self, build: NvidiaBuild, node: SharedNode, kubeconfig_path: Path, node_name: str
    ) -> None:
        self.build = build
        self.node = node
        self.node_name = node_name
        self.kubeconfig_path = kubeconfig_path
        self.work = Path(tempfile.mkdtemp(prefix="dra-gpu-nv-", dir="/tmp"))
        self.kubelet_root = self.work / "kubelet"
        self.cdi_root = self.work / "cdi"
        self.log_path = self.work / "plugin.log"
        self.client = KubeletClient(self.kubelet_root, DEFAULT_DRIVER_NAME, timeout=20.0)
        self.process: subprocess.Popen[bytes] | None = None

    def args(self) -> list[str]:
        """The command line."""
        return [
            str(self.build.plugin),
            f"--node-name={self.node_name}",
            f"--kubeconfig={self.kubeconfig_path}",
            f"--kube-api-qps={NVIDIA_KUBE_API_QPS}",
            f"--kube-api-burst={NVIDIA_KUBE_API_QPS}",
            f"--cdi-root={self.cdi_root}",
            "--nvidia-driver-root=/",
            f"--container-driver-root={self.node.driver_root}",
            "--nvidia-cdi-hook-path=/usr/bin/nvidia-cdi-hook",
            f"--kubelet-registrar-directory-path={self.kubelet_root / 'plugins_registry'}",
            f"--kubelet-plugins-directory-path={self.kubelet_root / 'plugins'}",
            f"-v={NVIDIA_LOG_VERBOSITY}",
            "--image-name=dra-driver-nvidia-gpu:bench",  # required; names the MPS daemons' image
        ]

    @property
    def dra_socket(self) -> Path:
        """The socket NodePrepareResources is served on."""
        return dra_socket_path(self.kubelet_root, DEFAULT_DRIVER_NAME)

    def start(self) -> Self:
        """Start the plugin and wait until it registers; PluginError (with its log) if not."""
        registration = registration_socket_path(self.kubelet_root, DEFAULT_DRIVER_NAME)
        env = {
            key: value
            for key, value in os.environ.items()
            if key not in ("NODE_NAME", "NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT", "CDI_ROOT")
        }
        env["MOCK_NVML_CONFIG"] = str(self.node.mock_profile)
        registration.parent.mkdir(parents=True, exist_ok=True)  # the kubelet makes it
        unshare = shutil.which("unshare")
        if unshare is None:
            raise ConfigError(
                "unshare (util-linux) is not installed: NVIDIA's plugin runs in a mount "
                "namespace where the simulated node's sysfs is its /sys/bus/pci/devices"
            )
        command = [
            unshare,
            "--mount",
            "--propagation=private",
            "--",
            "sh",
            "-c",
            'mount --bind "$0" /sys/bus/pci/devices && exec "$@"',
            str(self.node.pci_devices),
            *self.args(),
        ]
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (registration.exists() and self.dra_socket.exists()):
            if self.process.poll() is not None:
                raise PluginError(
                    f"NVIDIA's plugin exited with {self.process.returncode} before it "
                    f"registered; log:\n{self.log_tail()}"
                )
            if time.monotonic() > deadline:
                raise PluginError(
                    f"NVIDIA's plugin did not register within {START_TIMEOUT_S:g} s; "
                    f"log:\n{self.log_tail()}"
                )
            time.sleep(0.05)
        return self

    def rss_peak_kib(self) -> int:
        """The plugin's peak resident set size so far (VmHWM), in KiB."""
        if self.process is None:
            raise PluginError("NVIDIA's plugin was never started")
        status = Path(f"/proc/{self.process.pid}/status").read_text(encoding="ascii")
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise PluginError(f"/proc/{self.process.pid}/status has no VmHWM line")

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the plugin's log."""
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except FileNotFoundError:
            return ""

    def close(self) -> None:
        """Stop the plugin (SIGTERM, then SIGKILL) and remove its work directory."""
        self.client.close()
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)
        shutil.rmtree(self.work, ignore_errors=True)

    def __enter__(self) -> Self:
        try:
            return self.start()
        except BaseException:
            self.close()
            raise

    def __exit__(self, *_exc: object) -> None:
        self.close()
