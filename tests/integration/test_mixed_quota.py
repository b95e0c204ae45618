"""A namespace's quota in a mixed cluster covers what both allocators hand out.

One GPU (16 GiB, 2 shares) is served both ways; the namespace's
`limits.nvidia.com/gpumem` is 10000 MiB. Whichever side holds 8 GiB of it
(a DRA claim, or a legacy pod), the other side refuses 4000 MiB more as
HAMi does (`ResourceQuotaNotFit` in Filter and in the controller, a denial
naming the quota in the webhook), though the card itself has room, and still
gives out 1000 MiB.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from controller_cluster import WAIT_S, Cluster, capacity, node_of, request
from legacy_fixtures import base_url, create_pod, extender_client, gpu_pod
from mixed_fixtures import NODE, NS, UUID, mixed_cluster

from api.hami_annotations import VGPU_DEVICES_ALLOCATED, VGPU_NODE
from controller.controller import Controller
from controller.legacy.server import LegacyServer
from dra_driver.kube.rest import KubeClient
from simulator.standins.admission import AdmissionClient, AdmissionOutcome, WebhookConfig

USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
QUOTA = {
    "metadata": {"name": "gpu", "namespace": NS},
    "spec": {"hard": {"limits.nvidia.com/gpumem": "10000"}},
}


async def add_quota(client: KubeClient, ctl: Controller, server: LegacyServer) -> None:
    await client.create(f"/api/v1/namespaces/{NS}/resourcequotas", QUOTA)
    async with asyncio.timeout(WAIT_S):
        await ctl.view.quotas.wait_for(bool)
        await server.state.quotas.wait_for(bool)


async def admit(server: LegacyServer, pod: dict[str, Any]) -> AdmissionOutcome:
    async with AdmissionClient(WebhookConfig(url=f"{base_url(server)}/webhook")) as apiserver:
        return await apiserver.review(apiserver.build_review(pod, namespace=NS, user_info=USER))


async def refusal(c: Cluster, name: str) -> str:
    """The controller's FilteringFailed message for the claim; fails if it allocates it."""

    def refused(store: dict[str, dict[str, Any]]) -> bool:
        return any(
            e.get("reason") == "FilteringFailed" and e["involvedObject"].get("name") == name
            for e in store.values()
        )

    def allocated(store: dict[str, dict[str, Any]]) -> bool:
        return bool(((store.get(f"{NS}/{name}") or {}).get("status") or {}).get("allocation"))

    async with asyncio.timeout(WAIT_S), asyncio.TaskGroup() as group:
        waits = [
            group.create_task(c.events.wait_for(refused)),
            group.create_task(c.claims.wait_for(allocated)),
        ]
        await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in waits:
            task.cancel()
    assert not allocated(c.claims.store), f"claim {NS}/{name} was allocated"
    return next(
        e["message"]
        for e in c.events.store.values()
        if e.get("reason") == "FilteringFailed" and e["involvedObject"].get("name") == name
    )


async def test_the_legacy_side_counts_the_namespaces_claims(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, ctl, server):
        await add_quota(c.client, ctl, server)
        await c.add_claim("held", request(**capacity(memory="8Gi")), namespace=NS)
        await c.wait_allocated("held", namespace=NS)
        [claims] = [i for i in server.state.dra.informers if i.path.endswith("resourceclaims")]
        async with asyncio.timeout(WAIT_S):
            await claims.wait_for(
                lambda store: bool((store[f"{NS}/held"].get("status") or {}).get("allocation"))
            )

        denied = await admit(server, gpu_pod("more", NS, gpumem=4000))
        assert not denied.allowed
        assert (
            f"namespace {NS} ResourceQuota limits.nvidia.com/gpumem is 10000 MiB with 8192 MiB "
            "in use, and this pod asks for 4000 MiB"
        ) in denied.status["message"]
        assert (await admit(server, gpu_pod("small", NS, gpumem=1000))).allowed

        nodes = [{"metadata": {"name": NODE}}]
        async with extender_client(server) as extender:
            more = await create_pod(c.client, gpu_pod("more", NS, gpumem=4000))
            assert (await extender.filter(more, nodes)).failed == {NODE: "1/1 ResourceQuotaNotFit"}
            small = await create_pod(c.client, gpu_pod("small", NS, gpumem=1000))
            assert (await extender.filter(small, nodes)).feasible == [NODE]


async def test_the_controller_counts_the_namespaces_legacy_pods(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, ctl, server):
        await add_quota(c.client, ctl, server)
        placed = gpu_pod("held", NS, gpumem=8192)
        placed["metadata"]["annotations"] = {
            VGPU_NODE: NODE,
            VGPU_DEVICES_ALLOCATED: f"{UUID},NVIDIA,8192,0:;",
        }
        await create_pod(c.client, placed)
        async with asyncio.timeout(WAIT_S):
            await ctl.view.pods.wait_for(lambda _: f"{NS}/held" in ctl.view.legacy_holds)

        await c.add_claim("more", request(**capacity(memory="4000Mi")), namespace=NS)
        assert "ResourceQuotaNotFit" in await refusal(c, "more")
        await c.add_claim("small", request(**capacity(memory="1000Mi")), namespace=NS)
        (allocated,) = await c.wait_allocated("small", namespace=NS)
        assert node_of(allocated) == NODE
        assert not (c.claim("more", namespace=NS).get("status") or {}).get("allocation")
