"""Mixed mode: the legacy scheduler's refusal names the DRA claims that hold the card.

Seen on a real cluster: a legacy pod refused on a card that DRA claims filled was told
only `CardInsufficientMemory`, while the node side names every holder of both modes.
The FailedNodes reason kube-scheduler shows (kept HAMi's `k/N Reason` first) and the
pod's FilteringFailed event now say which claims hold which GPU, and how much.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from controller_cluster import WAIT_S, capacity, request
from legacy_fixtures import create_pod, extender_client, gpu_pod
from mixed_fixtures import NODE, NS, UUID, mixed_cluster

HOLDERS = f"DRA claims on {UUID}: {NS}/trainer (12288 MiB, 30 cores)"


async def test_a_legacy_pod_refused_for_dra_claims_is_told_which(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, _, server):
        await c.add_claim("trainer", request(**capacity(memory="12Gi", cores="30")), namespace=NS)
        await c.wait_allocated("trainer", namespace=NS)
        (claims,) = [i for i in server.state.dra.informers if i.path.endswith("resourceclaims")]

        def allocated(store: Mapping[str, dict[str, Any]]) -> bool:
            return bool(((store.get(f"{NS}/trainer") or {}).get("status") or {}).get("allocation"))

        async with asyncio.timeout(WAIT_S):
            await claims.wait_for(allocated)

        pod = await create_pod(c.client, gpu_pod("legacy", NS, gpu=1, gpumem=6000))
        async with extender_client(server) as extender:
            result = await extender.filter(pod, [{"metadata": {"name": NODE}}])
        assert result.feasible == []
        assert result.failed[NODE] == f"1/1 CardInsufficientMemory; {HOLDERS}"
        event = await c.wait_event("legacy", "FilteringFailed")
        assert event["message"] == (
            f"no available node, 1 nodes do not meet: 1 nodes CardInsufficientMemory({NODE}). "
            f"{NODE}: {HOLDERS}"
        )


async def test_a_refusal_with_no_claims_on_the_node_is_hamis(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, _, server):
        pod = await create_pod(c.client, gpu_pod("big", NS, gpu=1, gpumem=20000))
        async with extender_client(server) as extender:
            result = await extender.filter(pod, [{"metadata": {"name": NODE}}])
        assert result.failed == {NODE: "1/1 CardInsufficientMemory"}
        event = await c.wait_event("big", "FilteringFailed")
        assert event["message"] == (
            f"no available node, 1 nodes do not meet: 1 nodes CardInsufficientMemory({NODE})"
        )
