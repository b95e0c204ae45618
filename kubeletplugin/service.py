"""Process entry for `dra-driver kubelet-plugin`: flags to settings, then run."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from prometheus_client import CollectorRegistry

from dra_driver.kube.api_wait import ApiWait
from dra_driver.kube.rest import KubeClient
from dra_driver.process.build_info import register_build_info
from dra_driver.process.runtime import finished_before_stop
from kubeletplugin.plugin import COMPONENT, KubeletPlugin, PluginSettings, open_backend
from kubeletplugin.publisher import SlicePublisher
from kubeletplugin.slices import SliceSettings, Taint
from libvgpu.settings import LibvgpuPaths

ALLOCATION_TAINT_KEY = "allocation"
LIBRARY_LOGGERS = ("grpc", "watchfiles")
"""Libraries whose DEBUG output (every inotify batch, every channel state) buries the plugin's."""


def quiet_library_loggers(level: str = "WARNING") -> None:
    """Hold the chatty libraries at `level`, whatever the plugin's own level is."""
    for name in LIBRARY_LOGGERS:
        logging.getLogger(name).setLevel(level.upper())


def settings_from_args(args: argparse.Namespace) -> PluginSettings:
    taint = Taint(f"{args.driver}/{ALLOCATION_TAINT_KEY}", "controller")
    return PluginSettings(
        node_name=args.node_name,
        slices=SliceSettings(
            driver=args.driver,
            split_count=args.split_count,
            memory_scaling=args.memory_scaling,
            core_scaling=args.core_scaling,
            allocation_taint=taint if args.controller_allocated else None,
        ),
        registry_dir=args.registry_dir,
        plugin_dir=args.plugin_dir,
        cdi_dir=args.cdi_dir,
        mock_gpus=args.mock_gpus,
        gpu_backend=args.gpu_backend,
        config_file=args.config,
        libvgpu=LibvgpuPaths(
            host_dir=args.vgpu_dir,
            lock_dir=args.lock_dir,
            cache_root=args.vgpu_dir,
        ),
        with_device_nodes=args.nvidia_cdi_prefix is None,
        nvidia_cdi_prefix=args.nvidia_cdi_prefix,
        allow_claim_opt_out=args.allow_claim_opt_out,
        mixed_mode=args.mixed_mode,
    )


async def serve_kubelet_plugin(
    settings: PluginSettings,
    kubeconfig: Path | None,
    stop: asyncio.Event,
    metrics_address: tuple[str, int] | None = None,
    api_wait: ApiWait | None = None,
) -> None:
    """Run until `stop`; `/metrics` and `/readyz` are served on `metrics_address` when
    given, from the start on, so a plugin waiting for the API server, or refusing its
    checkpoint, says so."""
    client = await KubeClient.from_kubeconfig(kubeconfig, component=COMPONENT)
    registry = CollectorRegistry()
    register_build_info(registry)
    api_wait = api_wait or ApiWait(COMPONENT)
    try:
        plugin = KubeletPlugin(settings, client, open_backend(settings), registry, api_wait)
        async with _metrics_server(registry, metrics_address, plugin.readiness):
            if await finished_before_stop(stop, plugin.start()):
                try:
                    await stop.wait()
                finally:
                    await plugin.aclose()
    finally:
        await client.aclose()


@contextlib.asynccontextmanager
async def _metrics_server(
    registry: CollectorRegistry,
    address: tuple[str, int] | None,
    readiness: Callable[[], str | None],
) -> AsyncIterator[None]:
    """`/metrics` and `/readyz` on `address` while in the block; nothing when None."""
    if address is None:
        yield
        return
    from libvgpu.monitor import MetricsServer  # aiohttp.web only when serving

    async with MetricsServer(registry, *address, readiness=readiness):
        yield


async def remove_node_slices(settings: PluginSettings, kubeconfig: Path | None) -> None:
    """Explicit uninstall: delete this node's ResourceSlices of this driver.

    A running plugin never does this on its own: its slices survive restarts.
    """
    client = await KubeClient.from_kubeconfig(kubeconfig, component=COMPONENT)
    try:
        await SlicePublisher(client, settings.node_name, settings.slices).remove_all()
    finally:
        await client.aclose()
