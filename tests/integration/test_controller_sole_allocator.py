"""Sole allocator: the kube-scheduler stand-in allocates other drivers' claims in parallel
from consumable capacity; the controller-allocated device taint keeps it off this driver's
devices (even for a class that selects them), so no device is ever over-committed, and it
still binds pods to the nodes the controller chose."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from controller_cluster import (
    DRIVER,
    NAMESPACE,
    capacity,
    cluster,
    controller,
    gpu,
    overcommitted,
    request,
    scheduler,
)

from kubeletplugin.publisher import SlicePublisher
from kubeletplugin.slices import SliceSettings

OTHER_DRIVER = "gpu.example.com"
OTHER_CLASS = "other.example.com"
GREEDY_CLASS = "greedy.example.com"
NODES = ("node-a", "node-b")
OURS, OTHERS, GREEDY = 12, 6, 2


def claim_of(class_name: str, memory: str) -> dict[str, Any]:
    return {"name": "gpu", "exactly": {"deviceClassName": class_name, **capacity(memory=memory)}}


def refused(store: dict[str, Any], name: str) -> bool:
    conditions = (store.get(f"{NAMESPACE}/{name}") or {}).get("status", {}).get("conditions") or []
    return any(c["type"] == "PodScheduled" and c["status"] == "False" for c in conditions)


async def test_kube_scheduler_never_allocates_the_controllers_devices(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_class(OTHER_CLASS, f"device.driver == '{OTHER_DRIVER}'")
        await c.add_class(GREEDY_CLASS, f"device.driver == '{DRIVER}'")
        for node in NODES:
            await c.add_node(node, 2, cpu="64")
            publisher = SlicePublisher(c.client, node, SliceSettings(driver=OTHER_DRIVER))
            await publisher.start()
            c.publishers.append(publisher)
            await publisher.publish([gpu(node, i) for i in range(2)])
        async with controller(c.client), scheduler(c, tmp_path, allocate=True):
            for i in range(OURS):
                await c.add_pod_with_claim(f"ours-{i}", request(**capacity(memory="20Gi")))
                if i < OTHERS:
                    await c.add_pod_with_claim(f"other-{i}", claim_of(OTHER_CLASS, "20Gi"))
                if i < GREEDY:
                    await c.add_pod_with_claim(f"greedy-{i}", claim_of(GREEDY_CLASS, "1Gi"))
            ours = [f"ours-{i}" for i in range(OURS)]
            others = [f"other-{i}" for i in range(OTHERS)]
            await c.wait_allocated(*(f"{name}-claim" for name in ours + others))
            bound = {name: await c.wait_bound(name) for name in ours + others}
            for i in range(GREEDY):
                await c.pods.wait_for(lambda store, i=i: refused(store, f"greedy-{i}"))
            slices = (await c.client.list("/apis/resource.k8s.io/v1/resourceslices"))["items"]
    claims = list(c.claims.store.values())

    def drivers(name: str) -> set[str]:
        return {
            r["driver"]
            for r in c.claim(f"{name}-claim")["status"]["allocation"]["devices"]["results"]
        }

    assert all(drivers(name) == {DRIVER} for name in ours)
    assert all(drivers(name) == {OTHER_DRIVER} for name in others)
    assert all(
        bound[name]
        == c.claim(f"{name}-claim")["status"]["allocation"]["devices"]["results"][0]["pool"]
        for name in ours
    )
    assert not any(c.claim(f"greedy-{i}-claim")["status"].get("allocation") for i in range(GREEDY))
    assert overcommitted(claims, slices) == []
