"""Preemption in DRA mode (reference kubernetes-dra.md §10), against the API emulator
with the real controller: one node, one 80 GiB GPU full of four priority-0 pods of
20 GiB each. Victims carry a finalizer so they stay terminating until the test lets
them go, which shows the capacity they free held for the preemptor meanwhile."""

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
    request,
    scheduler,
)
from prometheus_client import CollectorRegistry

from controller.preemptor import DISRUPTION_REASON, HELD_FOR_NOMINATED

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
HOLD = "example.com/hold"
"""A finalizer of the test's own: a deleted victim stays, terminating, until removed."""
SHARE = request(**capacity(memory="20Gi"))
DOUBLE = request(**capacity(memory="40Gi"))
HIGH = "high-priority"
LOWS = [f"low-{i}" for i in range(4)]


async def add_node(c: Cluster) -> None:
    await c.add_class()
    await c.add_node("node-a", 1)
    await c.add_priority_class(HIGH, 1000)


async def fill_the_gpu(c: Cluster) -> None:
    for name in LOWS:
        await c.add_pod_with_claim(name, SHARE)
        await c.client.patch(f"{PODS}/{name}", {"metadata": {"finalizers": [HOLD]}})
    await c.wait_allocated(*(f"{name}-claim" for name in LOWS))


def pod(c: Cluster, name: str) -> Mapping[str, Any]:
    return c.pods.store.get(f"{NAMESPACE}/{name}") or {}


def terminating(c: Cluster) -> list[str]:
    return sorted(
        name for name in LOWS if pod(c, name).get("metadata", {}).get("deletionTimestamp")
    )


def events(c: Cluster, reason: str) -> list[dict[str, Any]]:
    return [e for e in c.events.store.values() if e.get("reason") == reason]


def sample(registry: CollectorRegistry, name: str, **labels: str) -> float:
    return registry.get_sample_value(name, labels) or 0.0


async def release(c: Cluster, name: str) -> None:
    """Let a terminating victim go; wait until its claim's share is taken back."""
    await c.client.patch(f"{PODS}/{name}", {"metadata": {"finalizers": None}})
    await c.wait_claims(
        lambda store: not store[f"{NAMESPACE}/{name}-claim"]["status"].get("allocation")
    )


async def test_a_high_priority_pod_preempts_two_victims_and_gets_their_share(
    tmp_path: Path,
) -> None:
    """40 GiB needs two of the four 20 GiB victims; each gets the DisruptionTarget
    condition, is deleted and told; the preemptor is nominated, and the 20 GiB the
    first victim frees is held from a priority-0 pod created then; once the second
    victim is gone the preemptor is allocated."""
    registry = CollectorRegistry()
    async with cluster(tmp_path) as c:
        await add_node(c)
        async with controller(c.client, FAST, registry):
            await fill_the_gpu(c)
            created = await c.add_pod_with_claim("high", DOUBLE, priorityClassName=HIGH)
            preempting = await c.wait_event("high", "Preempting")
            await c.pods.wait_for(lambda store: len(terminating(c)) == 2)
            victims = terminating(c)
            assert pod(c, "high")["status"]["nominatedNodeName"] == "node-a"
            for name in victims:
                [condition] = [
                    condition
                    for condition in pod(c, name)["status"]["conditions"]
                    if condition["type"] == "DisruptionTarget"
                ]
                assert condition["status"] == "True"
                assert condition["reason"] == DISRUPTION_REASON
                assert f"pod {NAMESPACE}/high" in condition["message"]
                preempted = await c.wait_event(name, "Preempted")
                assert preempted["type"] == "Normal"
                assert preempted["message"] == (
                    f"Preempted by pod {created['metadata']['uid']} on node node-a"
                )
                assert f"{NAMESPACE}/{name}" in preempting["message"]
            first, second = victims
            await release(c, first)
            await c.add_pod_with_claim("late", SHARE)
            refused = await c.wait_event("late", "FilteringFailed")
            assert HELD_FOR_NOMINATED in refused["message"]
            assert not c.claim("high-claim")["status"].get("allocation")
            await release(c, second)
            await c.wait_allocated("high-claim")
            assert terminating(c) == []
            assert len(events(c, "Preempted")) == 2
            assert not c.claim("late-claim")["status"].get("allocation")
    attempts = "vgpu_controller_preemption_attempts_total"
    assert sample(registry, attempts, result="preempted") == 1
    assert sample(registry, "vgpu_controller_preemption_victims_total") == 2


async def test_preemption_policy_never_preempts_nothing(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with cluster(tmp_path) as c:
        await add_node(c)
        await c.add_priority_class("polite", 1000, preemption_policy="Never")
        async with controller(c.client, FAST, registry):
            await fill_the_gpu(c)
            await c.add_pod_with_claim("polite", DOUBLE, priorityClassName="polite")
            await c.wait_event("polite", "FilteringFailed")
            attempts = "vgpu_controller_preemption_attempts_total"
            assert sample(registry, attempts, result="not_eligible") >= 1
            assert sample(registry, attempts, result="preempted") == 0
            assert terminating(c) == []
            assert not pod(c, "polite")["status"].get("nominatedNodeName")


async def test_a_pod_too_big_for_any_gpu_preempts_nothing(tmp_path: Path) -> None:
    registry = CollectorRegistry()
    async with cluster(tmp_path) as c:
        await add_node(c)
        async with controller(c.client, FAST, registry):
            await fill_the_gpu(c)
            huge = request(**capacity(memory="100Gi"))
            await c.add_pod_with_claim("huge", huge, priorityClassName=HIGH)
            refused = await c.wait_event("huge", "FilteringFailed")
            attempts = "vgpu_controller_preemption_attempts_total"
            assert sample(registry, attempts, result="not_helpful") >= 1
            assert sample(registry, attempts, result="preempted") == 0
            assert terminating(c) == []
            assert not pod(c, "huge")["status"].get("nominatedNodeName")
            assert "Preempting" not in {e.get("reason") for e in c.events.store.values()}
            assert "memory" in refused["message"].lower()


async def test_a_node_short_of_cpu_preempts_only_the_holder_whose_cpu_it_needs(
    tmp_path: Path,
) -> None:
    """A node of 4 cpu: two priority-0 pods bound there take 2 cpu each and 20 GiB of
    the GPU each. The high-priority pod asks 2 cpu and 20 GiB: the GPU has room, the
    node has no cpu, so the node fails NodeResourcesFit as it stands; with one holder
    gone it fits, so exactly one is preempted and the pod lands there once it is."""
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1, cpu="4")
        await c.add_priority_class(HIGH, 1000)
        async with controller(c.client, FAST), scheduler(c, tmp_path):
            for name in LOWS[:2]:
                await c.add_pod_with_claim(name, SHARE, cpu="2")
                assert await c.wait_bound(name) == "node-a"
            await c.add_pod_with_claim("high", SHARE, cpu="2", priorityClassName=HIGH)
            preempting = await c.wait_event("high", "Preempting")
            await c.pods.wait_for(lambda store: len(terminating(c)) == 1)
            [victim] = terminating(c)
            assert f"{NAMESPACE}/{victim}" in preempting["message"]
            assert pod(c, "high")["status"]["nominatedNodeName"] == "node-a"
            await c.client.delete(f"{PODS}/{victim}", grace_period_seconds=0)
            assert await c.wait_bound("high") == "node-a"
            assert len(events(c, "Preempted")) == 1
