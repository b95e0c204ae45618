"""The ResourceSlice publisher against the API emulator over loopback HTTP."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient, object_path
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.publisher import (
    NODES,
    RESOURCE_SLICES,
    NodeNotFoundError,
    PublisherSettings,
    SlicePublisher,
)
from kubeletplugin.slices import SliceSettings, slice_name
from simulator.apiserver import APIServer

NODE = "node-a"
DRIVER = "vgpu.hami.io"
SETTINGS = SliceSettings(driver=DRIVER)
FAST = PublisherSettings(retry_delay_s=0.001, max_retry_delay_s=0.01)
WRITE_VERBS = ("POST", "PUT", "PATCH", "DELETE")
FIRST = slice_name(NODE, DRIVER, 0)
SECOND = slice_name(NODE, DRIVER, 1)


def gpus(count: int) -> list[GpuInfo]:
    return [
        GpuInfo(
            uuid=f"GPU-{index:08d}-0000-0000-0000-000000000000",
            index=index,
            minor=index,
            product_name="NVIDIA A100-SXM4-80GB",
            memory_bytes=80 << 30,
        )
        for index in range(count)
    ]


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield server, client
        finally:
            await client.aclose()


async def create_node(client: KubeClient, name: str = NODE) -> str:
    node = await client.create(
        NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}
    )
    return node["metadata"]["uid"]


async def slices(client: KubeClient) -> dict[str, dict[str, Any]]:
    listing = await client.list(RESOURCE_SLICES)
    return {item["metadata"]["name"]: item for item in listing["items"]}


def pool(resource_slice: dict[str, Any]) -> dict[str, Any]:
    return resource_slice["spec"]["pool"]


def device_names(resource_slice: dict[str, Any]) -> list[str]:
    return [device["name"] for device in resource_slice["spec"].get("devices") or []]


def writes(server: APIServer) -> int:
    return sum(server.faults.count("/resourceslices", verb=verb) for verb in WRITE_VERBS)


async def test_first_publish_creates_one_slice_owned_by_the_node(cluster):
    _, client = cluster
    node_uid = await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(2))
        published = await slices(client)
        assert list(published) == [FIRST]
        first = published[FIRST]
        assert first["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
        ]
        assert first["spec"]["nodeName"] == NODE
        assert first["spec"]["driver"] == DRIVER
        assert pool(first) == {"name": NODE, "generation": 1, "resourceSliceCount": 1}
        assert device_names(first) == ["gpu-0", "gpu-1"]
        assert publisher.generation == 1


async def test_publishing_the_same_gpus_again_writes_nothing(cluster):
    server, client = cluster
    await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(2))
        before = await slices(client)
        server.faults.reset()
        await publisher.publish(gpus(2))
        await publisher.publish(list(reversed(gpus(2))))
        assert writes(server) == 0
        assert publisher.generation == 1
    unwatched = SlicePublisher(client, NODE, SETTINGS, FAST)
    await unwatched.publish(gpus(2))
    assert writes(server) == 0
    assert unwatched.generation == 1
    assert await slices(client) == before


async def test_server_side_rewriting_is_not_taken_for_a_change(cluster):
    """A real API server stamps `timeAdded` on taints and writes quantities in
    canonical form; neither may make the publisher rewrite its slices."""
    server, client = cluster
    await create_node(client)
    sick = [replace(gpu, healthy=False, unhealthy_reason="xid-79") for gpu in gpus(1)]
    await SlicePublisher(client, NODE, SETTINGS, FAST).publish(sick)
    first = (await slices(client))[FIRST]
    device = first["spec"]["devices"][0]
    device["taints"][0]["timeAdded"] = "2026-11-29T20:00:00Z"
    device["capacity"]["memory"]["value"] = "80Gi"
    device["capacity"]["memory"]["requestPolicy"]["validRange"]["step"] = "1Mi"
    await client.replace(object_path(RESOURCE_SLICES, FIRST), first)
    server.faults.reset()
    await SlicePublisher(client, NODE, SETTINGS, FAST).publish(sick)
    assert writes(server) == 0


async def test_an_unhealthy_gpu_bumps_the_generation_and_taints_the_device(cluster):
    _, client = cluster
    await create_node(client)
    healthy = gpus(2)
    sick = [healthy[0], replace(healthy[1], healthy=False, unhealthy_reason="xid-79")]
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(healthy)
        await publisher.publish(sick)
        assert publisher.generation == 2
        first = (await slices(client))[FIRST]
        assert pool(first)["generation"] == 2
        devices = {device["name"]: device for device in first["spec"]["devices"]}
        assert "taints" not in devices["gpu-0"]
        [taint] = devices["gpu-1"]["taints"]
        assert taint.pop("timeAdded")  # the API server stamps it, as a real one does
        assert taint == {"key": f"{DRIVER}/unhealthy", "value": "xid-79", "effect": "NoSchedule"}
        await publisher.publish(healthy)
        assert publisher.generation == 3
        assert "taints" not in (await slices(client))[FIRST]["spec"]["devices"][1]


async def test_a_restarted_publisher_adopts_the_pool_without_writing(cluster):
    server, client = cluster
    await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(130))
        await publisher.publish(gpus(129))
    before = await slices(client)
    assert {pool(item)["generation"] for item in before.values()} == {2}
    server.faults.reset()
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as restarted:
        assert restarted.generation == 2
        await restarted.publish(gpus(129))
        assert restarted.generation == 2
        assert restarted.publishes == 0
    assert writes(server) == 0
    assert await slices(client) == before


async def test_kubelet_deleting_the_node_slices_gets_them_republished(cluster):
    _, client = cluster
    await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(129))
        assert set(await slices(client)) == {FIRST, SECOND}
        await client.delete(RESOURCE_SLICES, field_selector=f"spec.nodeName={NODE}")
        await publisher.wait_for(lambda: publisher.generation > 1)
        republished = await slices(client)
        assert set(republished) == {FIRST, SECOND}
        for item in republished.values():
            assert pool(item)["generation"] == publisher.generation
            assert pool(item)["resourceSliceCount"] == 2
        assert len(device_names(republished[FIRST]) + device_names(republished[SECOND])) == 129


async def test_a_deleted_slice_is_republished(cluster):
    _, client = cluster
    await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(2))
        await client.delete(object_path(RESOURCE_SLICES, FIRST))
        await publisher.wait_for(lambda: publisher.generation > 1)
        first = (await slices(client))[FIRST]
        assert pool(first)["generation"] == publisher.generation
        assert device_names(first) == ["gpu-0", "gpu-1"]


async def test_a_slice_changed_by_someone_else_is_written_back(cluster):
    _, client = cluster
    await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(2))
        await client.patch(object_path(RESOURCE_SLICES, FIRST), {"spec": {"devices": []}})
        await publisher.wait_for(lambda: publisher.generation > 1)
        first = (await slices(client))[FIRST]
        assert device_names(first) == ["gpu-0", "gpu-1"]
        assert pool(first)["generation"] == publisher.generation


async def test_a_stray_slice_of_this_node_and_driver_is_deleted(cluster):
    _, client = cluster
    node_uid = await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(1))
        stray = (await slices(client))[FIRST]
        stray["metadata"] = {
            "name": "stray",
            "ownerReferences": stray["metadata"]["ownerReferences"],
        }
        await client.create(RESOURCE_SLICES, stray)
        await publisher.wait_for(lambda: publisher.generation > 1)
        remaining = await slices(client)
        assert set(remaining) == {FIRST}
        assert remaining[FIRST]["metadata"]["ownerReferences"][0]["uid"] == node_uid


async def test_growing_past_128_gpus_splits_the_pool_and_shrinking_deletes_the_surplus(cluster):
    _, client = cluster
    await create_node(client)
    events: list[tuple[str, str, int]] = []
    observer = Informer(
        client,
        RESOURCE_SLICES,
        handlers=[
            lambda kind, obj: events.append(
                (kind, obj["metadata"]["name"], pool(obj)["generation"])
            )
        ],
    )
    watch = asyncio.create_task(observer.run(), name="observer")
    try:
        await observer.synced.wait()
        async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
            await publisher.publish(gpus(2))
            await publisher.publish(gpus(129))
            grown = await slices(client)
            assert len(device_names(grown[FIRST])) == 128
            assert device_names(grown[SECOND]) == ["gpu-128"]
            assert {pool(item)["resourceSliceCount"] for item in grown.values()} == {2}
            assert {pool(item)["generation"] for item in grown.values()} == {2}
            await publisher.publish(gpus(3))
            shrunk = await slices(client)
            assert list(shrunk) == [FIRST]
            assert pool(shrunk[FIRST]) == {"name": NODE, "generation": 3, "resourceSliceCount": 1}
            await observer.wait_for(lambda store: set(store) == {FIRST})
        assert events.index(("MODIFIED", FIRST, 3)) < events.index(("DELETED", SECOND, 2))
        assert events.index(("MODIFIED", FIRST, 2)) < events.index(("ADDED", SECOND, 2))
    finally:
        watch.cancel()
        with pytest.raises(asyncio.CancelledError):
            await watch


async def test_remove_all_deletes_every_slice(cluster):
    _, client = cluster
    await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(129))
        await client.create(
            RESOURCE_SLICES,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "other-driver"},
                "spec": {
                    "driver": "other.example.com",
                    "nodeName": NODE,
                    "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
                },
            },
        )
        await publisher.remove_all()
        assert list(await slices(client)) == ["other-driver"]
        await publisher.publish(gpus(1))
        assert pool((await slices(client))[FIRST])["generation"] == 2


async def test_a_conflict_on_update_is_retried(cluster):
    server, client = cluster
    await create_node(client)
    healthy = gpus(1)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(healthy)
        rule = server.faults.fail("/resourceslices/", verb="PUT", status=409, times=1)
        await publisher.publish([replace(healthy[0], healthy=False, unhealthy_reason="xid-48")])
        assert rule.hits == 1
        assert server.faults.count("/resourceslices/", verb="PUT") == 2
        first = (await slices(client))[FIRST]
        assert pool(first)["generation"] == 2
        assert first["spec"]["devices"][0]["taints"][0]["value"] == "xid-48"


async def test_transient_errors_are_retried(cluster):
    server, client = cluster
    await create_node(client)
    server.faults.fail("/resourceslices", verb="POST", status=503, times=2)
    server.faults.fail("/nodes/", verb="GET", status=429, times=1)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(1))
        assert server.faults.count("/resourceslices", verb="POST") == 3
        assert set(await slices(client)) == {FIRST}


async def test_a_missing_node_is_a_typed_error(cluster):
    server, client = cluster
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        with pytest.raises(NodeNotFoundError) as raised:
            await publisher.publish(gpus(1))
    assert raised.value.node_name == NODE
    assert NODE in str(raised.value)
    assert writes(server) == 0


async def test_slices_follow_a_recreated_node(cluster):
    _, client = cluster
    await create_node(client)
    async with SlicePublisher(client, NODE, SETTINGS, FAST) as publisher:
        await publisher.publish(gpus(1))
        await client.delete(object_path(NODES, NODE))
        new_uid = await create_node(client)
        await publisher.wait_for(lambda: publisher.generation > 1)
        first = (await slices(client))[FIRST]
        assert first["metadata"]["ownerReferences"][0]["uid"] == new_uid
