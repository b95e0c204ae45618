"""A node for the device plugin tests: the API emulator, the kubelet device-plugin
stand-in on a real unix socket, mock GPUs, and pods written as HAMi's extender
leaves them after /filter and /bind."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from api.hami_annotations import (
    BIND_PHASE,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    ContainerDevice,
    encode_pod_devices,
)
from dra_driver.grpc_tasks import settle_cancelled_grpc_calls
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.sim.apiserver import APIServer
from dra_driver.sim.kubelet_deviceplugin import KubeletDevicePlugin
from kubeletplugin.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from kubeletplugin.gpus import GpuBackend, MockBackend
from kubeletplugin.slices import SliceSettings
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths

NODE = "node-dp"
RESOURCE = "nvidia.com/gpu"
UUID_A = "GPU-00000000-0000-0000-0000-00000000000a"
UUID_B = "GPU-00000000-0000-0000-0000-00000000000b"
MOCK_GPUS = f"""
gpus:
  - {{uuid: {UUID_A}, index: 0, memory: 16Gi, numa: 0, productName: NVIDIA A100-SXM4-80GB}}
  - {{uuid: {UUID_B}, index: 1, memory: 15Gi, numa: 1, productName: Tesla T4}}
"""
NODES = "/api/v1/nodes"
PODS = "/api/v1/namespaces/default/pods"


@dataclass
class Rig:
    root: Path
    server: APIServer
    client: KubeClient
    kubelet: KubeletDevicePlugin
    settings: DevicePluginSettings

    @property
    def mock_gpus(self) -> Path:
        assert self.settings.mock_gpus is not None
        return self.settings.mock_gpus

    def plugin(self, backend: GpuBackend | None = None) -> DevicePlugin:
        return DevicePlugin(self.settings, self.client, backend or MockBackend(self.mock_gpus))

    async def node(self) -> dict[str, Any]:
        return await self.client.get(object_path(NODES, NODE))

    async def pod(self, name: str) -> dict[str, Any]:
        return await self.client.get(object_path(PODS, name))

    async def bound_pod(
        self,
        name: str,
        devices: list[list[ContainerDevice]],
        containers: list[dict[str, Any]] | None = None,
        init_containers: list[dict[str, Any]] | None = None,
        lock: bool = True,
    ) -> dict[str, Any]:
        """A pod as the extender leaves it after /bind: annotated, bound, node locked."""
        encoded = encode_pod_devices(devices)
        spec: dict[str, Any] = {
            "nodeName": NODE,
            "containers": containers or [{"name": "main", "image": "cuda"}],
        }
        if init_containers:
            spec["initContainers"] = init_containers
        pod = await self.client.create(
            PODS,
            {
                "metadata": {
                    "name": name,
                    "annotations": {
                        VGPU_NODE: NODE,
                        VGPU_DEVICES_TO_ALLOCATE: encoded,
                        VGPU_DEVICES_ALLOCATED: encoded,
                        BIND_PHASE: "allocating",
                    },
                },
                "spec": spec,
            },
        )
        if lock:
            await NodeLocker(self.client).acquire(NODE, "default", name)
        return pod

    async def wait_node(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The node once `predicate` holds, watched (bounded by the test's timeout)."""
        while True:
            node = await self.node()
            if predicate(node):
                return node
            version = node["metadata"]["resourceVersion"]
            async for event in self.client.watch(
                NODES, field_selector=f"metadata.name={NODE}", resource_version=version
            ):
                if predicate(event["object"]):
                    return event["object"]


@asynccontextmanager
async def node_rig(
    split_count: int = 4, memory_scaling: float = 1.0, **overrides: Any
) -> AsyncIterator[Rig]:
    root = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    try:
        (root / "gpus.yaml").write_text(MOCK_GPUS)
        mountinfo = root / "mountinfo"
        mountinfo.write_text("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n")
        settings = DevicePluginSettings(
            node_name=NODE,
            plugin_dir=root / "dp",
            sharing=SliceSettings(split_count=split_count, memory_scaling=memory_scaling),
            mock_gpus=root / "gpus.yaml",
            config_file=root / "config" / "node.yaml",
            libvgpu=LibvgpuPaths(host_dir=str(root / "vgpu"), cache_root=str(root / "vgpu")),
            cache_dirs=CacheDirSettings(
                self_mountinfo=str(mountinfo), mountinfo_glob=str(root / "none-*")
            ),
        )
        settings = replace(settings, **overrides)
        async with APIServer() as server:
            client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            await client.create(NODES, {"metadata": {"name": NODE}})
            kubelet = KubeletDevicePlugin(settings.plugin_dir)
            try:
                async with kubelet:
                    yield Rig(root, server, client, kubelet, settings)
            finally:
                await client.aclose()
                await settle_cancelled_grpc_calls()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def bounded(awaitable: Any, seconds: float = 20.0) -> Any:
    """A wait that fails the test instead of hanging it."""
    async with asyncio.timeout(seconds):
        return await awaitable
