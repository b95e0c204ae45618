"""`dra-driver simulate`: the flags that shape the emulated cluster and the report.

Owns the subcommand's parser and handler. May import `dra_driver.cli` at
module level and, inside the handler, `simulator.run` and `simulator.settings`,
so that `--help` starts nothing and loads no component.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from dra_driver.cli.registration import Subcommands


def register(commands: Subcommands) -> None:
    simulate = commands.add_parser(
        "simulate",
        help="run the real components on emulated nodes with mock GPUs and show who got what",
        description=(
            "Start the API emulator, a real kubelet plugin per node (mock GPUs), the kubelet "
            "and kube-scheduler stand-ins and the real controller (or, with --mode legacy, "
            "the webhook, extender and device plugin), apply the workloads, and print per "
            "node and GPU who holds which share, the CDI devices and env each container "
            "gets, and why a workload did not fit; then run the scenario's tamper attempts, each "
            "as its identity, and show each refused, neutralised or ALLOWED. Exit status 0 when "
            "every pod started or was refused with a reason and no tamper attempt got through."
        ),
    )
    simulate.add_argument(
        "--mode",
        choices=("dra", "dra-scheduler-allocated", "legacy", "mixed"),
        env="SIMULATE_MODE",
        default="dra",
        help="dra: the controller allocates; dra-scheduler-allocated: "
        "kube-scheduler does; legacy: device-plugin path; mixed: both on the same NVIDIA "
        "GPUs (--mixed-mode on every component, /migrate for opted-in namespaces)",
    )
    simulate.add_argument(
        "--scenario",
        type=Path,
        action="append",
        env="SIMULATE_SCENARIOS",
        help="YAML file, or directory of *.yaml files, of DeviceClasses, ResourceClaimTemplates, "
        "ResourceClaims, ConfigMaps, PriorityClasses, Pods, TamperAttempts and Phases (steps "
        "applied in order once the pods before them settled; DRA mode) (repeatable); none: the "
        "bundled examples/ of the mode; examples/tamper: a tenant's attempts to lift or forge "
        "a share; examples/priority: gates, priority and preemption",
    )
    simulate.add_argument(
        "--nodes",
        type=int,
        env="SIMULATE_NODES",
        default=3,
        help="NVIDIA nodes",
    )
    simulate.add_argument(
        "--vendors",
        type=_vendor_list,
        env="SIMULATE_VENDORS",
        help="comma-separated families whose nodes the cluster has (nvidia, mlu, dcu, ascend, "
        "iluvatar, metax, mthreads, gcu, xpu, neuron, amd, vastai, biren), in DRA modes each "
        "selected by its DeviceClass <vendor>.vgpu.hami.io, in legacy mode each served by "
        "HAMi's backend for it (a stand-in playing the vendor's own device plugin); default: "
        "every one of them (mixed mode: nvidia, the family served both ways)",
    )
    simulate.add_argument(
        "--vendor-nodes",
        type=int,
        env="SIMULATE_VENDOR_NODES",
        default=1,
        help="nodes of each family other than NVIDIA",
    )
    simulate.add_argument("--gpus-per-node", type=int, env="SIMULATE_GPUS_PER_NODE", default=4)
    simulate.add_argument(
        "--mig-nodes",
        type=int,
        env="SIMULATE_MIG_NODES",
        help="NVIDIA nodes of 2 H100 80GB cards in MIG mode, each card published as MIG "
        "partitions (class mig.nvidia.vgpu.hami.io) beside the shared cards (DRA modes "
        "only, with nvidia among the vendors; default: 1 when a DRA mode runs the bundled "
        "examples, 0 with --scenario)",
    )
    simulate.add_argument(
        "--timeout",
        type=float,
        env="SIMULATE_TIMEOUT",
        default=30.0,
        help="seconds to wait for pods to settle",
    )
    simulate.add_argument(
        "--work-dir",
        type=Path,
        env="SIMULATE_WORK_DIR",
        help="keep the nodes' files (CDI specs, sockets, cache dirs) here; keep the path short",
    )
    simulate.add_argument(
        "-o", "--output", choices=("text", "json"), env="SIMULATE_OUTPUT", default="text"
    )
    simulate.set_defaults(handler=_simulate)


def _vendor_list(text: str) -> tuple[str, ...]:
    """`nvidia,ascend,mlu` -> the ids, each checked against the families DRA serves."""
    from dra_driver.errors import InvalidParameterError
    from dra_driver.objects.dra_vendors import dra_vendor

    ids = tuple(part.strip() for part in text.split(",") if part.strip())
    if not ids:
        raise argparse.ArgumentTypeError("names no vendor")
    try:
        return tuple(dra_vendor(vendor_id, "--vendors").id for vendor_id in ids)
    except InvalidParameterError as error:
        raise argparse.ArgumentTypeError(error.reason) from None


def _simulate(args: argparse.Namespace) -> int:
    # gRPC's C core logs connection teardown at INFO to stderr; the report is the output.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from dra_driver.errors import InvalidParameterError
    from simulator.run import run_simulation
    from simulator.settings import (
        DEFAULT_VENDORS,
        DRA_ALLOCATORS,
        ClusterShape,
        Mode,
        SimulationSettings,
    )

    mode = Mode(args.mode)
    default_vendors = ("nvidia",) if mode is Mode.MIXED else DEFAULT_VENDORS
    dra = mode in DRA_ALLOCATORS
    if args.mig_nodes and not dra:
        raise InvalidParameterError(
            "--mig-nodes", f"MIG nodes are simulated in the DRA modes only, not {mode.value}"
        )
    # The bundled DRA examples take partitions too; a scenario of one's own gets the
    # cluster it asks for.
    bundled_dra = dra and not args.scenario
    mig_nodes = (1 if bundled_dra else 0) if args.mig_nodes is None else args.mig_nodes
    settings = SimulationSettings(
        mode=mode,
        shape=ClusterShape(
            nodes=args.nodes,
            vendors=args.vendors or default_vendors,
            vendor_nodes=args.vendor_nodes,
            gpus_per_node=args.gpus_per_node,
            mig_nodes=mig_nodes,
        ),
        scenario=tuple(args.scenario or ()),
        settle_timeout_s=args.timeout,
        work_dir=args.work_dir,
    )
    return run_simulation(settings, args.output)
