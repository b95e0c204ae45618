"""`dra-driver kubelet-plugin` and `dra-driver device-plugin`: the two node components' flags.

Owns both subcommands' parsers and handlers and the GPU flags they share
(`_add_node_gpu_args`), defined once so the DRA and the legacy node halves read
the same node config the same way. May import `dra_driver.cli` at module level
and, inside the handlers, `kubeletplugin.service`, `kubeletplugin.deviceplugin`
and `dra_driver.process.runtime`, so that `--help` loads no gRPC or NVML.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from dra_driver.cli.args import EnvArgumentParser, add_process_args
from dra_driver.cli.registration import Subcommands

GPU_BACKEND_CHOICES = ("nvml", "amdsmi", "mock")
"""`kubeletplugin.gpu_sources.GPU_BACKENDS`, spelled here so `--help` imports no backend."""


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
        help="host lock dir, mounted into containers at /tmp/vgpulock (made by install-libvgpu)",
    )


def register_kubelet_plugin(commands: Subcommands) -> None:
    plugin = commands.add_parser(
        "kubelet-plugin",
        help="the kubelet DRA plugin: publish GPUs, prepare claims with CDI + libvgpu",
        description=(
            "Discover GPUs (NVML, AMD SMI or a mock file), publish ResourceSlices, and serve "
            "kubelet's DRA gRPC API on unix sockets. Every path has a flag and env var."
        ),
    )
    _add_node_gpu_args(plugin)
    plugin.add_argument(
        "--gpu-backend",
        choices=GPU_BACKEND_CHOICES,
        env="GPU_BACKEND",
        help="discovery: nvml (NVIDIA), amdsmi (AMD, ROCm's amdsmi module) or mock "
        "(--mock-gpus); default mock with --mock-gpus, else nvml",
    )
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
        "--allow-claim-opt-out",
        action=argparse.BooleanOptionalAction,
        env="ALLOW_CLAIM_OPT_OUT",
        default=False,
        help="honour a claim's own disableControl / coreLimitPolicy: disable (default: "
        "only a DeviceClass's config may turn HAMi-core's limits off)",
    )
    plugin.add_argument(
        "--mixed-mode",
        action=argparse.BooleanOptionalAction,
        env="MIXED_MODE",
        default=False,
        help="the device plugin serves these GPUs too: prepare counts the node's legacy "
        "pods and refuses a share that would over-commit a GPU (needs --controller-allocated)",
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


def register_device_plugin(commands: Subcommands) -> None:
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
        "--mixed-mode",
        action=argparse.BooleanOptionalAction,
        env="MIXED_MODE",
        default=False,
        help="the kubelet DRA plugin serves these GPUs too: Allocate counts the claims "
        "allocated on them and refuses a share that would over-commit a GPU",
    )
    device_plugin.add_argument(
        "--driver",
        env="DRIVER_NAME",
        default="vgpu.hami.io",
        help="in mixed mode, the DRA driver whose slices and claims share these GPUs",
    )
    device_plugin.add_argument(
        "--device-config-file",
        type=Path,
        env="DEVICE_CONFIG_FILE",
        default=None,
        help="HAMi device-config.yaml: its nvidia.migProfileAllowlist picks the MIG "
        "profiles registered per card model (re-read when it changes)",
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


def _kubelet_plugin(args: argparse.Namespace) -> int:
    from dra_driver.process.runtime import configure_logging, run_until_signalled
    from kubeletplugin.service import (
        quiet_library_loggers,
        remove_node_slices,
        serve_kubelet_plugin,
        settings_from_args,
    )

    configure_logging(args.log_level, args.command)
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

    configure_logging(args.log_level, args.command)
    settings = settings_from_args(args)
    return run_until_signalled(lambda stop: serve_device_plugin(settings, args.kubeconfig, stop))
