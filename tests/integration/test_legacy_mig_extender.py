"""HAMi's MIG mode through the legacy extender over real HTTP, on the API emulator.

A node registers an A100 40GB in `mig` mode with the profiles and placements
of HAMi's `a100MigProfiles()` (pkg/device/nvidia/mig_capability_test.go);
Filter must write `hami.io/vgpu-mig-allocations` as HAMi's
`EncodeMigAllocations` does, and a restarted extender must read the slices
back from the pods (HAMi's getNodesUsage) so that no placement is given twice.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from legacy_fixtures import (
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
    VGPU_DEVICES_ALLOCATED,
    VGPU_MIG_ALLOCATIONS,
    VGPU_MODE,
    MigPlacement,
    MigProfile,
    RegisteredDevice,
    encode_node_devices,
)
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer

NS = "mig-test"
NODE = "mig-node"
GPU = "GPU-mig-0"


def a100_register() -> str:
    ones = tuple(MigPlacement(start, 1) for start in range(7))
    profiles = (
        MigProfile("1g.5gb", 5120, 14, 1, ones),
        MigProfile(
            "2g.10gb", 10240, 28, 2, (MigPlacement(0, 2), MigPlacement(2, 2), MigPlacement(4, 2))
        ),
        MigProfile("3g.20gb", 20480, 42, 3, (MigPlacement(0, 4), MigPlacement(4, 4))),
    )
    device = RegisteredDevice(
        id=GPU,
        index=0,
        count=7,
        devmem=40960,
        devcore=100,
        type="NVIDIA-A100-SXM4-40GB",
        mode="mig",
        health=True,
        mig_profiles=profiles,
    )
    return encode_node_devices([device])


def mig_pod(name: str, gpu: int, gpumem: int) -> dict[str, Any]:
    pod = gpu_pod(name, NS, gpu=gpu, gpumem=gpumem)
    pod["metadata"]["annotations"] = {VGPU_MODE: "mig"}
    return pod


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            await add_gpu_node(client, NODE, register=a100_register())
            yield client
        finally:
            await client.aclose()


async def annotations_of(client: KubeClient, name: str) -> dict[str, str]:
    stored = await client.get(object_path(pods_path(NS), name))
    return stored["metadata"]["annotations"]


async def test_filter_writes_mig_allocations_and_a_restart_reads_them_back(cluster) -> None:
    client = cluster
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, NODE)
        node = await client.get(object_path("/api/v1/nodes", NODE))
        pod = await create_pod(client, mig_pod("two-slices", 2, 4000))
        result = await scheduler.schedule_once(pod, [node])
        assert (result.node, result.reason) == (NODE, None)
        await AllocatorStandIn(client).allocate(NS, "two-slices", NODE)
    written = await annotations_of(client, "two-slices")
    assert written[VGPU_DEVICES_ALLOCATED] == f"{GPU},NVIDIA,5120,14:{GPU},NVIDIA,5120,14:;"
    assert written[VGPU_MIG_ALLOCATIONS] == (
        f'[{{"containerIndex":0,"deviceIndex":0,"gpuUUID":"{GPU}","profile":"1g.5gb",'
        '"placement":{"start":6,"size":1}},'
        f'{{"containerIndex":0,"deviceIndex":1,"gpuUUID":"{GPU}","profile":"1g.5gb",'
        '"placement":{"start":5,"size":1}}]'
    )

    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, NODE)
        node = await client.get(object_path("/api/v1/nodes", NODE))
        big = await create_pod(client, mig_pod("big-slice", 1, 20000))
        result = await scheduler.schedule_once(big, [node])
        assert (result.node, result.reason) == (NODE, None)
        placed = await annotations_of(client, "big-slice")
        assert (
            '"profile":"3g.20gb","placement":{"start":0,"size":4}' in placed[VGPU_MIG_ALLOCATIONS]
        )
        assert placed[VGPU_DEVICES_ALLOCATED] == f"{GPU},NVIDIA,20480,42:;"

        # 1g slices at 5 and 6 and the 3g at 0-3 leave 10240 MiB but no free 2g placement.
        second = await create_pod(client, mig_pod("no-room", 1, 10000))
        answer = await scheduler.filter(second, [node])
        assert answer.feasible == []
        assert answer.failed[NODE] == "1/1 CardMigTopologyInfeasible"
