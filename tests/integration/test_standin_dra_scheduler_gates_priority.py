"""The kube-scheduler stand-in keeps kube-scheduler's contract for gates and priority
(reference §10): a gated pod never enters the queue (SchedulingGates' PreEnqueue: no
attempt, no event, no status write) until its last gate goes, and pending pods are
taken highest `spec.priority` first, then oldest in the queue."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_waits import wait_schedulable, watch_until
from kubernetes import client, config

from simulator.apiserver import APIServer
from simulator.standins.dra_scheduler import PRE_ENQUEUE, DRAScheduler, SchedulerSettings

NAMESPACE = "default"
NO_RETRY = SchedulerSettings(initial_backoff=3600, max_backoff=3600)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[tuple[APIServer, client.ApiClient]]:
    async with APIServer() as server:
        api_client = config.new_client_from_config(
            config_file=str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        )
        yield server, api_client
        api_client.close()


async def call(method: Any, *args: Any, **kwargs: Any) -> Any:
    response = await asyncio.to_thread(method, *args, _preload_content=False, **kwargs)
    return json.loads(response.data)


async def add_node(api: client.ApiClient, name: str, pods: str) -> None:
    body = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": pods}},
    }
    await call(client.CoreV1Api(api).create_node, body)
    await asyncio.to_thread(wait_schedulable, api, name)


async def add_pod(api: client.ApiClient, name: str, **spec: Any) -> dict[str, Any]:
    pod = {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}], **spec},
    }
    return await call(client.CoreV1Api(api).create_namespaced_pod, NAMESPACE, pod)


async def add_priority_class(api: client.ApiClient, name: str, value: int) -> None:
    body = {"metadata": {"name": name}, "value": value}
    await call(client.SchedulingV1Api(api).create_priority_class, body)


async def settled(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The pod once it is bound or refused by the scheduler."""

    def done(kind: str, pod: dict[str, Any]) -> bool:
        conditions = (pod.get("status") or {}).get("conditions") or []
        refused = any(c.get("reason") == "Unschedulable" for c in conditions)
        return bool(pod["spec"].get("nodeName")) or refused

    return await asyncio.to_thread(
        watch_until,
        client.CoreV1Api(api).list_namespaced_pod,
        done,
        NAMESPACE,
        field_selector=f"metadata.name={name}",
    )


async def test_a_gated_pod_is_left_alone_until_its_last_gate_goes(
    cluster: tuple[APIServer, client.ApiClient],
) -> None:
    server, api = cluster
    await add_node(api, "node-a", pods="110")
    gates = [{"name": "kueue.x-k8s.io/admission"}, {"name": "vgpu.hami.io/allocation"}]
    await add_pod(api, "held", schedulingGates=gates)
    await add_pod(api, "free")
    stop = asyncio.Event()
    running = asyncio.create_task(DRAScheduler(api, settings=NO_RETRY).run(stop))
    core = client.CoreV1Api(api)
    try:
        assert (await settled(api, "free"))["spec"]["nodeName"] == "node-a"
        await call(core.patch_namespaced_pod, "held", NAMESPACE, {"spec": {"schedulingGates": []}})
        placed = await settled(api, "held")
    finally:
        stop.set()
        await running
    assert placed["spec"]["nodeName"] == "node-a"
    assert server.audit.write_counts()["kube-scheduler"] == {"pods/binding": 2}


async def test_one_cycle_on_a_gated_pod_writes_nothing(
    cluster: tuple[APIServer, client.ApiClient],
) -> None:
    server, api = cluster
    await add_node(api, "node-a", pods="110")
    await add_pod(api, "held", schedulingGates=[{"name": "b.io/two"}, {"name": "a.io/one"}])
    outcome = await DRAScheduler(api).schedule(NAMESPACE, "held")
    assert (outcome.node, outcome.reason, outcome.message) == (
        None,
        PRE_ENQUEUE,
        "waiting for scheduling gates: [b.io/two a.io/one]",
    )
    assert "kube-scheduler" not in server.audit.write_counts()


async def test_the_highest_priority_pending_pod_takes_the_only_slot(
    cluster: tuple[APIServer, client.ApiClient],
) -> None:
    """Three pods queued at once for one slot: the latest but most important one wins."""
    _, api = cluster
    await add_node(api, "node-a", pods="1")
    await add_priority_class(api, "inference", 1000000)
    await add_pod(api, "batch-1")
    await add_pod(api, "batch-2")
    await add_pod(api, "inference", priorityClassName="inference")
    stop = asyncio.Event()
    running = asyncio.create_task(DRAScheduler(api, settings=NO_RETRY).run(stop))
    try:
        outcomes = {name: await settled(api, name) for name in ("batch-1", "batch-2", "inference")}
    finally:
        stop.set()
        await running
    placed = [name for name, pod in outcomes.items() if pod["spec"].get("nodeName")]
    assert placed == ["inference"]
