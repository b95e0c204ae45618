"""Devices that share a uuid (one mock GPU file for every node, cloned VMs, a bad NVML
answer): each node's card is allocated on its own, a uuid twice on one node is one card,
no device ever holds more than its capacity, and the repeat is reported on the nodes (an
event) and in /metrics."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller_cluster import (
    GIB,
    Cluster,
    capacity,
    cluster,
    controller,
    node_of,
    overcommitted,
    request,
    results,
)
from prometheus_client import CollectorRegistry

from controller.controller import FILTERING_FAILED
from controller.uuid_reports import DUPLICATE_UUID
from kubeletplugin.gpus import GpuInfo

NODES = ("node-a", "node-b")
GPUS_PER_NODE = 8
SHARES_PER_GPU = 8
"""80Gi cards, 10Gi claims."""
CLAIMS = 160
PRODUCT = "NVIDIA A100-SXM4-80GB"
LIMIT_S = 120.0
"""Hundreds of objects through the emulator on a busy machine: a bound, not a target."""


def cloned_gpu(index: int, uuid_index: int | None = None) -> GpuInfo:
    """A GPU as a shared mock file describes it: the same uuid on every node."""
    same = index if uuid_index is None else uuid_index
    return GpuInfo(f"GPU-clone-{same}", index, index, PRODUCT, 80 * GIB)


def refused_pods(events: Mapping[str, dict[str, Any]]) -> set[str]:
    return {
        e["involvedObject"]["name"]
        for e in events.values()
        if e.get("reason") == FILTERING_FAILED and e["involvedObject"].get("kind") == "Pod"
    }


def allocated(claims: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in claims.values() if (c.get("status") or {}).get("allocation")]


async def settle(c: Cluster, pods: int, fitting: int) -> None:
    """Until `fitting` claims are allocated and every other pod was refused."""
    await c.wait_claims(lambda store: len(allocated(store)) >= fitting, LIMIT_S)
    async with asyncio.timeout(LIMIT_S):
        await c.events.wait_for(lambda store: len(refused_pods(store)) >= pods - fitting)


async def test_two_nodes_with_the_same_uuids_never_overcommit_a_device(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        for node in NODES:
            await c.add_node(node, [cloned_gpu(i) for i in range(GPUS_PER_NODE)], cpu="1000")
        async with controller(c.client):
            for i in range(CLAIMS):
                await c.add_pod_with_claim(f"p-{i}", request(**capacity(memory="10Gi")))
            fitting = len(NODES) * GPUS_PER_NODE * SHARES_PER_GPU
            await settle(c, CLAIMS, fitting)
            slices = (await c.client.list("/apis/resource.k8s.io/v1/resourceslices"))["items"]
    claims = allocated(c.claims.store)
    assert overcommitted(claims, slices) == []
    assert len(claims) == fitting
    for claim in claims:
        [result] = results(claim)
        assert result["pool"] == node_of(claim)
    per_node = {node: sum(node_of(claim) == node for claim in claims) for node in NODES}
    assert per_node == {node: GPUS_PER_NODE * SHARES_PER_GPU for node in NODES}


async def test_a_uuid_twice_on_a_node_is_one_card_and_is_reported(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", [cloned_gpu(0), cloned_gpu(1, uuid_index=0)], cpu="100")
        await c.add_node("node-b", [cloned_gpu(0)], cpu="100")
        async with controller(c.client, registry=registry) as running:
            for i in range(4):
                await c.add_pod_with_claim(f"p-{i}", request(**capacity(memory="50Gi")))
            await settle(c, 4, 2)
            for node in ("node-a", "node-b"):
                event = await c.wait_event(node, DUPLICATE_UUID, LIMIT_S)
                assert event["involvedObject"]["kind"] == "Node"
                assert "GPU-clone-0" in event["message"]
            running.publish_view()
            duplicates = registry.get_sample_value(
                "vgpu_device_uuid_duplicates", {"device_uuid": "GPU-clone-0"}
            )
    claims = allocated(c.claims.store)
    assert sorted(node_of(claim) for claim in claims) == ["node-a", "node-b"]
    assert duplicates == 3
    placed = {claim["metadata"]["name"].removesuffix("-claim") for claim in claims}
    assert refused_pods(c.events.store) == {f"p-{i}" for i in range(4)} - placed
