"""Preemption reads PodDisruptionBudgets as kube-scheduler does (reference
kubernetes-dra.md §10): among candidate nodes, the one whose victims violate
fewest budgets wins before any other rule. Two nodes, one 80 GiB GPU each, full
of four priority-0 pods of 20 GiB; node-a's pods started later, so without
budgets node-a wins (latest start time among the most important victims); a
budget with no disruption left covers node-a's pods, so node-b is chosen."""

from __future__ import annotations

from pathlib import Path

from controller_cluster import FAST, NAMESPACE, Cluster, capacity, cluster, controller, request

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
PDBS = f"/apis/policy/v1/namespaces/{NAMESPACE}/poddisruptionbudgets"
SHARE = request(**capacity(memory="20Gi"))
DOUBLE = request(**capacity(memory="40Gi"))
STARTED = {"node-a": "2026-01-01T10:00:00Z", "node-b": "2026-01-01T09:00:00Z"}


async def fill(c: Cluster, node: str) -> list[str]:
    """Four pods pinned to `node`, labelled with it, started at STARTED[node]."""
    names = [f"{node}-low-{i}" for i in range(4)]
    for name in names:
        await c.add_pod_with_claim(name, SHARE, nodeSelector={"kubernetes.io/hostname": node})
    await c.wait_allocated(*(f"{name}-claim" for name in names))
    for name in names:
        await c.client.patch(f"{PODS}/{name}", {"metadata": {"labels": {"on": node}}})
        await c.client.patch(f"{PODS}/{name}/status", {"status": {"startTime": STARTED[node]}})
    return names


async def test_the_node_whose_victims_violate_no_budget_is_chosen(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", 1)
        await c.add_priority_class("high", 1000)
        budget = {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": {"name": "protect-a", "namespace": NAMESPACE},
            "spec": {"minAvailable": 4, "selector": {"matchLabels": {"on": "node-a"}}},
        }
        await c.client.create(PDBS, budget)
        # What kube-controller-manager's disruption controller writes: 4 healthy, 4 desired.
        status = {"currentHealthy": 4, "desiredHealthy": 4, "expectedPods": 4}
        await c.client.patch(
            f"{PDBS}/protect-a/status", {"status": {**status, "disruptionsAllowed": 0}}
        )
        async with controller(c.client, FAST):
            on_a = await fill(c, "node-a")
            on_b = await fill(c, "node-b")
            await c.add_pod_with_claim("high", DOUBLE, priorityClassName="high")
            preempting = await c.wait_event("high", "Preempting")
            assert "node node-b" in preempting["message"]
            high = c.pods.store[f"{NAMESPACE}/high"]
            assert high["status"]["nominatedNodeName"] == "node-b"
            for name in on_a:
                assert not c.pods.store[f"{NAMESPACE}/{name}"]["metadata"].get("deletionTimestamp")
            await c.wait_allocated("high-claim")
            assert c.claim("high-claim")["status"]["allocation"]["nodeSelector"]
            assert sum(f"{NAMESPACE}/{n}" in preempting["message"] for n in on_b) == 2
