"""The allocation gate (controller/allocation_gate.py): the controller allocates and
reserves the claims of a pod held only by its own gate, then removes that gate, so
kube-scheduler meets the pod once, ready to bind. It never touches a pod while another
gate (Kueue's) holds it, and never removes any gate but its own. Against the API
emulator with the real controller and the kube-scheduler stand-in."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller_cluster import (
    NAMESPACE,
    WAIT_S,
    Cluster,
    capacity,
    cluster,
    controller,
    request,
    scheduler,
)

from controller.allocation_gate import ALLOCATION_GATE
from dra_driver.kube.rest import JSON_PATCH

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
WHOLE = request(**capacity(memory="80Gi"))
KUEUE = "kueue.x-k8s.io/admission"


def gates(c: Cluster, pod: str) -> list[str]:
    spec = c.pods.store[f"{NAMESPACE}/{pod}"]["spec"]
    return [g["name"] for g in spec.get("schedulingGates") or []]


async def wait_ungated(c: Cluster, pod: str) -> None:
    async with asyncio.timeout(WAIT_S):
        await c.pods.wait_for(
            lambda store: not store[f"{NAMESPACE}/{pod}"]["spec"].get("schedulingGates")
        )


async def stored_claim(c: Cluster, name: str) -> Mapping[str, Any]:
    return await c.client.get(
        f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims/{name}"
    )


def reserved_names(claim: Mapping[str, Any]) -> list[str]:
    return [r["name"] for r in claim["status"].get("reservedFor") or []]


async def test_the_controller_allocates_a_pod_held_by_its_gate_then_removes_the_gate(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_pod_with_claim("job", WHOLE, schedulingGates=[{"name": ALLOCATION_GATE}])
        async with controller(c.client):
            await wait_ungated(c, "job")
            claim = await stored_claim(c, "job-claim")
            async with scheduler(c, tmp_path):
                node = await c.wait_bound("job")
        pod = c.pods.store[f"{NAMESPACE}/job"]
    assert claim["status"]["allocation"] and reserved_names(claim) == ["job"]
    assert node == "node-a"
    scheduled = [x for x in pod["status"]["conditions"] if x["type"] == "PodScheduled"]
    assert [x["status"] for x in scheduled] == ["True"]


async def test_a_pod_kueue_holds_too_is_left_alone_until_kueues_gate_goes(tmp_path: Path) -> None:
    """Ours is the first gate and Kueue's the second, so a removal by index alone would
    have taken Kueue's: the controller removes nothing while Kueue's is there, and the
    pod holds no share (the ungated pod gets the only GPU)."""
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        both = [{"name": ALLOCATION_GATE}, {"name": KUEUE}]
        await c.add_pod_with_claim("queued", WHOLE, schedulingGates=both)
        async with controller(c.client):
            await c.add_pod_with_claim("running", WHOLE)
            await c.wait_allocated("running-claim")
            held = gates(c, "queued"), (await stored_claim(c, "queued-claim")).get("status") or {}
            await c.client.patch(
                f"{PODS}/queued",
                [
                    {"op": "test", "path": "/spec/schedulingGates/1", "value": {"name": KUEUE}},
                    {"op": "remove", "path": "/spec/schedulingGates/1"},
                ],
                JSON_PATCH,
            )
            await c.wait_event("queued", "FilteringFailed")
            still_held = gates(c, "queued")
            await c.client.delete(f"{PODS}/running", grace_period_seconds=0)
            await wait_ungated(c, "queued")
            claim = await stored_claim(c, "queued-claim")
    assert held == ([ALLOCATION_GATE, KUEUE], {})
    assert still_held == [ALLOCATION_GATE]
    assert claim["status"]["allocation"] and reserved_names(claim) == ["queued"]


async def test_a_gate_whose_removal_failed_is_removed_once_the_claims_are_reserved(
    tmp_path: Path,
) -> None:
    """The claims are written and reserved, then the removal meets a 500: the retry finds
    nothing to allocate or reserve, and must still take the gate off (as after a restart
    between the writes and the removal)."""
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        c.server.faults.fail(f"{PODS}/job$", verb="PATCH", status=500, times=1)
        await c.add_pod_with_claim("job", WHOLE, schedulingGates=[{"name": ALLOCATION_GATE}])
        async with controller(c.client):
            await wait_ungated(c, "job")
        claim = await stored_claim(c, "job-claim")
    assert c.server.faults.count(f"{PODS}/job$", verb="PATCH") == 2
    assert reserved_names(claim) == ["job"]
