"""NodeLocker against the emulator: preconditions, retries, take-over and release rules."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from legacy_fixtures import add_gpu_node, add_namespace, create_pod, gpu_pod, pods_path

from api.hami_annotations import NODE_LOCK
from dra_driver.kube.node_lock import NodeLocker
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.objects.node_lock import NodeLockError
from simulator.apiserver import APIServer

NS = "locks"
NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
NODE = object_path("/api/v1/nodes", "n1")


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            await add_gpu_node(client, "n1")
            yield server, client
        finally:
            await client.aclose()


def locker(client: KubeClient, now: datetime = NOW) -> NodeLocker:
    return NodeLocker(client, clock=lambda: now, first_pause_s=0.01)


async def lock_of(client: KubeClient) -> str | None:
    node = await client.get(NODE)
    return (node["metadata"].get("annotations") or {}).get(NODE_LOCK)


async def set_lock(client: KubeClient, value: str | None) -> None:
    await client.patch(NODE, {"metadata": {"annotations": {NODE_LOCK: value}}})


async def test_acquire_writes_hami_value_and_is_reentrant(cluster) -> None:
    server, client = cluster
    await locker(client).acquire("n1", NS, "a")
    assert await lock_of(client) == f"2026-11-30T10:00:00Z,{NS},a"
    writes = server.faults.count("/nodes/n1", verb="PATCH")
    later = locker(client, NOW + timedelta(seconds=30))
    await later.acquire("n1", NS, "a")
    assert server.faults.count("/nodes/n1", verb="PATCH") == writes
    assert await lock_of(client) == f"2026-11-30T10:00:00Z,{NS},a"


async def test_live_holder_blocks_and_gone_holder_is_taken_over(cluster) -> None:
    _, client = cluster
    await create_pod(client, gpu_pod("holder", NS))
    await set_lock(client, f"2026-11-30T09:59:00Z,{NS},holder")
    with pytest.raises(NodeLockError, match=f"locked by {NS}/holder"):
        await locker(client).acquire("n1", NS, "b")
    await client.delete(object_path(pods_path(NS), "holder"))
    await locker(client).acquire("n1", NS, "b")
    assert await lock_of(client) == f"2026-11-30T10:00:00Z,{NS},b"


async def test_terminated_holder_is_dangling(cluster) -> None:
    _, client = cluster
    await create_pod(client, gpu_pod("done", NS))
    status = {"status": {"phase": "Failed"}}
    await client.patch(f"{object_path(pods_path(NS), 'done')}/status", status)
    await set_lock(client, f"2026-11-30T09:59:00Z,{NS},done")
    await locker(client).acquire("n1", NS, "c")
    assert await lock_of(client) == f"2026-11-30T10:00:00Z,{NS},c"


async def test_expired_lock_is_taken_over_even_if_holder_lives(cluster) -> None:
    _, client = cluster
    await create_pod(client, gpu_pod("slow", NS))
    await set_lock(client, f"2026-11-30T09:54:59Z,{NS},slow")
    await locker(client).acquire("n1", NS, "d")
    assert (await lock_of(client)).endswith(",d")


async def test_conflicts_and_server_errors_are_retried(cluster) -> None:
    server, client = cluster
    server.faults.fail("/nodes/n1", verb="PATCH", status=409, times=2)
    server.faults.fail("/nodes/n1", verb="PATCH", status=500, times=1)
    await locker(client).acquire("n1", NS, "e")
    assert (await lock_of(client)).endswith(",e")


async def test_persistent_conflict_gives_up_with_a_clear_error(cluster) -> None:
    server, client = cluster
    server.faults.fail("/nodes/n1", verb="PATCH", status=409, times=10)
    with pytest.raises(NodeLockError, match="lock not written after 5 tries"):
        await locker(client).acquire("n1", NS, "f")


async def test_unparsable_lock_is_an_error_not_overwritten(cluster) -> None:
    _, client = cluster
    await set_lock(client, "garbage")
    with pytest.raises(NodeLockError, match="unreadable lock 'garbage'"):
        await locker(client).acquire("n1", NS, "g")
    assert await lock_of(client) == "garbage"


async def test_release_rules(cluster) -> None:
    _, client = cluster
    await set_lock(client, f"2026-11-30T09:59:00Z,{NS},other")
    assert not await locker(client).release("n1", NS, "me")
    assert await lock_of(client) is not None
    await set_lock(client, "2026-11-30T09:59:00Z")
    assert await locker(client).release("n1", NS, "me")
    assert await lock_of(client) is None
    assert not await locker(client).release("n1", NS, "me")
