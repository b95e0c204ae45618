"""HAMi's handshake on the emulator: the scheduler writes Requesting, and a stale
Requesting with no allocatable GPUs makes the node's devices unhealthy."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from legacy_fixtures import (
    OPEN,
    add_gpu_node,
    add_namespace,
    create_pod,
    extender_client,
    gpu_pod,
    wait_for_nodes,
)

from api.hami_annotations import NODE_HANDSHAKE
from controller.legacy.cluster import ClusterState
from controller.legacy.config import LegacySettings
from controller.legacy.server import LegacyServer, ServeSettings
from dra_driver.errors import DriverError
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer

NS = "health"
START = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield server, client
        finally:
            await client.aclose()


async def set_allocatable(client: KubeClient, node: str, gpus: str) -> None:
    body = {"status": {"allocatable": {"nvidia.com/gpu": gpus}}}
    await client.patch(f"{object_path('/api/v1/nodes', node)}/status", body)


def handshake(store: dict[str, Any], node: str) -> str | None:
    return ((store.get(node) or {}).get("metadata", {}).get("annotations") or {}).get(
        NODE_HANDSHAKE
    )


async def test_stale_requesting_with_no_allocatable_gpus_is_unhealthy(cluster) -> None:
    _, client = cluster
    now = [START]
    state = ClusterState(client, LegacySettings(), clock=lambda: now[0])
    for name in ("gone", "alive", "no-time"):
        await add_gpu_node(client, name)
    await set_allocatable(client, "gone", "0")
    await set_allocatable(client, "no-time", "0")
    async with (
        LegacyServer(
            client, LegacySettings(caller_auth=OPEN), ServeSettings(port=0), state
        ) as server,
        extender_client(server) as scheduler,
    ):
        await wait_for_nodes(server, "gone", "alive", "no-time")
        written = "Requesting_2026-11-30 10:00:00"
        await state.nodes.wait_for(
            lambda store: all(handshake(store, n) == written for n in ("gone", "alive", "no-time"))
        )
        await client.patch(
            object_path("/api/v1/nodes", "no-time"),
            {"metadata": {"annotations": {NODE_HANDSHAKE: "Requesting_soon"}}},
        )
        await state.nodes.wait_for(lambda store: handshake(store, "no-time") == "Requesting_soon")
        nodes = [await client.get(object_path("/api/v1/nodes", n)) for n in ("gone", "alive")]
        nodes.append(await client.get(object_path("/api/v1/nodes", "no-time")))
        pod = await create_pod(client, gpu_pod("p", NS, gpumem=1000))

        now[0] = START + timedelta(seconds=59)
        state.refresh_health()
        assert "gone" not in (await scheduler.filter(pod, nodes[:1])).failed

        now[0] = START + timedelta(seconds=61)
        state.refresh_health()
        result = await scheduler.filter(pod, nodes[:1])
        assert result.failed == {"gone": "2/2 CardNotHealth"}
        assert (await scheduler.filter(pod, nodes[2:])).feasible == ["no-time"]

        await set_allocatable(client, "gone", "20")
        await state.nodes.wait_for(lambda _: state.inventory["gone"].allocatable_gpus == 20)
        other = await create_pod(client, gpu_pod("q", NS, gpumem=1000))
        assert "gone" not in (await scheduler.filter(other, nodes[:1])).failed


async def test_no_handshake_written_for_unregistered_nodes(cluster) -> None:
    server_api, client = cluster
    await client.create("/api/v1/nodes", {"metadata": {"name": "plain"}})
    await add_gpu_node(client, "gpu")
    async with LegacyServer(client, LegacySettings(), ServeSettings(port=0)) as server:
        await wait_for_nodes(server, "plain", "gpu")
        await server.state.nodes.wait_for(lambda store: handshake(store, "gpu") is not None)
        assert handshake(server.state.nodes.store, "plain") is None
        assert server_api.faults.count("/nodes/plain", verb="PATCH") == 0


async def test_cache_that_cannot_list_fails_start_with_the_reason(cluster) -> None:
    server_api, client = cluster
    server_api.faults.fail("/api/v1/pods", verb="GET", status=403, times=1000)
    server = LegacyServer(client, LegacySettings(), ServeSettings(port=0))
    with pytest.raises(DriverError, match="cache legacy-pods stopped before listing: 403"):
        await server.start()
    await server.aclose()


async def test_port_in_use_is_a_clear_error_and_nothing_leaks(cluster) -> None:
    _, client = cluster
    async with LegacyServer(client, LegacySettings(), ServeSettings(port=0)) as first:
        assert first.state.ready
        second = LegacyServer(client, LegacySettings(), ServeSettings(port=first.port))
        with pytest.raises(DriverError, match=f"cannot listen on 127.0.0.1:{first.port}"):
            await second.start()
        assert not second.state.ready


async def test_node_label_selector_limits_the_nodes_read(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "selected")
    await add_gpu_node(client, "other")
    await client.patch(
        object_path("/api/v1/nodes", "selected"), {"metadata": {"labels": {"gpu": "on"}}}
    )
    settings = LegacySettings(node_label_selector="gpu=on", caller_auth=OPEN)
    async with (
        LegacyServer(client, settings, ServeSettings(port=0)) as server,
        extender_client(server) as scheduler,
    ):
        await wait_for_nodes(server, "selected")
        assert "other" not in server.state.nodes.store
        nodes = [await client.get(object_path("/api/v1/nodes", n)) for n in ("selected", "other")]
        pod = await create_pod(client, gpu_pod("p", NS, gpumem=1000))
        result = await scheduler.filter(pod, nodes)
        assert result.feasible == ["selected"]
        await client.patch(
            object_path("/api/v1/nodes", "selected"), {"metadata": {"labels": {"gpu": None}}}
        )
        await server.state.nodes.wait_for(lambda store: "selected" not in store)
        other = await create_pod(client, gpu_pod("q", NS, gpumem=1000))
        assert (await scheduler.filter(other, nodes)).failed == {
            "selected": "node unregistered",
            "other": "node unregistered",
        }


async def test_webhook_only_process_writes_no_handshake(cluster) -> None:
    server_api, client = cluster
    await add_gpu_node(client, "gpu")
    serve = ServeSettings(port=0, extender=False)
    async with LegacyServer(client, LegacySettings(), serve) as server:
        await wait_for_nodes(server, "gpu")
        assert handshake(server.state.nodes.store, "gpu") is None
    assert server_api.faults.count("/nodes/gpu", verb="PATCH") == 1
