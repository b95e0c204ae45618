"""1,000 allocations through bursts of 409 and 500/429 answers and dropped watches; the
final state is checked by the invariant checker: no device over-committed, and no claim of
a live pod left unallocated while capacity exists (all of them fit by construction)."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from pathlib import Path

from controller_cluster import (
    FAST,
    NAMESPACE,
    capacity,
    cluster,
    controller,
    overcommitted,
    request,
)

from dra_driver.kube.informer import InformerSettings

NODES, GPUS = 16, 8
CLAIMS = 1000
"""16 x 8 GPUs x 10 shares = 1,280 slots: every claim fits, most cards are shared."""

BATCH = 50
RESILIENT = replace(
    FAST, informer=InformerSettings(retry_delay_s=0.01, max_retry_delay_s=0.2), write_attempts=8
)


async def test_a_thousand_allocations_survive_conflicts_errors_and_lost_watches(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        for n in range(NODES):
            await c.add_node(f"node-{n:02d}", GPUS, cpu="2000")
        faults = c.server.faults
        rules = []
        dropped = 0
        async with controller(c.client, RESILIENT):
            for start in range(0, CLAIMS, BATCH):
                batch = range(start, min(start + BATCH, CLAIMS))
                if start // BATCH % 4 == 1:
                    rules.append(
                        faults.fail(
                            r"/resourceclaims/[^/]+/status", verb="PUT", status=409, times=20
                        )
                    )
                if start // BATCH % 4 == 2:
                    rules.append(
                        faults.fail(
                            r"/resourceclaims/[^/]+/status", verb="PUT", status=500, times=15
                        )
                    )
                    rules.append(faults.fail(r"/resourceclaims/[^/]+/status", status=429, times=10))
                if start // BATCH % 4 == 3:
                    dropped += faults.drop_watches()
                await asyncio.gather(
                    *(c.add_claim(f"p{i}-claim", request(**capacity(memory="1Gi"))) for i in batch)
                )
                await asyncio.gather(*(c.add_pod(f"p{i}", cpu="10m") for i in batch))
            names = [f"p{i}-claim" for i in range(CLAIMS)]
            await c.wait_allocated(*names, limit_s=60)
            slices = (await c.client.list("/apis/resource.k8s.io/v1/resourceslices"))["items"]
    claims = [c.claim(name) for name in names]
    assert all(rule.remaining == 0 for rule in rules) and len(rules) > 10
    assert dropped > 0
    assert overcommitted(claims, slices) == []
    assert all(len(claim["status"]["allocation"]["devices"]["results"]) == 1 for claim in claims)
    assert all(
        [r["name"] for r in claim["status"]["reservedFor"]]
        == [claim["metadata"]["name"].removesuffix("-claim")]
        for claim in claims
    )
    assert {claim["metadata"]["namespace"] for claim in claims} == {NAMESPACE}
