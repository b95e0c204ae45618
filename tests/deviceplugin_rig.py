"""GPU nodes for the device plugin tests: the kubelet device-plugin stand-in on a real
unix socket, mock GPUs, and the API emulator; pods written as HAMi's extender leaves
them after /filter and /bind. Used by the component tests (one node) and the legacy
chain tests (several nodes on one API server)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
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
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, NotFoundError, object_path
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls
from kubeletplugin.deviceplugin.plugin import DevicePlugin, DevicePluginSettings
from kubeletplugin.gpus import GpuBackend, MockBackend
from kubeletplugin.slices import SliceSettings
from libvgpu.cache_dirs import CacheDirSettings
from simulator.apiserver import APIServer
from simulator.nodes import install_libvgpu_files
from simulator.standins.kubelet_deviceplugin import KubeletDevicePlugin

NODE = "node-dp"
RESOURCE = "nvidia.com/gpu"
UUID_A = "GPU-00000000-0000-0000-0000-00000000000a"
UUID_B = "GPU-00000000-0000-0000-0000-00000000000b"
TWO_GPUS = f"""
gpus:
  - {{uuid: {UUID_A}, index: 0, memory: 16Gi, numa: 0, productName: NVIDIA A100-SXM4-80GB}}
  - {{uuid: {UUID_B}, index: 1, memory: 15Gi, numa: 1, productName: Tesla T4}}
"""
NODES = "/api/v1/nodes"


def mock_gpus(uuids: Sequence[str], memory: str = "16Gi") -> str:
    """A mock GPU file: one GPU per UUID, NVML index in order."""
    lines = [
        f"  - {{uuid: {uuid}, index: {index}, memory: {memory}, productName: Tesla T4}}"
        for index, uuid in enumerate(uuids)
    ]
    return "gpus:\n" + "\n".join(lines) + "\n"


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


@dataclass
class GpuNode:
    name: str
    root: Path
    client: KubeClient
    kubelet: KubeletDevicePlugin
    settings: DevicePluginSettings
    server: APIServer | None = None

    @property
    def mock_gpus(self) -> Path:
        assert self.settings.mock_gpus is not None
        return self.settings.mock_gpus

    def plugin(self, backend: GpuBackend | None = None) -> DevicePlugin:
        return DevicePlugin(self.settings, self.client, backend or MockBackend(self.mock_gpus))

    async def node(self) -> dict[str, Any]:
        return await self.client.get(object_path(NODES, self.name))

    async def pod(self, name: str, namespace: str = "default") -> dict[str, Any]:
        return await self.client.get(object_path(pods_path(namespace), name))

    async def report_allocatable(self) -> None:
        """kubelet's node status update: allocatable replicas of the resource."""
        allocatable = {RESOURCE: str(self.kubelet.allocatable(RESOURCE))}
        await self.client.patch(
            f"{object_path(NODES, self.name)}/status",
            {"status": {"capacity": allocatable, "allocatable": allocatable}},
        )

    async def bound_pod(
        self,
        name: str,
        devices: list[list[ContainerDevice]],
        containers: list[dict[str, Any]] | None = None,
        init_containers: list[dict[str, Any]] | None = None,
        lock: bool = True,
        bound: bool = True,
    ) -> dict[str, Any]:
        """A pod as the extender leaves it after /bind: annotated, bound, node locked
        (`bound=False`: the lock taken, the binding not yet written)."""
        encoded = encode_pod_devices(devices)
        spec: dict[str, Any] = {"containers": containers or [{"name": "main", "image": "cuda"}]}
        if bound:
            spec["nodeName"] = self.name
        if init_containers:
            spec["initContainers"] = init_containers
        pod = await self.client.create(
            pods_path("default"),
            {
                "metadata": {
                    "name": name,
                    "annotations": {
                        VGPU_NODE: self.name,
                        VGPU_DEVICES_TO_ALLOCATE: encoded,
                        VGPU_DEVICES_ALLOCATED: encoded,
                        BIND_PHASE: "allocating",
                    },
                },
                "spec": spec,
            },
        )
        if lock:
            await NodeLocker(self.client).acquire(self.name, "default", name)
        return pod

    async def wait_node(self, predicate: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The node once `predicate` holds, watched (bound it with `bounded`)."""
        while True:
            node = await self.node()
            if predicate(node):
                return node
            async for event in self.client.watch(
                NODES,
                field_selector=f"metadata.name={self.name}",
                resource_version=node["metadata"]["resourceVersion"],
            ):
                if predicate(event["object"]):
                    return event["object"]


@asynccontextmanager
async def gpu_node(
    client: KubeClient,
    root: Path,
    name: str = NODE,
    gpus: str = TWO_GPUS,
    split_count: int = 4,
    memory_scaling: float = 1.0,
    **overrides: Any,
) -> AsyncIterator[GpuNode]:
    """A node object, its directory under `root`, and a running kubelet stand-in."""
    base = root / name
    base.mkdir(parents=True)
    (base / "gpus.yaml").write_text(gpus)
    mountinfo = base / "mountinfo"
    mountinfo.write_text("22 1 8:1 / / rw,relatime - ext4 /dev/sda1 rw\n")
    settings = DevicePluginSettings(
        node_name=name,
        plugin_dir=base / "dp",
        sharing=SliceSettings(split_count=split_count, memory_scaling=memory_scaling),
        mock_gpus=base / "gpus.yaml",
        config_file=base / "config" / "node.yaml",
        libvgpu=install_libvgpu_files(base),
        cache_dirs=CacheDirSettings(
            self_mountinfo=str(mountinfo), mountinfo_glob=str(base / "none-*")
        ),
    )
    settings = replace(settings, **overrides)
    try:
        await client.get(object_path(NODES, name))
    except NotFoundError:
        await client.create(NODES, {"metadata": {"name": name}})
    async with KubeletDevicePlugin(settings.plugin_dir) as kubelet:
        yield GpuNode(name, base, client, kubelet, settings)


@asynccontextmanager
async def scratch_dir() -> AsyncIterator[Path]:
    """A short directory: unix socket paths must stay under 108 bytes."""
    root = Path(tempfile.mkdtemp(prefix="dp-", dir="/tmp"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@asynccontextmanager
async def api_client(root: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
        try:
            yield server, client
        finally:
            await client.aclose()
            await settle_cancelled_grpc_calls()


@asynccontextmanager
async def node_rig(**options: Any) -> AsyncIterator[GpuNode]:
    """One GPU node on its own API server."""
    async with (
        scratch_dir() as root,
        api_client(root) as (server, client),
        gpu_node(client, root, **options) as node,
    ):
        node.server = server
        yield node


async def bounded(awaitable: Any, seconds: float = 20.0) -> Any:
    """A wait that fails the test instead of hanging it."""
    async with asyncio.timeout(seconds):
        return await awaitable
