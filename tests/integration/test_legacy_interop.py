"""Interop: nodes registered by HAMi's own device plugin, and pods HAMi's scheduler placed.

A cluster swaps HAMi's scheduler for ours without touching running pods, so
the register annotation in both of HAMi's formats must be read as HAMi reads
it, and the allocations HAMi wrote on running pods must count as usage.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from legacy_fixtures import (
    add_gpu_node,
    add_namespace,
    create_pod,
    extender_client,
    gpu_pod,
    legacy_scheduler,
    pods_path,
    wait_for_nodes,
)

from api.hami_annotations import USE_GPU_TYPE, VGPU_DEVICES_ALLOCATED, VGPU_NODE
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer

NS = "interop"
T4_0 = "GPU-8a7d2f9c-3b1e-4c55-9d0a-1e2f3a4b5c6d"
T4_1 = "GPU-b1c2d3e4-f5a6-4b7c-8d9e-0f1a2b3c4d5e"
V100_0 = "GPU-c0ffee00-1111-4222-8333-444455556666"
V100_1 = "GPU-d00dfeed-7777-4888-9999-aaaabbbbcccc"
# MarshalNodeDevices output of HAMi's NVIDIA plugin: omitempty drops index 0 and numa 0.
HAMI_JSON = (
    f'[{{"id":"{T4_0}","count":10,"devmem":15360,"devcore":100,"type":"NVIDIA-Tesla T4",'
    '"mode":"hami-core","health":true},'
    f'{{"id":"{T4_1}","index":1,"count":10,"devmem":15360,"devcore":100,'
    '"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core","health":true}]'
)
# The colon list (7 fields per device) older HAMi plugins, Hygon and Iluvatar write.
HAMI_LEGACY = (
    f"{V100_0},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
    f"{V100_1},10,32768,100,NVIDIA-Tesla V100-PCIE-32GB,0,true:"
)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            await add_gpu_node(client, "t4-node", register=HAMI_JSON)
            await add_gpu_node(client, "v100-node", register=HAMI_LEGACY)
            yield client
        finally:
            await client.aclose()


def typed(pod: dict[str, Any], gpu_type: str) -> dict[str, Any]:
    pod["metadata"]["annotations"] = {USE_GPU_TYPE: gpu_type}
    return pod


async def allocated(client: KubeClient, name: str) -> tuple[str, str]:
    pod = await client.get(object_path(pods_path(NS), name))
    annotations = pod["metadata"]["annotations"]
    return annotations[VGPU_NODE], annotations[VGPU_DEVICES_ALLOCATED]


async def test_hami_registered_nodes_and_hami_placed_pods(cluster) -> None:
    client = cluster
    running = gpu_pod("hami-placed", NS, gpucores=100)
    running["metadata"]["annotations"] = {
        VGPU_NODE: "v100-node",
        VGPU_DEVICES_ALLOCATED: f"{V100_1},NVIDIA,32768,100:;",
    }
    await create_pod(client, running)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "t4-node", "v100-node")
        await server.state.pods.wait_for(lambda _: len(server.state.allocations) == 1)
        nodes = [
            await client.get(object_path("/api/v1/nodes", n)) for n in ("t4-node", "v100-node")
        ]

        whole = await create_pod(client, typed(gpu_pod("whole-v100", NS, gpucores=100), "V100"))
        assert (await scheduler.filter(whole, nodes)).feasible == ["v100-node"]
        assert await allocated(client, "whole-v100") == (
            "v100-node",
            f"{V100_0},NVIDIA,32768,100:;",
        )

        full = await create_pod(client, typed(gpu_pod("another-v100", NS, gpucores=100), "V100"))
        result = await scheduler.filter(full, nodes)
        assert result.feasible == []
        # Without gpumem a pod takes the whole card (HAMi), so memory is checked first.
        assert result.failed["v100-node"] == "2/2 CardInsufficientMemory"
        assert result.failed["t4-node"] == "2/2 CardTypeMismatch"

        half = gpu_pod("half-t4", NS)
        half["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem-percentage"] = "50"
        half = await create_pod(client, typed(half, "T4"))
        assert (await scheduler.filter(half, nodes)).feasible == ["t4-node"]
        node, devices = await allocated(client, "half-t4")
        assert node == "t4-node"
        assert devices in (f"{T4_0},NVIDIA,7680,0:;", f"{T4_1},NVIDIA,7680,0:;")
