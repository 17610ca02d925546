"""The `dra-gpu` command line: the composition root.

One entry point with a sub-command per job, all in one table (`COMMANDS`):
each row names the command, its help, a function that adds its flags and a
function that runs it. This module only parses flags and hands over; each
command's work lives with the package it belongs to (the daemon in
`kubelet_plugin`, slice building and publishing in `controller`, the
simulator in `dra_driver.scheduling.whatif`), imported lazily so `dra-gpu inventory`
does not pay for gRPC start-up. It is the one core module allowed to import
`kubelet_plugin` and `controller` (see `.importlinter`): it wires the
controller's slice builder into the simulator and the simulator's allocation
into the demo. Adding a command is one function pair and one row.
"""

from __future__ import annotations

import argparse
import faulthandler
import logging
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, cast

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.compute_domain.names import DRIVER_NAME as COMPUTE_DOMAIN_DRIVER
from dra_driver.errors import ConfigError, DraGpuError
from dra_driver.log_safety import SafeLogFilter
from dra_driver.node.consumable_shares import FLAG_HELP, parse_consumable_shares
from dra_driver.node.feature_gates import FLAG_HELP as DRIVER_GATES_HELP
from dra_driver.node.feature_gates import PASSTHROUGH_SUPPORT, parse_driver_gates

if TYPE_CHECKING:
    from dra_driver.container.driver_root import DriverRoot
    from dra_driver.hardware.machine import Hardware
    from dra_driver.kube.object_store import ObjectStore
    from dra_driver.scheduling.whatif.command import ScenarioOptions

SHAPES = (
    "dgx-a100-40gb, dgx-a100-80gb, dgx-h100, dgx-h200, dgx-b200, gb200-node, gb300-node, "
    "gh200-node, a30-node, l4-node, h100-pcie-node"
)  # dra_driver.hardware.simulated.shapes.BUILTIN_SHAPES (a test keeps them equal)
NVML_HELP = (
    "'real' for the GPUs of this machine through NVML, or 'sim:<shape>' for a simulated node "
    f"(shapes: {SHAPES}, or a path to a YAML shape file)"
)
OUTPUT_HELP = (
    "table: for people, at most 100 columns; wide: every column, nothing shortened; "
    "yaml or json: for tools"
)


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help with each flag's default, as kubectl's help shows them."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (
            "%(default)" in text
            or not action.option_strings
            or default is None
            or default is argparse.SUPPRESS
            or isinstance(default, bool)
            or default in ("", [])
        ):
            return text
        return f"{text} (default: %(default)s)"


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("dra-gpu")
    except PackageNotFoundError:  # run from a source tree without installing
        return "unknown"


class _VersionAction(argparse.Action):
    """`--version`: the installed package's version, looked up only when asked (reading
    the installed packages' metadata is a tenth of a small command's start-up)."""

    def __init__(self, option_strings: Sequence[str], dest: str) -> None:
        super().__init__(
            option_strings,
            dest,
            nargs=0,
            default=argparse.SUPPRESS,
            help="show program's version number and exit",
        )

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> NoReturn:
        print(f"dra-gpu {_version()}")  # on stdout, as argparse's own version action
        parser.exit()


@dataclass(frozen=True)
class Command:
    """One sub-command: its name and help, how to add its flags, and how to run it."""

    name: str
    help: str
    add_flags: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]
    description: str | None = None


NODE_NAME_ENV = "NODE_NAME"
POD_UID_ENV = "POD_UID"


def _add_node_name_flag(
    parser: argparse.ArgumentParser, *, fallback: str | None = None, help: str | None = None
) -> None:
    """--node-name, from NODE_NAME when absent (the DaemonSet sets it from spec.nodeName);
    required where there is no `fallback`."""
    default = os.environ.get(NODE_NAME_ENV) or fallback
    parser.add_argument(
        "--node-name",
        default=default,
        required=default is None,
        help=(help or "the node's name")
        + f" (env {NODE_NAME_ENV}"
        + (f", else {fallback}" if fallback else "")
        + ")",
    )


def _positive_seconds(text: str) -> float:
    """An argparse type: seconds > 0 (0 or less would re-sync in a busy loop)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value > 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0 seconds")
    return value


def _seconds_or_off(text: str) -> float:
    """An argparse type: seconds >= 0, where 0 turns the feature off."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not value >= 0:  # also refuses nan
        raise argparse.ArgumentTypeError(f"{text!r}: must be 0 (off) or more seconds")
    return value


_DURATION_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def _duration(text: str) -> float:
    """An argparse type: a duration > 0, in seconds or with a unit (90s, 30m, 2h, 1d)."""
    unit = _DURATION_UNITS.get(text[-1:]) if text else None
    number = text[:-1] if unit is not None else text
    try:
        value = float(number) * (unit or 1.0)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is not a duration (seconds, or a number with s, m, h or d)"
        ) from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: must be more than 0")
    return value


def _add_hardware_flags(parser: argparse.ArgumentParser, *, latency: bool = False) -> None:
    """--nvml and --sim-state; --sim-latency only where operations run (the plugin)."""
    parser.add_argument("--nvml", required=True, help=NVML_HELP)
    parser.add_argument(
        "--sim-state",
        type=Path,
        help="state file of the simulated hardware (MIG mode, instances); shared across restarts",
    )
    if latency:
        parser.add_argument(
            "--sim-latency",
            default="",
            help="simulated operation latencies, e.g. gi-create=1,gi-destroy=1,ci-create=0.1 "
            "(seconds)",
        )


DRIVER_ROOT_ENV = ("NVIDIA_DRIVER_ROOT", "HOST_DRIVER_ROOT")  # NVIDIA's plugin reads both
CONTAINER_DRIVER_ROOT_ENV = "DRIVER_ROOT_CTR_PATH"
CDI_HOOK_PATH_ENV = "NVIDIA_CDI_HOOK_PATH"
DISABLED_CDI_HOOKS_ENV = "NVIDIA_CDI_DISABLED_HOOKS"


def _add_driver_root_flags(parser: argparse.ArgumentParser) -> None:
    """--nvidia-driver-root, --container-driver-root, --nvidia-cdi-hook-path (NVIDIA's names)."""
    env_root = next((os.environ[e] for e in DRIVER_ROOT_ENV if os.environ.get(e)), None)
    parser.add_argument(
        "--nvidia-driver-root",
        metavar="HOST_PATH",
        default=env_root,
        help="root of the NVIDIA driver installation on the host: / for a host-installed "
        "driver (the default with --nvml real), /run/nvidia/driver with the GPU Operator; "
        "default with --nvml sim:... is a generated fake root "
        f"(env {' or '.join(DRIVER_ROOT_ENV)})",
    )
    parser.add_argument(
        "--container-driver-root",
        metavar="PATH",
        default=os.environ.get(CONTAINER_DRIVER_ROOT_ENV) or None,
        help="where the driver root is mounted in this process's container; files are "
        "found here, CDI hostPaths are written under --nvidia-driver-root "
        f"(default: the same path; env {CONTAINER_DRIVER_ROOT_ENV})",
    )
    parser.add_argument(
        "--nvidia-cdi-hook-path",
        metavar="PATH",
        default=os.environ.get(CDI_HOOK_PATH_ENV) or None,
        help="nvidia-cdi-hook (or nvidia-ctk) on the host, which runs the CDI specs' hooks "
        f"(default /usr/bin/nvidia-cdi-hook; env {CDI_HOOK_PATH_ENV})",
    )
    parser.add_argument(
        "--disable-cdi-hook",
        metavar="NAME",
        action="append",
        default=[h for h in os.environ.get(DISABLED_CDI_HOOKS_ENV, "").split(",") if h.strip()],
        help="leave out one of NVIDIA's CDI hooks, for hosts whose nvidia-container-toolkit "
        "predates it (repeatable, or comma-separated): create-symlinks, update-ldcache (1.16), "
        "enable-cuda-compat (1.17.5), disable-device-node-modification (1.18), "
        "update-application-profile (1.20); 'all' for none, and then libraries are also "
        f"mounted at their soname paths (env {DISABLED_CDI_HOOKS_ENV})",
    )


def _driver_root(args: argparse.Namespace) -> DriverRoot | None:
    """The DriverRoot the flags name; None when none was given (the backend's default)."""
    from dra_driver.container.driver_root import DriverRoot

    host, container, hook = (
        args.nvidia_driver_root,
        args.container_driver_root,
        args.nvidia_cdi_hook_path,
    )
    disabled = frozenset(
        name.strip() for value in args.disable_cdi_hook for name in value.split(",") if name.strip()
    )
    if host is None and container is None and hook is None and not disabled:
        return None
    # host None: the backend's default root ("/", or a simulated node's fake root).
    return DriverRoot(
        host_path=host, container_path=container, cdi_hook_path=hook, disabled_hooks=disabled
    )


def _hardware(args: argparse.Namespace, latency: Mapping[str, float] | None = None) -> Hardware:
    """The hardware --nvml names (real or simulated: decided here, and only here)."""
    from dra_driver.composition.hardware import open_hardware

    return open_hardware(
        args.nvml,
        sim_state=args.sim_state,
        node_name=args.node_name,
        latency=latency,
        driver_root=_driver_root(args),
    )


# ---------------------------------------------------------------- inventory


def _inventory_flags(parser: argparse.ArgumentParser) -> None:
    _add_node_name_flag(parser, help="the node's name: the slices' pool and node")
    parser.add_argument(
        "--driver",
        choices=(DEFAULT_DRIVER_NAME, COMPUTE_DOMAIN_DRIVER),
        default=DEFAULT_DRIVER_NAME,
        help=f"which driver's devices: the GPUs ({DEFAULT_DRIVER_NAME}, the default) or "
        f"the ComputeDomain channel and daemon ({COMPUTE_DOMAIN_DRIVER})",
    )
    parser.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "yaml", "json"),
        default="table",
        help=OUTPUT_HELP,
    )
    parser.add_argument(
        "--dynamic-mig",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="include partitionable MIG devices, as the plugin publishes them with --dynamic-mig",
    )
    parser.add_argument("--partitionable-layout", choices=("v1.34", "v1.35"), default="v1.35")
    _add_consumable_shares_flag(parser)
    _add_driver_gates_flag(parser)
    parser.add_argument(
        "--passthrough",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="include the VFIO passthrough devices, as the plugin publishes them with "
        "--passthrough (or --feature-gates PassthroughSupport=true)",
    )
    _add_hardware_flags(parser)
    _add_driver_root_flags(parser)


def _run_inventory(args: argparse.Namespace) -> int:
    if args.driver == COMPUTE_DOMAIN_DRIVER:
        from controller.compute_domain_inventory import print_compute_domain_inventory

        if args.dynamic_mig or args.consumable_shares:
            raise ConfigError(
                f"--dynamic-mig and --consumable-shares apply to {DEFAULT_DRIVER_NAME} only, "
                f"not --driver {COMPUTE_DOMAIN_DRIVER}"
            )
        return print_compute_domain_inventory(
            _hardware(args), node_name=args.node_name, output=args.output
        )
    from controller.inventory_command import print_inventory

    return print_inventory(
        _hardware(args),
        node_name=args.node_name,
        driver_name=args.driver_name,
        output=args.output,
        dynamic_mig=args.dynamic_mig,
        layout=args.partitionable_layout,
        consumable_shares=parse_consumable_shares(args.consumable_shares),
        list_attributes=parse_driver_gates(args.feature_gates).list_type_attributes,
        passthrough=_passthrough(args),
    )


def _add_driver_gates_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--feature-gates", default="", metavar="GATES", help=DRIVER_GATES_HELP)


def _passthrough(args: argparse.Namespace) -> bool:
    """VFIO passthrough is on: `--passthrough`, or NVIDIA's spelling of it,
    `--feature-gates PassthroughSupport=true`; the two saying opposite things is refused."""
    gate = parse_driver_gates(args.feature_gates).passthrough
    if args.passthrough and gate is False:
        raise ConfigError(
            f"--passthrough and --feature-gates {PASSTHROUGH_SUPPORT}=false contradict each "
            f"other: {PASSTHROUGH_SUPPORT} is NVIDIA's name for --passthrough; give one"
        )
    return bool(args.passthrough or gate)


# ---------------------------------------------------------------- kubelet-plugin


def _plugin_flags(parser: argparse.ArgumentParser) -> None:
    _add_node_name_flag(parser, help="the node this plugin serves")
    parser.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
    parser.add_argument(
        "--pod-uid",
        default=os.environ.get(POD_UID_ENV) or None,
        help="this plugin pod's UID: names the sockets per instance so that an old and a new "
        "plugin pod serve side by side during a rolling upgrade (kubelet 1.33+; the DaemonSet "
        f"passes metadata.uid; env {POD_UID_ENV}; default: the classic socket names)",
    )
    parser.add_argument(
        "--cluster",
        default="kube",
        help="'kube' (in-cluster or kubeconfig) or 'local:DIR' (a directory of YAML objects)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then ~/.kube)")
    parser.add_argument("--kubelet-root", type=Path, default=Path("/var/lib/kubelet"))
    parser.add_argument("--cdi-root", type=Path, default=Path("/var/run/cdi"))
    parser.add_argument(
        "--publish-interval",
        type=_positive_seconds,
        default=30.0,
        help="seconds between ResourceSlice re-syncs (the kubelet wipes slices when it restarts)",
    )
    _add_hardware_flags(parser, latency=True)
    _add_driver_root_flags(parser)
    parser.add_argument(
        "--driver-retry-interval",
        type=_positive_seconds,
        default=10.0,
        help="seconds between attempts to load NVML and find the driver's files while the "
        "driver is missing (the GPU Operator installs it after the plugin starts)",
    )
    parser.add_argument(
        "--dynamic-mig",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="publish every MIG placement as a partitionable device and create MIG instances at "
        "Prepare (needs the DRAPartitionableDevices feature gate on Kubernetes 1.34/1.35)",
    )
    parser.add_argument(
        "--partitionable-layout",
        choices=("auto", "v1.34", "v1.35"),
        default="auto",
        help="slice layout of partitionable devices; auto reads the API server version",
    )
    parser.add_argument(
        "--mig-reclaim-unknown",
        action="store_true",
        help="destroy MIG instances no prepared claim owns at start-up (default: publish them "
        "as static MIG devices and leave them alone)",
    )
    _add_consumable_shares_flag(parser)
    _add_driver_gates_flag(parser)
    parser.add_argument(
        "--keep-mig-enabled",
        action="store_true",
        help="leave MIG mode on when the last dynamic MIG device of a Hopper+ GPU is gone",
    )
    parser.add_argument(
        "--device-health-checks",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="watch NVML Xid/ECC events, taint unhealthy devices and serve the kubelet's "
        "health stream",
    )
    parser.add_argument(
        "--additional-xids-to-ignore",
        default="",
        metavar="XIDS",
        help="comma-separated Xids never to taint for; other Xids taint a GPU when its NVML "
        "recovery action asks for more than none (without one, before driver R565: all Xids "
        "but the application errors 13,31,43,45,68,109)",
    )
    parser.add_argument(
        "--health-poll-interval",
        type=_positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="how often each GPU's NVML recovery action is read: a reset GPU's taint is removed "
        "without a restart, a GPU that needs recovery is tainted",
    )
    parser.add_argument(
        "--unhealthy-taint-effect",
        choices=("NoSchedule", "NoExecute"),
        default="NoSchedule",
        help="effect of the gpu.nvidia.com/unhealthy taint (NoExecute also evicts pods)",
    )
    parser.add_argument(
        "--metrics-address",
        metavar="HOST:PORT",
        help="serve Prometheus metrics on http://HOST:PORT/metrics (e.g. :8080)",
    )
    parser.add_argument(
        "--healthcheck-port",
        type=int,
        metavar="PORT",
        help="serve the gRPC health service (for liveness/readiness probes) on this port",
    )
    parser.add_argument(
        "--instance-wait",
        type=_positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="how long to wait for another plugin instance that serves this node (and is "
        "no rolling-upgrade peer of this one) to exit before refusing to start",
    )
    parser.add_argument(
        "--usage-interval",
        type=_seconds_or_off,
        default=10.0,
        metavar="SECONDS",
        help="sample GPU use per claim and pod (NVML per-process data, /proc/<pid>/cgroup) this "
        "often, for the dra_gpu_claim_* metrics and dra-gpu status; 0 turns it off",
    )
    parser.add_argument(
        "--idle-claim-after",
        type=_duration,
        metavar="DURATION",
        help="post a GPUIdle Warning Event on a claim whose GPUs did nothing this long "
        "(e.g. 30m, 2h); off by default",
    )
    parser.add_argument(
        "--device-metadata",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="write device metadata files (KEP-5304) per claim and request and mount them "
        "read-only into its containers through CDI",
    )
    parser.add_argument(
        "--passthrough",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="publish a gpu-vfio-<idx> device per GPU without MIG devices (DeviceClass "
        "vfio.gpu.nvidia.com) and bind a claimed one to vfio-pci for a VM (KubeVirt); NVIDIA's "
        "PassthroughSupport gate (--feature-gates PassthroughSupport=true is the same). Needs "
        "the IOMMU on and --no-device-health-checks; not with --dynamic-mig",
    )


def _check_hardware_flags(args: argparse.Namespace) -> None:
    """The daemon's hardware flags, checked before it starts anything (ConfigError): the
    --nvml form and shape, the --sim-state directory, and a driver root that is a directory
    where it exists (a missing one is a driver still being installed: the plugin waits)."""
    from dra_driver.composition.hardware import REAL_SPEC, SIM_PREFIX, SPEC_FORMS
    from dra_driver.errors import ConfigError
    from kubelet_plugin.preflight import check_writable_directory

    spec = args.nvml
    if spec != REAL_SPEC:
        shape = spec[len(SIM_PREFIX) :].strip() if spec.startswith(SIM_PREFIX) else ""
        if not shape:
            raise ConfigError(f"--nvml {spec!r}: expected {SPEC_FORMS}")
        from dra_driver.hardware.simulated.shapes import load_shape

        load_shape(shape)
    if args.sim_state is not None:
        directory = Path(os.path.abspath(args.sim_state)).parent
        check_writable_directory(directory, "--sim-state", "its directory")
    root = _driver_root(args)
    if root is not None and root.local_path.exists() and not root.local_path.is_dir():
        flag = "--container-driver-root" if root.container_path else "--nvidia-driver-root"
        raise ConfigError(f"{flag} {root.local_path}: not a directory")


def _dump_threads_on_demand() -> None:
    """A daemon prints every thread's stack to its log on SIGQUIT and keeps running (as a
    Go daemon prints its goroutines), and on a fatal error (SIGSEGV, SIGABRT) before it dies:
    `kubectl exec POD -- sh -c "kill -QUIT 1"` shows where a plugin that seems stuck waits."""
    stderr = sys.__stderr__  # the process's own, never a test's captured stream
    if stderr is None:
        return
    faulthandler.enable(stderr, all_threads=True)
    faulthandler.register(signal.SIGQUIT, stderr, all_threads=True)


def _check_passthrough_flags(args: argparse.Namespace, passthrough: bool) -> None:
    """The combinations NVIDIA's `ValidateFeatureGates` refuses with PassthroughSupport
    (`passthrough`: `_passthrough(args)`, the flag or the gate)."""
    from dra_driver.errors import ConfigError

    if not passthrough:
        return
    given = "--passthrough" if args.passthrough else f"{PASSTHROUGH_SUPPORT}=true"
    if args.dynamic_mig:
        raise ConfigError(
            f"{given} and --dynamic-mig cannot be combined (NVIDIA's driver refuses "
            "PassthroughSupport with DynamicMIG too): a GPU handed to a VM cannot be partitioned"
        )
    if args.device_health_checks:
        raise ConfigError(
            f"{given} needs --no-device-health-checks (NVIDIA's driver refuses "
            "PassthroughSupport with NVMLDeviceHealthCheck too): the health monitor keeps every "
            "GPU open through NVML, and the nvidia driver does not let go of a GPU that is open"
        )


def _run_plugin(args: argparse.Namespace) -> int:
    from dra_driver.hardware.simulated.latency import parse_latency
    from dra_driver.node.health import parse_xid_list
    from kubelet_plugin.main import PluginOptions, run

    _dump_threads_on_demand()
    _check_hardware_flags(args)  # the daemon checks the rest before it starts anything
    passthrough = _passthrough(args)
    _check_passthrough_flags(args, passthrough)
    latency = parse_latency(args.sim_latency) if args.sim_latency else None
    return run(
        PluginOptions(
            node_name=args.node_name,
            open_hardware=lambda: _hardware(args, latency),
            cluster=args.cluster,
            kubelet_root=args.kubelet_root,
            cdi_root=args.cdi_root,
            driver_name=args.driver_name,
            kubeconfig=args.kubeconfig,
            publish_interval=args.publish_interval,
            dynamic_mig=args.dynamic_mig,
            partitionable_layout=args.partitionable_layout,
            mig_reclaim_unknown=args.mig_reclaim_unknown,
            keep_mig_enabled=args.keep_mig_enabled,
            consumable_shares=parse_consumable_shares(args.consumable_shares),
            list_attributes=parse_driver_gates(args.feature_gates).list_type_attributes,
            driver_retry_interval=args.driver_retry_interval,
            health_checks=args.device_health_checks,
            ignored_xids=parse_xid_list(args.additional_xids_to_ignore),
            health_poll_interval=args.health_poll_interval,
            taint_effect=args.unhealthy_taint_effect,
            metrics_address=args.metrics_address,
            healthcheck_port=args.healthcheck_port,
            instance_wait=args.instance_wait,
            pod_uid=args.pod_uid,
            usage_interval=args.usage_interval,
            idle_claim_after=args.idle_claim_after,
            device_metadata=args.device_metadata,
            passthrough=passthrough,
        )
    )


# ---------------------------------------------------------------- compute-domain-kubelet-plugin


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def _add_imex_isolation_flag(parser: argparse.ArgumentParser, *, who: str) -> None:
    parser.add_argument(
        "--imex-isolation",
        choices=("domain", "channel"),
        default=os.environ.get("IMEX_ISOLATION") or "domain",
        help="domain: one IMEX domain per ComputeDomain, a node serves one at a time, pods get "
        "channel0; channel: one IMEX domain per clique, each ComputeDomain its own channel "
        f"1..2047 and nodes shared; {who} (env IMEX_ISOLATION; the controller, the CD kubelet "
        "plugin and the IMEX host must agree)",
    )


def _cd_plugin_flags(parser: argparse.ArgumentParser) -> None:
    _add_node_name_flag(parser, help="the node this plugin serves")
    parser.add_argument(
        "--cluster",
        default="kube",
        help="'kube' (in-cluster or kubeconfig) or 'local:DIR' (a directory of YAML objects)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then ~/.kube)")
    parser.add_argument(
        "--namespace",
        default=os.environ.get("NAMESPACE") or "",
        help="the driver's namespace, where the node's ComputeDomainMembers live (env NAMESPACE; "
        "required: it must be the controller's and the IMEX host's)",
    )
    parser.add_argument("--kubelet-root", type=Path, default=Path("/var/lib/kubelet"))
    parser.add_argument("--cdi-root", type=Path, default=Path("/var/run/cdi"))
    _add_hardware_flags(parser)
    _add_driver_root_flags(parser)
    parser.add_argument(
        "--imex-mode",
        choices=("driverManaged", "hostManaged"),
        default=os.environ.get("IMEX_MODE") or "driverManaged",
        help="driverManaged: IMEX runs in dra-gpu's IMEX host, Prepare waits for this node's "
        "member to be Ready; hostManaged: the host runs nvidia-imex, Prepare asks it for READY "
        "(env IMEX_MODE)",
    )
    parser.add_argument(
        "--imex-host-socket-path",
        default=os.environ.get("IMEX_HOST_SOCKET_PATH") or "/etc/nvidia-imex/imex_ctrl.sock",
        help="the host IMEX daemon's control socket (hostManaged; env IMEX_HOST_SOCKET_PATH)",
    )
    _add_imex_isolation_flag(parser, who="channel: Prepare injects the domain's channel")
    parser.add_argument(
        "--gpu-clique-label",
        action="store_true",
        default=_env_flag("GPU_CLIQUE_LABEL_ENABLED"),
        help="set the Node label nvidia.com/gpu.clique to the node's NVLink clique, remove it "
        "on shutdown (env GPU_CLIQUE_LABEL_ENABLED)",
    )
    parser.add_argument(
        "--fabric-check-interval",
        type=_positive_seconds,
        default=10.0,
        help="seconds between NVLink fabric checks; the slice follows without a restart",
    )
    parser.add_argument(
        "--prepare-wait",
        type=_positive_seconds,
        default=45.0,
        help="how long Prepare waits for IMEX on this node to be Ready before the kubelet retries",
    )
    parser.add_argument(
        "--publish-interval",
        type=_positive_seconds,
        default=30.0,
        help="seconds between ResourceSlice re-syncs",
    )
    parser.add_argument(
        "--healthcheck-port",
        type=int,
        metavar="PORT",
        help="serve the gRPC health service (liveness/readiness probes) on this port",
    )


def _run_cd_plugin(args: argparse.Namespace) -> int:
    from kubelet_plugin.compute_domain.main import CdPluginOptions, run

    if not args.namespace:
        print(
            "dra-gpu compute-domain-kubelet-plugin: --namespace: required (env NAMESPACE): the "
            "driver's namespace, where the controller and the IMEX host look for members",
            file=sys.stderr,
        )
        return 2
    _dump_threads_on_demand()
    return run(
        CdPluginOptions(
            node_name=args.node_name,
            namespace=args.namespace,
            open_hardware=lambda: _hardware(args),
            cluster=args.cluster,
            kubeconfig=args.kubeconfig,
            kubelet_root=args.kubelet_root,
            cdi_root=args.cdi_root,
            imex_mode=args.imex_mode,
            imex_isolation=args.imex_isolation,
            imex_host_socket_path=args.imex_host_socket_path,
            gpu_clique_label=args.gpu_clique_label,
            fabric_check_interval=args.fabric_check_interval,
            prepare_wait=args.prepare_wait,
            publish_interval=args.publish_interval,
            healthcheck_port=args.healthcheck_port,
        )
    )


# ---------------------------------------------------------------- mps-host


def _mps_host_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME") or "sim-node",
        help="node name (simulated UUIDs; env NODE_NAME)",
    )
    parser.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
    parser.add_argument(
        "--kubelet-root",
        type=Path,
        default=Path("/var/lib/kubelet"),
        help="the kubelet plugin's kubelet root: intents are read from <root>/plugins/<driver>/mps",
    )
    _add_hardware_flags(parser)
    _add_driver_root_flags(parser)
    parser.add_argument(
        "--driver-retry-interval",
        type=_positive_seconds,
        default=10.0,
        help="seconds between attempts to find nvidia-cuda-mps-control while the driver is missing",
    )


def _run_mps_host(args: argparse.Namespace) -> int:
    from kubelet_plugin.mps_host_main import HostOptions, run

    _dump_threads_on_demand()
    return run(
        HostOptions(
            open_hardware=lambda: _hardware(args),
            kubelet_root=args.kubelet_root,
            driver_name=args.driver_name,
            driver_retry_interval=args.driver_retry_interval,
        )
    )


# ---------------------------------------------------------------- imex-host


def _positive_count(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value}: must be 1 or more")
    return value


def _imex_host_flags(parser: argparse.ArgumentParser) -> None:
    _add_node_name_flag(parser, help="the node this IMEX host serves")
    parser.add_argument(
        "--node-ip",
        default=os.environ.get("NODE_IP") or None,
        required=not os.environ.get("NODE_IP"),
        help="the node's address, on which IMEX listens and which its peers are told "
        "(the DaemonSet passes status.hostIP; env NODE_IP)",
    )
    parser.add_argument(
        "--cluster",
        default="kube",
        help="'kube' (in-cluster or kubeconfig) or 'local:DIR' (a directory of YAML objects)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then ~/.kube)")
    parser.add_argument(
        "--namespace",
        default=os.environ.get("NAMESPACE") or None,
        required=not os.environ.get("NAMESPACE"),
        help="the driver's namespace, where ComputeDomainMembers and ComputeDomainCliques live "
        "(env NAMESPACE)",
    )
    _add_hardware_flags(parser)
    _add_driver_root_flags(parser)
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=Path("/var/lib/dra-gpu/imex"),
        help="where each domain's imexd.cfg, nodes.cfg, hosts file, pid file and IMEX log live",
    )
    parser.add_argument(
        "--hosts-file",
        type=Path,
        default=None,
        help="also keep the IMEX names in this shared hosts file (/etc/hosts, which the real "
        "nvidia-imex resolves names in); default: only the domain's own hosts file",
    )
    parser.add_argument(
        "--max-nodes-per-imex-domain",
        type=_positive_count,
        default=None,
        help="lines of nodes.cfg; must equal the controller's (env MAX_NODES_PER_IMEX_DOMAIN, "
        "else 18)",
    )
    _add_imex_isolation_flag(parser, who="channel: one IMEX daemon for the node's clique")
    parser.add_argument(
        "--imex-host-socket-path",
        default=os.environ.get("IMEX_HOST_SOCKET_PATH") or "/etc/nvidia-imex/imex_ctrl.sock",
        help="a host nvidia-imex service's command socket; one that answers there (under "
        "--host-root) is reported on every member as HostImexRunning (env IMEX_HOST_SOCKET_PATH)",
    )
    parser.add_argument(
        "--host-root",
        type=Path,
        default=Path("/"),
        help="where the host's file system is mounted in this process's container",
    )
    parser.add_argument(
        "--poll-interval",
        type=_positive_seconds,
        default=0.5,
        help="seconds between nvidia-imex-ctl polls while the daemon is not Ready and connected",
    )
    parser.add_argument(
        "--ready-poll-interval",
        type=_positive_seconds,
        default=10.0,
        help="seconds between nvidia-imex-ctl polls once it is Ready and connected",
    )
    parser.add_argument(
        "--sigusr1-min-interval",
        type=_positive_seconds,
        default=5.0,
        help="seconds between two SIGUSR1 to IMEX (it ignores one sooner than 5 s after the "
        "last); a later peer change waits for it",
    )
    parser.add_argument(
        "--driver-retry-interval",
        type=_positive_seconds,
        default=10.0,
        help="seconds between attempts to find nvidia-imex while the driver is missing",
    )


def _object_store(args: argparse.Namespace) -> ObjectStore:
    """The --cluster store, as an ObjectStore (the ComputeDomain kinds)."""
    from dra_driver.kube.access import open_cluster

    store = open_cluster(args.cluster, kubeconfig=args.kubeconfig)
    if not callable(getattr(store, "watch_objects", None)):
        raise ConfigError(
            f"--cluster {args.cluster}: this store cannot serve ComputeDomain objects"
        )
    return cast("ObjectStore", store)


def _max_nodes_per_imex_domain(args: argparse.Namespace) -> int:
    """The flag, else env MAX_NODES_PER_IMEX_DOMAIN (checked when used, not when the parser is
    built: a bad value must be one line naming it, not a traceback of every command), else 18."""
    if args.max_nodes_per_imex_domain is not None:
        return int(args.max_nodes_per_imex_domain)
    return _env_int("MAX_NODES_PER_IMEX_DOMAIN", 18)


def _run_imex_host(args: argparse.Namespace) -> int:
    from kubelet_plugin.imex_host import HostConfig
    from kubelet_plugin.imex_host_main import HostOptions, run

    _dump_threads_on_demand()
    socket_path = args.host_root / str(args.imex_host_socket_path).lstrip("/")
    return run(
        HostOptions(
            open_hardware=lambda: _hardware(args),
            open_store=lambda: _object_store(args),
            host=HostConfig(
                node_name=args.node_name,
                node_ip=args.node_ip,
                namespace=args.namespace,
                state_dir=args.state_dir,
                max_nodes=_max_nodes_per_imex_domain(args),
                isolation=args.imex_isolation,
                hosts_file=args.hosts_file,
                host_socket=socket_path,
                sigusr1_min_interval=args.sigusr1_min_interval,
            ),
            driver_retry_interval=args.driver_retry_interval,
            fast_interval=args.poll_interval,
            ready_interval=args.ready_poll_interval,
        )
    )


# ---------------------------------------------------------------- mig


def _mig_flags(parser: argparse.ArgumentParser) -> None:
    mig_commands = parser.add_subparsers(dest="mig_command", required=True, metavar="MIG_COMMAND")
    status = mig_commands.add_parser("status", help="print the live MIG layout of every GPU")
    _add_node_name_flag(status, fallback="sim-node", help="node name (simulated UUIDs)")
    status.add_argument(
        "-o",
        "--output",
        choices=("text", "yaml", "json"),
        default="text",
        help="text: a drawing of each GPU's memory slices, for people; yaml or json: for tools "
        "(per GPU: MIG mode, GPU instances with profile and placement, compute instances "
        "with MIG UUIDs)",
    )
    _add_hardware_flags(status)
    _add_driver_root_flags(status)


def _run_mig(args: argparse.Namespace) -> int:
    # `status` is the only MIG command (argparse refuses any other).
    from dra_driver.node import mig_status

    sys.stdout.write(
        mig_status.format_status(mig_status.collect(_hardware(args).nvml), args.output)
    )
    return 0


# ---------------------------------------------------------------- status


def _status_flags(parser: argparse.ArgumentParser) -> None:
    _add_node_name_flag(parser, fallback="sim-node", help="node name (simulated UUIDs)")
    parser.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
    parser.add_argument(
        "--kubelet-root",
        type=Path,
        default=Path("/var/lib/kubelet"),
        help="the plugin's kubelet root: its checkpoint and MPS daemons are read from there",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "yaml", "json"),
        default="table",
        help=OUTPUT_HELP,
    )
    parser.add_argument(
        "--claims",
        action="store_true",
        help="only the per-claim view: pods, SM %%, memory used/limit, idle time, over share",
    )
    _add_hardware_flags(parser)
    _add_driver_root_flags(parser)


def _run_status(args: argparse.Namespace) -> int:
    from kubelet_plugin.node_status import print_status

    return print_status(
        _hardware(args),
        kubelet_root=args.kubelet_root,
        driver_name=args.driver_name,
        output=args.output,
        claims=args.claims,
    )


# ---------------------------------------------------------------- sim


def _sim_flags(parser: argparse.ArgumentParser) -> None:
    from dra_driver.hardware.nvml.codes import RECOVERY_ACTION_NAMES

    sim_commands = parser.add_subparsers(dest="sim_command", required=True, metavar="SIM_COMMAND")
    health = sim_commands.add_parser(
        "health", help="inject a device-health event into a running plugin's simulated GPUs"
    )
    health.add_argument("--sim-state", type=Path, required=True, help="the node's state file")
    health.add_argument("--gpu", type=_gpu_index, required=True, help="NVML index of the GPU")
    event = health.add_mutually_exclusive_group(required=True)
    event.add_argument("--xid", type=_xid, help="a critical Xid error, e.g. 79 or 48")
    event.add_argument("--double-bit-ecc", action="store_true", help="a double-bit ECC error")
    event.add_argument("--gpu-lost", action="store_true", help="the GPU fell off the bus")
    event.add_argument(
        "--healthy",
        action="store_true",
        help="the GPU was reset and works again: no recovery action pending (NVML sends no "
        "event for that; the plugin's health poll notices)",
    )
    health.add_argument(
        "--recovery-action",
        choices=sorted(RECOVERY_ACTION_NAMES.values()),
        help="the recovery action the driver asks for after the event (default: none for "
        "application Xids 13,31,43,45,68,109, gpu-reset for any other fault)",
    )
    workload = sim_commands.add_parser(
        "workload",
        help="run (or stop) a pod's CUDA process on a simulated GPU or MIG device",
        description="Run a simulated CUDA process of pod --pod-uid on --device of a running "
        "plugin's simulated node: NVML lists it with its memory and SM utilization, and its "
        "/proc/<pid>/cgroup names the pod. Again for the same device and pod: new numbers.",
    )
    workload.add_argument("--sim-state", type=Path, required=True, help="the node's state file")
    workload.add_argument(
        "--device",
        required=True,
        help="a GPU or MIG UUID, gpu-<minor>, or a MIG device name as the plugin publishes it",
    )
    workload.add_argument("--pod-uid", required=True, help="the UID of the pod the process is in")
    workload.add_argument(
        "--sm", type=int, default=0, metavar="PCT", help="SM utilization in percent (default 0)"
    )
    workload.add_argument(
        "--memory", default="0", metavar="QTY", help="GPU memory used, e.g. 20Gi (default 0)"
    )
    workload.add_argument("--stop", action="store_true", help="end the pod's process there")
    modules = sim_commands.add_parser(
        "modules",
        help="make a simulated node lack nvidia-uvm (as after a host driver install), or not",
        description="Leave kernel modules out of a simulated node's /proc/devices, as on a node "
        "whose driver was installed after boot before any CUDA program ran; the plugin loads "
        "them, or fails as --modprobe-error says. Without --unload: all loaded again.",
    )
    modules.add_argument("--sim-state", type=Path, required=True, help="the node's state file")
    modules.add_argument(
        "--unload", action="append", default=[], metavar="MODULE", help="nvidia-uvm"
    )
    modules.add_argument(
        "--modprobe-error",
        default="",
        metavar="TEXT",
        help="what modprobe says when asked to load one (default: it loads)",
    )
    modules.add_argument("--shape", help="boot a node of this shape if --sim-state does not exist")
    modules.add_argument("--node-name", default="sim-node", help="its node name (with --shape)")
    fabric = sim_commands.add_parser(
        "fabric",
        help="change a simulated node's NVLink fabric answer (state, clique, health)",
        description="Set what the GPUs of a running simulated node answer to "
        "nvmlDeviceGetGpuFabricInfoV, or place the node by NVIDIA's mock cluster topology "
        "file (domains[]{name, uuid, cliques[]{id, nodes[]}}). Fields not given are kept.",
    )
    fabric.add_argument(
        "--state-file", "--sim-state", type=Path, required=True, help="the node's state file"
    )
    fabric.add_argument("--gpu", type=_gpu_index, help="NVML index of the GPU (default: all)")
    fabric.add_argument(
        "--state", choices=("completed", "in_progress", "not_started", "not_supported")
    )
    fabric.add_argument("--clique", type=int, help="the clique id (0..4294967295)")
    fabric.add_argument("--cluster-uuid", help="the cluster UUID")
    fabric.add_argument("--health", choices=("healthy", "degraded", "unhealthy"))
    fabric.add_argument("--topology", type=Path, help="a mock-NVML cluster topology file")
    fabric.add_argument("--node", help="the node's name in --topology")


MAX_XID = 2**32 - 1


def _xid(text: str) -> int:
    """An argparse type: an Xid as NVML reports them, 1 to 2^32-1."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not an Xid number") from None
    if not 1 <= value <= MAX_XID:
        raise argparse.ArgumentTypeError(f"{text[:40]}: an Xid is 1 to {MAX_XID}")
    return value


def _gpu_index(text: str) -> int:
    """An argparse type: an NVML GPU index, 0 to 1023."""
    try:
        value = int(text, 10)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a GPU index") from None
    if not 0 <= value < 1024:
        raise argparse.ArgumentTypeError(f"{text[:40]}: a GPU index is 0 to 1023")
    return value


def _run_sim(args: argparse.Namespace) -> int:
    if args.sim_command == "fabric":
        from dra_driver.hardware.simulated.fabric_command import set_fabric

        return set_fabric(
            args.state_file,
            gpu=args.gpu,
            state=args.state,
            clique=args.clique,
            cluster_uuid=args.cluster_uuid,
            health=args.health,
            topology=args.topology,
            node=args.node,
        )
    if args.sim_command == "modules":
        from dra_driver.hardware.simulated.modules_command import set_modules

        return set_modules(
            args.sim_state,
            unload=args.unload,
            modprobe_error=args.modprobe_error,
            shape=args.shape,
            node_name=args.node_name,
        )
    if args.sim_command == "workload":
        from dra_driver.hardware.simulated.workload_command import run_workload

        return run_workload(
            args.sim_state,
            device=args.device,
            pod_uid=args.pod_uid,
            sm_percent=args.sm,
            memory=args.memory,
            stop=args.stop,
        )
    from dra_driver.hardware.simulated.health_command import inject_health_event

    return inject_health_event(
        args.sim_state,
        gpu=args.gpu,
        xid=args.xid,
        double_bit_ecc=args.double_bit_ecc,
        gpu_lost=args.gpu_lost,
        recovery_action=args.recovery_action,
    )


# ---------------------------------------------------------------- cdi


def _cdi_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nvml", default="real", help=NVML_HELP + " (default: real)")
    parser.add_argument(
        "--sim-state", type=Path, help="state file of the simulated hardware (with --nvml sim:)"
    )
    _add_node_name_flag(parser, fallback="sim-node", help="node name (simulated UUIDs)")
    parser.add_argument("-o", "--output", choices=("yaml", "json"), default="yaml")
    _add_driver_root_flags(parser)


def _run_cdi(args: argparse.Namespace) -> int:
    from kubelet_plugin.cdi_command import print_common_edits

    return print_common_edits(_hardware(args), output=args.output)


# ---------------------------------------------------------------- demo


def _demo_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "scene",
        nargs="?",
        choices=("compute-domain",),
        help="compute-domain: N simulated GB200 nodes (GPU plugin, ComputeDomain plugin, IMEX "
        "host each) and the ComputeDomain controller run a 2-node ComputeDomain and its "
        "workers; exit status 0 only when the domain becomes Ready and every worker has its "
        "IMEX channel (default: the single-node scene on a dgx-h100)",
    )
    parser.add_argument(
        "--nodes",
        type=int,
        default=4,
        help="compute-domain: how many simulated gb200-node nodes (at least 2)",
    )
    parser.add_argument(
        "-o",
        "--output",
        choices=("text", "json"),
        default="text",
        help="compute-domain: json prints one document: nodes, pods with their device nodes, "
        "the domain's status, the IMEX peers, ready and channels",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary directory")


def _run_demo(args: argparse.Namespace) -> int:
    if args.scene == "compute-domain":
        from dra_driver.composition.compute_domain_demo import run_compute_domain_demo

        if args.nodes < 2:
            raise ConfigError(f"--nodes {args.nodes}: the demo's ComputeDomain spans 2 nodes")
        return run_compute_domain_demo(nodes=args.nodes, output=args.output, keep=args.keep)
    from dra_driver.composition.demo import run_demo
    from dra_driver.scheduling.whatif.node_allocation import allocate_on_node

    return run_demo(allocate=allocate_on_node, keep=args.keep)


# ---------------------------------------------------------------- simulate, explain


def _simulate_flags(parser: argparse.ArgumentParser) -> None:
    _add_scenario_flags(parser, files_required=True)
    parser.add_argument(
        "-o",
        "--output",
        choices=("table", "wide", "yaml", "json"),
        default="table",
        help=f"{OUTPUT_HELP}: one list of {{pod, placed, node, reason, claims: [{{claim, "
        "results: [{request, driver, pool, device}], config}]}",
    )


def _scenario(args: argparse.Namespace) -> ScenarioOptions:
    """The files, `--nodes` and defaults of `simulate` and `explain`, with our node builder."""
    from dra_driver.composition.simulated_nodes import build_simulated_nodes
    from dra_driver.scheduling.whatif.command import ScenarioOptions

    return ScenarioOptions(
        build_nodes=build_simulated_nodes,
        files=args.files,
        nodes=args.nodes,
        namespace=args.namespace,
        release=args.release,
        mig=args.mig,
        feature_gates=args.feature_gates,
        consumable_shares=parse_consumable_shares(args.consumable_shares),
        recursive=args.recursive,
        passthrough=args.passthrough,
    )


def _run_simulate(args: argparse.Namespace) -> int:
    from dra_driver import cycle_collector

    with cycle_collector.paused():  # the imports too
        from dra_driver.scheduling.whatif.command import run_simulate

        return run_simulate(_scenario(args), output=args.output)


def _explain_flags(parser: argparse.ArgumentParser) -> None:
    _add_scenario_flags(parser, files_required=False)
    parser.add_argument(
        "--cluster",
        help="read the cluster instead of files: 'kube' (kubeconfig / in-cluster) or 'local:DIR'",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig path for --cluster kube")
    parser.add_argument("--claim", help="the ResourceClaim to explain, NAMESPACE/NAME")
    parser.add_argument("--pod", help="the pod whose claims to explain, NAMESPACE/NAME")
    parser.add_argument("--node", help="only this node (default: every node the pod may use)")
    parser.add_argument(
        "--verbose",
        dest="details",
        action="store_true",
        help="every node and every device, not a summary",
    )


def _run_explain(args: argparse.Namespace) -> int:
    from dra_driver import cycle_collector

    with cycle_collector.paused():  # the imports too
        from dra_driver.scheduling.whatif.command import run_explain

        return run_explain(
            _scenario(args),
            cluster=args.cluster,
            kubeconfig=args.kubeconfig,
            claim=args.claim,
            pod=args.pod,
            node=args.node,
            verbose=args.details,
        )


def _add_scenario_flags(parser: argparse.ArgumentParser, *, files_required: bool) -> None:
    parser.add_argument(
        "-f",
        "--filename",
        dest="files",
        action="append",
        required=files_required,
        default=[],
        metavar="FILE",
        help="Pods, workloads, ResourceClaims(Templates), DeviceClasses, ResourceSlices, Nodes, "
        "Namespaces, as for kubectl apply -f: a YAML or JSON file, a directory, a glob, "
        "a comma-separated list, or '-' for stdin; repeatable",
    )
    parser.add_argument(
        "-R",
        "--recursive",
        action="store_true",
        help="read the directories given with -f and their subdirectories",
    )
    parser.add_argument(
        "--nodes",
        metavar="SPEC",
        help="simulated nodes built with our inventory code, e.g. dgx-h100=2,dgx-a100-40gb=1 "
        f"(shapes: {SHAPES}, or a YAML shape file); without it: the nodes the files name",
    )
    parser.add_argument(
        "-n", "--namespace", default="default", help="namespace of objects that name none"
    )
    parser.add_argument(
        "--kubernetes",
        dest="release",
        choices=(
            "1.34",
            "1.35",
            "1.36",
            "1.37",
        ),  # dra_driver.scheduling.allocator.features.RELEASES
        default="1.35",
        help="Kubernetes release whose API validation, allocator, feature-gate defaults and "
        "slice layout to follow (1.35 is the oldest release still supported; "
        "docs/kubernetes-versions.md)",
    )
    parser.add_argument(
        "--mig",
        choices=("static", "dynamic"),
        default="static",
        help="how --nodes publish MIG-capable GPUs, as the kubelet plugin does: static = its "
        "default (the MIG devices that exist); dynamic = with --dynamic-mig (every MIG "
        "placement, created at Prepare; needs DRAPartitionableDevices, off by default on "
        "1.34/1.35)",
    )
    parser.add_argument(
        "--feature-gates",
        default="",
        metavar="GATES",
        help="scheduler DRA gates, e.g. DRAConsumableCapacity=true,DRADeviceTaints=false; "
        "DRAListTypeAttributes=true (1.36+) also makes --nodes publish numaNode as a list, "
        "as the plugin does with that gate",
    )
    _add_consumable_shares_flag(parser)
    parser.add_argument(
        "--passthrough",
        action="store_true",
        help="--nodes publish VFIO passthrough devices (gpu-vfio-<idx>, class "
        "vfio.gpu.nvidia.com), as the kubelet plugin does with --passthrough",
    )


def _add_consumable_shares_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--consumable-shares", default="", metavar="unlimited|memory|N", help=FLAG_HELP
    )


def _webhook_flags(parser: argparse.ArgumentParser) -> None:
    from dra_driver.admission import DEFAULT_PORT

    parser.add_argument(
        "--tls-cert-file",
        required=True,
        type=Path,
        help="File containing the default x509 Certificate for HTTPS. (CA cert, if any, "
        "concatenated after server cert). Read again when it changes",
    )
    parser.add_argument(
        "--tls-private-key-file",
        required=True,
        type=Path,
        help="File containing the default x509 private key matching --tls-cert-file",
    )
    parser.add_argument(
        "--port", type=_port, default=DEFAULT_PORT, help="Secure port that the webhook listens on"
    )
    parser.add_argument(
        "--driver-name", default=DEFAULT_DRIVER_NAME, help="the driver whose configs to check"
    )


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 < port < 65536:
        raise argparse.ArgumentTypeError(f"port {port} is not in 1..65535")
    return port


def _run_webhook(args: argparse.Namespace) -> int:
    from dra_driver.admission.server import WebhookOptions, run

    return run(
        WebhookOptions(
            cert_file=args.tls_cert_file,
            key_file=args.tls_private_key_file,
            port=args.port,
            driver=args.driver_name,
        )
    )


# ---------------------------------------------------------------- the table


# ---------------------------------------------------------------- compute-domain-controller


def _env_int(name: str, default: int) -> int:
    value = os.environ.get(name)
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        raise ConfigError(f"env {name}={value!r}: expected an integer") from None


def _compute_domain_controller_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster",
        default="kube",
        help="'kube' (in-cluster or kubeconfig) or 'local:DIR' (a directory of YAML objects)",
    )
    parser.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then ~/.kube)")
    parser.add_argument(
        "--namespace",
        default=os.environ.get("NAMESPACE") or "",
        help="the driver's namespace: cliques, members and the Lease live there (env NAMESPACE)",
    )
    parser.add_argument(
        "--max-nodes-per-imex-domain",
        type=int,
        default=None,
        metavar="N",
        help="nodes per IMEX domain (clique) at most; 18 on GB200 and GB300 "
        "(env MAX_NODES_PER_IMEX_DOMAIN, else 18)",
    )
    parser.add_argument(
        "--imex-mode",
        choices=("driverManaged", "hostManaged"),
        default=os.environ.get("IMEX_MODE") or "driverManaged",
        help="driverManaged: IMEX runs in the IMEX host, the controller keeps cliques; "
        "hostManaged: the host runs IMEX, only the finalizer, template and status (env IMEX_MODE)",
    )
    _add_imex_isolation_flag(parser, who="channel: the controller assigns the channels")
    parser.add_argument(
        "--leader-elect",
        action=argparse.BooleanOptionalAction,
        default=False,
        help="hold the Lease dra-gpu-compute-domain-controller in --namespace before writing "
        "(run more than one replica)",
    )
    parser.add_argument(
        "--leader-elect-lease-duration",
        type=_positive_seconds,
        default=15.0,
        metavar="SECONDS",
        help="how long a Lease holds without renewal before another replica may take it",
    )
    parser.add_argument(
        "--leader-elect-renew-deadline",
        type=_positive_seconds,
        default=10.0,
        metavar="SECONDS",
        help="the leader stops writing when it could not renew for this long",
    )
    parser.add_argument(
        "--leader-elect-retry-period",
        type=_positive_seconds,
        default=2.0,
        metavar="SECONDS",
        help="seconds between attempts to acquire or renew the Lease",
    )
    parser.add_argument(
        "--healthcheck-port",
        type=int,
        metavar="PORT",
        help="serve HTTP /healthz and /metrics (Prometheus) on this port",
    )


def _run_compute_domain_controller(args: argparse.Namespace) -> int:
    from controller.compute_domain.main import ControllerCommand, run

    _dump_threads_on_demand()
    max_nodes = _max_nodes_per_imex_domain(args)
    return run(
        ControllerCommand(
            cluster=args.cluster,
            namespace=args.namespace,
            max_nodes=max_nodes,
            imex_mode=args.imex_mode,
            imex_isolation=args.imex_isolation,
            leader_elect=args.leader_elect,
            lease_duration=args.leader_elect_lease_duration,
            renew_deadline=args.leader_elect_renew_deadline,
            retry_period=args.leader_elect_retry_period,
            healthcheck_port=args.healthcheck_port,
            kubeconfig=args.kubeconfig,
        )
    )


COMMANDS: tuple[Command, ...] = (
    Command(
        "inventory",
        "print the ResourceSlices this node would publish (writes nothing)",
        _inventory_flags,
        _run_inventory,
    ),
    Command("kubelet-plugin", "run the node daemon", _plugin_flags, _run_plugin),
    Command(
        "compute-domain-kubelet-plugin",
        "run the node daemon of compute-domain.nvidia.com (IMEX channels)",
        _cd_plugin_flags,
        _run_cd_plugin,
    ),
    Command(
        "status",
        "per GPU: MIG mode, time-slice, MPS daemon and the claims it serves, MIG devices; "
        "per claim: pods, SM %%, memory used/limit, idle time, over share",
        _status_flags,
        _run_status,
    ),
    Command("mig", "MIG tools", _mig_flags, _run_mig),
    Command(
        "mps-host",
        "run the node's MPS control daemons for the kubelet plugin (outlives plugin upgrades)",
        _mps_host_flags,
        _run_mps_host,
        description="Start, re-limit and stop MPS control daemons as the kubelet plugin's "
        "intent files under <kubelet root>/plugins/<driver>/mps ask. Runs as its own "
        "DaemonSet so that plugin upgrades never stop a daemon; exits on SIGTERM and leaves "
        "the daemons running.",
    ),
    Command(
        "imex-host",
        "run the node's IMEX daemon for the ComputeDomain the node is a member of",
        _imex_host_flags,
        _run_imex_host,
        description="Watch this node's ComputeDomainMembers and their ComputeDomainCliques, "
        "run nvidia-imex for the domain the node serves (config, nodes and hosts files under "
        "--state-dir), keep its peers current and write each member's status. Runs as its own "
        "DaemonSet (hostNetwork) so that plugin and controller upgrades never stop IMEX; exits "
        "on SIGTERM and leaves the daemon running.",
    ),
    Command(
        "compute-domain-controller",
        "run the ComputeDomain controller (compute-domain.nvidia.com): cliques, status, "
        "workload templates",
        _compute_domain_controller_flags,
        _run_compute_domain_controller,
        description="Keep each ComputeDomain's finalizer, workload ResourceClaimTemplate, "
        "ComputeDomainCliques (IMEX indices, one per node, kept while the node is a member) and "
        "status (nodes, Ready/Degraded/CliqueFull/Terminating conditions, Events), driven by "
        "watches. Deletion waits until no node holds a channel claim.",
    ),
    Command("sim", "act on a simulated node's hardware", _sim_flags, _run_sim),
    Command(
        "cdi",
        "print the CDI edits every claim's container gets on this node (driver files, "
        "control devices, hooks)",
        _cdi_flags,
        _run_cdi,
        description="Discover the NVIDIA driver's files under the driver root for the driver "
        "version NVML reports and print the common CDI containerEdits a prepared claim "
        "carries, so an admin can check a node. Writes nothing.",
    ),
    Command(
        "webhook",
        "run the validating admission webhook for ResourceClaims and ResourceClaimTemplates",
        _webhook_flags,
        _run_webhook,
        description="Serve POST /validate-resource-claim-parameters (AdmissionReview "
        "admission.k8s.io/v1) and GET /readyz over HTTPS: refuses a claim or claim template "
        "whose GpuConfig or MigDeviceConfig the kubelet plugin would refuse at Prepare, with "
        "the plugin's message. TLS from the two files, reloaded when they change.",
    ),
    Command(
        "demo",
        "the whole path on a simulated dgx-h100 node (`demo compute-domain`: GB200 nodes "
        "running a ComputeDomain)",
        _demo_flags,
        _run_demo,
    ),
    Command(
        "simulate",
        "place pods and claims from YAML files on simulated nodes with the scheduler's allocator",
        _simulate_flags,
        _run_simulate,
        description="Place the Pods (and the pods of Deployments, ReplicaSets, StatefulSets "
        "and Jobs) in the files, in order, first fit, allocating their ResourceClaims exactly "
        "as kube-scheduler would. Exit status 1 if anything was not placed.",
    ),
    Command(
        "explain",
        "why a claim (or a pod's claims) does or does not fit, per node and device",
        _explain_flags,
        _run_explain,
        description="Explain a claim or a pod from the files (the simulation up to it) or "
        "from a cluster. Without --claim/--pod, the first item simulate could not place. "
        "Exit status 1 if it does not fit.",
    ),
)


class _Parser(argparse.ArgumentParser):
    """argparse, with a bad flag reported in one line (no usage block) and exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="dra-gpu",
        description="DRA driver for NVIDIA GPUs: node plugin and tools",
        formatter_class=_HelpFormatter,
    )
    parser.add_argument("--version", action=_VersionAction)
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    parser.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="log lines as text, or as one JSON object each (for log collectors)",
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            formatter_class=_HelpFormatter,
        )
        command.add_flags(sub)
        sub.set_defaults(run=command.run)
    _show_defaults(parser)
    return parser


def _show_defaults(parser: argparse.ArgumentParser) -> None:
    """Every sub-command's parser, nested ones (`mig status`) included, shows defaults."""
    parser.formatter_class = _HelpFormatter
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                _show_defaults(sub)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command `argv` names (None: this process's arguments, and it exits next)."""
    args = build_parser().parse_args(argv)
    _configure_logging(verbose=args.verbose, json_format=args.log_format == "json")
    try:
        code: int = args.run(args)
    except DraGpuError as exc:
        print(f"dra-gpu {args.command}: {exc}", file=sys.stderr)
        return 2
    finally:
        if argv is None:
            _before_exit()
    return code


def _before_exit() -> None:
    """Spare the exiting interpreter its cycle collection over everything still alive.

    After a 5,000-pod `simulate` the caches hold 300,000 objects, and the
    interpreter's shutdown took 0.6 s of CPU collecting them, a fifth of the
    whole run. Moved to the permanent generation (`gc.freeze`), they are not
    scanned; nothing there has a finalizer the command's output depends on.
    """
    import gc

    gc.freeze()


def _configure_logging(*, verbose: bool, json_format: bool) -> None:
    handler = logging.StreamHandler(sys.stderr)
    if json_format:
        from pythonjsonlogger.json import JsonFormatter

        handler.setFormatter(
            JsonFormatter(
                "%(asctime)s %(levelname)s %(name)s %(message)s",
                rename_fields={"asctime": "time", "levelname": "level", "name": "logger"},
            )
        )
    else:
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.addFilter(SafeLogFilter())  # one bounded line per record, whatever claims hold
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.INFO, handlers=[handler], force=True
    )


if __name__ == "__main__":
    sys.exit(main())
