"""A burst of pods onto one node: every bind waits for the node lock instead of failing.

kube-scheduler filters pods one at a time and binds them concurrently; HAMi's
node lock stays with a pod until the device plugin's Allocate releases it. The
kube-scheduler stand-in's queue drives the real HTTP server here, and a pod
watcher plays kubelet + device plugin (`AllocatorStandIn` for each bound pod).
The wait allowed is long, so the test does not depend on the machine's speed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from legacy_fixtures import (
    AllocatorStandIn,
    add_gpu_node,
    add_namespace,
    base_url,
    create_pod,
    gpu_pod,
    legacy_scheduler,
    pods_path,
    wait_for_nodes,
)

from api.hami_annotations import BIND_PHASE, NODE_LOCK, BindPhase
from controller.legacy.config import LegacySettings
from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import ExtenderConfig, SchedulerExtenderClient

NS = "burst"
NODE = "gpu-node"
PODS = 20
PATIENT = LegacySettings(node_lock_retry_timeout=timedelta(minutes=5))


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            await add_gpu_node(client, NODE, gpus=2)
            yield client
        finally:
            await client.aclose()


class Kubelet:
    """Serves each pod bound to the node once, in the order the watch shows them."""

    def __init__(self, client: KubeClient) -> None:
        self.allocator = AllocatorStandIn(client)
        self.bound: asyncio.Queue[str] = asyncio.Queue()
        self.pods = Informer(client, pods_path(NS), handlers=[self._on_pod])
        self._seen: set[str] = set()

    def _on_pod(self, kind: str, pod: dict[str, Any]) -> None:
        name = pod["metadata"]["name"]
        phase = (pod["metadata"].get("annotations") or {}).get(BIND_PHASE)
        if (
            kind != "DELETED"
            and pod["spec"].get("nodeName") == NODE
            and phase == BindPhase.ALLOCATING.value
            and name not in self._seen
        ):
            self._seen.add(name)
            self.bound.put_nowait(name)

    async def serve(self, count: int) -> None:
        """Allocate `count` pods (and release each one's lock), then return."""
        for _ in range(count):
            await self.allocator.allocate(NS, await self.bound.get(), NODE)


async def test_twenty_binds_onto_one_node_each_succeed_on_the_first_call(client) -> None:
    kubelet = Kubelet(client)
    async with legacy_scheduler(client, PATIENT) as server, asyncio.TaskGroup() as tasks:
        await wait_for_nodes(server, NODE)
        watching = tasks.create_task(kubelet.pods.run())
        serving = tasks.create_task(kubelet.serve(PODS))
        await kubelet.pods.synced.wait()
        node = await client.get(object_path("/api/v1/nodes", NODE))
        pods = [
            await create_pod(client, gpu_pod(f"p{i:02d}", NS, gpumem=1000)) for i in range(PODS)
        ]
        config = ExtenderConfig(url_prefix=base_url(server), http_timeout=600.0)
        async with SchedulerExtenderClient(config) as scheduler:
            histories = await scheduler.schedule_queue(pods, [node], max_cycles=1)
        failures = {name: h[-1].message for name, h in histories.items() if h[-1].node != NODE}
        assert failures == {}
        await serving
        watching.cancel()
        await server.extender.events.wait_idle()

    assert scheduler.bind_calls == PODS
    assert set(kubelet.allocator.served) == {f"{NS}/p{i:02d}" for i in range(PODS)}
    events = (await client.list(f"/api/v1/namespaces/{NS}/events"))["items"]
    assert [e for e in events if e["reason"] == "BindingFailed"] == []
    node = await client.get(object_path("/api/v1/nodes", NODE))
    assert NODE_LOCK not in (node["metadata"].get("annotations") or {})
