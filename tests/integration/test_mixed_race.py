"""A legacy /filter+/bind and a DRA claim allocation race for the same GPU, round after round.

One node serves one GPU both ways: its kubelet plugin publishes a ResourceSlice
device with the GPU's uuid (2 shares, 16 GiB, 100 cores) and the node carries
the same card in `hami.io/node-nvidia-register`. The real DRA controller and
the real legacy scheduler (extender over HTTP, callers not authenticated on
loopback) run against the API emulator, both in mixed mode. Each round a
legacy pod and a standalone claim, whose shares do not both fit, are started
at once (asyncio.gather): kube-scheduler's part (filter, then bind) is played
over HTTP, the device plugin's Allocate by `AllocatorStandIn` (it releases the
node lock), and the claim is created for the controller to allocate. Rounds
cycle through memory, cores and slots as the dimension that does not fit (a
slot round first places a small claim so one slot is left). The legacy side's
filter starts at once, or once the controller's cache holds the claim, or once
the controller holds the node lock for it: at once the filter's annotations
tend to land first and the controller's re-check under the lock refuses; once
the lock is taken the filter may still pass on a cache without the allocation,
and the bind, waiting for the lock and then re-reading the claims, refuses. After each round
what is really held, read from the API (legacy pods bound to the node, claims'
allocation results), must fit the GPU in every dimension; then the round is
cleared and both components are seen to have noticed before the next starts.

With mixed mode off neither allocator sees the other: the control test shows
the checker finds the over-commit in every dimension.
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from controller_cluster import WAIT_S, Cluster, capacity, request
from legacy_fixtures import (
    AllocatorStandIn,
    create_pod,
    extender_client,
    gpu_pod,
    pods_path,
)
from mixed_fixtures import (
    CLAIMS,
    CORES,
    DRIVER,
    MEMORY_MIB,
    NODE,
    NS,
    SHARES,
    UUID,
    claim_path,
    mixed_cluster,
)

from api.hami_annotations import NODE_LOCK, VGPU_DEVICES_ALLOCATED, decode_pod_devices
from api.quantity import MIB, parse_quantity
from controller.controller import Controller
from controller.legacy.server import LegacyServer
from dra_driver.kube.rest import ConflictError, KubeClient, NotFoundError, object_path
from dra_driver.objects.node_lock import read_lock
from simulator.standins.scheduler_extender import ExtenderCallError, SchedulerExtenderClient

ROUNDS = 200


@dataclass(frozen=True, slots=True)
class Shape:
    """One round's two requests: each fits alone, both together do not."""

    dimension: str
    memory_mib: int
    cores: int
    preplaced: bool = False
    """Place a small claim first, so the round contends for the last slot."""


SHAPES = (
    Shape("memory", memory_mib=10 * 1024, cores=10),
    Shape("cores", memory_mib=2 * 1024, cores=60),
    Shape("slots", memory_mib=1024, cores=1, preplaced=True),
)


@dataclass(slots=True)
class Tally:
    legacy_won: int = 0
    dra_won: int = 0
    over: list[str] = field(default_factory=list)


async def held(client: KubeClient) -> dict[str, Decimal]:
    """What the GPU really carries now, read from the API with the codecs alone: legacy pods
    bound to the node and every claim's allocation results."""
    totals = {"memory": Decimal(0), "cores": Decimal(0), "slots": Decimal(0)}
    for pod in (await client.list(pods_path(NS)))["items"]:
        annotations = pod["metadata"].get("annotations") or {}
        if pod["spec"].get("nodeName") != NODE or VGPU_DEVICES_ALLOCATED not in annotations:
            continue
        for container in decode_pod_devices(annotations[VGPU_DEVICES_ALLOCATED]):
            for device in container:
                assert device.uuid == UUID
                totals["memory"] += device.usedmem
                totals["cores"] += device.usedcores
                totals["slots"] += 1
    for claim in (await client.list(CLAIMS.format(ns=NS)))["items"]:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            consumed = {
                name.removeprefix(f"{DRIVER}/"): value
                for name, value in (result.get("consumedCapacity") or {}).items()
            }
            totals["memory"] += parse_quantity(consumed.get("memory", "0")) / MIB
            totals["cores"] += parse_quantity(consumed.get("cores", "0"))
            totals["slots"] += parse_quantity(consumed.get("shares", "1"))
    return totals


def over_commits(totals: dict[str, Decimal]) -> list[str]:
    limits = {"memory": MEMORY_MIB, "cores": CORES, "slots": SHARES}
    return [
        f"{name} {totals[name]} > {limit}" for name, limit in limits.items() if totals[name] > limit
    ]


async def legacy_side(
    client: KubeClient,
    extender: SchedulerExtenderClient,
    device_plugin: AllocatorStandIn,
    name: str,
    shape: Shape,
    start: asyncio.Future[None] | None = None,
) -> bool:
    """kube-scheduler's filter and bind, then the device plugin's Allocate; True if bound.
    With `start`, the filter waits for it (the controller has seen the claim)."""
    pod = await create_pod(
        client, gpu_pod(name, NS, gpu=1, gpumem=shape.memory_mib, gpucores=shape.cores)
    )
    if start is not None:
        await start
    try:
        result = await extender.filter(pod, [{"metadata": {"name": NODE}}])
        if result.feasible != [NODE]:
            return False
        await extender.bind(pod, NODE)
    except ExtenderCallError:
        return False
    await device_plugin.allocate(NS, name, NODE)
    return True


async def dra_side(c: Cluster, name: str, shape: Shape) -> bool:
    """Create the claim; True once allocated, False once the controller says it fits nowhere."""
    amounts = capacity(memory=f"{shape.memory_mib}Mi", cores=str(shape.cores))
    await c.add_claim(name, request(**amounts), namespace=NS)
    key = f"{NS}/{name}"

    def allocated(store: dict[str, dict[str, Any]]) -> bool:
        return bool(((store.get(key) or {}).get("status") or {}).get("allocation"))

    def refused(store: dict[str, dict[str, Any]]) -> bool:
        return any(
            e.get("reason") == "FilteringFailed" and e["involvedObject"].get("name") == name
            for e in store.values()
        )

    waits = {
        asyncio.create_task(c.claims.wait_for(allocated)),
        asyncio.create_task(c.events.wait_for(refused)),
    }
    try:
        done, _ = await asyncio.wait(waits, timeout=WAIT_S, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in waits:
            task.cancel()
        await asyncio.gather(*waits, return_exceptions=True)
    assert done, f"claim {key}: neither allocated nor refused"
    return allocated(c.claims.store)


async def clear_claim(client: KubeClient, name: str) -> None:
    """Delete the claim, deallocating it first as kube-controller-manager would."""
    path = claim_path(name)
    with contextlib.suppress(NotFoundError):
        await client.delete(path)
    while True:
        try:
            claim = await client.get(path)
            status = {k: v for k, v in (claim.get("status") or {}).items() if k != "allocation"}
            claim = await client.replace(f"{path}/status", {**claim, "status": status})
            await client.patch(
                path,
                {
                    "metadata": {
                        "resourceVersion": claim["metadata"]["resourceVersion"],
                        "finalizers": None,
                    }
                },
            )
        except NotFoundError:
            return
        except ConflictError:
            continue


async def settle_removed(
    ctl: Controller, server: LegacyServer, claims: list[str], pods: list[str]
) -> None:
    """Until both components' caches have seen the round's objects go."""
    claim_keys = [f"{NS}/{n}" for n in claims]
    pod_keys = [f"{NS}/{n}" for n in pods]
    dra_claims = [i for i in server.state.dra.informers if i.path.endswith("resourceclaims")]

    def no_claims(store: dict[str, Any]) -> bool:
        return not any(k in store for k in claim_keys)

    def no_pods(store: dict[str, Any]) -> bool:
        return not any(k in store for k in pod_keys)

    async with asyncio.timeout(WAIT_S):
        await ctl.view.claims.wait_for(no_claims)
        for informer in dra_claims:
            await informer.wait_for(no_claims)
        await ctl.view.pods.wait_for(no_pods)
        await server.state.pods.wait_for(no_pods)


def start_signal(
    c: Cluster, ctl: Controller, claim: str, variant: int
) -> asyncio.Future[None] | None:
    """When the legacy side's filter starts: at once (0), once the controller holds the node
    lock for the claim (1: its write is under way), once its cache holds the claim (2)."""
    key = f"{NS}/{claim}"

    def locked(store: dict[str, dict[str, Any]]) -> bool:
        annotations = (store.get(NODE) or {}).get("metadata", {}).get("annotations") or {}
        holder = read_lock(NODE, annotations.get(NODE_LOCK))
        return holder is not None and (holder.namespace, holder.pod) == (NS, claim)

    if variant == 1 and ctl.settings.mixed_mode:  # outside mixed mode it takes no lock
        return asyncio.ensure_future(c.nodes.wait_for(locked))
    if variant == 2:
        return asyncio.ensure_future(ctl.view.claims.wait_for(lambda store: key in store))
    return None


async def play_rounds(c: Cluster, ctl: Controller, server: LegacyServer, rounds: int) -> Tally:
    tally = Tally()
    device_plugin = AllocatorStandIn(c.client)
    async with extender_client(server) as extender:
        for number in range(rounds):
            shape = SHAPES[number % len(SHAPES)]
            claims, pods = [f"dra-{number}"], [f"legacy-{number}"]
            if shape.preplaced:
                small = Shape("slots", memory_mib=512, cores=1)
                claims.append(f"first-{number}")
                assert await dra_side(c, claims[-1], small), "the slot round's first claim"
            seen = start_signal(c, ctl, claims[0], (number // len(SHAPES)) % 3)
            legacy_won, dra_won = await asyncio.gather(
                legacy_side(c.client, extender, device_plugin, pods[0], shape, seen),
                dra_side(c, claims[0], shape),
            )
            tally.legacy_won += legacy_won
            tally.dra_won += dra_won
            found = over_commits(await held(c.client))
            if found:
                tally.over.append(f"round {number} ({shape.dimension}): {', '.join(found)}")
            for name in claims:
                await clear_claim(c.client, name)
            for name in pods:
                await c.client.delete(object_path(pods_path(NS), name), grace_period_seconds=0)
            await settle_removed(ctl, server, claims, pods)
    return tally


async def test_legacy_bind_and_dra_allocation_race_never_overcommit(tmp_path: Path) -> None:
    async with mixed_cluster(tmp_path, mixed=True) as (c, ctl, server):
        tally = await play_rounds(c, ctl, server, ROUNDS)
    assert tally.over == [], "\n".join(tally.over)
    assert tally.legacy_won + tally.dra_won >= ROUNDS, "a round where neither side got the GPU"
    assert tally.legacy_won > 0 and tally.dra_won > 0, (
        f"one side always won (legacy {tally.legacy_won}, DRA {tally.dra_won}): no race"
    )


async def test_without_mixed_mode_both_sides_overcommit(tmp_path: Path) -> None:
    """The control: neither allocator counts the other, so every round over-commits."""
    async with mixed_cluster(tmp_path, mixed=False) as (c, ctl, server):
        tally = await play_rounds(c, ctl, server, len(SHAPES))
    assert (tally.legacy_won, tally.dra_won) == (len(SHAPES), len(SHAPES))
    assert [entry.split(": ")[1].split(" ")[0] for entry in tally.over] == [
        "memory",
        "cores",
        "slots",
    ], tally.over
