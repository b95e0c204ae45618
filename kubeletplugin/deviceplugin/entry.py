"""Process entry for `dra-driver device-plugin`: flags to settings, then run."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from dra_driver.kube.rest import KubeClient
from kubeletplugin.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from kubeletplugin.gpu_sources import open_gpu_backend
from kubeletplugin.slices import SliceSettings
from libvgpu.settings import LibvgpuPaths


def settings_from_args(args: argparse.Namespace) -> DevicePluginSettings:
    return DevicePluginSettings(
        node_name=args.node_name,
        resource_name=args.resource_name,
        plugin_dir=args.device_plugin_dir,
        sharing=SliceSettings(
            split_count=args.split_count,
            memory_scaling=args.memory_scaling,
            core_scaling=args.core_scaling,
        ),
        mock_gpus=args.mock_gpus,
        config_file=args.config,
        libvgpu=LibvgpuPaths(
            host_dir=args.vgpu_dir,
            lock_dir=args.lock_dir,
            cache_root=args.vgpu_dir,
        ),
        disable_core_limit=args.disable_core_limit,
        register_interval_s=args.register_interval,
        mixed_mode=args.mixed_mode,
        driver=args.driver,
        device_config=args.device_config_file,
    )


async def serve_device_plugin(
    settings: DevicePluginSettings, kubeconfig: Path | None, stop: asyncio.Event
) -> None:
    """Run until `stop`."""
    client = await KubeClient.from_kubeconfig(kubeconfig, component="device-plugin")
    try:
        backend = open_gpu_backend(settings.mock_gpus, read_topology=True)
        async with DevicePlugin(settings, client, backend):
            await stop.wait()
    finally:
        await client.aclose()
