"""The kube-scheduler stand-in's NodeResourcesFit against the API emulator, as kube-scheduler
v1.36 decides it (`noderesources/fit.go fitsRequest`; wire fixtures scheduler-extender/,
config A): a requested resource the node does not list counts as 0 allocatable, every
insufficient resource is a reason of its own, a request larger than the node's
allocatable makes preemption useless; and a DRA extended resource (a DeviceClass's
`deviceclass.resource.kubernetes.io/<class>` or extendedResourceName) the node does not
list is not NodeResourcesFit's to refuse."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_waits import wait_schedulable
from kubernetes import client, config

from simulator.apiserver import APIServer
from simulator.standins.dra_scheduler import DRAScheduler
from simulator.standins.node_fit import DRA_EXTENDED_NOT_MODELLED, FitFailure, fit_failure

NAMESPACE = "default"
GPU = "nvidia.com/gpu"
CLASS = "nvidia.vgpu.hami.io"
IMPLICIT = f"deviceclass.resource.kubernetes.io/{CLASS}"
TAIL_NOT_HELPFUL = "Preemption is not helpful for scheduling."


@pytest.fixture
async def api(tmp_path: Path) -> AsyncIterator[client.ApiClient]:
    async with APIServer() as server:
        api_client = config.new_client_from_config(
            config_file=str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        )
        yield api_client
        api_client.close()


async def call(method: Any, *args: Any, **kwargs: Any) -> Any:
    response = await asyncio.to_thread(method, *args, _preload_content=False, **kwargs)
    return json.loads(response.data)


def node(name: str, **extra: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110", **extra}},
    }


def pod(name: str, node_name: str | None = None, **limits: str) -> dict[str, Any]:
    """A pod that sets only limits, as every legacy GPU pod does: its requests are the API
    server's defaults."""
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "registry.k8s.io/pause:3.10", "resources": {"limits": limits}}
        ]
    }
    if node_name is not None:
        spec["nodeName"] = node_name
    return {"metadata": {"name": name, "namespace": NAMESPACE}, "spec": spec}


async def add_nodes(api: client.ApiClient, *bodies: dict[str, Any]) -> None:
    for body in bodies:
        await call(client.CoreV1Api(api).create_node, body)
        await asyncio.to_thread(wait_schedulable, api, body["metadata"]["name"])


async def schedule(api: client.ApiClient, body: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    core = client.CoreV1Api(api)
    await call(core.create_namespaced_pod, NAMESPACE, body)
    name = body["metadata"]["name"]
    outcome = await DRAScheduler(api).schedule(NAMESPACE, name)
    return outcome, await call(core.read_namespaced_pod, name, NAMESPACE)


async def test_a_gpu_pod_stays_pending_on_a_node_that_lists_no_gpu(api: client.ApiClient) -> None:
    await add_nodes(api, node("amd-node"))

    outcome, stored = await schedule(api, pod("legacy-gpu", **{GPU: "1"}))

    assert outcome.node is None and outcome.reason == "Unschedulable"
    assert outcome.message == (
        f"0/1 nodes are available: 1 Insufficient {GPU}. no new claims to deallocate, "
        f"preemption: 0/1 nodes are available: 1 {TAIL_NOT_HELPFUL}"
    )
    assert "nodeName" not in stored["spec"]
    condition = stored["status"]["conditions"][-1]
    assert (condition["type"], condition["reason"], condition["message"]) == (
        "PodScheduled",
        "Unschedulable",
        outcome.message,
    )


async def test_a_used_gpu_leaves_preemption_a_chance_an_absent_one_does_not(
    api: client.ApiClient,
) -> None:
    await add_nodes(api, node("gpu-node", **{GPU: "1"}), node("cpu-node"))
    await call(
        client.CoreV1Api(api).create_namespaced_pod,
        NAMESPACE,
        pod("holder", "gpu-node", **{GPU: "1"}),
    )

    outcome, _ = await schedule(api, pod("second", **{GPU: "1"}))

    assert outcome.message == (
        f"0/2 nodes are available: 2 Insufficient {GPU}. no new claims to deallocate, "
        "preemption: 0/2 nodes are available: 1 No preemption victims found for incoming "
        f"pod, 1 {TAIL_NOT_HELPFUL}"
    )


async def test_a_node_that_lists_the_gpu_takes_the_pod(api: client.ApiClient) -> None:
    await add_nodes(api, node("cpu-node"), node("gpu-node", **{GPU: "4"}))

    outcome, stored = await schedule(api, pod("fits", **{GPU: "1"}))

    assert outcome.node == "gpu-node"
    assert stored["spec"]["nodeName"] == "gpu-node"


async def test_every_insufficient_resource_is_a_reason(api: client.ApiClient) -> None:
    await add_nodes(api, node("small"))

    outcome, _ = await schedule(api, pod("large", cpu="16", **{GPU: "1"}))

    assert outcome.message == (
        f"0/1 nodes are available: 1 Insufficient cpu, 1 Insufficient {GPU}. no new claims "
        f"to deallocate, preemption: 0/1 nodes are available: 1 {TAIL_NOT_HELPFUL}"
    )


async def test_a_dra_extended_resource_is_left_to_dynamic_resources(
    api: client.ApiClient,
) -> None:
    """kube-scheduler allocates it from the class's devices through DynamicResources;
    the stand-in does not model that and says so rather than `Insufficient`."""
    await add_nodes(api, node("dra-node"))
    await call(
        client.ResourceV1Api(api).create_device_class,
        {"metadata": {"name": CLASS}, "spec": {}},
    )

    outcome, _ = await schedule(api, pod("by-class", **{IMPLICIT: "1"}))

    assert outcome.node is None
    assert "Insufficient" not in outcome.message
    assert f"1 {DRA_EXTENDED_NOT_MODELLED}" in outcome.message


async def test_a_node_listing_the_extended_resource_fits_it_as_usual(
    api: client.ApiClient,
) -> None:
    await add_nodes(api, node("plugin-node", **{IMPLICIT: "2"}))
    await call(
        client.ResourceV1Api(api).create_device_class,
        {"metadata": {"name": CLASS}, "spec": {}},
    )

    outcome, _ = await schedule(api, pod("by-plugin", **{IMPLICIT: "1"}))

    assert outcome.node == "plugin-node"


@pytest.mark.parametrize(
    ("allocatable", "requests", "expected"),
    [
        ({}, {GPU: "1"}, FitFailure((f"Insufficient {GPU}",), resolvable=False)),
        ({GPU: "0"}, {GPU: "1"}, FitFailure((f"Insufficient {GPU}",), resolvable=False)),
        ({GPU: "2"}, {GPU: "1"}, None),
        ({GPU: "2"}, {GPU: "0"}, None),
        (
            {"cpu": "2", "memory": "1Gi", "pods": "110"},
            {"cpu": "3", "memory": "2Gi"},
            FitFailure(("Insufficient cpu", "Insufficient memory"), resolvable=False),
        ),
    ],
)
def test_resource_fit_predicate(
    allocatable: dict[str, str], requests: dict[str, str], expected: FitFailure | None
) -> None:
    target = {"metadata": {"name": "n"}, "status": {"allocatable": {"pods": "110", **allocatable}}}
    candidate = {"spec": {"containers": [{"resources": {"requests": requests}}]}}

    assert fit_failure(candidate, target, []) == expected


def test_a_node_with_no_pod_room_listed_takes_no_pod() -> None:
    """AllowedPodNumber is 0 when allocatable lacks `pods`."""
    target = {"metadata": {"name": "n"}, "status": {"allocatable": {"cpu": "8"}}}
    candidate = {"spec": {"containers": [{"name": "main"}]}}

    assert fit_failure(candidate, target, []) == FitFailure(("Too many pods",), resolvable=True)
