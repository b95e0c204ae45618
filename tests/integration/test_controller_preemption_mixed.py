"""Preemption in mixed mode, the DRA side (issue 34 item 6): a legacy pod's HAMi hold on
the GPU is a share like a claim's, so a DRA pod of higher priority preempts it under
the same rules, and a legacy pod of equal or higher priority is never a victim.

One mixed node (mixed_fixtures.py): one 16 GiB GPU with 2 shares, served to legacy
pods through the real extender and to claims through the real controller. The legacy
pod is placed as kube-scheduler and the device plugin would (filter, bind, Allocate),
and the test finishes its deletion as its kubelet would."""

from __future__ import annotations

import asyncio
from pathlib import Path

from controller_cluster import WAIT_S, Cluster, capacity, request
from legacy_fixtures import AllocatorStandIn, create_pod, extender_client, gpu_pod, pods_path
from mixed_fixtures import NODE, NS, mixed_cluster

from controller.controller import Controller
from controller.legacy.server import LegacyServer
from controller.preemptor import DISRUPTION_REASON
from dra_driver.kube.rest import object_path

HIGH = "high-priority"
LEGACY_MIB = 12 * 1024
"""Leaves 4 GiB of the 16: the DRA pod's 10 GiB fits only once the legacy pod goes."""


async def place_legacy_pod(
    c: Cluster, ctl: Controller, server: LegacyServer, name: str, priority_class: str | None
) -> None:
    """Filter, bind and Allocate a legacy pod; return once the controller charges it."""
    body = gpu_pod(name, NS, gpu=1, gpumem=LEGACY_MIB)
    if priority_class is not None:
        body["spec"]["priorityClassName"] = priority_class
    pod = await create_pod(c.client, body)
    async with extender_client(server) as extender:
        result = await extender.filter(pod, [{"metadata": {"name": NODE}}])
        assert result.feasible == [NODE], result
        await extender.bind(pod, NODE)
    await AllocatorStandIn(c.client).allocate(NS, name, NODE)
    async with asyncio.timeout(WAIT_S):
        await ctl.view.pods.wait_for(lambda _: f"{NS}/{name}" in ctl.view.legacy_holds)


def conditions(c: Cluster, name: str) -> list[dict[str, str]]:
    pod = c.pods.store.get(f"{NS}/{name}") or {}
    return list((pod.get("status") or {}).get("conditions") or [])


async def test_a_dra_pod_of_higher_priority_preempts_the_legacy_pod_on_its_gpu(
    tmp_path: Path,
) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, ctl, server):
        await c.add_priority_class(HIGH, 1000)
        await place_legacy_pod(c, ctl, server, "legacy-low", None)
        await c.add_pod_with_claim(
            "dra-high",
            request(**capacity(memory="10Gi")),
            namespace=NS,
            priorityClassName=HIGH,
        )
        preempting = await c.wait_event("dra-high", "Preempting")
        assert f"{NS}/legacy-low" in preempting["message"]
        assert (await c.wait_event("legacy-low", "Preempted"))["type"] == "Normal"
        assert [cond.get("reason") for cond in conditions(c, "legacy-low")].count(
            DISRUPTION_REASON
        ) == 1
        async with asyncio.timeout(WAIT_S):
            await c.pods.wait_for(
                lambda store: bool(store[f"{NS}/legacy-low"]["metadata"].get("deletionTimestamp"))
            )
        assert not c.claim("dra-high-claim", NS)["status"].get("allocation")
        await c.client.delete(object_path(pods_path(NS), "legacy-low"), grace_period_seconds=0)
        await c.wait_allocated("dra-high-claim", namespace=NS)
        assert c.pods.store[f"{NS}/dra-high"]["status"]["nominatedNodeName"] == NODE


async def test_a_legacy_pod_of_higher_priority_is_never_a_victim(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, ctl, server):
        await c.add_priority_class(HIGH, 1000)
        await place_legacy_pod(c, ctl, server, "legacy-high", HIGH)
        await c.add_pod_with_claim(
            "dra-low", request(**capacity(memory="10Gi")), namespace=NS, priorityClassName=HIGH
        )
        await c.wait_event("dra-low", "FilteringFailed")
        attempts = "vgpu_controller_preemption_attempts_total"
        registry = ctl.metrics.registry
        assert (registry.get_sample_value(attempts, {"result": "not_helpful"}) or 0) >= 1
        assert not registry.get_sample_value(attempts, {"result": "preempted"})
        assert all(cond.get("reason") != DISRUPTION_REASON for cond in conditions(c, "legacy-high"))
        assert not c.pods.store[f"{NS}/legacy-high"]["metadata"].get("deletionTimestamp")
