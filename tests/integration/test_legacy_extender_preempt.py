"""The legacy extender's preempt verb over HTTP with kube-scheduler's JSON, on the emulator.

Every holder is a real legacy pod the extender filtered and bound, pinned to
one GPU with `nvidia.com/use-gpuuuid`; the requests are what kube-scheduler's
`preemption.callExtenders` sends (Go field names, the Meta form for a
nodeCacheCapable extender, full pods otherwise). Node GPUs hold 16384 MiB,
100 cores and 10 slots unless a case says otherwise.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from legacy_fixtures import (
    AllocatorStandIn,
    add_gpu_node,
    add_namespace,
    base_url,
    create_pod,
    extender_client,
    gpu_pod,
    gpu_uuid,
    legacy_scheduler,
    wait_for_nodes,
)

from api.hami_annotations.keys import USE_GPU_UUID
from controller.legacy.config import CallerAuthSettings
from controller.legacy.server import LegacyServer
from dra_driver.kube.rest import ConflictError, KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import SchedulerExtenderClient

NS = "preempt-test"
HIGH = 1000


@dataclass
class Cluster:
    client: KubeClient
    server: LegacyServer
    scheduler: SchedulerExtenderClient
    allocator: AllocatorStandIn
    last_answer: dict[str, Any] = field(default_factory=dict)

    async def place(
        self,
        name: str,
        node: str,
        gpu: int,
        *,
        gpumem: int,
        gpucores: int | None = None,
        priority: int = 0,
    ) -> dict[str, Any]:
        """A legacy pod filtered and bound by the extender onto the node's GPU `gpu`."""
        pod = gpu_pod(name, NS, gpumem=gpumem, gpucores=gpucores)
        pod["metadata"]["annotations"] = {USE_GPU_UUID: gpu_uuid(node, gpu)}
        if priority:
            pod["spec"]["priorityClassName"] = await priority_class(self.client, priority)
        created = await create_pod(self.client, pod)
        node_object = await self.client.get(object_path("/api/v1/nodes", node))
        result = await self.scheduler.schedule_once(created, [node_object])
        assert (result.node, result.reason) == (node, None), result.message
        await self.allocator.allocate(NS, name, node)
        return await self.client.get(object_path(f"/api/v1/namespaces/{NS}/pods", name))

    async def preempt(
        self,
        preemptor: dict[str, Any],
        proposed: dict[str, list[dict[str, Any]]],
        *,
        meta: bool = True,
        pdb_violations: int = 0,
    ) -> dict[str, set[str]]:
        """POST kube-scheduler's ExtenderPreemptionArgs; per node, the victims' names."""
        if meta:
            args = {
                "Pod": preemptor,
                "NodeNameToVictims": None,
                "NodeNameToMetaVictims": {
                    node: {
                        "Pods": [{"UID": pod["metadata"]["uid"]} for pod in pods],
                        "NumPDBViolations": pdb_violations,
                    }
                    for node, pods in proposed.items()
                },
            }
        else:
            args = {
                "Pod": preemptor,
                "NodeNameToVictims": {
                    node: {"Pods": pods, "NumPDBViolations": pdb_violations}
                    for node, pods in proposed.items()
                },
                "NodeNameToMetaVictims": None,
            }
        async with (
            aiohttp.ClientSession() as session,
            session.post(f"{base_url(self.server)}/preempt", json=args) as response,
        ):
            assert response.status == 200, await response.text()
            answer = await response.json()
        names = {
            pod["metadata"]["uid"]: pod["metadata"]["name"]
            for pods in proposed.values()
            for pod in pods
        }
        listing = await self.client.list(f"/api/v1/namespaces/{NS}/pods")
        names.update({pod["metadata"]["uid"]: pod["metadata"]["name"] for pod in listing["items"]})
        self.last_answer = answer
        return {
            node: {names[victim["UID"]] for victim in victims["Pods"]}
            for node, victims in (answer["NodeNameToMetaVictims"] or {}).items()
        }


async def priority_class(client: KubeClient, value: int) -> str:
    """A PriorityClass of that value (the Priority admission plugin sets spec.priority)."""
    name = f"priority-{value}"
    path = "/apis/scheduling.k8s.io/v1/priorityclasses"
    body = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "value": value}
    with contextlib.suppress(ConflictError):
        await client.create(path, {**body, "metadata": {"name": name}})
    return name


def preemptor(
    name: str,
    *,
    gpumem: int,
    gpucores: int | None = None,
    priority: int = HIGH,
    policy: str | None = None,
    only_gpu: str | None = None,
) -> dict[str, Any]:
    """The pending pod as kube-scheduler holds it (never created: it only has to be sent)."""
    pod = gpu_pod(name, NS, gpumem=gpumem, gpucores=gpucores)
    pod["metadata"]["uid"] = f"uid-{name}"
    pod["spec"]["priority"] = priority
    if policy is not None:
        pod["spec"]["preemptionPolicy"] = policy
    if only_gpu is not None:
        pod["metadata"]["annotations"] = {USE_GPU_UUID: only_gpu}
    return pod


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[Cluster]:
    async with APIServer() as api:
        client = await KubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            await add_gpu_node(client, "n1")
            await add_gpu_node(client, "n2", gpus=1)
            await add_gpu_node(client, "n3", gpus=1, count=2)
            async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
                await wait_for_nodes(server, "n1", "n2", "n3")
                yield Cluster(client, server, scheduler, AllocatorStandIn(client))
        finally:
            await client.aclose()


@pytest.mark.parametrize("meta", [True, False], ids=["meta-victims", "full-pods"])
async def test_memory_bound_keeps_proposed_victims_and_adds_the_fewest_lowest(
    cluster: Cluster, meta: bool
) -> None:
    """n1: GPU 0 holds a 4000 (p0), b 6000 (p10), c 4000 (p100); GPU 1 holds e 10000 (p0).
    The pod needs 12000 MiB anywhere. kube-scheduler proposed a; without a, GPU 0 has
    6384 free. Reprieve c, then b (more important), then e: with b back GPU 0 has 6384,
    so the pod needs GPU 1 and e stays a victim. a + e: two, the lowest priorities."""
    a = await cluster.place("a", "n1", 0, gpumem=4000)
    await cluster.place("b", "n1", 0, gpumem=6000, priority=10)
    await cluster.place("c", "n1", 0, gpumem=4000, priority=100)
    await cluster.place("e", "n1", 1, gpumem=10000)
    pod = preemptor("big", gpumem=12000)
    assert await cluster.preempt(pod, {"n1": [a]}, meta=meta) == {"n1": {"a", "e"}}


async def test_proposed_victims_that_free_enough_are_answered_alone(cluster: Cluster) -> None:
    a = await cluster.place("a", "n1", 0, gpumem=10000)
    await cluster.place("b", "n1", 0, gpumem=6000)
    pod = preemptor("mid", gpumem=8000, only_gpu=gpu_uuid("n1", 0))
    assert await cluster.preempt(pod, {"n1": [a]}, pdb_violations=1) == {"n1": {"a"}}
    assert cluster.last_answer["NodeNameToMetaVictims"]["n1"]["NumPDBViolations"] == 1


async def test_cores_bound(cluster: Cluster) -> None:
    """n2, one GPU: x holds 60 cores, y 30; the pod needs 50. Without the proposed y,
    x's 60 + 50 is over 100: x is added. Without the proposed x, 30 + 50 fits."""
    x = await cluster.place("x", "n2", 0, gpumem=1000, gpucores=60)
    y = await cluster.place("y", "n2", 0, gpumem=1000, gpucores=30)
    pod = preemptor("cores", gpumem=1000, gpucores=50)
    assert await cluster.preempt(pod, {"n2": [y]}) == {"n2": {"x", "y"}}
    assert await cluster.preempt(pod, {"n2": [x]}) == {"n2": {"x"}}


async def test_split_count_bound(cluster: Cluster) -> None:
    """n3, one GPU with 2 slots, both taken by 1000 MiB pods: memory is plenty, a slot is not."""
    p = await cluster.place("p", "n3", 0, gpumem=1000)
    await cluster.place("q", "n3", 0, gpumem=1000, priority=5)
    pod = preemptor("slot", gpumem=1000)
    assert await cluster.preempt(pod, {"n3": [p]}) == {"n3": {"p"}}
    assert await cluster.preempt(pod, {}) == {}


async def test_uuid_filter_only_victims_on_the_allowed_gpu_help(cluster: Cluster) -> None:
    """n1: u0 fills GPU 0, u1 fills GPU 1; the pod may only use GPU 1."""
    u0 = await cluster.place("u0", "n1", 0, gpumem=16000)
    u1 = await cluster.place("u1", "n1", 1, gpumem=16000)
    pod = preemptor("pinned", gpumem=8000, only_gpu=gpu_uuid("n1", 1))
    assert await cluster.preempt(pod, {"n1": [u1]}) == {"n1": {"u1"}}
    assert await cluster.preempt(pod, {"n1": [u0]}) == {"n1": {"u0", "u1"}}


async def test_equal_or_higher_priority_never_victims_and_hopeless_nodes_dropped(
    cluster: Cluster,
) -> None:
    """n2: h (the pod's own priority) fills the GPU; a low pod beside it frees too little.
    n3: s (higher priority) and t (p0) hold the 2 slots; removing t is enough."""
    h = await cluster.place("h", "n2", 0, gpumem=16000, priority=HIGH)
    low = await cluster.place("low", "n2", 0, gpumem=300)
    s = await cluster.place("s", "n3", 0, gpumem=1000, priority=HIGH + 1)
    t = await cluster.place("t", "n3", 0, gpumem=1000)
    pod = preemptor("urgent", gpumem=8000)
    answer = await cluster.preempt(pod, {"n2": [h, low], "n3": [s, t]})
    assert answer == {"n3": {"t"}}


async def test_never_policy_preempts_nothing(cluster: Cluster) -> None:
    p = await cluster.place("p", "n3", 0, gpumem=1000)
    await cluster.place("q", "n3", 0, gpumem=1000)
    pod = preemptor("polite", gpumem=1000, policy="Never")
    assert await cluster.preempt(pod, {"n3": [p]}) == {}


async def test_malformed_args_name_the_field(cluster: Cluster) -> None:
    url = f"{base_url(cluster.server)}/preempt"
    body = {"Pod": preemptor("x", gpumem=1), "NodeNameToMetaVictims": {"n1": {"Pods": "no"}}}
    async with aiohttp.ClientSession() as session, session.post(url, json=body) as response:
        assert response.status == 400
        assert "NodeNameToMetaVictims.n1.Pods" in (await response.json())["Error"]


async def test_preempt_needs_an_allowed_caller(tmp_path: Path) -> None:
    async with APIServer() as api:
        client = await KubeClient.from_kubeconfig(api.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            guarded = CallerAuthSettings(allowed_callers=frozenset({"kube-scheduler"}))
            async with (
                legacy_scheduler(client, caller_auth=guarded) as server,
                aiohttp.ClientSession() as session,
                session.post(f"{base_url(server)}/preempt", json={}) as response,
            ):
                assert response.status == 401
        finally:
            await client.aclose()
