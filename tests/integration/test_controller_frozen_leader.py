"""A leader paused past its lease writes nothing once it resumes (issue: frozen leader).

On a real control plane a leader frozen (SIGSTOP) for 20 s while pods were deleted
resumed and wrote allocations onto GPUs its successor had already handed out. Here the
pause is a jump of the leader's own monotonic clock, so the order is exact: the leader
falls silent past its lease (its renewal loop asleep, as a stopped process's is), pods
are deleted and others wait for their room, and the stale leader then sees all of it.
It must drop every write, step down, and let the successor decide alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from pathlib import Path
from typing import Any

import pytest
from controller_cluster import (
    FAST,
    NAMESPACE,
    WAIT_S,
    Cluster,
    capacity,
    cluster,
    overcommitted,
    request,
)
from prometheus_client import CollectorRegistry

from controller.controller import Controller
from controller.metrics import ControllerMetrics
from dra_driver.kube.events import EventRecorder, EventSettings
from dra_driver.kube.leader import LeaderElector, LeaderSettings, LeadershipLostError
from dra_driver.objects.api_time import micro_time
from dra_driver.objects.resource_api import RESOURCE_API

PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
LEASE = LeaderSettings(NAMESPACE, "vgpu-frozen-leader", "", 15.0, 10.0, 0.05)
CONTROLLER = "vgpu-dra-driver/controller"


class JumpingClock:
    """This process's monotonic clock as one replica sees it; `jump` is a pause of that
    replica (the wall time it did not see pass)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def __call__(self) -> float:
        return time.monotonic() + self.offset

    def jump(self, seconds: float) -> None:
        self.offset += seconds


@pytest.fixture
async def c(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with cluster(tmp_path) as running:
        yield running


@contextlib.asynccontextmanager
async def replica(
    c: Cluster, identity: str, clock: JumpingClock, retry_period_s: float
) -> AsyncIterator[tuple[LeaderElector, asyncio.Task[None]]]:
    """One controller replica under leader election, as `dra-driver controller` runs it."""
    settings = LeaderSettings(LEASE.namespace, LEASE.name, identity, retry_period_s=retry_period_s)
    elector = LeaderElector(c.client, settings, clock)
    recorder = EventRecorder(
        c.client.for_component("controller"), EventSettings(component="vgpu-dra-controller")
    )
    recorder.start()

    async def allocate() -> None:
        metrics = ControllerMetrics(CollectorRegistry())
        await Controller(c.client, FAST, metrics, recorder, fence=elector).run()

    task = asyncio.create_task(elector.run(allocate), name=f"replica {identity}")
    try:
        yield elector, task
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, LeadershipLostError):
            await task
        await recorder.aclose()


def claim_status_writes(c: Cluster) -> int:
    counts = c.server.audit.write_counts().get(CONTROLLER, {})
    return counts.get("resourceclaims/status", 0)


async def settle(c: Cluster, waiting: list[str], deleted: list[str]) -> None:
    """Until the waiting pods' claims are allocated and the deleted pods' claims free."""

    def done(store: dict[str, Any]) -> bool:
        def status(name: str) -> dict[str, Any]:
            return (store.get(f"{NAMESPACE}/{name}-claim") or {}).get("status") or {}

        return all(status(n).get("allocation") for n in waiting) and not any(
            status(n).get("reservedFor") for n in deleted
        )

    await c.wait_claims(done, limit_s=WAIT_S * 3)


async def take_over(c: Cluster, identity: str) -> None:
    """The successor's takeover write, as its elector makes it once the lease expired by
    its own clock (that part is test_controller_service's)."""
    path = f"/apis/coordination.k8s.io/v1/namespaces/{LEASE.namespace}/leases/{LEASE.name}"
    lease = await c.client.get(path)
    spec = lease["spec"]
    transitions = int(spec.get("leaseTransitions") or 0) + 1
    now = micro_time()
    taken = {"holderIdentity": identity, "acquireTime": now, "renewTime": now}
    await c.client.replace(
        path, {**lease, "spec": {**spec, **taken, "leaseTransitions": transitions}}
    )


async def first_of(task: asyncio.Task[None], other: Awaitable[None]) -> None:
    """Until `task` ends or `other` happens, whichever is first."""
    waiter = asyncio.ensure_future(other)
    try:
        async with asyncio.timeout(WAIT_S * 3):
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await waiter


async def test_a_leader_paused_past_its_lease_writes_nothing_after_resuming(c: Cluster):
    await c.add_class()
    await c.add_node("node-a", 1)
    full = [f"full-{i}" for i in range(8)]
    waiting = [f"waiting-{i}" for i in range(4)]
    old_clock = JumpingClock()
    # The old leader's renewal loop sleeps through the test, as a stopped process's does.
    async with replica(c, "old", old_clock, retry_period_s=3600.0) as (old, old_task):
        async with asyncio.timeout(WAIT_S):
            await old.is_leader.wait()
        for name in full:
            await c.add_pod_with_claim(name, request(**capacity(memory="10Gi")))
        await c.wait_allocated(*(f"{name}-claim" for name in full), limit_s=WAIT_S * 3)
        old_clock.jump(20.0)
        writes_before = claim_status_writes(c)
        for name in full[:4]:
            await c.client.delete(f"{PODS}/{name}")
        for name in waiting:
            await c.add_pod_with_claim(name, request(**capacity(memory="10Gi")))
        await first_of(old_task, settle(c, waiting, full[:4]))
        stale_writes = claim_status_writes(c) - writes_before
        assert stale_writes == 0
        assert old_task.done() and not old.is_leader.is_set()
        with pytest.raises(LeadershipLostError, match=r"not renewed by old for 2\d\.\d s"):
            old_task.result()
        await take_over(c, "new")
        async with replica(c, "new", JumpingClock(), retry_period_s=0.05) as (new, _):
            async with asyncio.timeout(WAIT_S):
                await new.is_leader.wait()
            await settle(c, waiting, full[:4])
    slices = (await c.client.list(f"{RESOURCE_API}/resourceslices"))["items"]
    claims = list(c.claims.store.values())
    assert overcommitted(claims, slices) == []
