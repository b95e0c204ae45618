"""The legacy extender over real HTTP, driven by the kube-scheduler stand-in, on the emulator."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from legacy_fixtures import (
    AllocatorStandIn,
    add_gpu_node,
    add_namespace,
    add_plain_node,
    base_url,
    create_pod,
    extender_client,
    gpu_pod,
    gpu_uuid,
    legacy_scheduler,
    pods_path,
    register_value,
    wait_for_nodes,
)

from api.hami_annotations import (
    BIND_PHASE,
    BIND_TIME,
    NODE_HANDSHAKE,
    NODE_LOCK,
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
)
from controller.legacy.config import LegacySettings
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import (
    SCHEDULER_ERROR,
    UNSCHEDULABLE,
    ExtenderCallError,
)

NS = "gpu-test"


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, KubeClient]]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield server, client
        finally:
            await client.aclose()


async def node_objects(client: KubeClient, *names: str) -> list[dict[str, Any]]:
    return [await client.get(object_path("/api/v1/nodes", name)) for name in names]


async def events(client: KubeClient, reason: str, server) -> list[dict[str, Any]]:
    await server.extender.events.wait_idle()
    listing = await client.list(f"/api/v1/namespaces/{NS}/events")
    return [e for e in listing["items"] if e["reason"] == reason]


async def test_filter_and_bind_write_what_hami_writes(cluster) -> None:
    _, client = cluster
    await add_plain_node(client, "gpu-node-1")
    await add_gpu_node(client, "gpu-node-2")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "gpu-node-1", "gpu-node-2")
        pod = await create_pod(client, gpu_pod("gpu-pod", NS, gpumem=3000))
        nodes = await node_objects(client, "gpu-node-1", "gpu-node-2")
        result = await scheduler.schedule_once(pod, nodes)
        assert (result.node, result.reason) == ("gpu-node-2", None)

        stored = await client.get(object_path(pods_path(NS), "gpu-pod"))
        annotations = stored["metadata"]["annotations"]
        devices = f"{gpu_uuid('gpu-node-2', 1)},NVIDIA,3000,0:;"
        assert annotations[VGPU_DEVICES_TO_ALLOCATE] == devices
        assert annotations[VGPU_DEVICES_ALLOCATED] == devices
        assert annotations[VGPU_NODE] == "gpu-node-2"
        assert stored["metadata"]["labels"][VGPU_NODE] == "gpu-node-2"
        assert annotations[VGPU_TIME].isdigit() and annotations[BIND_TIME].isdigit()
        assert annotations[BIND_PHASE] == "allocating"
        assert stored["spec"]["nodeName"] == "gpu-node-2"
        node = await client.get(object_path("/api/v1/nodes", "gpu-node-2"))
        stamp, namespace, name = node["metadata"]["annotations"][NODE_LOCK].split(",")
        assert (namespace, name) == (NS, "gpu-pod") and stamp.endswith("Z")
        assert [e["message"] for e in await events(client, "FilteringSucceed", server)] == [
            "Successfully filtered to node gpu-node-2"
        ]

        allocator = AllocatorStandIn(client)
        await allocator.allocate(NS, "gpu-pod", "gpu-node-2")
        node = await client.get(object_path("/api/v1/nodes", "gpu-node-2"))
        assert NODE_LOCK not in (node["metadata"].get("annotations") or {})


async def test_no_fit_lists_every_node_with_its_reason(cluster) -> None:
    _, client = cluster
    await add_plain_node(client, "gpu-node-1")
    await add_gpu_node(client, "gpu-node-2", memory=2048)
    await add_gpu_node(client, "gpu-node-3", register="[{broken")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "gpu-node-1", "gpu-node-2", "gpu-node-3")
        pod = await create_pod(client, gpu_pod("big", NS, gpumem=3000))
        nodes = await node_objects(client, "gpu-node-1", "gpu-node-2", "gpu-node-3")
        answer = await scheduler.filter(pod, nodes)
        assert answer.feasible == []
        assert answer.failed["gpu-node-1"] == "node unregistered"
        assert answer.failed["gpu-node-2"] == "2/2 CardInsufficientMemory"
        assert answer.failed["gpu-node-3"].startswith(
            "node unregistered: annotation hami.io/node-nvidia-register: not valid JSON"
        )
        cycle = await scheduler.schedule_once(pod, nodes)
        assert cycle.reason == UNSCHEDULABLE and "3 nodes are available" in cycle.message
        failed = await events(client, "FilteringFailed", server)
        assert failed and failed[0]["message"].startswith("no available node, 3 nodes do not meet")
        stored = await client.get(object_path(pods_path(NS), "big"))
        assert VGPU_NODE not in (stored["metadata"].get("annotations") or {})


async def test_repeated_filtering_failures_fold_into_one_event_with_a_count(cluster) -> None:
    """kube-scheduler retries an unschedulable pod for as long as it is pending."""
    _, client = cluster
    await add_gpu_node(client, "n1", memory=2048)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        pod = await create_pod(client, gpu_pod("big", NS, gpumem=3000))
        nodes = await node_objects(client, "n1")
        for _ in range(5):
            assert (await scheduler.filter(pod, nodes)).feasible == []
        failed = await events(client, "FilteringFailed", server)
    assert [(e["count"], e["involvedObject"]["name"]) for e in failed] == [(5, "big")]
    assert failed[0]["source"]["component"] == "hami-scheduler"


async def test_malformed_node_does_not_stop_scheduling_elsewhere(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "bad", register="GPU-x,ten,1,1,NVIDIA,0,true:")
    await add_gpu_node(client, "good")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "bad", "good")
        pod = await create_pod(client, gpu_pod("p", NS, gpumem=1000))
        result = await scheduler.filter(pod, await node_objects(client, "bad", "good"))
        assert result.feasible == ["good"]


async def test_pod_without_gpu_passes_through_untouched(cluster) -> None:
    _, client = cluster
    await add_plain_node(client, "a")
    await add_plain_node(client, "b")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        pod = await create_pod(client, gpu_pod("cpu", NS, gpu=None))
        result = await scheduler.filter(pod, await node_objects(client, "a", "b"))
        assert result.feasible == ["a", "b"] and result.failed == {}
        stored = await client.get(object_path(pods_path(NS), "cpu"))
        assert not stored["metadata"].get("annotations")


async def test_full_nodes_request_is_a_side_effect_free_simulation(cluster) -> None:
    server_api, client = cluster
    await add_gpu_node(client, "n1")
    await add_gpu_node(client, "n2")
    async with legacy_scheduler(client) as server, extender_client(server, False) as scheduler:
        await wait_for_nodes(server, "n1", "n2")
        pod = await create_pod(client, gpu_pod("sim", NS, gpumem=1000))
        patches = server_api.faults.count("/pods", verb="PATCH")
        result = await scheduler.filter(pod, await node_objects(client, "n1", "n2"))
        assert len(result.feasible) == 1
        assert server_api.faults.count("/pods", verb="PATCH") == patches
        assert server.state.allocations == {}


async def test_full_nodes_are_read_from_the_objects_sent_not_only_the_cache(cluster) -> None:
    """cluster-autoscaler's template node: never created, so no watch has shown it."""
    _, client = cluster
    await add_gpu_node(client, "known", memory=2048)
    template = {
        "metadata": {
            "name": "template-gpu-node",
            "annotations": {NODE_NVIDIA_REGISTER: register_value("template-gpu-node")},
        },
        "status": {"allocatable": {"nvidia.com/gpu": "20"}},
    }
    unregistered = {"metadata": {"name": "template-plain-node"}}
    async with legacy_scheduler(client) as server, extender_client(server, False) as scheduler:
        await wait_for_nodes(server, "known")
        pod = await create_pod(client, gpu_pod("scale-up", NS, gpumem=3000))
        known = await node_objects(client, "known")
        result = await scheduler.filter(pod, [*known, template, unregistered])
        assert "template-gpu-node" not in server.state.inventory
        assert server.state.allocations == {}
    assert result.feasible == ["template-gpu-node"]
    assert result.failed["template-plain-node"] == "node unregistered"


async def test_bind_releases_the_lock_and_answers_error_when_binding_fails(cluster) -> None:
    server_api, client = cluster
    await add_gpu_node(client, "n1")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        pod = await create_pod(client, gpu_pod("p", NS, gpumem=1000))
        await scheduler.filter(pod, await node_objects(client, "n1"))
        server_api.faults.fail("/binding", verb="POST", status=409, message="already bound")
        cycle = await scheduler.schedule_once(pod, await node_objects(client, "n1"))
        assert cycle.reason == SCHEDULER_ERROR and "already bound" in cycle.message
        node = await client.get(object_path("/api/v1/nodes", "n1"))
        assert NODE_LOCK not in (node["metadata"].get("annotations") or {})
        assert await events(client, "BindingFailed", server)


async def test_locked_node_blocks_another_pod_until_released(cluster) -> None:
    """With no wait allowed, a held lock fails the bind at once, as in HAMi."""
    _, client = cluster
    await add_gpu_node(client, "n1")
    settings = LegacySettings(node_lock_retry_timeout=timedelta(0))
    async with legacy_scheduler(client, settings) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        first = await create_pod(client, gpu_pod("first", NS, gpumem=1000))
        second = await create_pod(client, gpu_pod("second", NS, gpumem=1000))
        nodes = await node_objects(client, "n1")
        assert (await scheduler.schedule_once(first, nodes)).node == "n1"
        blocked = await scheduler.schedule_once(second, nodes)
        assert blocked.reason == SCHEDULER_ERROR
        assert f"locked by {NS}/first" in blocked.message
        await AllocatorStandIn(client).allocate(NS, "first", "n1")
        assert (await scheduler.schedule_once(second, nodes)).node == "n1"


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        (b"{not json", 400, "not JSON"),
        (b"[]", 400, "ExtenderArgs"),
        (b'{"Pod": {"metadata": {"name": "p"}}, "NodeNames": [1]}', 400, "NodeNames"),
        (b'{"Pod": {"metadata": {"name": "p"}}}', 400, "NodeNames or Nodes"),
        (b'{"Pod": "x", "NodeNames": []}', 400, "Pod"),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": "x"}}, "NodeNames": []}',
            400,
            "Pod.spec.containers: expected a list",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [7]}}, "NodeNames": []}',
            400,
            "Pod.spec.containers[0]: expected an object",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p", "annotations": {"a": 1}}}, "NodeNames": []}',
            400,
            "Pod.metadata.annotations: values must be strings",
        ),
        (
            b'{"Pod": {"metadata": {"name": "p"}, "spec": {"containers": [{"resources": '
            b'{"limits": []}}]}}, "NodeNames": []}',
            400,
            "Pod.spec.containers[0].resources.limits: expected an object",
        ),
    ],
)
async def test_malformed_filter_args_get_400_naming_the_field(
    cluster, body: bytes, status: int, field: str
) -> None:
    _, client = cluster
    async with (
        legacy_scheduler(client) as server,
        aiohttp.ClientSession() as session,
        session.post(f"{base_url(server)}/filter", data=body) as response,
    ):
        assert response.status == status
        assert field in (await response.json())["Error"]


async def test_oversized_body_is_413_and_bad_bind_args_are_400(cluster) -> None:
    _, client = cluster
    async with legacy_scheduler(client) as server, aiohttp.ClientSession() as session:
        huge = json.dumps({"Pod": {"metadata": {"name": "x" * (1 << 20)}}}).encode()
        async with session.post(f"{base_url(server)}/filter", data=huge) as response:
            assert response.status == 413
        async with session.post(f"{base_url(server)}/bind", json={"PodName": "p"}) as response:
            assert response.status == 400
            assert "PodNamespace" in (await response.json())["Error"]
        async with session.get(f"{base_url(server)}/healthz") as response:
            assert response.status == 200
        async with session.get(f"{base_url(server)}/readyz") as response:
            assert response.status == 200


async def test_bad_resource_value_is_a_clear_error(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "n1")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        pod = gpu_pod("odd", NS, gpumem=1000)
        pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "500m"
        pod = await create_pod(client, pod)
        cycle = await scheduler.schedule_once(pod, await node_objects(client, "n1"))
        assert cycle.reason == SCHEDULER_ERROR
        assert "nvidia.com/gpu" in cycle.message and "whole number" in cycle.message


async def test_changed_register_annotation_rereads_the_node(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "n1", memory=2048)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        pod = await create_pod(client, gpu_pod("p", NS, gpumem=3000))
        nodes = await node_objects(client, "n1")
        assert (await scheduler.filter(pod, nodes)).feasible == []
        bigger = (await client.get(object_path("/api/v1/nodes", "n1")))["metadata"]["annotations"][
            NODE_NVIDIA_REGISTER
        ].replace('"devmem":2048', '"devmem":8192')
        patch = {"metadata": {"annotations": {NODE_NVIDIA_REGISTER: bigger}}}
        await client.patch(object_path("/api/v1/nodes", "n1"), patch)

        def reread(_: dict[str, Any]) -> bool:
            entry = server.state.inventory.get("n1")
            return entry is not None and entry.register_value == bigger

        await server.state.nodes.wait_for(reread)
        assert (await scheduler.filter(pod, nodes)).feasible == ["n1"]
        await client.patch(
            object_path("/api/v1/nodes", "n1"),
            {"metadata": {"annotations": {NODE_NVIDIA_REGISTER: None}}},
        )
        await server.state.nodes.wait_for(lambda _: server.state.inventory["n1"].node is None)
        other = await create_pod(client, gpu_pod("q", NS, gpumem=3000))
        assert (await scheduler.filter(other, nodes)).failed == {"n1": "node unregistered"}


async def test_bind_of_a_pod_without_gpu_takes_no_lock(cluster) -> None:
    server_api, client = cluster
    await add_gpu_node(client, "n1")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        await server.state.nodes.wait_for(
            lambda store: NODE_HANDSHAKE in store["n1"]["metadata"]["annotations"]
        )
        pod = await create_pod(client, gpu_pod("cpu", NS, gpu=None))
        writes = server_api.faults.count("/nodes/n1", verb="PATCH")
        await scheduler.bind(pod, "n1")
        assert server_api.faults.count("/nodes/n1", verb="PATCH") == writes
        node = await client.get(object_path("/api/v1/nodes", "n1"))
        assert NODE_LOCK not in node["metadata"]["annotations"]
        stored = await client.get(object_path(pods_path(NS), "cpu"))
        assert stored["spec"]["nodeName"] == "n1"


async def test_late_watch_event_keeps_the_share_and_deletion_frees_it(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "n1", gpus=1)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        nodes = await node_objects(client, "n1")
        first = await create_pod(client, gpu_pod("first", NS))
        second = await create_pod(client, gpu_pod("second", NS))
        assert (await scheduler.filter(first, nodes)).feasible == ["n1"]
        key = f"{NS}/first"
        await server.state.pods.wait_for(
            lambda store: VGPU_NODE in (store[key]["metadata"].get("annotations") or {})
        )
        for handler in server.state.pods.handlers:
            handler("ADDED", first)
        assert (await scheduler.filter(second, nodes)).failed == {
            "n1": "1/1 CardInsufficientMemory"
        }
        await client.delete(object_path(pods_path(NS), "first"))
        uid = first["metadata"]["uid"]
        await server.state.pods.wait_for(lambda _: uid not in server.state.allocations)
        assert (await scheduler.filter(second, nodes)).feasible == ["n1"]


async def test_namespace_quota_limits_filter(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "n1")
    quota = {
        "metadata": {"name": "gpu", "namespace": NS},
        "spec": {"hard": {"limits.nvidia.com/gpumem": "5000"}},
    }
    await client.create(f"/api/v1/namespaces/{NS}/resourcequotas", quota)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        await server.state.quotas.wait_for(lambda store: len(store) == 1)
        nodes = await node_objects(client, "n1")
        first = await create_pod(client, gpu_pod("a", NS, gpumem=3000))
        assert (await scheduler.filter(first, nodes)).feasible == ["n1"]
        second = await create_pod(client, gpu_pod("b", NS, gpumem=3000))
        assert (await scheduler.filter(second, nodes)).failed == {"n1": "2/2 ResourceQuotaNotFit"}


async def test_unknown_scheduling_policy_is_a_clear_error(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "n1")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        pod = gpu_pod("odd-policy", NS, gpumem=1000)
        pod["metadata"]["annotations"] = {"hami.io/gpu-scheduler-policy": "fastest"}
        pod = await create_pod(client, pod)
        cycle = await scheduler.schedule_once(pod, await node_objects(client, "n1"))
        assert cycle.reason == SCHEDULER_ERROR
        assert "unknown policy 'fastest'" in cycle.message


async def test_bind_refuses_a_node_the_pod_was_not_filtered_for(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "n1")
    await add_gpu_node(client, "n2")
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1", "n2")
        pod = await create_pod(client, gpu_pod("p", NS, gpumem=1000))
        with pytest.raises(ExtenderCallError, match="filtered on no node yet, not n1"):
            await scheduler.bind(pod, "n1")
        chosen = (await scheduler.filter(pod, await node_objects(client, "n1", "n2"))).feasible
        other = "n2" if chosen == ["n1"] else "n1"
        with pytest.raises(ExtenderCallError, match=f"filtered on node {chosen[0]}, not {other}"):
            await scheduler.bind(pod, other)
        for name in ("n1", "n2"):
            node = await client.get(object_path("/api/v1/nodes", name))
            assert NODE_LOCK not in node["metadata"]["annotations"]


async def test_metrics_show_hamis_series_for_a_filtered_pod(cluster) -> None:
    _, client = cluster
    await add_gpu_node(client, "n1", gpus=1)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "n1")
        pod = await create_pod(client, gpu_pod("p", NS, gpumem=1000, gpucores=30))
        assert (await scheduler.filter(pod, await node_objects(client, "n1"))).feasible == ["n1"]
        async with (
            aiohttp.ClientSession() as session,
            session.get(f"{base_url(server)}/metrics") as response,
        ):
            text = await response.text()
    device = f'device_uuid="{gpu_uuid("n1", 0)}"'
    memory = [line for line in text.splitlines() if line.startswith("hami_gpu_memory_allocated")]
    assert len(memory) == 1 and device in memory[0]
    assert float(memory[0].rsplit(" ", 1)[1]) == 1000 * (1 << 20)
    vgpu = [line for line in text.splitlines() if line.startswith("hami_vgpu_core_allocated")]
    assert len(vgpu) == 1 and 'pod="p"' in vgpu[0]
    assert float(vgpu[0].rsplit(" ", 1)[1]) == 30
