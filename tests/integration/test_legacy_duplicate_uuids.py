"""Legacy mode with nodes that register the same uuids (one mock file for every node, a
cloned VM) and a uuid listed twice on a node: Filter charges each pod to its own node's
card, a repeated uuid on a node is one card, so no card is given more than it has, and
/metrics reports the repeats and each node gets a warning event."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from legacy_fixtures import (
    WAIT_S,
    add_gpu_node,
    add_namespace,
    base_url,
    create_pod,
    extender_client,
    gpu_pod,
    legacy_scheduler,
    wait_for_nodes,
)

from api.hami_annotations import (
    VGPU_DEVICES_ALLOCATED,
    VGPU_NODE,
    RegisteredDevice,
    decode_pod_devices,
    encode_node_devices,
)
from controller.uuid_reports import DUPLICATE_UUID
from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.process.runtime import cancel_and_wait
from simulator.apiserver import APIServer

NS = "gpu-test"
NODES = ("n1", "n2")
CARD_MIB = 16384
POD_MIB = 4000
PODS = 40


def card(uuid: str, index: int) -> RegisteredDevice:
    return RegisteredDevice(uuid, index, 10, CARD_MIB, 100, "NVIDIA-Tesla T4", 0, "hami-core", True)


REGISTER = encode_node_devices(
    [card("GPU-clone-0", 0), card("GPU-clone-1", 1), card("GPU-clone-0", 2)]
)
"""What every node registers: two cards, the first listed twice."""


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield client
        finally:
            await client.aclose()


async def test_shared_uuids_are_charged_per_node_and_reported(client: KubeClient) -> None:
    for name in NODES:
        await add_gpu_node(client, name, gpus=3, register=REGISTER)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, *NODES)
        nodes = [await client.get(object_path("/api/v1/nodes", name)) for name in NODES]
        placed = 0
        for i in range(PODS):
            pod = await create_pod(client, gpu_pod(f"p-{i}", NS, gpumem=POD_MIB))
            placed += bool((await scheduler.filter(pod, nodes)).feasible)
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{base_url(server)}/metrics") as response,
        ):
            text = await response.text()
        pods = (await client.list(f"/api/v1/namespaces/{NS}/pods"))["items"]
        warned = await _nodes_warned(client)
    assert warned == set(NODES)
    used: dict[tuple[str, str], int] = {}
    for pod in pods:
        annotations: dict[str, Any] = pod["metadata"].get("annotations") or {}
        if VGPU_DEVICES_ALLOCATED not in annotations:
            continue
        for container in decode_pod_devices(annotations[VGPU_DEVICES_ALLOCATED]):
            for device in container:
                key = (annotations[VGPU_NODE], device.uuid)
                used[key] = used.get(key, 0) + device.usedmem
    fitting = CARD_MIB // POD_MIB
    assert used == {(node, f"GPU-clone-{i}"): fitting * POD_MIB for node in NODES for i in (0, 1)}
    assert placed == len(NODES) * 2 * fitting
    duplicates = {
        line.split('"')[1]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("vgpu_device_uuid_duplicates{")
    }
    assert duplicates == {"GPU-clone-0": 4.0, "GPU-clone-1": 2.0}


async def _nodes_warned(client: KubeClient) -> set[str]:
    """The nodes with a DuplicateDeviceUUID Warning, once every node has one."""
    events = Informer(client, "/api/v1/events")

    def nodes(store: Mapping[str, dict[str, Any]]) -> set[str]:
        return {
            event["involvedObject"]["name"]
            for event in store.values()
            if event.get("reason") == DUPLICATE_UUID
            and event.get("type") == "Warning"
            and event["involvedObject"].get("kind") == "Node"
        }

    watching = asyncio.create_task(events.run())
    try:
        async with asyncio.timeout(WAIT_S):
            await events.wait_for(lambda store: nodes(store) >= set(NODES))
        return nodes(events.store)
    finally:
        await cancel_and_wait([watching])
