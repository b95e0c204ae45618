"""Scheduling gates (reference kubernetes-dra.md §10): a pod with any gate is not
scheduled, so the controller allocates and reserves nothing for it and its claims hold
no capacity until the last gate is gone; then it is decided like any other pod. Against
the API emulator with the real controller."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller_cluster import NAMESPACE, Cluster, capacity, cluster, controller, request

from dra_driver.kube.rest import MERGE_PATCH

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
WHOLE = request(**capacity(memory="80Gi"))
KUEUE_GATE = [{"name": "kueue.x-k8s.io/admission"}]


def allocation(c: Cluster, claim: str) -> Mapping[str, Any] | None:
    return (c.claim(claim).get("status") or {}).get("allocation")


def events_about(c: Cluster, *names: str) -> list[str]:
    return [
        str(e.get("reason"))
        for e in c.events.store.values()
        if e["involvedObject"].get("name") in names
    ]


async def remove_gates(c: Cluster, pod: str) -> None:
    await c.client.patch(f"{PODS}/{pod}", {"spec": {"schedulingGates": None}}, MERGE_PATCH)


async def test_a_gated_pod_gets_nothing_until_its_gate_is_removed(tmp_path: Path) -> None:
    """The gated pod is older and of higher priority, so the controller would decide it
    first: the younger ungated pod getting the only GPU shows the gated one took none."""
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        # Never: the gated pod must wait for the GPU, not preempt the ungated pod.
        await c.add_priority_class("high-priority", 1000, preemption_policy="Never")
        await c.add_pod_with_claim(
            "gated", WHOLE, priorityClassName="high-priority", schedulingGates=KUEUE_GATE
        )
        async with controller(c.client):
            await c.add_pod_with_claim("ungated", WHOLE)
            await c.wait_allocated("ungated-claim")
            gated_before = allocation(c, "gated-claim")
            events_before = events_about(c, "gated", "gated-claim")
            await remove_gates(c, "gated")
            await c.wait_event("gated", "FilteringFailed")
            await c.client.delete(f"{PODS}/ungated", grace_period_seconds=0)
            [claim] = await c.wait_allocated("gated-claim")
    assert gated_before is None and events_before == []
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["gated"]


async def test_a_gated_pod_keeps_no_allocation_alive(tmp_path: Path) -> None:
    """A shared claim whose only other user is gone is cleared although a gated pod names
    it: held for the gated pod, its share would be charged to a pod nobody schedules."""
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_claim("shared", WHOLE)
        async with controller(c.client):
            await c.add_pod("first", ["shared"])
            await c.wait_allocated("shared")
            await c.add_pod("second", ["shared"], schedulingGates=KUEUE_GATE)
            await c.client.delete(f"{PODS}/first", grace_period_seconds=0)
            await c.wait_claims(
                lambda store: not store[f"{NAMESPACE}/shared"]["status"].get("allocation")
            )
            await c.add_pod_with_claim("other", WHOLE)
            await c.wait_allocated("other-claim")
            await remove_gates(c, "second")
            await c.wait_event("second", "FilteringFailed")
            await c.client.delete(f"{PODS}/other", grace_period_seconds=0)
            [shared] = await c.wait_allocated("shared")
    assert [r["name"] for r in shared["status"]["reservedFor"]] == ["second"]
