"""MIG partitions allocated by the real controller against the API emulator.

The nodes' pools are published directly in the contract's shape (tests/mig_slices.py:
a counters-only slice, then partition devices consuming their placement's counters,
beside share devices of whole cards); the emulator validates them as v1.36 does and
stores the controller's allocations, which name a whole device and consume nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from controller_cluster import (
    CLASS,
    FAST,
    NAMESPACE,
    Cluster,
    capacity,
    cluster,
    controller,
    node_of,
    request,
    results,
)

from controller.controller import FILTERING_FAILED
from controller.settings import ControllerSettings
from dra_driver.objects.mig_devices import PARTITION_CLASS
from tests.mig_slices import partition_class, partition_request, pool_slices, profile_selector

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CLASSES = "/apis/resource.k8s.io/v1/deviceclasses"


async def publish(c: Cluster, node: str, **cards: Any) -> None:
    """The node, then its pool's slices, created with the client as a plugin would."""
    await c.add_node(node, None)
    for body in pool_slices(node, **cards):
        body["metadata"] = {"name": body["metadata"]["name"]}
        await c.client.create(SLICES, body)


async def classes(c: Cluster) -> None:
    await c.add_class()
    await c.client.create(CLASSES, partition_class())


def mig(profile: str, name: str = "mig") -> dict[str, Any]:
    return partition_request(name, profile_selector(profile))


def whole(result: dict[str, Any]) -> bool:
    return "shareID" not in result and "consumedCapacity" not in result


async def test_a_3g_partition_is_allocated_on_an_h100(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a")
        async with controller(c.client):
            await c.add_pod_with_claim("p", mig("3g.40gb"))
            [claim] = await c.wait_allocated("p-claim")
            [result] = results(claim)
            assert (result["device"], result["pool"], node_of(claim)) == (
                "gpu-0-mig-3g-40gb-at-4",
                "node-a",
                "node-a",
            )
            assert whole(result)


@pytest.mark.parametrize(
    ("gpu_policy", "second"),
    [("binpack", "gpu-0-mig-1g-10gb-at-5"), ("spread", "gpu-1-mig-1g-10gb-at-6")],
)
async def test_binpack_or_spread_over_two_cards(
    tmp_path: Path, gpu_policy: str, second: str
) -> None:
    settings = ControllerSettings(
        retry_initial_s=FAST.retry_initial_s, retry_max_s=FAST.retry_max_s, gpu_policy=gpu_policy
    )
    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a", mig_cards=(0, 1))
        async with controller(c.client, settings):
            await c.add_pod_with_claim("first", mig("1g.10gb"))
            [first] = await c.wait_allocated("first-claim")
            await c.add_pod_with_claim("second", mig("1g.10gb"))
            [again] = await c.wait_allocated("second-claim")
            assert results(first)[0]["device"] == "gpu-0-mig-1g-10gb-at-6"
            assert results(again)[0]["device"] == second


async def test_two_claims_for_the_last_4g_placement_never_both_get_it(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a")
        async with controller(c.client):
            await c.add_pod_with_claim("one", mig("4g.40gb"))
            await c.add_pod_with_claim("two", mig("4g.40gb"))
            await c.wait_claims(
                lambda store: any(
                    (store[f"{NAMESPACE}/{n}-claim"].get("status") or {}).get("allocation")
                    for n in ("one", "two")
                    if f"{NAMESPACE}/{n}-claim" in store
                )
            )
            winner = next(
                n
                for n in ("one", "two")
                if (c.claim(f"{n}-claim").get("status") or {}).get("allocation")
            )
            loser = "two" if winner == "one" else "one"
            event = await c.wait_event(loser, FILTERING_FAILED)
            assert "CardMigTopologyInfeasible" in event["message"]
            assert "no free placement of 4g.40gb" in event["message"]
            assert not (c.claim(f"{loser}-claim").get("status") or {}).get("allocation")
            assert results(c.claim(f"{winner}-claim"))[0]["device"] == "gpu-0-mig-4g-40gb-at-0"


async def test_a_profile_the_card_lacks_is_refused_naming_card_and_free(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a")
        async with controller(c.client):
            await c.add_pod_with_claim("big", mig("7g.80gb"))
            await c.wait_allocated("big-claim")
            await c.add_pod_with_claim("odd", mig("5g.60gb"))
            event = await c.wait_event("odd", FILTERING_FAILED)
            message = event["message"]
            assert "1/1 CardMigTopologyInfeasible" in message
            assert "card gpu-0 (GPU-node-a-0): no profile matches" in message
            assert "profile == '5g.60gb'" in message and "free: nothing" in message
            claim_event = await c.wait_event("odd-claim", FILTERING_FAILED)
            assert claim_event["message"] == message


async def test_first_available_share_or_partition_in_the_users_order(tmp_path: Path) -> None:
    def either(*order: str) -> dict[str, Any]:
        kinds = {"share": CLASS, "mig": PARTITION_CLASS}
        return {
            "name": "gpu",
            "firstAvailable": [
                {"name": kind, "deviceClassName": kinds[kind], **capacity(memory="9Gi")}
                for kind in order
            ],
        }

    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a", mig_cards=(1,), shared_cards=(0,))
        async with controller(c.client):
            await c.add_pod_with_claim("share-first", either("share", "mig"))
            await c.add_pod_with_claim("mig-first", either("mig", "share"))
            share_claim, mig_claim = await c.wait_allocated("share-first-claim", "mig-first-claim")
            [shared] = results(share_claim)
            assert (shared["request"], shared["device"]) == ("gpu/share", "gpu-0")
            assert shared["consumedCapacity"]["memory"] == "9Gi"
            [partition] = results(mig_claim)
            assert (partition["request"], partition["device"]) == (
                "gpu/mig",
                "gpu-1-mig-1g-10gb-at-6",
            )
            assert whole(partition)


async def test_a_shared_and_a_partitioned_card_each_serve_their_kind(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a", mig_cards=(1,), shared_cards=(0,))
        async with controller(c.client):
            await c.add_pod_with_claim(
                "both", request("share", **capacity(memory="20Gi")), mig("2g.20gb")
            )
            await c.add_pod_with_claim("shares", request("a", **capacity(memory="40Gi")))
            both, shares = await c.wait_allocated("both-claim", "shares-claim")
            by_request = {r["request"]: r for r in results(both)}
            assert by_request["share"]["device"] == "gpu-0"
            assert by_request["share"]["consumedCapacity"]["memory"] == "20Gi"
            assert by_request["mig"]["device"] == "gpu-1-mig-2g-20gb-at-0"
            assert whole(by_request["mig"])
            assert {r["device"] for r in results(shares)} == {"gpu-0"}


async def test_a_partition_counts_against_the_namespace_gpu_memory_quota(tmp_path: Path) -> None:
    """A namespace held to 30000 MiB of GPU memory: a 3g.40gb (40192 MiB) is refused with
    HAMi's quota reason, a 2g.20gb (20096 MiB) is allocated, and a second one refused."""
    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a")
        quota = {
            "apiVersion": "v1",
            "kind": "ResourceQuota",
            "metadata": {"name": "gpu", "namespace": NAMESPACE},
            "spec": {"hard": {"limits.nvidia.com/gpumem": "30000"}},
        }
        await c.client.create(f"/api/v1/namespaces/{NAMESPACE}/resourcequotas", quota)
        async with controller(c.client):
            await c.add_pod_with_claim("big", mig("3g.40gb"))
            event = await c.wait_event("big", FILTERING_FAILED)
            assert "1/1 ResourceQuotaNotFit" in event["message"]
            assert "namespace default has 30000 MiB of its NVIDIA quota left" in event["message"]
            await c.add_pod_with_claim("small", mig("2g.20gb"))
            [small] = await c.wait_allocated("small-claim")
            assert results(small)[0]["device"] == "gpu-0-mig-2g-20gb-at-0"
            await c.add_pod_with_claim("again", mig("2g.20gb"))
            event = await c.wait_event("again", FILTERING_FAILED)
            assert "ResourceQuotaNotFit" in event["message"]
            assert not (c.claim("big-claim").get("status") or {}).get("allocation")


async def test_a_high_priority_partition_pod_preempts_the_holder_in_its_way(
    tmp_path: Path,
) -> None:
    """The card holds two 3g.40gb: keep's at 4 (priority 500), low's at 0 (priority 0).
    A priority-1000 pod asking for a 3g.40gb preempts low only (keep given back first
    still leaves placement 0 free once low is gone), and gets placement 0 once low's
    claim is released; keep's partition is untouched."""
    async with cluster(tmp_path) as c:
        await classes(c)
        await publish(c, "node-a")
        await c.add_priority_class("mid", 500)
        await c.add_priority_class("high", 1000)
        async with controller(c.client):
            await c.add_pod_with_claim("keep", mig("3g.40gb"), priorityClassName="mid")
            [keep] = await c.wait_allocated("keep-claim")
            await c.add_pod_with_claim("low", mig("3g.40gb"))
            [low] = await c.wait_allocated("low-claim")
            assert results(keep)[0]["device"] == "gpu-0-mig-3g-40gb-at-4"
            assert results(low)[0]["device"] == "gpu-0-mig-3g-40gb-at-0"
            await c.add_pod_with_claim("high", mig("3g.40gb"), priorityClassName="high")
            preempting = await c.wait_event("high", "Preempting")
            assert f"{NAMESPACE}/low" in preempting["message"]
            assert f"{NAMESPACE}/keep" not in preempting["message"]
            [high] = await c.wait_allocated("high-claim")
            assert results(high)[0]["device"] == "gpu-0-mig-3g-40gb-at-0"
            assert whole(results(high)[0])
            # The pod gone, its partition counts as free (ClusterView.freed) before the
            # claim's release is written.
            await c.wait_claims(
                lambda store: not store[f"{NAMESPACE}/low-claim"]["status"].get("allocation")
            )
            await c.pods.wait_for(lambda store: f"{NAMESPACE}/low" not in store)
            assert f"{NAMESPACE}/keep" in c.pods.store
            assert results(c.claim("keep-claim"))[0]["device"] == "gpu-0-mig-3g-40gb-at-4"
