"""The whole legacy path with real parts: the admission stand-in calls our webhook, the
kube-scheduler stand-in calls our extender's /filter and /bind over HTTP, and the
kubelet stand-in calls our device plugin's Allocate over its unix socket; every node
registered by our device plugin, all against the API emulator."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from typing import Any

from deviceplugin_rig import (
    RESOURCE,
    GpuNode,
    api_client,
    bounded,
    gpu_node,
    mock_gpus,
    scratch_dir,
)
from legacy_fixtures import (
    add_namespace,
    base_url,
    create_pod,
    extender_client,
    gpu_pod,
    legacy_scheduler,
    pods_path,
    wait_for_nodes,
)

from api.hami_annotations import (
    BIND_PHASE,
    NODE_LOCK,
    NODE_NVIDIA_REGISTER,
    NODE_SCHEDULER_POLICY,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    decode_pod_devices,
)
from controller.legacy.config import LegacySettings
from controller.legacy.server import LegacyServer
from dra_driver.kube.rest import KubeClient, object_path
from simulator.standins.admission import AdmissionClient, WebhookConfig
from simulator.standins.kubelet_deviceplugin import ContainerRequest
from simulator.standins.scheduler_extender import SCHEDULER_ERROR

NS = "gpu-test"
USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}
GPU_MIB = 16384
SPLIT = 10


def annotations(obj: dict[str, Any]) -> dict[str, str]:
    return obj["metadata"].get("annotations") or {}


def uuids(node: str, count: int = 2) -> list[str]:
    return [f"GPU-{node}-{index}" for index in range(count)]


@asynccontextmanager
async def cluster(*names: str) -> AsyncIterator[tuple[KubeClient, dict[str, GpuNode]]]:
    """GPU nodes, each with a kubelet stand-in and our running device plugin, and their
    register annotations written; kubelet has reported the allocatable replicas."""
    async with scratch_dir() as root, api_client(root) as (_, client), AsyncExitStack() as stack:
        await add_namespace(client, NS)
        nodes: dict[str, GpuNode] = {}
        for name in names:
            node = await stack.enter_async_context(
                gpu_node(client, root, name, gpus=mock_gpus(uuids(name)), split_count=SPLIT)
            )
            await stack.enter_async_context(node.plugin())
            await bounded(node.kubelet.wait_update(RESOURCE))
            await node.report_allocatable()
            await bounded(node.wait_node(lambda n: NODE_NVIDIA_REGISTER in annotations(n)))
            nodes[name] = node
        yield client, nodes


async def node_objects(client: KubeClient, nodes: dict[str, GpuNode]) -> list[dict[str, Any]]:
    return [await node.node() for node in nodes.values()]


async def test_webhook_filter_bind_allocate_for_one_pod() -> None:
    async with (
        cluster("gpu-node-1", "gpu-node-2") as (client, nodes),
        legacy_scheduler(client) as scheduler,
        extender_client(scheduler) as kube_scheduler,
        AdmissionClient(WebhookConfig(url=f"{base_url(scheduler)}/webhook")) as apiserver,
    ):
        await bounded(wait_for_nodes(scheduler, *nodes))
        asked = gpu_pod("chain", NS, gpumem=3000, gpucores=30, scheduler=None)
        admitted = await apiserver.review(
            apiserver.build_review(asked, namespace=NS, user_info=USER)
        )
        assert admitted.allowed, admitted.status
        pod = await create_pod(client, admitted.object)
        cycle = await kube_scheduler.schedule_once(pod, await node_objects(client, nodes))
        assert cycle.reason is None, cycle.message
        node = nodes[cycle.node]
        admission = await bounded(
            node.kubelet.admit_pod(pod["metadata"]["uid"], RESOURCE, [ContainerRequest("cuda", 1)])
        )
        served = await client.get(object_path(pods_path(NS), "chain"))
        locked = annotations(await node.node()).get(NODE_LOCK)

    assert pod["spec"]["schedulerName"] == "hami-scheduler"
    (granted,) = decode_pod_devices(annotations(served)[VGPU_DEVICES_ALLOCATED])[0]
    envs = admission.responses["cuda"].envs
    assert envs["NVIDIA_VISIBLE_DEVICES"] == granted.uuid
    assert granted.uuid in uuids(cycle.node)
    assert envs["CUDA_DEVICE_MEMORY_LIMIT_0"] == "3000m"
    assert envs["CUDA_DEVICE_SM_LIMIT_0"] == "30"
    assert annotations(served)[VGPU_DEVICES_TO_ALLOCATE] == ";"
    assert annotations(served)[BIND_PHASE] == "success"
    assert locked is None


async def wait_lock_moves(node: GpuNode, held: str | None) -> None:
    """Until the node's lock is no longer `held` (released, or taken by another pod)."""
    await node.wait_node(lambda n: annotations(n).get(NODE_LOCK) != held)


async def place(
    pod: dict[str, Any],
    client: KubeClient,
    nodes: dict[str, GpuNode],
    node_list: list[dict[str, Any]],
    scheduler: LegacyServer,
    admissions: dict[str, asyncio.Lock],
    lock_waits: list[int],
) -> tuple[str, dict[str, str]]:
    """Schedule until bound over the pod's own connection (a bind refused by another
    pod's lock waits for that lock to move, as kube-scheduler retries after its
    backoff), then admit on the node: kubelet admits pods one at a time."""
    name = pod["metadata"]["name"]
    async with extender_client(scheduler) as kube_scheduler:
        while True:
            cycle = await kube_scheduler.schedule_once(pod, node_list)
            if cycle.node is not None:
                break
            contended = any(
                text in cycle.message for text in ("locked by", "lock not written", "earlier binds")
            )
            assert cycle.reason == SCHEDULER_ERROR and contended, cycle.message
            lock_waits.append(1)
            chosen = annotations(await client.get(object_path(pods_path(NS), name)))
            node = nodes[chosen["hami.io/vgpu-node"]]
            held = annotations(await node.node()).get(NODE_LOCK)
            if held is not None:
                await wait_lock_moves(node, held)
    node = nodes[cycle.node]
    async with admissions[cycle.node]:
        admission = await node.kubelet.admit_pod(
            pod["metadata"]["uid"], RESOURCE, [ContainerRequest("cuda", 1)]
        )
    return cycle.node, dict(admission.responses["cuda"].envs)


async def test_fifty_pods_filtered_bound_and_allocated_concurrently_on_four_nodes() -> None:
    names = [f"gpu-node-{i}" for i in range(1, 5)]
    # Binds fail on a held lock, as HAMi's do, so the retry path is the one exercised.
    no_wait = LegacySettings(node_lock_retry_timeout=timedelta(0))
    async with cluster(*names) as (client, nodes), legacy_scheduler(client, no_wait) as scheduler:
        await bounded(wait_for_nodes(scheduler, *names))
        node_list = await node_objects(client, nodes)
        pods = []
        for index in range(50):
            manifest = gpu_pod(f"p{index:02d}", NS, gpumem=2000, gpucores=10)
            manifest["metadata"]["annotations"] = {NODE_SCHEDULER_POLICY: "spread"}
            pods.append(await create_pod(client, manifest))
        admissions = defaultdict(asyncio.Lock)
        lock_waits: list[int] = []
        placed = await bounded(
            asyncio.gather(
                *(
                    place(p, client, nodes, node_list, scheduler, admissions, lock_waits)
                    for p in pods
                )
            ),
            seconds=180,
        )
        stored = [await client.get(object_path(pods_path(NS), p["metadata"]["name"])) for p in pods]
        locks = [annotations(await node.node()).get(NODE_LOCK) for node in nodes.values()]

    memory: dict[str, int] = defaultdict(int)
    cores: dict[str, int] = defaultdict(int)
    shares: dict[str, int] = defaultdict(int)
    for (node, envs), pod in zip(placed, stored, strict=True):
        (granted,) = decode_pod_devices(annotations(pod)[VGPU_DEVICES_ALLOCATED])[0]
        assert envs["NVIDIA_VISIBLE_DEVICES"] == granted.uuid, pod["metadata"]["name"]
        assert granted.uuid in uuids(node)
        assert annotations(pod)[BIND_PHASE] == "success"
        assert annotations(pod)[VGPU_DEVICES_TO_ALLOCATE] == ";"
        memory[granted.uuid] += int(envs["CUDA_DEVICE_MEMORY_LIMIT_0"].removesuffix("m"))
        cores[granted.uuid] += int(envs["CUDA_DEVICE_SM_LIMIT_0"])
        shares[granted.uuid] += 1
    assert sum(shares.values()) == 50
    assert max(memory.values()) <= GPU_MIB
    assert max(cores.values()) <= 100
    assert max(shares.values()) <= SPLIT
    assert len({node for node, _ in placed}) == 4
    assert locks == [None, None, None, None]
    assert lock_waits, "no bind ever met a held lock: the test did not contend"
