"""Priority order (reference kubernetes-dra.md §10): pending pods are decided highest
`spec.priority` first, then oldest, as kube-scheduler's queue does, and a pod's retry
backoff never lets a lower-priority pod take the capacity it waits for. Against the API
emulator with the real controller, on one GPU that one pod fills."""

from __future__ import annotations

from pathlib import Path

from controller_cluster import (
    FAST,
    NAMESPACE,
    Cluster,
    capacity,
    cluster,
    controller,
    request,
)

from controller.settings import ControllerSettings

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
WHOLE = request(**capacity(memory="80Gi"))
HIGH = "high-priority"
LOW = "low-priority"
ROUNDS = 3
LOW_PODS = 19
LONG_BACKOFF = ControllerSettings(retry_initial_s=3600.0, retry_max_s=3600.0)
"""A refused pod is not retried by its backoff within any test's time."""


async def add_classes(c: Cluster) -> None:
    """The high class never preempts: the order is under test here, not preemption
    (test_controller_preemption_flow.py)."""
    await c.add_priority_class(HIGH, 1000, preemption_policy="Never")
    await c.add_priority_class(LOW, 0)


def allocated(c: Cluster) -> list[str]:
    """The pods (named like their claims) whose claims are allocated, by name."""
    return sorted(
        key.removeprefix(f"{NAMESPACE}/").removesuffix("-claim")
        for key, claim in c.claims.store.items()
        if (claim.get("status") or {}).get("allocation")
    )


async def test_a_freed_slot_goes_to_the_high_priority_pod_every_time(tmp_path: Path) -> None:
    """19 older low-priority pods and one high-priority pod wait; each round the pod
    holding the GPU is deleted and the slot goes to the round's high-priority pod."""
    holders = []
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await add_classes(c)
        async with controller(c.client, FAST):
            await c.add_pod_with_claim("holder", WHOLE)
            await c.wait_allocated("holder-claim")
            holder = "holder"
            for i in range(LOW_PODS):
                await c.add_pod_with_claim(f"low-{i}", WHOLE, priorityClassName=LOW)
            for i in range(LOW_PODS):
                await c.wait_event(f"low-{i}", "FilteringFailed")
            for round_ in range(ROUNDS):
                high = f"high-{round_}"
                await c.add_pod_with_claim(high, WHOLE, priorityClassName=HIGH)
                await c.wait_event(high, "FilteringFailed")
                await c.client.delete(f"{PODS}/{holder}", grace_period_seconds=0)
                await c.wait_claims(
                    lambda store, gone=holder: (
                        not store[f"{NAMESPACE}/{gone}-claim"]["status"].get("allocation")
                        and len(allocated(c)) == 1
                    )
                )
                [holder] = allocated(c)
                holders.append(holder)
    assert holders == [f"high-{i}" for i in range(ROUNDS)]


async def test_a_high_priority_pod_in_backoff_is_not_overtaken(tmp_path: Path) -> None:
    """The high-priority pod was refused and backs off for an hour; when the GPU frees,
    a low-priority pod created then is due at once, yet the high-priority pod gets the GPU."""
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await add_classes(c)
        async with controller(c.client, LONG_BACKOFF):
            await c.add_pod_with_claim("holder", WHOLE)
            await c.wait_allocated("holder-claim")
            await c.add_pod_with_claim("high", WHOLE, priorityClassName=HIGH)
            await c.wait_event("high", "FilteringFailed")
            await c.client.delete(f"{PODS}/holder", grace_period_seconds=0)
            await c.wait_claims(
                lambda store: not store[f"{NAMESPACE}/holder-claim"]["status"].get("allocation")
            )
            await c.add_pod_with_claim("low", WHOLE, priorityClassName=LOW)
            await c.wait_allocated("high-claim")
            await c.wait_event("low", "FilteringFailed")
    assert allocated(c) == ["high"]
