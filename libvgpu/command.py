"""`dra-driver monitor` and `dra-driver install-libvgpu`: the libvgpu host side's flags.

Owns both subcommands' parsers and handlers. May import `dra_driver.cli` at
module level and, inside the handlers, `libvgpu.monitor`,
`libvgpu.monitor_service`, `libvgpu.install` and `dra_driver.process.runtime`,
so that `--help` loads no Prometheus, HTTP or NVML.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from dra_driver.cli.args import add_process_args
from dra_driver.cli.registration import Subcommands


def register_monitor(commands: Subcommands) -> None:
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
        "--mock-gpus",
        type=Path,
        env="MOCK_GPUS",
        help="mock GPU file (any vendor) for the host series instead of NVML",
    )
    monitor.add_argument(
        "--legacy-metrics",
        action="store_true",
        env="MONITOR_LEGACY_METRICS",
        help="also export HAMi's pre-v2.9 metric names (HostGPUMemoryUsage, ...)",
    )
    add_process_args(monitor)
    monitor.set_defaults(handler=_monitor)


def register_install(commands: Subcommands) -> None:
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


def _monitor(args: argparse.Namespace) -> int:
    from dra_driver.process.runtime import configure_logging, run_until_signalled
    from libvgpu.monitor import MonitorSettings
    from libvgpu.monitor_service import serve_monitor

    configure_logging(args.log_level, args.command)
    settings = MonitorSettings(
        host=args.host,
        port=args.port,
        cache_root=args.cache_root,
        node_name=args.node_name,
        legacy_metrics=args.legacy_metrics,
        mock_gpus=args.mock_gpus,
    )
    return run_until_signalled(lambda stop: serve_monitor(settings, args.kubeconfig, stop))


def _install_libvgpu(args: argparse.Namespace) -> int:
    from libvgpu.install import InstallSettings, run_install

    settings = InstallSettings(
        source_library=args.source,
        host_dir=args.host_dir,
        container_library_path=args.container_library_path,
        lock_dir=args.lock_dir,
    )
    return run_install(settings)
