"""50 GPU pods filtered and bound at once across 4 nodes: no double booking, every lock released.

Each pod has its own kube-scheduler stand-in connection. Binds may not wait
for a lock here (`node_lock_retry_timeout` 0, HAMi's behaviour): a bind that
meets a node lock held by another pod, queued behind another bind of this
scheduler or losing every write race for it answers Error, and the pod tries
again once some lock has been released (kube-scheduler would retry after its
backoff). `AllocatorStandIn`
takes the device plugin's place after Bind.
"""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path

import pytest
from legacy_fixtures import (
    GPU_MEMORY_MIB,
    AllocatorStandIn,
    add_gpu_node,
    add_namespace,
    create_pod,
    extender_client,
    gpu_pod,
    legacy_scheduler,
    pods_path,
    wait_for_nodes,
)

from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    VGPU_DEVICES_ALLOCATED,
    VGPU_NODE,
    decode_pod_devices,
)
from controller.legacy.config import LegacySettings
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import SCHEDULER_ERROR

NS = "burst"
NODES = [f"gpu-node-{i}" for i in range(4)]
PODS = 50
POD_MEMORY = 2300
"""7 fit on a 16384 MiB card and an 8th would not: 56 places for 50 pods."""
MAX_CYCLES = 200


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            for name in NODES:
                await add_gpu_node(client, name, gpus=2)
            yield client
        finally:
            await client.aclose()


async def test_fifty_pods_at_once_no_double_booking_all_locks_released(cluster) -> None:
    client = cluster
    settings = LegacySettings(node_lock_retry_timeout=timedelta(0))
    async with legacy_scheduler(client, settings) as server:
        await wait_for_nodes(server, *NODES)
        nodes = [await client.get(object_path("/api/v1/nodes", name)) for name in NODES]
        pods = [
            await create_pod(client, gpu_pod(f"p{i:02d}", NS, gpumem=POD_MEMORY))
            for i in range(PODS)
        ]
        allocator = AllocatorStandIn(client)
        lock_waits = [0]

        async def schedule(pod) -> str:
            name = pod["metadata"]["name"]
            async with extender_client(server) as scheduler:
                for _ in range(MAX_CYCLES):
                    seen = allocator.releases
                    cycle = await scheduler.schedule_once(pod, nodes)
                    if cycle.node is not None:
                        await allocator.allocate(NS, name, cycle.node)
                        return cycle.node
                    contended = any(
                        text in cycle.message
                        for text in ("locked by", "lock not written", "earlier binds")
                    )
                    assert cycle.reason == SCHEDULER_ERROR and contended, cycle.message
                    lock_waits[0] += 1
                    await allocator.wait_for_release_after(seen)
            raise AssertionError(f"{name} not bound after {MAX_CYCLES} cycles")

        placed = await asyncio.gather(*(schedule(pod) for pod in pods))

    assert len(placed) == PODS and set(placed) <= set(NODES)
    assert lock_waits[0] > 0, "no bind ever met a held lock: the test did not contend"
    memory: dict[str, int] = defaultdict(int)
    shares: dict[str, int] = defaultdict(int)
    listing = await client.list(pods_path(NS))
    for pod in listing["items"]:
        annotations = pod["metadata"]["annotations"]
        assert pod["spec"]["nodeName"] == annotations[VGPU_NODE]
        assert annotations[BIND_PHASE] == "success"
        for container in decode_pod_devices(annotations[VGPU_DEVICES_ALLOCATED]):
            for device in container:
                assert device.uuid.startswith(f"GPU-{pod['spec']['nodeName']}-")
                memory[device.uuid] += device.usedmem
                shares[device.uuid] += 1
    assert sum(shares.values()) == PODS
    assert all(total <= GPU_MEMORY_MIB for total in memory.values()), memory
    assert all(count <= 10 for count in shares.values())
    for name in NODES:
        node = await client.get(object_path("/api/v1/nodes", name))
        assert NODE_LOCK not in (node["metadata"].get("annotations") or {})
    assert len(allocator.served) == PODS
