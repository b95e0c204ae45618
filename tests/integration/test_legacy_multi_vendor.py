"""A pod asking for several vendors, placed by the legacy scheduler over real HTTP on the
API emulator: one container per vendor, every vendor's devices registered on one node
the way its HAMi device plugin registers them, Filter's pod keys per vendor (one entry
per container), and Bind taking one shared `hami.io/mutex.lock` that the device plugin's
release frees.

To add a vendor, add a `VendorNode` to `VENDORS`: its register annotation, the
resources its container asks for, and the pod key and entry Filter is to write.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from legacy_fixtures import (
    WAIT_S,
    AllocatorStandIn,
    add_namespace,
    base_url,
    create_pod,
    legacy_scheduler,
    pods_path,
    register_value,
    wait_for_nodes,
)

from api.hami_annotations import NODE_LOCK, NODE_NVIDIA_REGISTER, VGPU_NODE
from controller.legacy.config import LegacySettings
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import ExtenderConfig, SchedulerExtenderClient

NS = "mixed"
NODE = "mixed-1"
NODES = "/api/v1/nodes"


@dataclass(frozen=True)
class VendorNode:
    """One vendor on the shared node and in the pod."""

    register_key: str
    register: str
    allocatable: dict[str, str]
    limits: dict[str, str]
    pod_keys: tuple[str, ...]
    entry: str
    """The container's device list Filter writes (the pod's other containers are empty)."""


VENDORS = (
    VendorNode(
        NODE_NVIDIA_REGISTER,
        register_value(NODE, gpus=1),
        {"nvidia.com/gpu": "10"},
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"},
        ("hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated"),
        f"GPU-{NODE}-0,NVIDIA,4000,30:",
    ),
    VendorNode(
        "hami.io/node-dcu-register",
        "DCU-mixed-0,4,65520,100,DCU-Z100,0,true,0,hami-core:",
        {"hygon.com/dcunum": "4"},
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2048", "hygon.com/dcucores": "25"},
        ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated"),
        "DCU-mixed-0,DCU,2048,25:",
    ),
)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield client
        finally:
            await client.aclose()


async def add_mixed_node(client: KubeClient) -> dict[str, Any]:
    annotations = {vendor.register_key: vendor.register for vendor in VENDORS}
    metadata = {"name": NODE, "annotations": annotations}
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": metadata})
    allocatable = {k: v for vendor in VENDORS for k, v in vendor.allocatable.items()}
    return await client.patch(
        f"{object_path(NODES, NODE)}/status", {"status": {"allocatable": allocatable}}
    )


def mixed_pod(name: str) -> dict[str, Any]:
    containers = [
        {"name": f"c{i}", "image": "pause", "resources": {"limits": vendor.limits}}
        for i, vendor in enumerate(VENDORS)
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {"schedulerName": "hami-scheduler", "containers": containers},
    }


def extender_client(server) -> SchedulerExtenderClient:
    """kube-scheduler with every vendor's resources among managedResources."""
    managed = tuple(name for vendor in VENDORS for name in vendor.limits)
    return SchedulerExtenderClient(ExtenderConfig(base_url(server), managed_resources=managed))


async def lock_values(client: KubeClient, since: str, seen: list[str | None]) -> None:
    """Record every value the node's lock takes, from `since`, until it is removed again."""
    async for event in client.watch(
        NODES, field_selector=f"metadata.name={NODE}", resource_version=since
    ):
        value = (event["object"]["metadata"].get("annotations") or {}).get(NODE_LOCK)
        if not seen or seen[-1] != value:
            seen.append(value)
        if value is None and len(seen) > 1:
            return


async def test_a_pod_of_two_vendors_lands_on_one_node_under_one_lock(cluster) -> None:
    client = cluster
    node = await add_mixed_node(client)
    async with (
        legacy_scheduler(client, LegacySettings()) as server,
        extender_client(server) as scheduler,
    ):
        await wait_for_nodes(server, NODE)
        assert {device.type for device in server.state.inventory[NODE].node.devices} == {
            "NVIDIA-Tesla T4",
            "DCU-Z100",
        }
        seen: list[str | None] = []
        watching = asyncio.create_task(
            lock_values(client, node["metadata"]["resourceVersion"], seen)
        )
        pod = await create_pod(client, mixed_pod("both"))
        result = await scheduler.schedule_once(pod, [node])
        assert (result.node, result.reason) == (NODE, None)

        stored = await client.get(object_path(pods_path(NS), "both"))
        annotations = stored["metadata"]["annotations"]
        assert annotations[VGPU_NODE] == NODE
        for position, vendor in enumerate(VENDORS):
            entries = [vendor.entry if i == position else "" for i in range(len(VENDORS))]
            for key in vendor.pod_keys:
                assert annotations[key] == "".join(f"{entry};" for entry in entries)

        held = (await client.get(object_path(NODES, NODE)))["metadata"]["annotations"]
        assert held[NODE_LOCK].split(",")[1:] == [NS, "both"]
        await AllocatorStandIn(client).allocate(NS, "both", NODE)
        await asyncio.wait_for(watching, WAIT_S)
        # One lock taken for the whole pod, then released: absent, held, absent.
        assert len(seen) == 3 and seen[0] is None and seen[2] is None
        assert seen[1] is not None and seen[1].endswith(f",{NS},both")


async def test_usage_of_every_vendor_is_read_back_from_its_pod_keys(cluster) -> None:
    """A second scheduler process (a restart) counts the first pod's DCU share: a pod
    that needs the rest of the card plus the share cannot fit."""
    client = cluster
    node = await add_mixed_node(client)
    async with (
        legacy_scheduler(client, LegacySettings()) as server,
        extender_client(server) as scheduler,
    ):
        await wait_for_nodes(server, NODE)
        first = await create_pod(client, mixed_pod("first"))
        assert (await scheduler.schedule_once(first, [node])).node == NODE
        await AllocatorStandIn(client).allocate(NS, "first", NODE)
    async with (
        legacy_scheduler(client, LegacySettings()) as server,
        extender_client(server) as scheduler,
    ):
        await wait_for_nodes(server, NODE)
        usage = server.state.allocations
        assert {
            (grant.vendor, grant.memory_mib)
            for a in usage.values()
            for c in a.placement.containers
            for grant in c
        } == {("NVIDIA", 4000), ("DCU", 2048)}
        greedy = mixed_pod("greedy")
        greedy["spec"]["containers"] = [
            {
                "name": "dcu",
                "image": "pause",
                "resources": {"limits": {"hygon.com/dcunum": "1", "hygon.com/dcumem": "64000"}},
            }
        ]
        result = await scheduler.schedule_once(await create_pod(client, greedy), [node])
        assert result.node is None
        assert "CardInsufficientMemory" in (result.message or "")
