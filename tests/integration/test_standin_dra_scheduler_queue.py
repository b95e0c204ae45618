"""DRAScheduler.run against the API emulator: watch-fed caches, the queue, assumed pods.

The backoff is set to an hour wherever a test needs a pod scheduled again, so only the
event the test makes (a claim written by a third party) can bring the pod back before
the watch gives up."""

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
from simulator.standins.dra_scheduler import DRAScheduler, SchedulerSettings

DRIVER = "gpu.example.com"
NAMESPACE = "default"
SHARE_ID = "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"
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


async def add_node(api: client.ApiClient, name: str, pods: str = "110") -> None:
    body = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": pods}},
    }
    await call(client.CoreV1Api(api).create_node, body)
    await asyncio.to_thread(wait_schedulable, api, name)


def allocation(node_name: str) -> dict[str, Any]:
    return {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": DRIVER,
                    "pool": node_name,
                    "device": "gpu-0",
                    "shareID": SHARE_ID,
                    "consumedCapacity": {"memory": "10Gi"},
                }
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node_name]}]}
            ]
        },
        "allocationTimestamp": "2026-11-29T20:00:00Z",
    }


async def add_pod(api: client.ApiClient, name: str, allocated_on: str | None) -> dict[str, Any]:
    """The pod and its claim, the claim allocated on `allocated_on` (unreserved) if given."""
    resources = client.ResourceV1Api(api)
    claim = {
        "metadata": {"name": f"{name}-claim", "namespace": NAMESPACE},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
        },
    }
    created = await call(resources.create_namespaced_resource_claim, NAMESPACE, claim)
    if allocated_on is not None:
        created["status"] = {"allocation": allocation(allocated_on)}
        await call(
            resources.replace_namespaced_resource_claim_status, f"{name}-claim", NAMESPACE, created
        )
    pod = {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-claim"}],
        },
    }
    return await call(client.CoreV1Api(api).create_namespaced_pod, NAMESPACE, pod)


def scheduled_condition(pod: dict[str, Any]) -> dict[str, Any] | None:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conditions if c.get("type") == "PodScheduled"), None)


async def settled(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The pod once it is bound or refused."""

    def done(kind: str, pod: dict[str, Any]) -> bool:
        return bool(pod["spec"].get("nodeName")) or scheduled_condition(pod) is not None

    return await asyncio.to_thread(
        watch_until,
        client.CoreV1Api(api).list_namespaced_pod,
        done,
        NAMESPACE,
        field_selector=f"metadata.name={name}",
    )


async def bound(api: client.ApiClient, name: str) -> dict[str, Any]:
    return await asyncio.to_thread(
        watch_until,
        client.CoreV1Api(api).list_namespaced_pod,
        lambda kind, pod: bool(pod["spec"].get("nodeName")),
        NAMESPACE,
        field_selector=f"metadata.name={name}",
    )


async def test_a_claim_allocated_and_reserved_later_wakes_the_pod_for_one_binding(
    cluster: tuple[APIServer, client.ApiClient],
) -> None:
    server, api = cluster
    await add_node(api, "node-a")
    stop = asyncio.Event()
    running = asyncio.create_task(DRAScheduler(api, settings=NO_RETRY).run(stop))
    try:
        created = await add_pod(api, "late", None)
        refused = await settled(api, "late")
        assert "nodeName" not in refused["spec"]
        assert "cannot allocate all claims" in scheduled_condition(refused)["message"]
        # A controller writes allocation and reservation in one status write.
        resources = client.ResourceV1Api(api)
        claim = await call(resources.read_namespaced_resource_claim, "late-claim", NAMESPACE)
        reservation = {"resource": "pods", "name": "late", "uid": created["metadata"]["uid"]}
        claim["status"] = {"allocation": allocation("node-a"), "reservedFor": [reservation]}
        await call(
            resources.replace_namespaced_resource_claim_status, "late-claim", NAMESPACE, claim
        )
        placed = await bound(api, "late")
    finally:
        stop.set()
        await running
    assert placed["spec"]["nodeName"] == "node-a"
    assert server.audit.write_counts()["kube-scheduler"] == {"pods/status": 1, "pods/binding": 1}


async def test_pods_placed_but_not_yet_bound_count_on_their_node(
    cluster: tuple[APIServer, client.ApiClient],
) -> None:
    """Three pods pinned to a node with room for two, all queued at once: cycles run while
    the first bindings are in flight, so only the assumed pods keep the third off."""
    server, api = cluster
    await add_node(api, "node-a", pods="2")
    names = [f"p{index}" for index in range(3)]
    for name in names:
        await add_pod(api, name, "node-a")
    stop = asyncio.Event()
    running = asyncio.create_task(DRAScheduler(api, settings=NO_RETRY).run(stop))
    try:
        outcomes = [await settled(api, name) for name in names]
    finally:
        stop.set()
        await running
    placed = [pod for pod in outcomes if pod["spec"].get("nodeName") == "node-a"]
    refused = [scheduled_condition(pod) for pod in outcomes if not pod["spec"].get("nodeName")]
    assert len(placed) == 2
    assert [c["message"] for c in refused if c] == [
        "0/1 nodes are available: 1 Too many pods. no new claims to deallocate, preemption: "
        "0/1 nodes are available: 1 No preemption victims found for incoming pod."
    ]
    assert server.audit.write_counts()["kube-scheduler"] == {
        "resourceclaims/status": 2,
        "pods/binding": 2,
        "pods/status": 1,
    }


async def test_run_ends_when_stopped_before_its_watches_synced(tmp_path: Path) -> None:
    """No server answers: the lists keep failing, and `stop` still ends `run`."""
    async with APIServer() as server:
        path = server.write_kubeconfig(tmp_path / "kubeconfig")
    api = config.new_client_from_config(config_file=str(path))
    try:
        stop = asyncio.Event()
        running = asyncio.create_task(DRAScheduler(api).run(stop))
        stop.set()
        await running
    finally:
        api.close()
    assert running.exception() is None
