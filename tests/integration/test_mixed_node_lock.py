"""HAMi's node lock between the two allocators of a mixed node, one holder at a time.

The legacy scheduler's Bind meets a lock the DRA controller holds (its holder a
claim that is being allocated): it waits, and takes the lock only once that
claim is gone. The controller meets a lock a legacy pod holds between Bind and
the device plugin's Allocate: it does not write, tells the claim why, and
allocates once the lock is released, releasing its own lock after the write.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from controller_cluster import WAIT_S, capacity, node_of, request
from legacy_fixtures import AllocatorStandIn, create_pod, extender_client, gpu_pod
from mixed_fixtures import NODE, NS, claim_path, mixed_cluster

from api.hami_annotations import NODE_LOCK
from controller.legacy.config import LegacySettings
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.objects.node_lock import lock_value
from simulator.standins.scheduler_extender import ExtenderCallError

NODE_PATH = object_path("/api/v1/nodes", NODE)
NO_LOCK_WAIT = LegacySettings(node_lock_retry_timeout=timedelta(0))
"""A Bind that meets a held lock answers at once (HAMi's behaviour), so the test can see it."""


async def hold_lock(client: KubeClient, holder: str) -> None:
    value = lock_value(NS, holder, datetime.now(UTC))
    await client.patch(NODE_PATH, {"metadata": {"annotations": {NODE_LOCK: value}}})


async def lock_on_node(client: KubeClient) -> str | None:
    node = await client.get(NODE_PATH)
    return (node["metadata"].get("annotations") or {}).get(NODE_LOCK)


async def test_bind_waits_for_a_claim_being_allocated_then_takes_a_dangling_lock(
    tmp_path: Path,
) -> None:
    async with mixed_cluster(tmp_path, mixed=True, legacy=NO_LOCK_WAIT) as (c, _, server):
        # A claim of another driver's class: the controller leaves it unallocated, as
        # it is while the controller writes its allocation under the lock.
        foreign = {"name": "gpu", "exactly": {"deviceClassName": "other.example.com"}}
        await c.add_claim("writing", foreign, namespace=NS)
        await hold_lock(c.client, "writing")
        pod = await create_pod(c.client, gpu_pod("legacy", NS, gpu=1, gpumem=1024))
        async with extender_client(server) as extender:
            assert (await extender.filter(pod, [{"metadata": {"name": NODE}}])).feasible == [NODE]
            with pytest.raises(ExtenderCallError, match=f"locked by {NS}/writing"):
                await extender.bind(pod, NODE)
            await c.client.delete(claim_path("writing"))
            await extender.bind(pod, NODE)
        assert f",{NS},legacy" in (await lock_on_node(c.client) or "")
        await AllocatorStandIn(c.client).allocate(NS, "legacy", NODE)


async def test_controller_does_not_write_under_a_legacy_pods_lock(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, _, _):
        await create_pod(c.client, gpu_pod("binding", NS, gpu=1, gpumem=1024))
        await hold_lock(c.client, "binding")
        await c.add_claim("small", request(**capacity(memory="1Gi")), namespace=NS)
        event = await c.wait_event("small", "NodeLockHeld")
        assert f"locked by {NS}/binding" in event["message"]
        claim = await c.client.get(claim_path("small"))
        assert not (claim.get("status") or {}).get("allocation")
        # The device plugin's Allocate releases the lock: the controller allocates now.
        await c.client.patch(NODE_PATH, {"metadata": {"annotations": {NODE_LOCK: None}}})
        (allocated,) = await c.wait_allocated("small", namespace=NS)
        assert node_of(allocated) == NODE

        def unlocked(store: dict[str, dict[str, Any]]) -> bool:
            annotations = (store.get(NODE) or {}).get("metadata", {}).get("annotations") or {}
            return NODE_LOCK not in annotations

        async with asyncio.timeout(WAIT_S):
            await c.nodes.wait_for(unlocked)
