"""Mixed mode: the legacy extender's /preempt chooses DRA pods as victims too (issue 34).

One GPU (16 GiB, 100 cores, 2 slots) served both ways, the real DRA controller
and legacy scheduler running (`mixed_fixtures`). A DRA pod is what kube-scheduler
leaves behind: a claim the controller allocated on the node, a pod bound there
naming it, and the pod in the claim's `status.reservedFor`. A legacy pod is
filtered and bound by the extender over HTTP. The preemptor is the pending
legacy pod kube-scheduler sends (never created), proposing no victims of its
own, so every victim in the answer is the extender's choice.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from controller_cluster import WAIT_S, Cluster, capacity, request
from legacy_fixtures import (
    AllocatorStandIn,
    base_url,
    create_pod,
    extender_client,
    gpu_pod,
    pods_path,
)
from mixed_fixtures import NODE, NS, claim_path, mixed_cluster

from controller.legacy.server import LegacyServer
from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import object_path

HIGH = 1000
CLASSES = {"p10": 10, "high": HIGH}
"""PriorityClasses by name: admission sets a pod's spec.priority from its class."""


async def add_classes(c: Cluster) -> None:
    for name, value in CLASSES.items():
        await c.add_priority_class(name, value)


def claim_caches(c: Cluster, server: LegacyServer) -> list[Informer]:
    """The test's claims cache, and the legacy scheduler's (mixed mode only)."""
    legacy = [i for i in server.state.dra.informers if i.path.endswith("resourceclaims")]
    return [c.claims, *legacy]


async def bound_pod(
    c: Cluster, name: str, claim: str, priority_class: str | None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"nodeName": NODE}
    if priority_class is not None:
        spec["priorityClassName"] = priority_class
    return await c.add_pod(name, [claim], namespace=NS, **spec)


async def dra_pod(
    c: Cluster,
    server: LegacyServer,
    name: str,
    memory: str,
    *,
    priority_class: str | None = None,
    peer_class: str | None = None,
    other_consumer: bool = False,
) -> dict[str, Any]:
    """A pod bound to the node reserving its claim, allocated there by the controller;
    with `peer_class` a second pod of that class reserves the claim too, with
    `other_consumer` a reserver that is no pod. Returns once the legacy scheduler's
    caches hold the pods and (mixed mode) the claim's reservations."""
    claim = f"{name}-claim"
    await c.add_claim(claim, request(**capacity(memory=memory)), namespace=NS)
    await c.wait_allocated(claim, namespace=NS)
    pods = [await bound_pod(c, name, claim, priority_class)]
    if peer_class is not None:
        pods.append(await bound_pod(c, f"{name}-peer", claim, peer_class))
    reserved: list[dict[str, Any]] = [
        {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        for pod in pods
    ]
    if other_consumer:
        reserved.append(
            {"apiGroup": "example.com", "resource": "trainings", "name": "t", "uid": "t-uid"}
        )
    await c.client.patch(f"{claim_path(claim)}/status", {"status": {"reservedFor": reserved}})

    def claim_seen(store: Mapping[str, dict[str, Any]]) -> bool:
        status = (store.get(f"{NS}/{claim}") or {}).get("status") or {}
        return bool(status.get("allocation")) and len(status.get("reservedFor") or []) == len(
            reserved
        )

    def pods_seen(store: Mapping[str, dict[str, Any]]) -> bool:
        return all(f"{NS}/{pod['metadata']['name']}" in store for pod in pods)

    async with asyncio.timeout(WAIT_S):
        for claims in claim_caches(c, server):
            await claims.wait_for(claim_seen)
        await server.state.pods.wait_for(pods_seen)
    return pods[0]


async def legacy_pod(
    c: Cluster, server: LegacyServer, name: str, gpumem: int, priority_class: str | None = None
) -> dict[str, Any]:
    """A legacy pod the extender filtered and bound to the node, its Allocate done."""
    pod = gpu_pod(name, NS, gpumem=gpumem)
    if priority_class is not None:
        pod["spec"]["priorityClassName"] = priority_class
    created = await create_pod(c.client, pod)
    node = await c.client.get(object_path("/api/v1/nodes", NODE))
    async with extender_client(server) as scheduler:
        result = await scheduler.schedule_once(created, [node])
    assert (result.node, result.reason) == (NODE, None), result.message
    await AllocatorStandIn(c.client).allocate(NS, name, NODE)

    def bound(store: Mapping[str, dict[str, Any]]) -> bool:
        return ((store.get(f"{NS}/{name}") or {}).get("spec") or {}).get("nodeName") == NODE

    async with asyncio.timeout(WAIT_S):
        await server.state.pods.wait_for(bound)
    return created


def preemptor(name: str, gpumem: int) -> dict[str, Any]:
    """The pending legacy pod as kube-scheduler holds it."""
    pod = gpu_pod(name, NS, gpumem=gpumem)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["spec"]["priority"] = HIGH
    return pod


async def preempt(
    c: Cluster, server: LegacyServer, pod: dict[str, Any], proposed: Sequence[str] = ()
) -> tuple[dict[str, set[str]], dict[str, Any]]:
    """POST ExtenderPreemptionArgs for the node (kube-scheduler's victims by uid); the
    answer's victims by name per node, and the raw answer."""
    args = {
        "Pod": pod,
        "NodeNameToVictims": None,
        "NodeNameToMetaVictims": {
            NODE: {"Pods": [{"UID": uid} for uid in proposed], "NumPDBViolations": 0}
        },
    }
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{base_url(server)}/preempt", json=args) as response,
    ):
        assert response.status == 200, await response.text()
        answer = await response.json()
    listing = await c.client.list(pods_path(NS))
    names = {p["metadata"]["uid"]: p["metadata"]["name"] for p in listing["items"]}
    victims = {
        node: {names[victim["UID"]] for victim in result["Pods"]}
        for node, result in (answer["NodeNameToMetaVictims"] or {}).items()
    }
    return victims, answer


async def test_a_legacy_pod_preempts_the_dra_pod_that_fills_its_gpu(tmp_path: Path) -> None:
    """The low-priority DRA pod's 16 GiB claim fills the GPU; 8000 MiB wanted: the DRA
    pod is the victim, counted as a possible PDB violation (an added victim)."""
    async with mixed_cluster(tmp_path, mixed=True) as (c, _, server):
        await add_classes(c)
        await dra_pod(c, server, "trainer", "16Gi")
        victims, answer = await preempt(c, server, preemptor("urgent", 8000))
        assert victims == {NODE: {"trainer"}}
        assert answer["NodeNameToMetaVictims"][NODE]["NumPDBViolations"] == 1


@pytest.mark.parametrize(
    ("peer_class", "other_consumer"),
    [("high", False), (None, True)],
    ids=["shared-with-a-high-priority-pod", "reserved-for-a-non-pod-consumer"],
)
async def test_a_claim_reserved_by_a_pod_that_stays_frees_nothing(
    tmp_path: Path, peer_class: str | None, other_consumer: bool
) -> None:
    """The 16 GiB claim is also reserved by a pod of the preemptor's priority, or by a
    consumer that is no pod: deleting the low pod frees nothing, the node is dropped."""
    async with mixed_cluster(tmp_path, mixed=True) as (c, _, server):
        await add_classes(c)
        await dra_pod(
            c, server, "trainer", "16Gi", peer_class=peer_class, other_consumer=other_consumer
        )
        victims, _ = await preempt(c, server, preemptor("urgent", 8000))
        assert victims == {}


@pytest.mark.parametrize(
    ("dra_class", "legacy_class", "victim"),
    [(None, "p10", "trainer"), ("p10", None, "legacy")],
    ids=["dra-pod-lower", "legacy-pod-lower"],
)
async def test_of_a_legacy_and_a_dra_holder_only_the_lower_priority_one_goes(
    tmp_path: Path, dra_class: str | None, legacy_class: str | None, victim: str
) -> None:
    """An 8 GiB claim and an 8000 MiB legacy pod take both slots and all but 192 MiB;
    8000 MiB wanted: either one gone is enough, so the more important one is
    reprieved and the answer holds only the other."""
    async with mixed_cluster(tmp_path, mixed=True) as (c, _, server):
        await add_classes(c)
        await dra_pod(c, server, "trainer", "8Gi", priority_class=dra_class)
        await legacy_pod(c, server, "legacy", 8000, legacy_class)
        victims, _ = await preempt(c, server, preemptor("urgent", 8000))
        assert victims == {NODE: {victim}}


async def test_outside_mixed_mode_dra_pods_are_never_victims(tmp_path: Path) -> None:
    """Mixed mode off: the legacy scheduler sees neither the claim nor its pod. The
    legacy pod (priority 10) leaves 6384 MiB; 8000 wanted: it is the only victim,
    though the DRA pod below it holds the GPU's whole memory."""
    async with mixed_cluster(tmp_path, mixed=False) as (c, _, server):
        await add_classes(c)
        await dra_pod(c, server, "trainer", "16Gi")
        await legacy_pod(c, server, "legacy", 10000, "p10")
        victims, _ = await preempt(c, server, preemptor("urgent", 8000))
        assert victims == {NODE: {"legacy"}}
