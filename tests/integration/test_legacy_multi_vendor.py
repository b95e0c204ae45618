"""A pod asking for several vendors, placed by the legacy scheduler over real HTTP on the
API emulator: one container per vendor, every vendor's devices on one node the way its
HAMi device plugin registers them (an annotation, or Cambricon's `status.capacity`),
Filter's pod keys per vendor (one entry per container), and Bind taking the locks HAMi's
Bind takes: one shared `hami.io/mutex.lock` for NVIDIA and Hygon, which the NVIDIA
device plugin's Allocate releases, and Cambricon's own `cambricon.com/dsmlu.lock`, which
Cambricon's device plugin removes once it has allocated the pod (HAMi's scheduler never
releases it after a successful bind); the test plays both device plugins' releases.

To add a vendor, add a `VendorNode` to `VENDORS`: what its device plugin puts on the
node, the resources its container asks for, and the pod keys and entry Filter writes.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
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

from api.hami_annotations import NODE_LOCK, NODE_NVIDIA_REGISTER, VGPU_NODE, decode_node_lock
from controller.legacy.config import LegacySettings, parse_device_config
from dra_driver.engine.vendor_backends import cambricon, kunlun
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import ExtenderConfig, SchedulerExtenderClient

NS = "mixed"
NODE = "mixed-1"
NODES = "/api/v1/nodes"
LOCKS = (NODE_LOCK, cambricon.LOCK_KEY)
"""The node lock keys watched, shared first."""


@dataclass(frozen=True)
class VendorNode:
    """One vendor on the shared node and in the pod."""

    device_type: str
    annotations: dict[str, str]
    """What its device plugin registers on the node (none for capacity-based vendors)."""
    resources: dict[str, str]
    """Its `status.capacity` and `status.allocatable`."""
    limits: dict[str, str]
    pod_keys: tuple[str, ...]
    entry: str
    """The container's device list Filter writes (the pod's other containers are empty)."""
    other_pod_keys: dict[str, str] = field(default_factory=dict)
    """The rest of what its PatchAnnotations writes for its device plugin."""


VENDORS = (
    VendorNode(
        "NVIDIA-Tesla T4",
        {NODE_NVIDIA_REGISTER: register_value(NODE, gpus=1)},
        {"nvidia.com/gpu": "10"},
        {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "4000", "nvidia.com/gpucores": "30"},
        ("hami.io/vgpu-devices-to-allocate", "hami.io/vgpu-devices-allocated"),
        f"GPU-{NODE}-0,NVIDIA,4000,30:",
    ),
    VendorNode(
        "DCU-Z100",
        {"hami.io/node-dcu-register": "DCU-mixed-0,4,65520,100,DCU-Z100,0,true,0,hami-core:"},
        {"hygon.com/dcunum": "4"},
        {"hygon.com/dcunum": "1", "hygon.com/dcumem": "2048", "hygon.com/dcucores": "25"},
        ("hami.io/dcu-devices-to-allocate", "hami.io/dcu-devices-allocated"),
        "DCU-mixed-0,DCU,2048,25:",
    ),
    VendorNode(
        "MLU",
        {},
        # One card: 100 vcore units, 64 x 256 MiB of vmemory.
        {"cambricon.com/mlu.smlu.vcore": "100", "cambricon.com/mlu.smlu.vmemory": "64"},
        {
            "cambricon.com/vmlu": "1",
            "cambricon.com/mlu.smlu.vmemory": "8",
            "cambricon.com/mlu.smlu.vcore": "20",
        },
        (
            "hami.io/cambricon-mlu-devices-to-allocate",
            "hami.io/cambricon-mlu-devices-allocated",
        ),
        f"{NODE}-cambricon-mlu-0,MLU,2048,20:",
        # <index>_<cores>_<memory in 256 MiB units> of the first MLU granted.
        {cambricon.ASSIGNED: "false", cambricon.PROFILE: "0_20_8"},
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
    annotations = {k: v for vendor in VENDORS for k, v in vendor.annotations.items()}
    metadata = {"name": NODE, "annotations": annotations}
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": metadata})
    resources = {k: v for vendor in VENDORS for k, v in vendor.resources.items()}
    return await client.patch(
        f"{object_path(NODES, NODE)}/status",
        {"status": {"capacity": resources, "allocatable": resources}},
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


async def lock_values(
    client: KubeClient, since: str, seen: list[tuple[str | None, ...]], node: str = NODE
) -> None:
    """Record every state the node's locks (`LOCKS`) go through, from `since`, until
    they are all gone again."""
    async for event in client.watch(
        NODES, field_selector=f"metadata.name={node}", resource_version=since
    ):
        annotations = event["object"]["metadata"].get("annotations") or {}
        state = tuple(annotations.get(key) for key in LOCKS)
        if not seen or seen[-1] != state:
            seen.append(state)
        if not any(state) and len(seen) > 1:
            return


async def release_cambricon_lock(client: KubeClient, node: str = NODE) -> None:
    """Cambricon's device plugin after allocating the pod: the dsmlu lock removed."""
    await client.patch(
        object_path(NODES, node), {"metadata": {"annotations": {cambricon.LOCK_KEY: None}}}
    )


async def test_a_pod_of_three_vendors_lands_on_one_node_under_hamis_locks(cluster) -> None:
    client = cluster
    node = await add_mixed_node(client)
    async with (
        legacy_scheduler(client, LegacySettings()) as server,
        extender_client(server) as scheduler,
    ):
        await wait_for_nodes(server, NODE)
        assert {device.type for device in server.state.inventory[NODE].node.devices} == {
            vendor.device_type for vendor in VENDORS
        }
        seen: list[tuple[str | None, ...]] = []
        watching = asyncio.create_task(
            lock_values(client, node["metadata"]["resourceVersion"], seen)
        )
        pod = await create_pod(client, mixed_pod("all"))
        result = await scheduler.schedule_once(pod, [node])
        assert (result.node, result.reason) == (NODE, None)

        stored = await client.get(object_path(pods_path(NS), "all"))
        annotations = stored["metadata"]["annotations"]
        assert annotations[VGPU_NODE] == NODE
        for position, vendor in enumerate(VENDORS):
            entries = [vendor.entry if i == position else "" for i in range(len(VENDORS))]
            for key in vendor.pod_keys:
                assert annotations[key] == "".join(f"{entry};" for entry in entries)
            assert {k: annotations.get(k) for k in vendor.other_pod_keys} == vendor.other_pod_keys

        held = (await client.get(object_path(NODES, NODE)))["metadata"]["annotations"]
        assert held[NODE_LOCK].split(",")[1:] == [NS, "all"]
        dsmlu = decode_node_lock(held[cambricon.LOCK_KEY])
        assert (dsmlu.namespace, dsmlu.pod) == ("", "")  # a bare time: no owner recorded
        await AllocatorStandIn(client).allocate(NS, "all", NODE)
        await release_cambricon_lock(client)
        await asyncio.wait_for(watching, WAIT_S)
        shared, own = held[NODE_LOCK], held[cambricon.LOCK_KEY]
        # HAMi's Bind locks vendor by vendor in common-word order (DCU and GPU: the
        # shared lock, taken once; then MLU: its own); each device plugin frees its own.
        assert seen == [(None, None), (shared, None), (shared, own), (None, own), (None, None)]


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
        await release_cambricon_lock(client)
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
        } == {("NVIDIA", 4000), ("DCU", 2048), ("MLU", 2048)}
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


async def test_locks_follow_hamis_vendor_order_not_shared_first(cluster) -> None:
    """HAMi's Bind runs LockNode vendor by vendor in common-word order, so for a pod of
    Kunlun vXPU (`XPU`, shared lock) and Cambricon (`MLU`, own lock) the dsmlu lock is
    written first, then `hami.io/mutex.lock`."""
    client = cluster
    name = "xpu-mlu"
    register = json.dumps(
        [{"id": "xpu-0", "index": 0, "count": 4, "devmem": 98304, "devcore": 100,
          "type": "XPU", "health": True}]
    )  # fmt: skip
    mlu = VENDORS[2]
    await client.create(
        NODES,
        {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "annotations": {kunlun.VXPU_REGISTER: register}},
        },
    )
    resources = {**mlu.resources, kunlun.VXPU_COUNT: "4"}
    node = await client.patch(
        f"{object_path(NODES, name)}/status",
        {"status": {"capacity": resources, "allocatable": resources}},
    )
    settings = LegacySettings(
        device_config=parse_device_config(
            {"nvidia": {}, "cambricon": cambricon.DEFAULT_SECTION, "kunlun": {}}
        )
    )
    xpu_limits = {kunlun.VXPU_COUNT: "1", kunlun.VXPU_MEMORY: "24576"}
    managed = (*xpu_limits, *mlu.limits)
    async with (
        legacy_scheduler(client, settings) as server,
        SchedulerExtenderClient(
            ExtenderConfig(base_url(server), managed_resources=managed)
        ) as scheduler,
    ):
        await wait_for_nodes(server, name)
        seen: list[tuple[str | None, ...]] = []
        watching = asyncio.create_task(
            lock_values(client, node["metadata"]["resourceVersion"], seen, name)
        )
        body = mixed_pod("xm")
        body["spec"]["containers"] = [
            {"name": "xpu", "image": "pause", "resources": {"limits": xpu_limits}},
            {"name": "mlu", "image": "pause", "resources": {"limits": mlu.limits}},
        ]
        result = await scheduler.schedule_once(await create_pod(client, body), [node])
        assert (result.node, result.reason) == (name, None)
        held = (await client.get(object_path(NODES, name)))["metadata"]["annotations"]
        assert await NodeLocker(client).release(name, NS, "xm")
        await release_cambricon_lock(client, name)
        await asyncio.wait_for(watching, WAIT_S)
    shared, own = held[NODE_LOCK], held[cambricon.LOCK_KEY]
    assert seen == [(None, None), (None, own), (shared, own), (None, own), (None, None)]
