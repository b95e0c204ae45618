"""Mixed mode: the DRA controller's refusal names the legacy pods that hold the card.

The legacy side's refusal names the DRA claims holding a node's GPUs; the
controller's said only `CardInsufficientMemory(mixed-node)` when legacy pods
filled the card. Its FilteringFailed event (on the claim and on the pod) now says
which legacy pods hold which GPU, and how much, in the same form.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from controller_cluster import WAIT_S, capacity, request
from legacy_fixtures import create_pod, extender_client, gpu_pod
from mixed_fixtures import NODE, NS, UUID, mixed_cluster

HOLDERS = f"legacy pods on {UUID}: {NS}/trainer (12288 MiB, 30 cores)"


async def test_a_claim_refused_for_legacy_pods_is_told_which(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, ctl, server):
        pod = await create_pod(c.client, gpu_pod("trainer", NS, gpumem=12288, gpucores=30))
        async with extender_client(server) as extender:
            result = await extender.filter(pod, [{"metadata": {"name": NODE}}])
        assert result.feasible == [NODE]
        async with asyncio.timeout(WAIT_S):
            await ctl.view.pods.wait_for(lambda _: f"{NS}/trainer" in ctl.view.legacy_holds)

        await c.add_claim("big", request(**capacity(memory="8Gi")), namespace=NS)
        event = await c.wait_event("big", "FilteringFailed")
        assert event["message"] == (
            f"no available node, 1 nodes do not meet: 1 nodes CardInsufficientMemory({NODE}). "
            f"{NODE}: 1/1 CardInsufficientMemory. {NODE}: {HOLDERS}"
        )


async def test_a_card_that_claims_fill_names_no_legacy_pods(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, _, _):
        await c.add_claim("first", request(**capacity(memory="10Gi")), namespace=NS)
        await c.wait_allocated("first", namespace=NS)
        await c.add_claim("second", request(**capacity(memory="8Gi")), namespace=NS)
        event = await c.wait_event("second", "FilteringFailed")
        assert event["message"] == (
            f"no available node, 1 nodes do not meet: 1 nodes CardInsufficientMemory({NODE}). "
            f"{NODE}: 1/1 CardInsufficientMemory"
        )
