"""Two controller processes with leader election: kill -9 the leader while claims stream in;
the other takes over within the lease duration, starts from a fresh list, and every claim is
allocated exactly once, with no device over-committed."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from controller_cluster import (
    NAMESPACE,
    Cluster,
    capacity,
    overcommitted,
    request,
)

from dra_driver.kube.informer import Informer, object_key
from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServer, run_in_thread

LEASE_NAME = "vgpu-failover-test"
PODS_PER_WAVE = 20
LEASE_S = 2.0


@pytest.fixture
def server() -> Iterator[APIServer]:
    """In its own thread, so the controller processes and this test reach it alike."""
    with run_in_thread() as running:
        yield running


async def start_controller(kubeconfig: Path, identity: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "dra_driver.cli",
        "controller",
        "--kubeconfig",
        str(kubeconfig),
        "--identity",
        identity,
        "--lease-name",
        LEASE_NAME,
        "--lease-duration",
        str(LEASE_S),
        "--renew-deadline",
        "1.5",
        "--retry-period",
        "0.2",
        "--metrics-port",
        "0",
        "--log-level",
        "WARNING",
        stdin=asyncio.subprocess.DEVNULL,
    )


def allocation_ids(claim: dict[str, Any]) -> tuple[str, ...] | None:
    allocation = (claim.get("status") or {}).get("allocation")
    if allocation is None:
        return None
    return tuple(r.get("shareID", "") for r in allocation["devices"]["results"])


async def test_killing_the_leader_hands_over_without_double_allocation(
    server: APIServer, tmp_path: Path
) -> None:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    client = await KubeClient.from_kubeconfig(kubeconfig)
    c = Cluster(server, client)
    seen: dict[str, list[tuple[str, ...]]] = {}

    def record(kind: str, claim: dict[str, Any]) -> None:
        ids = allocation_ids(claim)
        history = seen.setdefault(object_key(claim), [])
        if ids is not None and (not history or history[-1] != ids):
            history.append(ids)

    c.claims.handlers.append(record)
    leases = Informer(client, f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases")
    lease_task = asyncio.create_task(leases.run(), name="lease informer")
    processes: list[asyncio.subprocess.Process] = []
    try:
        await c.start()
        await c.add_class()
        for node in ("node-a", "node-b"):
            await c.add_node(node, 4)
        processes = [await start_controller(kubeconfig, f"ctl-{i}") for i in range(2)]
        key = f"{NAMESPACE}/{LEASE_NAME}"

        def holder(store: dict[str, Any]) -> str:
            return str(((store.get(key) or {}).get("spec") or {}).get("holderIdentity") or "")

        async with asyncio.timeout(30):
            await leases.wait_for(lambda store: holder(store) != "")
        leader = holder(leases.store)
        for i in range(PODS_PER_WAVE):
            await c.add_pod_with_claim(f"w1-{i}", request(**capacity(memory="10Gi")))
        await c.wait_allocated("w1-0-claim", limit_s=30)
        victim = processes[int(leader.rsplit("-", 1)[1])]
        os.kill(victim.pid, signal.SIGKILL)
        await victim.wait()
        for i in range(PODS_PER_WAVE):
            await c.add_pod_with_claim(f"w2-{i}", request(**capacity(memory="10Gi")))
        names = [f"w{wave}-{i}-claim" for wave in (1, 2) for i in range(PODS_PER_WAVE)]
        await c.wait_allocated(*names, limit_s=30)
        successor = holder(leases.store)
        slices = (await client.list("/apis/resource.k8s.io/v1/resourceslices"))["items"]
        claims = list(c.claims.store.values())
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
                await process.wait()
        lease_task.cancel()
        await asyncio.gather(lease_task, return_exceptions=True)
        await c.aclose()
        await client.aclose()
    assert successor != leader
    assert {k: len(v) for k, v in seen.items() if len(v) != 1} == {}
    assert len(seen) == 2 * PODS_PER_WAVE
    assert overcommitted(claims, slices) == []
