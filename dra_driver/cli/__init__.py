"""The `dra-driver` command: thin argument parsing over the library's entry points."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from dra_driver.cli.args import EnvArgumentParser, add_process_args
from dra_driver.errors import DriverError

EXIT_PLACED = 0
EXIT_REFUSED = 1
EXIT_BAD_INPUT = 2


def _explain(args: argparse.Namespace) -> int:
    from dra_driver.engine.vendors import VendorRegistry
    from dra_driver.explain.explanation import explain, render
    from dra_driver.explain.inventory_file import inventory_schema, load_inventory
    from dra_driver.objects.yaml_files import read_yaml_document

    if args.print_schema:
        print(json.dumps(inventory_schema(), indent=2))
        return EXIT_PLACED
    if args.inventory is None or args.workload is None:
        print("dra-driver explain: --inventory and --workload are required", file=sys.stderr)
        return EXIT_BAD_INPUT
    vendors = VendorRegistry()
    inventory = load_inventory(args.inventory, vendors)
    explanation = explain(inventory, read_yaml_document(args.workload), vendors)
    print(render(explanation, args.output))
    return EXIT_PLACED if explanation.decision.placement is not None else EXIT_REFUSED


def _monitor(args: argparse.Namespace) -> int:
    from dra_driver.process.runtime import configure_logging, run_until_signalled
    from libvgpu.monitor import MonitorSettings
    from libvgpu.monitor_service import serve_monitor

    configure_logging(args.log_level)
    settings = MonitorSettings(
        host=args.host,
        port=args.port,
        cache_root=args.cache_root,
        node_name=args.node_name,
        legacy_metrics=args.legacy_metrics,
    )
    return run_until_signalled(lambda stop: serve_monitor(settings, args.kubeconfig, stop))


def _kubelet_plugin(args: argparse.Namespace) -> int:
    from dra_driver.process.runtime import configure_logging, run_until_signalled
    from kubeletplugin.service import (
        quiet_library_loggers,
        remove_node_slices,
        serve_kubelet_plugin,
        settings_from_args,
    )

    configure_logging(args.log_level)
    quiet_library_loggers(args.library_log_level)
    settings = settings_from_args(args)
    if args.remove_slices:
        asyncio.run(remove_node_slices(settings, args.kubeconfig))
        return 0
    metrics = (args.metrics_host, args.metrics_port) if args.metrics_port else None
    return run_until_signalled(
        lambda stop: serve_kubelet_plugin(settings, args.kubeconfig, stop, metrics)
    )


def _device_plugin(args: argparse.Namespace) -> int:
    from dra_driver.process.runtime import configure_logging, run_until_signalled
    from kubeletplugin.deviceplugin.entry import serve_device_plugin, settings_from_args

    configure_logging(args.log_level)
    settings = settings_from_args(args)
    return run_until_signalled(lambda stop: serve_device_plugin(settings, args.kubeconfig, stop))


def _install_libvgpu(args: argparse.Namespace) -> int:
    from libvgpu.install import InstallSettings, run_install

    settings = InstallSettings(
        source_library=args.source,
        host_dir=args.host_dir,
        container_library_path=args.container_library_path,
        lock_dir=args.lock_dir,
    )
    return run_install(settings)


def _healthcheck(args: argparse.Namespace) -> int:
    from dra_driver.process.healthcheck import check_sockets

    problems = asyncio.run(check_sockets(args.socket, args.timeout))
    for problem in problems:
        print(f"dra-driver healthcheck: {problem}", file=sys.stderr)
    return 1 if problems else 0


def _status(args: argparse.Namespace) -> int:
    from dra_driver.status.command import StatusSettings, run_status
    from dra_driver.status.model import StatusFilter

    settings = StatusSettings(
        driver=args.driver,
        output=args.output,
        only=StatusFilter(node=args.node, namespace=args.namespace),
    )
    return asyncio.run(run_status(args.kubeconfig, settings))


def _simulate(args: argparse.Namespace) -> int:
    # gRPC's C core logs connection teardown at INFO to stderr; the report is the output.
    os.environ.setdefault("GRPC_VERBOSITY", "ERROR")
    from simulator.run import run_simulation
    from simulator.settings import ClusterShape, Mode, SimulationSettings

    settings = SimulationSettings(
        mode=Mode(args.mode),
        shape=ClusterShape(nodes=args.nodes, gpus_per_node=args.gpus_per_node),
        scenario=tuple(args.scenario or ()),
        settle_timeout_s=args.timeout,
        work_dir=args.work_dir,
    )
    return run_simulation(settings, args.output)


def _certs(args: argparse.Namespace) -> int:
    from datetime import timedelta

    from dra_driver.tls.certs import CertFilesSettings, CertsSettings, run_cert_files, run_certs

    if args.validity_days <= 0:
        print("dra-driver certs: --validity-days must be positive", file=sys.stderr)
        return EXIT_BAD_INPUT
    validity = timedelta(days=args.validity_days)
    if args.out_dir is not None:
        return run_cert_files(CertFilesSettings.from_flags(args.out_dir, args.san, validity))
    if args.san:
        message = "--san: only with --out-dir; the Secret's certificate names the Service"
        print(f"dra-driver certs: {message}", file=sys.stderr)
        return EXIT_BAD_INPUT
    settings = CertsSettings(
        namespace=args.namespace,
        service=args.service,
        secret=args.secret,
        webhooks=tuple(args.webhook or ()),
        validity=validity,
        cluster_domain=args.cluster_domain,
    )
    return asyncio.run(run_certs(args.kubeconfig, settings))


def _legacy_scheduler(args: argparse.Namespace) -> int:
    from controller.legacy.command import run_legacy

    return run_legacy(args)


def _add_node_gpu_args(parser: EnvArgumentParser) -> None:
    """What both node components (DRA kubelet plugin, device plugin) take about the GPUs."""
    parser.add_argument("--node-name", env="NODE_NAME", required=True)
    parser.add_argument(
        "--mock-gpus", type=Path, env="MOCK_GPUS", help="mock GPU file instead of NVML"
    )
    parser.add_argument(
        "--config",
        type=Path,
        env="PLUGIN_CONFIG",
        help="node config file (splitCount, memoryScaling, coreScaling, filterDevices), watched",
    )
    parser.add_argument("--split-count", type=int, env="DEVICE_SPLIT_COUNT", default=10)
    parser.add_argument("--memory-scaling", type=float, env="DEVICE_MEMORY_SCALING", default=1.0)
    parser.add_argument("--core-scaling", type=float, env="DEVICE_CORE_SCALING", default=1.0)
    parser.add_argument(
        "--vgpu-dir",
        env="VGPU_HOST_DIR",
        default="/usr/local/vgpu",
        help="host dir of libvgpu.so, ld.so.preload and the cache dirs",
    )
    parser.add_argument(
        "--lock-dir",
        env="VGPU_LOCK_DIR",
        default="/tmp/vgpulock",
        help="host lock dir mounted into containers (made by install-libvgpu)",
    )


def build_parser() -> EnvArgumentParser:
    parser = EnvArgumentParser(
        prog="dra-driver",
        description="Shared-GPU Kubernetes driver (HAMi-compatible, DRA and device plugin).",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    explain = commands.add_parser(
        "explain",
        help="where would this pod or claim go, and why not elsewhere?",
        description=(
            "Run the HAMi allocation engine over an inventory file for one Pod or "
            "ResourceClaim; print the chosen node and devices, or each node's refusal. "
            "Exit status: 0 placed, 1 refused everywhere, 2 bad input."
        ),
    )
    explain.add_argument(
        "-i",
        "--inventory",
        type=Path,
        env="EXPLAIN_INVENTORY",
        help="inventory file (YAML or JSON)",
    )
    explain.add_argument(
        "-w", "--workload", type=Path, env="EXPLAIN_WORKLOAD", help="Pod or ResourceClaim manifest"
    )
    explain.add_argument(
        "-o", "--output", choices=("text", "json"), env="EXPLAIN_OUTPUT", default="text"
    )
    explain.add_argument(
        "--print-schema",
        action="store_true",
        env="EXPLAIN_PRINT_SCHEMA",
        help="print the inventory JSON Schema and exit",
    )
    explain.set_defaults(handler=_explain)

    monitor = commands.add_parser(
        "monitor",
        help="serve libvgpu usage and host GPU metrics (hami_*) for Prometheus",
        description="Export hami_* metrics from libvgpu shared-region files and NVML.",
    )
    monitor.add_argument("--host", env="MONITOR_HOST", default="0.0.0.0")
    monitor.add_argument("--port", type=int, env="MONITOR_PORT", default=9394)
    monitor.add_argument(
        "--cache-root",
        env="VGPU_CACHE_ROOT",
        default="/usr/local/vgpu",
        help="root of claims/<uid>/ and containers/<podUID>_<ctr>/ cache dirs",
    )
    monitor.add_argument("--node-name", env="NODE_NAME", default="")
    monitor.add_argument(
        "--legacy-metrics",
        action="store_true",
        env="MONITOR_LEGACY_METRICS",
        help="also export HAMi's pre-v2.9 metric names (HostGPUMemoryUsage, ...)",
    )
    add_process_args(monitor)
    monitor.set_defaults(handler=_monitor)

    plugin = commands.add_parser(
        "kubelet-plugin",
        help="the kubelet DRA plugin: publish GPUs, prepare claims with CDI + libvgpu",
        description=(
            "Discover GPUs (NVML or a mock file), publish ResourceSlices, and serve "
            "kubelet's DRA gRPC API on unix sockets. Every path has a flag and env var."
        ),
    )
    _add_node_gpu_args(plugin)
    plugin.add_argument("--driver", env="DRIVER_NAME", default="vgpu.hami.io")
    plugin.add_argument(
        "--registry-dir",
        type=Path,
        env="KUBELET_REGISTRY_DIR",
        default="/var/lib/kubelet/plugins_registry",
    )
    plugin.add_argument(
        "--plugin-dir",
        type=Path,
        env="KUBELET_PLUGIN_DIR",
        help="dra.sock and checkpoint; none: /var/lib/kubelet/plugins/<driver>",
    )
    plugin.add_argument("--cdi-dir", type=Path, env="CDI_DIR", default="/var/run/cdi")
    plugin.add_argument(
        "--controller-allocated",
        action=argparse.BooleanOptionalAction,
        env="CONTROLLER_ALLOCATED",
        default=False,
        help="taint devices so only the HAMi-policy controller allocates them",
    )
    plugin.add_argument(
        "--library-log-level",
        env="LIBRARY_LOG_LEVEL",
        default="WARNING",
        help="level of the grpc and watchfiles loggers, kept out of --log-level DEBUG",
    )
    plugin.add_argument(
        "--nvidia-cdi-prefix",
        env="NVIDIA_CDI_PREFIX",
        help="e.g. nvidia.com/gpu: return the NVIDIA CDI device, omit device nodes",
    )
    plugin.add_argument("--metrics-host", env="METRICS_HOST", default="0.0.0.0")
    plugin.add_argument(
        "--metrics-port",
        type=int,
        env="METRICS_PORT",
        default=9396,
        help="Prometheus /metrics port; 0 disables it",
    )
    plugin.add_argument(
        "--remove-slices",
        action="store_true",
        env="REMOVE_SLICES",
        help="uninstall: delete this node's ResourceSlices of the driver and exit",
    )
    add_process_args(plugin)
    plugin.set_defaults(handler=_kubelet_plugin)

    device_plugin = commands.add_parser(
        "device-plugin",
        help="the legacy node half: a kubelet device plugin speaking HAMi's protocol",
        description=(
            "Register GPUs with kubelet as split-count replicas (device plugin API v1beta1), "
            "write hami.io/node-nvidia-register, and answer Allocate for the pod the node "
            "lock names with libvgpu's env and mounts."
        ),
    )
    _add_node_gpu_args(device_plugin)
    device_plugin.add_argument("--resource-name", env="RESOURCE_NAME", default="nvidia.com/gpu")
    device_plugin.add_argument(
        "--device-plugin-dir",
        type=Path,
        env="DEVICE_PLUGIN_DIR",
        default="/var/lib/kubelet/device-plugins",
        help="kubelet's device-plugins directory (kubelet.sock)",
    )
    device_plugin.add_argument(
        "--disable-core-limit",
        action=argparse.BooleanOptionalAction,
        env="DISABLE_CORE_LIMIT",
        default=False,
        help="GPU_CORE_UTILIZATION_POLICY=disable for every container (HAMi's flag)",
    )
    device_plugin.add_argument(
        "--register-interval",
        type=float,
        env="REGISTER_INTERVAL",
        default=30.0,
        help="seconds between checks of the node register annotation",
    )
    add_process_args(device_plugin)
    device_plugin.set_defaults(handler=_device_plugin)

    install = commands.add_parser(
        "install-libvgpu",
        help="install libvgpu.so, ld.so.preload and /tmp/vgpulock on the host",
        description=(
            "Copy libvgpu.so from the image to the host only when its hash changed "
            "(atomic replace), write ld.so.preload, create the lock dir."
        ),
    )
    install.add_argument("--source", env="LIBVGPU_SOURCE", default="/usr/local/lib/hami/libvgpu.so")
    install.add_argument("--host-dir", env="LIBVGPU_HOST_DIR", default="/usr/local/vgpu")
    install.add_argument(
        "--container-library-path",
        env="LIBVGPU_CONTAINER_PATH",
        default="/usr/local/vgpu/libvgpu.so",
        help="the library path written into ld.so.preload (as containers see it)",
    )
    install.add_argument("--lock-dir", env="VGPU_LOCK_DIR", default="/tmp/vgpulock")
    install.set_defaults(handler=_install_libvgpu)

    simulate = commands.add_parser(
        "simulate",
        help="run the real components on emulated nodes with mock GPUs and show who got what",
        description=(
            "Start the API emulator, a real kubelet plugin per node (mock GPUs), the kubelet "
            "and kube-scheduler stand-ins and the real controller (or, with --mode legacy, "
            "the webhook, extender and device plugin), apply the workloads, and print per "
            "node and GPU who holds which share, the CDI devices and env each container "
            "gets, and why a workload did not fit. Exit status 0 when every pod started or "
            "was refused with a reason."
        ),
    )
    simulate.add_argument(
        "--mode",
        choices=("dra", "dra-scheduler-allocated", "legacy"),
        env="SIMULATE_MODE",
        default="dra",
        help="dra: the controller allocates; dra-scheduler-allocated: "
        "kube-scheduler does; legacy: device-plugin path",
    )
    simulate.add_argument(
        "--scenario",
        type=Path,
        action="append",
        env="SIMULATE_SCENARIOS",
        help="YAML file of DeviceClasses, ResourceClaimTemplates, ResourceClaims and Pods "
        "(repeatable); none: the bundled examples/",
    )
    simulate.add_argument("--nodes", type=int, env="SIMULATE_NODES", default=3)
    simulate.add_argument("--gpus-per-node", type=int, env="SIMULATE_GPUS_PER_NODE", default=4)
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

    status = commands.add_parser(
        "status",
        help="who holds which GPU share: per node and GPU, DRA claims and legacy pods",
        description=(
            "Read the cluster (kubeconfig) once: per node and GPU the capacity, allocated "
            "memory and cores, the claims and pods holding shares, and pending claims "
            "with their last failure reason."
        ),
    )
    status.add_argument(
        "-o", "--output", choices=("text", "json", "yaml"), env="STATUS_OUTPUT", default="text"
    )
    status.add_argument("--node", env="STATUS_NODE", help="only this node's GPUs")
    status.add_argument(
        "--namespace", "-n", env="STATUS_NAMESPACE", help="only shares and claims in this namespace"
    )
    status.add_argument("--driver", env="DRIVER_NAME", default="vgpu.hami.io")
    status.add_argument(
        "--kubeconfig",
        type=Path,
        env="KUBECONFIG",
        default=Path.home() / ".kube" / "config",
        help="kubeconfig file",
    )
    status.set_defaults(handler=_status)

    healthcheck = commands.add_parser(
        "healthcheck",
        help="liveness probe: ask grpc.health.v1 over a component's own unix sockets",
        description="Exit 0 when every socket answers SERVING; else print why and exit 1.",
    )
    healthcheck.add_argument(
        "--socket",
        type=Path,
        action="append",
        required=True,
        env="HEALTHCHECK_SOCKETS",
        help="a component's gRPC unix socket (repeatable)",
    )
    healthcheck.add_argument(
        "--timeout", type=float, env="HEALTHCHECK_TIMEOUT", default=3.0, help="seconds per socket"
    )
    healthcheck.set_defaults(handler=_healthcheck)
    certs = commands.add_parser(
        "certs",
        help="TLS for the legacy webhook/extender: CA + serving cert Secret, webhook caBundle",
        description=(
            "Create (or keep, when still valid) a CA and a serving certificate for the "
            "Service's DNS names in a kubernetes.io/tls Secret with ca.crt, and set the "
            "caBundle of the named MutatingWebhookConfigurations. Safe to rerun."
        ),
    )
    certs.add_argument("--namespace", env="POD_NAMESPACE", default="vgpu-system")
    certs.add_argument("--service", env="CERTS_SERVICE", default="vgpu-legacy-scheduler")
    certs.add_argument("--secret", env="CERTS_SECRET", default="vgpu-legacy-scheduler-tls")
    certs.add_argument(
        "--webhook",
        action="append",
        env="CERTS_WEBHOOKS",
        help="MutatingWebhookConfiguration to patch (repeatable)",
    )
    certs.add_argument("--validity-days", type=int, env="CERTS_VALIDITY_DAYS", default=3650)
    certs.add_argument(
        "--out-dir",
        type=Path,
        env="CERTS_OUT_DIR",
        help="write ca.crt, tls.crt, tls.key here instead of a Secret (no API calls)",
    )
    certs.add_argument(
        "--san",
        action="append",
        env="CERTS_SANS",
        default=[],
        help="with --out-dir: DNS:<host name> or IP:<address> the certificate names (repeatable)",
    )
    certs.add_argument("--cluster-domain", env="CLUSTER_DOMAIN", default="cluster.local")
    certs.add_argument(
        "--kubeconfig",
        type=Path,
        env="KUBECONFIG",
        help="kubeconfig file; none: the in-cluster service account",
    )
    certs.set_defaults(handler=_certs)
    from controller.legacy.command import add_legacy_parsers

    add_legacy_parsers(commands, _legacy_scheduler)
    from controller.command import add_controller_parser

    add_controller_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.handler(args)
    except DriverError as error:
        print(f"dra-driver {args.command}: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT

