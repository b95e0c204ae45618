"""Reusable pieces for legacy-mode tests against the API emulator.

GPU nodes registered the way HAMi's device plugin registers them (JSON or the
legacy colon format), GPU pods, the legacy scheduler process (extender +
webhook) on a free port, and `AllocatorStandIn`, which plays the device
plugin's part after Bind (serve the pod the node lock names, set bind-phase,
release the lock) until the real device plugin takes that place in the full
chain test.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import Any

from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_TO_ALLOCATE,
    BindPhase,
    RegisteredDevice,
    decode_pod_devices,
    encode_node_devices,
)
from controller.legacy.config import CallerAuthSettings, LegacySettings
from controller.legacy.server import LegacyServer, ServeSettings
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.objects.node_lock import read_lock
from simulator.standins.scheduler_extender import ExtenderConfig, SchedulerExtenderClient

NODES = "/api/v1/nodes"
GPU_MEMORY_MIB = 16384
WAIT_S = 30.0
OPEN = CallerAuthSettings(enabled=False)
"""Caller authentication off: for the tests that are not about who may call."""


def gpu_uuid(node: str, index: int) -> str:
    return f"GPU-{node}-{index}"


def register_value(
    node: str, gpus: int = 2, count: int = 10, memory: int = GPU_MEMORY_MIB, legacy: bool = False
) -> str:
    """`hami.io/node-nvidia-register` as HAMi's NVIDIA plugin writes it (or the colon list)."""
    devices = [
        RegisteredDevice(
            id=gpu_uuid(node, i),
            index=i,
            count=count,
            devmem=memory,
            devcore=100,
            type="NVIDIA-Tesla T4",
            numa=0,
            mode="hami-core",
            health=True,
        )
        for i in range(gpus)
    ]
    if legacy:
        return "".join(
            f"{d.id},{d.count},{d.devmem},{d.devcore},{d.type},{d.numa},true,{d.index},{d.mode}:"
            for d in devices
        )
    return encode_node_devices(devices)


async def add_gpu_node(
    client: KubeClient,
    name: str,
    *,
    gpus: int = 2,
    count: int = 10,
    memory: int = GPU_MEMORY_MIB,
    legacy: bool = False,
    register: str | None = None,
) -> dict[str, Any]:
    """A node with registered GPUs and `nvidia.com/gpu` allocatable, as kubelet reports it."""
    annotations = {
        NODE_NVIDIA_REGISTER: register or register_value(name, gpus, count, memory, legacy)
    }
    await client.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": annotations},
        },
    )
    status = {"status": {"allocatable": {"nvidia.com/gpu": str(gpus * count)}}}
    return await client.patch(f"{object_path(NODES, name)}/status", status)


async def add_plain_node(client: KubeClient, name: str) -> dict[str, Any]:
    return await client.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    )


async def add_namespace(client: KubeClient, name: str) -> None:
    await client.create("/api/v1/namespaces", {"metadata": {"name": name}})


def gpu_pod(
    name: str,
    namespace: str,
    *,
    gpu: int | None = 1,
    gpumem: int | None = None,
    gpucores: int | None = None,
    scheduler: str | None = "hami-scheduler",
) -> dict[str, Any]:
    limits = {
        key: str(value)
        for key, value in (
            ("nvidia.com/gpu", gpu),
            ("nvidia.com/gpumem", gpumem),
            ("nvidia.com/gpucores", gpucores),
        )
        if value is not None
    }
    spec: dict[str, Any] = {
        "containers": [{"name": "cuda", "image": "pause", "resources": {"limits": limits}}]
    }
    if scheduler:
        spec["schedulerName"] = scheduler
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }


def pods_path(namespace: str) -> str:
    return f"/api/v1/namespaces/{namespace}/pods"


async def create_pod(client: KubeClient, pod: dict[str, Any]) -> dict[str, Any]:
    return await client.create(pods_path(pod["metadata"]["namespace"]), pod)


@asynccontextmanager
async def legacy_scheduler(
    client: KubeClient,
    settings: LegacySettings | None = None,
    caller_auth: CallerAuthSettings = OPEN,
    **serve: Any,
) -> AsyncIterator[LegacyServer]:
    """The `dra-driver scheduler` process (extender + webhook) on a free loopback port."""
    settings = replace(settings or LegacySettings(), caller_auth=caller_auth)
    server = LegacyServer(client, settings, ServeSettings(port=0, **serve))
    async with server:
        yield server


def base_url(server: LegacyServer, scheme: str = "http") -> str:
    return f"{scheme}://127.0.0.1:{server.port}"


async def wait_for_nodes(server: LegacyServer, *names: str) -> None:
    """Until the scheduler's node cache has read every named node."""

    def seen(_: dict[str, Any]) -> bool:
        return all(name in server.state.inventory for name in names)

    await asyncio.wait_for(server.state.nodes.wait_for(seen), WAIT_S)


def extender_client(
    server: LegacyServer, node_cache_capable: bool = True
) -> SchedulerExtenderClient:
    return SchedulerExtenderClient(
        ExtenderConfig(url_prefix=base_url(server), node_cache_capable=node_cache_capable)
    )


class AllocatorStandIn:
    """The device plugin's side after Bind: only the pod the node lock names is served.

    `allocate` checks that the lock names the pod, reads the devices it was
    given, marks bind-phase success and releases the lock; `releases` counts
    releases so a pod whose bind hit a held lock can wait for the next one.
    """

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.locker = NodeLocker(client)
        self.releases = 0
        self.served: dict[str, list[list[Any]]] = {}
        self._released = asyncio.Condition()

    async def allocate(self, namespace: str, name: str, node: str) -> None:
        current = await self.client.get(object_path(NODES, node))
        holder = read_lock(node, (current["metadata"].get("annotations") or {}).get(NODE_LOCK))
        assert holder is not None and (holder.namespace, holder.pod) == (namespace, name), (
            f"node {node} lock is {holder}, not {namespace}/{name}"
        )
        pod = await self.client.get(object_path(pods_path(namespace), name))
        devices = decode_pod_devices(pod["metadata"]["annotations"][VGPU_DEVICES_TO_ALLOCATE])
        self.served[f"{namespace}/{name}"] = devices
        phase = {"metadata": {"annotations": {BIND_PHASE: BindPhase.SUCCESS.value}}}
        await self.client.patch(object_path(pods_path(namespace), name), phase)
        assert await self.locker.release(node, namespace, name)
        async with self._released:
            self.releases += 1
            self._released.notify_all()

    async def wait_for_release_after(self, seen: int) -> None:
        async with self._released:
            await asyncio.wait_for(self._released.wait_for(lambda: self.releases > seen), WAIT_S)
