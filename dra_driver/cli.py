"""The `dra-gpu` command line.

One entry point with a sub-command per job. This module only parses flags
and hands over; each command's work lives with the package it belongs to
(the daemon in `kubelet_plugin`, publishing in `controller`), imported
lazily so `dra-gpu inventory` does not pay for gRPC start-up.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from dra_driver import DEFAULT_DRIVER_NAME
from dra_driver.errors import DraGpuError

NVML_HELP = (
    "'real' for the GPUs of this machine through NVML, or 'sim:<shape>' for a simulated node "
    "(shapes: dgx-a100-40gb, dgx-a100-80gb, dgx-h100, dgx-h200, a30-node, l4-node, "
    "h100-pcie-node, or a path to a YAML shape file)"
)


def _add_hardware_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--nvml", required=True, help=NVML_HELP)
    parser.add_argument(
        "--sim-state",
        type=Path,
        help="state file of the simulated hardware (MIG mode, instances); shared across restarts",
    )
    parser.add_argument(
        "--sim-latency",
        default="",
        help="simulated operation latencies, e.g. gi-create=1,gi-destroy=1,ci-create=0.1 (seconds)",
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dra-gpu", description="DRA driver for NVIDIA GPUs: node plugin and tools"
    )
    parser.add_argument("-v", "--verbose", action="store_true", help="debug logging")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    inventory = commands.add_parser(
        "inventory", help="print the ResourceSlices this node would publish (writes nothing)"
    )
    inventory.add_argument("--node-name", required=True)
    inventory.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
    inventory.add_argument("-o", "--output", choices=("yaml", "table"), default="table")
    _add_hardware_flags(inventory)

    plugin = commands.add_parser("kubelet-plugin", help="run the node daemon")
    plugin.add_argument("--node-name", required=True)
    plugin.add_argument("--driver-name", default=DEFAULT_DRIVER_NAME)
    plugin.add_argument(
        "--cluster",
        default="kube",
        help="'kube' (in-cluster or kubeconfig) or 'local:DIR' (a directory of YAML objects)",
    )
    plugin.add_argument("--kubeconfig", help="kubeconfig path (default: in-cluster, then ~/.kube)")
    plugin.add_argument("--kubelet-root", type=Path, default=Path("/var/lib/kubelet"))
    plugin.add_argument("--cdi-root", type=Path, default=Path("/var/run/cdi"))
    plugin.add_argument(
        "--publish-interval",
        type=float,
        default=30.0,
        help="seconds between ResourceSlice re-syncs (the kubelet wipes slices when it restarts)",
    )
    _add_hardware_flags(plugin)

    mig = commands.add_parser("mig", help="MIG tools")
    mig_commands = mig.add_subparsers(dest="mig_command", required=True, metavar="MIG_COMMAND")
    status = mig_commands.add_parser("status", help="print the live MIG layout of every GPU")
    status.add_argument("--node-name", default="sim-node", help="node name (simulated UUIDs)")
    _add_hardware_flags(status)

    demo = commands.add_parser("demo", help="the whole path on a simulated dgx-h100 node")
    demo.add_argument("--keep", action="store_true", help="keep the temporary directory")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.DEBUG if args.verbose else logging.INFO,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )
    try:
        return _dispatch(args)
    except DraGpuError as exc:
        print(f"dra-gpu {args.command}: {exc}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "inventory":
        from controller.inventory_command import print_inventory

        return print_inventory(
            node_name=args.node_name,
            driver_name=args.driver_name,
            nvml=args.nvml,
            sim_state=args.sim_state,
            output=args.output,
        )
    if args.command == "kubelet-plugin":
        from dra_driver.sim.hardware import parse_latency
        from kubelet_plugin.main import PluginOptions, run

        return run(
            PluginOptions(
                node_name=args.node_name,
                nvml=args.nvml,
                cluster=args.cluster,
                kubelet_root=args.kubelet_root,
                cdi_root=args.cdi_root,
                driver_name=args.driver_name,
                sim_state=args.sim_state,
                sim_latency=parse_latency(args.sim_latency) if args.sim_latency else None,
                kubeconfig=args.kubeconfig,
                publish_interval=args.publish_interval,
            )
        )
    if args.command == "mig":
        from dra_driver import mig_status
        from dra_driver.nvml.backend import open_hardware

        hardware = open_hardware(args.nvml, sim_state=args.sim_state, node_name=args.node_name)
        print(mig_status.render(mig_status.collect(hardware.nvml)), end="")
        return 0
    if args.command == "demo":
        from kubelet_plugin.demo import run_demo

        return run_demo(keep=args.keep)
    raise AssertionError(f"unhandled command {args.command}")


if __name__ == "__main__":
    sys.exit(main())
