"""The controller's life cycle against the emulator and the kube-scheduler stand-in: no-fit
events and retries, quota, a pod moved off a node it cannot go to, capacity returned by
finished and deleted pods, shared claims."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Any

from controller_cluster import (
    FAST,
    NAMESPACE,
    Cluster,
    capacity,
    cluster,
    controller,
    gpu,
    node_of,
    request,
    results,
    scheduler,
    vgpu_config,
)
from prometheus_client import CollectorRegistry

from dra_driver.kube.rest import MERGE_PATCH

POD_STATUS = f"/api/v1/namespaces/{NAMESPACE}/pods/{{}}/status"


def allocated_on(c: Cluster, claim: str, node: str) -> bool:
    stored = c.claims.store[f"{NAMESPACE}/{claim}"]
    return bool(stored["status"].get("allocation")) and node_of(stored) == node


def reserved(c: Cluster, claim: str) -> bool:
    return bool(c.claims.store[f"{NAMESPACE}/{claim}"]["status"].get("reservedFor"))


async def test_no_fit_reports_hami_reasons_then_fits_when_a_node_arrives(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        await c.add_claim("huge-claim", config=[vgpu_config(memory="100Gi")])
        await c.add_pod("huge")
        async with controller(c.client, registry=registry):
            on_pod = await c.wait_event("huge", "FilteringFailed")
            on_claim = await c.wait_event("huge-claim", "FilteringFailed")
            await c.add_node("node-b", [gpu("node-b", 0, memory_gib=141, product="NVIDIA H200")])
            [claim] = await c.wait_allocated("huge-claim")
    expected = "node-a: 2/2 CardInsufficientMemory"
    assert expected in on_pod["message"] and expected in on_claim["message"]
    assert on_pod["message"].startswith("no available node, 1 nodes do not meet")
    assert on_pod["type"] == "Warning"
    assert node_of(claim) == "node-b"
    failures = registry.get_sample_value(
        "vgpu_controller_failures_total", {"reason": "FilteringFailed"}
    )
    assert failures is not None and 1 <= failures <= 6


async def test_a_namespace_quota_denies_what_would_exceed_it(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu", "namespace": NAMESPACE},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "30000"}},
        }
        await c.client.create(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas", quota)
        await c.add_pod_with_claim("within", request(**capacity(memory="20Gi")))
        async with controller(c.client):
            await c.wait_allocated("within-claim")
            await c.add_pod_with_claim("beyond", request(**capacity(memory="20Gi")))
            event = await c.wait_event("beyond", "FilteringFailed")
    assert "ResourceQuotaNotFit" in event["message"]
    assert not c.claim("beyond-claim")["status"].get("allocation")


async def test_scoring_weights_change_the_card_binpack_picks(tmp_path: Path) -> None:
    binpack = {"hami.io/gpu-scheduler-policy": "binpack"}
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        await c.add_claim(
            "memory-heavy-claim",
            request(),
            config=[vgpu_config(memory="40Gi", useUUIDs=["GPU-node-a-0"])],
        )
        await c.add_pod("memory-heavy", ["memory-heavy-claim"])
        await c.add_claim(
            "core-heavy-claim",
            request(),
            config=[vgpu_config(memory="1Gi", cores=50, useUUIDs=["GPU-node-a-1"])],
        )
        await c.add_pod("core-heavy", ["core-heavy-claim"])
        async with controller(c.client):
            await c.wait_allocated("memory-heavy-claim", "core-heavy-claim")
            await c.add_pod_with_claim(
                "no-memory",
                request(**capacity(memory="1Gi")),
                annotations={**binpack, "hami.io/device-scoring-weights": "slot=1,core=1,memory=0"},
            )
            [no_memory] = await c.wait_allocated("no-memory-claim")
            await c.add_pod_with_claim(
                "no-core",
                request(**capacity(memory="1Gi")),
                annotations={**binpack, "hami.io/device-scoring-weights": "slot=1,core=0,memory=1"},
            )
            [no_core] = await c.wait_allocated("no-core-claim")
    assert results(no_memory)[0]["device"] == "gpu-1"
    assert results(no_core)[0]["device"] == "gpu-0"


async def test_a_pod_that_cannot_go_to_the_chosen_node_is_moved(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        async with controller(c.client):
            await c.add_pod_with_claim("mover", request(**capacity(memory="10Gi")))
            [first] = await c.wait_allocated("mover-claim")
            chosen = node_of(first)
            await c.add_node("node-b", 1)
            await c.client.patch(f"/api/v1/nodes/{chosen}", {"spec": {"unschedulable": True}})
            async with scheduler(c, tmp_path):
                # The pod fits no node with its claim on node-a: kube-scheduler's PostFilter
                # takes the allocation back, the controller allocates again elsewhere.
                event = await c.wait_event("mover", "AllocationTakenBack")
                bound = await c.wait_bound("mover")
    claim = c.claim("mover-claim")
    assert chosen == "node-a" and node_of(claim) == "node-b" and bound == "node-b"
    assert event["type"] == "Normal" and "on node-a" in event["message"]
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["mover"]


async def test_finished_and_deleted_pods_return_their_capacity(tmp_path: Path) -> None:
    whole = request(**capacity(memory="80Gi"))
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        async with controller(c.client), scheduler(c, tmp_path):
            await c.add_pod_with_claim("batch", whole)
            await c.wait_allocated("batch-claim")
            await c.wait_claims(lambda store: reserved(c, "batch-claim"))
            await c.add_pod_with_claim("next", whole)
            await c.wait_event("next", "FilteringFailed")
            await c.client.patch(
                POD_STATUS.format("batch"), {"status": {"phase": "Succeeded"}}, MERGE_PATCH
            )
            await c.wait_allocated("next-claim")
            await c.wait_claims(lambda store: reserved(c, "next-claim"))
            await c.add_pod_with_claim("third", whole)
            await c.wait_event("third", "FilteringFailed")
            await c.client.delete(
                f"/api/v1/namespaces/{NAMESPACE}/pods/next", grace_period_seconds=0
            )
            [third] = await c.wait_allocated("third-claim")
    assert results(third)[0]["device"] == "gpu-0"


async def test_an_allocation_of_a_pod_deleted_while_pending_is_cleared(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        async with controller(c.client):
            await c.add_pod_with_claim("gone", request(**capacity(memory="80Gi")))
            await c.wait_allocated("gone-claim")
            await c.client.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/gone")
            await c.wait_claims(
                lambda store: not store[f"{NAMESPACE}/gone-claim"]["status"].get("allocation")
            )
            await c.add_pod_with_claim("after", request(**capacity(memory="80Gi")))
            await c.wait_allocated("after-claim")
    assert "resource.kubernetes.io/delete-protection" not in (
        c.claim("gone-claim")["metadata"].get("finalizers") or []
    )


async def test_a_shared_claim_serves_two_pods_on_one_node(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", 1)
        await c.add_claim("shared", request(**capacity(memory="10Gi")))
        await c.add_claim("own", request(**capacity(memory="10Gi")))
        async with controller(c.client), scheduler(c, tmp_path):
            await c.add_pod("first", ["shared"])
            [shared] = await c.wait_allocated("shared")
            await c.add_pod("second", ["shared", "own"])
            [own] = await c.wait_allocated("own")
            await c.wait_claims(
                lambda store: (
                    len(store[f"{NAMESPACE}/shared"]["status"].get("reservedFor") or []) == 2
                )
            )
    assert node_of(own) == node_of(shared)
    assert len(results(c.claim("shared"))) == 1


async def test_a_failed_write_undoes_the_pods_other_claims_then_retries(tmp_path: Path) -> None:
    history: list[bool] = []

    def record(kind: str, claim: dict[str, Any]) -> None:
        if claim["metadata"]["name"] == "duo-a":
            allocated = bool((claim.get("status") or {}).get("allocation"))
            if not history or history[-1] != allocated:
                history.append(allocated)

    async with cluster(tmp_path) as c:
        c.claims.handlers.append(record)
        await c.add_class()
        await c.add_node("node-a", 2)
        for name in ("duo-a", "duo-b"):
            await c.add_claim(name, request(**capacity(memory="10Gi")))
        rule = c.server.faults.fail(
            "/resourceclaims/duo-b/status", verb="PUT", status=500, times=FAST.write_attempts
        )
        await c.add_pod("duo", ["duo-a", "duo-b"])
        async with controller(c.client):
            first, second = await c.wait_allocated("duo-a", "duo-b")
    assert rule.remaining == 0
    assert history == [False, True, False, True]
    assert node_of(first) == node_of(second)


async def test_standalone_claims_are_allocated_only_when_configured(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_claim("alone", request(**capacity(memory="10Gi")))
        async with controller(c.client):
            await c.add_pod_with_claim("needed", request(**capacity(memory="10Gi")))
            await c.wait_allocated("needed-claim")
            ignored = c.claim("alone")["status"].get("allocation")
        async with controller(c.client, replace(FAST, allocate_standalone_claims=True)):
            [alone] = await c.wait_allocated("alone")
    assert ignored is None
    assert node_of(alone) == "node-a"
    assert not alone["status"].get("reservedFor")


async def test_a_selector_that_fails_on_a_device_is_reported_never_matched(
    tmp_path: Path,
) -> None:
    broken = {"cel": {"expression": "device.attributes['vgpu.hami.io'].nosuch == 'x'"}}
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_pod_with_claim("odd", request(selectors=[broken]))
        async with controller(c.client):
            event = await c.wait_event("odd-claim", "InvalidParameters")
    assert "nosuch" in event["message"] and "cel.expression" in event["message"]
    assert not c.claim("odd-claim")["status"].get("allocation")


async def test_claims_of_a_pending_pod_leave_a_node_that_is_deleted(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        async with controller(c.client):
            await c.add_pod_with_claim("stranded", request(**capacity(memory="10Gi")))
            [first] = await c.wait_allocated("stranded-claim")
            await c.add_node("node-b", 1)
            await c.client.delete("/api/v1/nodes/node-a")
            event = await c.wait_event("stranded", "AllocationMoved")
            await c.wait_claims(lambda store: allocated_on(c, "stranded-claim", "node-b"))
    assert node_of(first) == "node-a"
    assert "node node-a no longer exists" in event["message"]
