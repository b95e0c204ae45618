"""The controller gives the memory a burst took back to the system once the burst's
pods are gone and its view has been quiet for a tick, not while pods keep coming."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

from controller_cluster import FAST, NAMESPACE, WAIT_S, capacity, cluster, controller, request
from prometheus_client import CollectorRegistry

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
NAMES = ("first", "second", "third")


async def test_freed_memory_is_given_back_once_a_bursts_pods_are_gone(tmp_path: Path) -> None:
    releases: list[int] = []
    released = asyncio.Event()
    registry = CollectorRegistry()

    def release() -> bool:
        releases.append(len(running.view.pods.store))
        released.set()
        return True

    settings = dataclasses.replace(FAST, release_after_freed_objects=len(NAMES))
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        async with controller(c.client, settings, registry, release) as running:
            for name in NAMES:
                await c.add_pod_with_claim(name, request(**capacity(memory="1Gi")))
            await c.wait_allocated(*(f"{name}-claim" for name in NAMES))
            assert releases == []
            for name in NAMES:
                await c.client.delete(f"{PODS}/{name}", grace_period_seconds=0)
            async with asyncio.timeout(WAIT_S):
                await released.wait()
            assert releases == [0]
            assert registry.get_sample_value("vgpu_controller_memory_releases_total") == 1
