"""The controller's one write per claim: the allocation with the pod's reservation, so
kube-scheduler only binds (reference kubernetes-dra.md §2, "Checked later"). Against the API
emulator (its kube-controller-manager rules, its per-client write counts) with the real
controller; a test client plays kube-scheduler where its verdicts must be exact."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller_cluster import (
    FAST,
    NAMESPACE,
    Cluster,
    capacity,
    cluster,
    controller,
    node_of,
    request,
    results,
    scheduler,
)

from controller.claim_writes import ClaimWriter, WriteSettings, pod_reservation
from dra_driver.kube.rest import MERGE_PATCH
from dra_driver.objects.api_time import api_time
from dra_driver.objects.resource_api import DELETE_PROTECTION

CONTROLLER = "vgpu-dra-driver/controller"
CLAIMS = f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
WHOLE = request(**capacity(memory="80Gi"))

State = tuple[str | None, tuple[str, ...]]
"""A claim as (allocated node or None, names of the pods in reservedFor)."""


def state(claim: Mapping[str, Any]) -> State:
    status = claim.get("status") or {}
    node = node_of(claim) if status.get("allocation") else None
    return node, tuple(r["name"] for r in status.get("reservedFor") or [])


def record_states(c: Cluster, name: str) -> list[State]:
    """Every distinct state the watch shows the claim in, in order."""
    history: list[State] = []

    def record(kind: str, claim: dict[str, Any]) -> None:
        if claim["metadata"]["name"] == name and kind != "DELETED":
            now = state(claim)
            if not history or history[-1] != now:
                history.append(now)

    c.claims.handlers.append(record)
    return history


def claim_writes(c: Cluster, client: str) -> dict[str, int]:
    """The client's writes to claims, by resource[/subresource]."""
    counts = c.server.audit.write_counts().get(client, {})
    return {k: n for k, n in counts.items() if k.startswith("resourceclaims")}


def kube_scheduler_claim_writes(c: Cluster) -> int:
    counts = c.server.audit.write_counts().get("kube-scheduler", {})
    return sum(n for k, n in counts.items() if k.startswith("resourceclaims"))


async def unschedulable(c: Cluster, pod: str, message: str) -> None:
    """What kube-scheduler writes when the pod cannot go anywhere it tried."""
    condition = {
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastTransitionTime": api_time(),
    }
    await c.client.patch(
        f"{PODS}/{pod}/status", {"status": {"conditions": [condition]}}, MERGE_PATCH
    )


async def post_filter(c: Cluster, claim: str) -> None:
    """kube-scheduler's PostFilter: allocation, reservedFor and devices cleared in one write."""
    stored = await c.client.get(f"{CLAIMS}/{claim}")
    status = {
        k: v
        for k, v in stored["status"].items()
        if k not in ("allocation", "reservedFor", "devices")
    }
    await c.client.replace(f"{CLAIMS}/{claim}/status", {**stored, "status": status})


def warnings_on(c: Cluster, name: str) -> list[str]:
    return [
        str(e.get("reason"))
        for e in c.events.store.values()
        if e["involvedObject"].get("name") == name and e.get("type") == "Warning"
    ]


async def test_the_allocation_and_the_pods_reservation_are_one_write(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        history = record_states(c, "one-claim")
        pod = await c.add_pod_with_claim("one", request(**capacity(memory="10Gi")))
        async with controller(c.client):
            [claim] = await c.wait_allocated("one-claim")
            written = claim_writes(c, CONTROLLER)
            async with scheduler(c, tmp_path):
                bound = await c.wait_bound("one")
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "one", "uid": pod["metadata"]["uid"]}
    ]
    assert DELETE_PROTECTION not in (claim["metadata"].get("finalizers") or [])
    assert written == {"resourceclaims/status": 1}
    assert history == [(None, ()), ("node-a", ("one",))]
    assert bound == "node-a"
    assert kube_scheduler_claim_writes(c) == 0
    assert state(c.claim("one-claim")) == ("node-a", ("one",))


async def test_a_pod_kube_scheduler_refused_is_moved_with_its_reservation(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", 1)
        history = record_states(c, "mover-claim")
        await c.add_pod_with_claim("mover", WHOLE)
        async with controller(c.client):
            [first] = await c.wait_allocated("mover-claim")
            chosen = node_of(first)
            other = "node-b" if chosen == "node-a" else "node-a"
            await unschedulable(
                c, "mover", f"0/2 nodes are available: 1 Insufficient cpu on {chosen}"
            )
            event = await c.wait_event("mover", "AllocationMoved")
            await c.wait_claims(lambda store: state(store[f"{NAMESPACE}/mover-claim"])[0] == other)
            written = claim_writes(c, CONTROLLER)
    assert history == [(None, ()), (chosen, ("mover",)), (None, ()), (other, ("mover",))]
    assert written == {"resourceclaims/status": 3}
    assert event["type"] == "Warning" and f"allocated on {chosen}" in event["message"]
    assert "devices" not in c.claim("mover-claim")["status"]


async def test_a_claim_kube_schedulers_post_filter_cleared_is_allocated_again(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", 1)
        history = record_states(c, "again-claim")
        await c.add_pod_with_claim("again", WHOLE)
        async with controller(c.client):
            [first] = await c.wait_allocated("again-claim")
            chosen = node_of(first)
            other = "node-b" if chosen == "node-a" else "node-a"
            await post_filter(c, "again-claim")
            await unschedulable(
                c, "again", f"0/2 nodes are available: 1 node(s) had untolerated taint on {chosen}"
            )
            await c.wait_claims(lambda store: state(store[f"{NAMESPACE}/again-claim"])[0] == other)
            event = await c.wait_event("again", "AllocationTakenBack")
            async with scheduler(c, tmp_path):
                bound = await c.wait_bound("again")
            warnings = warnings_on(c, "again")
    assert history == [(None, ()), (chosen, ("again",)), (None, ()), (other, ("again",))]
    assert bound == other
    assert event["type"] == "Normal"
    assert f"on {chosen}" in event["message"] and "allocated again" in event["message"]
    assert warnings == []


async def test_a_shared_claims_second_pod_is_reserved_by_the_controller(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", 1)
        await c.add_claim("shared", request(**capacity(memory="10Gi")))
        history = record_states(c, "shared")
        async with controller(c.client):
            await c.add_pod("first", ["shared"])
            [allocated] = await c.wait_allocated("shared")
            await c.add_pod("second", ["shared"])
            await c.wait_claims(lambda store: len(state(store[f"{NAMESPACE}/shared"])[1]) == 2)
            written = claim_writes(c, CONTROLLER)
            async with scheduler(c, tmp_path):
                nodes = {await c.wait_bound("first"), await c.wait_bound("second")}
    node = node_of(allocated)
    assert history == [(None, ()), (node, ("first",)), (node, ("first", "second"))]
    assert written == {"resourceclaims/status": 2}
    assert results(c.claim("shared")) == results(allocated)
    assert nodes == {node}
    assert kube_scheduler_claim_writes(c) == 0


async def test_a_reservation_kube_scheduler_wrote_meanwhile_is_success(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_claim("shared", request(**capacity(memory="10Gi")))
        await c.add_pod("first", ["shared"])
        async with controller(c.client):
            [allocated] = await c.wait_allocated("shared")
        second = await c.add_pod("second", ["shared"])
        reserved = {
            **allocated,
            "status": {
                **allocated["status"],
                "reservedFor": [*allocated["status"]["reservedFor"], pod_reservation(second)],
            },
        }
        await c.client.replace(f"{CLAIMS}/shared/status", reserved)
        writer = ClaimWriter(c.client, WriteSettings(attempts=2))
        stored = await writer.reserve(allocated, pod_reservation(second))
        refused = c.server.audit.refused_counts()
    assert stored is not None
    assert [r["name"] for r in stored["status"]["reservedFor"]] == ["first", "second"]
    assert any(counts.get("resourceclaims/status") == 1 for counts in refused.values())


async def test_a_deleted_pods_allocation_is_cleared_and_its_capacity_reused(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        history = record_states(c, "batch-claim")
        async with controller(c.client), scheduler(c, tmp_path):
            await c.add_pod_with_claim("batch", WHOLE)
            await c.wait_bound("batch")
            await c.add_pod_with_claim("next", WHOLE)
            await c.wait_event("next", "FilteringFailed")
            await c.client.delete(f"{PODS}/batch", grace_period_seconds=0)
            [after] = await c.wait_allocated("next-claim")
            bound = await c.wait_bound("next")
            # The capacity counts as freed once the pod is gone (ClusterView.freed), so
            # the next pod may be allocated before the clearing write lands: wait for it.
            await c.wait_claims(
                lambda store: (
                    not (store[f"{NAMESPACE}/batch-claim"].get("status") or {}).get("allocation")
                )
            )
    # kube-controller-manager drops the gone pod's reservation; the controller clears the rest.
    assert history == [(None, ()), ("node-a", ("batch",)), ("node-a", ()), (None, ())]
    assert results(after)[0]["device"] == "gpu-0" and bound == "node-a"


async def test_a_deleted_pod_is_remembered_only_while_a_claim_still_reserves_it(
    tmp_path: Path,
) -> None:
    """The controller keeps a deleted pod's uid to read its reservation as stale; once
    kube-controller-manager drops the reservation there is nothing left to keep, so
    rounds of pods come and go without the table growing."""
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        async with controller(c.client) as running, scheduler(c, tmp_path):
            for name in ("first", "second"):
                await c.add_pod_with_claim(name, WHOLE)
                await c.wait_bound(name)
            await c.client.delete(f"{PODS}/first", grace_period_seconds=0)
            await c.client.delete(f"{PODS}/second", grace_period_seconds=0)
            await running.view.claims.wait_for(
                lambda store: all(
                    not (store[f"{NAMESPACE}/{name}-claim"].get("status") or {}).get("reservedFor")
                    for name in ("first", "second")
                )
            )
            remembered = dict(running.view._deleted_pods)
    assert remembered == {}


async def test_a_claim_deleted_while_its_pod_runs_keeps_its_capacity_until_it_ends(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        async with controller(c.client, FAST), scheduler(c, tmp_path):
            await c.add_pod_with_claim("runner", WHOLE)
            await c.wait_bound("runner")
            await c.client.delete(f"{CLAIMS}/runner-claim")
            await c.wait_claims(lambda store: f"{NAMESPACE}/runner-claim" not in store)
            await c.add_pod_with_claim("waiter", WHOLE)
            refused = await c.wait_event("waiter", "FilteringFailed")
            await c.client.patch(
                f"{PODS}/runner/status", {"status": {"phase": "Succeeded"}}, MERGE_PATCH
            )
            [waiter] = await c.wait_allocated("waiter-claim")
    assert "CardInsufficientMemory" in refused["message"]
    assert results(waiter)[0]["device"] == "gpu-0"


async def test_post_filter_clearing_one_of_two_claims_moves_both(tmp_path: Path) -> None:
    half = request(**capacity(memory="40Gi"))
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", 1)
        await c.add_claim("duo-a", half)
        await c.add_claim("duo-b", half)
        history = record_states(c, "duo-b")
        await c.add_pod("duo", ["duo-a", "duo-b"])
        async with controller(c.client):
            first, _ = await c.wait_allocated("duo-a", "duo-b")
            chosen = node_of(first)
            other = "node-b" if chosen == "node-a" else "node-a"
            await post_filter(c, "duo-a")
            await c.wait_claims(
                lambda store: all(
                    state(store[f"{NAMESPACE}/{n}"])[0] == other for n in ("duo-a", "duo-b")
                )
            )
            warnings = warnings_on(c, "duo")
    assert history == [(None, ()), (chosen, ("duo",)), (None, ()), (other, ("duo",))]
    assert warnings == []
