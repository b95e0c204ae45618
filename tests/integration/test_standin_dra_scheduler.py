"""DRAScheduler against the API emulator: the behaviours verified on a real kube-scheduler."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cluster_waits import wait_schedulable
from kubernetes import client, config

from dra_driver.objects.node_predicates import node_selector_matches
from simulator.apiserver import APIServer
from simulator.standins.dra_scheduler import DRAScheduler
from simulator.standins.node_fit import FitFailure, fit_failure, pod_untolerated_taint

DRIVER = "gpu.example.com"
NAMESPACE = "default"
SHARE_ID = "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d"


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


def node(name: str, cpu: str = "8", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": spec,
        "status": {"allocatable": {"cpu": cpu, "memory": "32Gi", "pods": "110"}},
    }


def pod(name: str, cpu: str = "1", **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": cpu}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-claim"}],
            **spec,
        },
    }


def allocation(node_name: str, timestamp: bool = True) -> dict[str, Any]:
    result = {
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
    }
    if timestamp:
        result["allocationTimestamp"] = "2026-11-29T20:00:00Z"
    return result


def without_timestamp(allocated: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in allocated.items() if k != "allocationTimestamp"}


async def create_claim(
    api: client.ApiClient, name: str, allocated: dict[str, Any] | None
) -> dict[str, Any]:
    resources = client.ResourceV1Api(api)
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": DRIVER}}]}
        },
    }
    claim = await call(resources.create_namespaced_resource_claim, NAMESPACE, body)
    if allocated is not None:
        claim["status"] = {"allocation": allocated}
        claim = await call(
            resources.replace_namespaced_resource_claim_status, name, NAMESPACE, claim
        )
    return claim


async def setup(
    api: client.ApiClient, pod_body: dict[str, Any], allocated: dict[str, Any] | None
) -> None:
    core = client.CoreV1Api(api)
    for body in (node("node-a"), node("node-b")):
        await call(core.create_node, body)
        await asyncio.to_thread(wait_schedulable, api, body["metadata"]["name"])
    await create_claim(api, f"{pod_body['metadata']['name']}-claim", allocated)
    await call(core.create_namespaced_pod, NAMESPACE, pod_body)


async def read_pod_and_claim(api: client.ApiClient, name: str) -> tuple[Any, Any]:
    stored_pod = await call(client.CoreV1Api(api).read_namespaced_pod, name, NAMESPACE)
    claim = await call(
        client.ResourceV1Api(api).read_namespaced_resource_claim, f"{name}-claim", NAMESPACE
    )
    return stored_pod, claim


async def test_a_preallocated_claim_sends_the_pod_to_its_node_and_reserves_it(
    api: client.ApiClient,
) -> None:
    await setup(api, pod("infer"), allocation("node-b"))

    outcome = await DRAScheduler(api).schedule(NAMESPACE, "infer")
    stored_pod, claim = await read_pod_and_claim(api, "infer")

    assert outcome.node == "node-b"
    assert stored_pod["spec"]["nodeName"] == "node-b"
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["infer"]
    assert claim["status"]["reservedFor"][0]["uid"] == stored_pod["metadata"]["uid"]
    assert without_timestamp(claim["status"]["allocation"]) == (
        without_timestamp(allocation("node-b"))
    )
    assert claim["status"]["allocation"]["allocationTimestamp"].startswith("2026-11-29T20:00:00")


async def test_an_allocation_without_timestamp_never_binds(api: client.ApiClient) -> None:
    await setup(api, pod("late"), allocation("node-a", timestamp=False))

    outcome = await DRAScheduler(api).schedule(NAMESPACE, "late")
    stored_pod, claim = await read_pod_and_claim(api, "late")

    assert outcome.node is None and outcome.reason == "SchedulerError"
    assert "field is immutable" in outcome.message
    assert "nodeName" not in stored_pod["spec"]
    assert "reservedFor" not in claim["status"]
    assert "allocationTimestamp" not in claim["status"]["allocation"]


async def test_a_pod_that_does_not_fit_keeps_its_claim_allocated(api: client.ApiClient) -> None:
    await setup(api, pod("big", cpu="16"), allocation("node-a"))

    outcome = await DRAScheduler(api).schedule(NAMESPACE, "big")
    stored_pod, claim = await read_pod_and_claim(api, "big")

    assert outcome.reason == "Unschedulable"
    # Insufficient cpu fails both nodes before DynamicResources' Filter runs, so no claim
    # is unavailable and PostFilter leaves the allocation alone (verified on kube-scheduler).
    # 16 cpu is more than either node has at all: preemption cannot help (fit.go).
    assert outcome.message == (
        "0/2 nodes are available: 2 Insufficient cpu. no new claims to deallocate, "
        "preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    )
    condition = stored_pod["status"]["conditions"][-1]
    assert (condition["type"], condition["status"], condition["reason"]) == (
        "PodScheduled",
        "False",
        "Unschedulable",
    )
    assert without_timestamp(claim["status"]["allocation"]) == (
        without_timestamp(allocation("node-a"))
    )
    assert "reservedFor" not in claim["status"]
    assert "nodeName" not in stored_pod["spec"]


TAINT = {"key": "gpu", "value": "broken", "effect": "NoSchedule"}


async def setup_tainted(api: client.ApiClient, pod_body: dict[str, Any]) -> None:
    """node-a tainted, node-b not: the pod's claim, allocated on node-a, reaches only node-a."""
    core = client.CoreV1Api(api)
    for body in (node("node-a", taints=[TAINT]), node("node-b")):
        await call(core.create_node, body)
    await asyncio.to_thread(wait_schedulable, api, "node-b")
    await create_claim(api, f"{pod_body['metadata']['name']}-claim", allocation("node-a"))
    await call(core.create_namespaced_pod, NAMESPACE, pod_body)


async def reserve(api: client.ApiClient, claim_name: str, pod_name: str, uid: str) -> None:
    resources = client.ResourceV1Api(api)
    claim = await call(resources.read_namespaced_resource_claim, claim_name, NAMESPACE)
    claim["status"]["reservedFor"] = [{"resource": "pods", "name": pod_name, "uid": uid}]
    await call(resources.replace_namespaced_resource_claim_status, claim_name, NAMESPACE, claim)


async def test_post_filter_deallocates_a_claim_unavailable_where_the_pod_otherwise_fits(
    api: client.ApiClient,
) -> None:
    await setup_tainted(api, pod("moved"))

    outcome = await DRAScheduler(api).schedule(NAMESPACE, "moved")
    stored_pod, claim = await read_pod_and_claim(api, "moved")

    assert outcome.reason == "Unschedulable"
    assert outcome.message.startswith(
        "0/2 nodes are available: 1 node(s) had untolerated taint {gpu: broken}, "
        "1 resourceclaim not available on the node."
    )
    assert stored_pod["status"]["conditions"][-1]["message"] == outcome.message
    assert "nodeName" not in stored_pod["spec"]
    assert {"allocation", "reservedFor", "devices"}.isdisjoint(claim.get("status") or {})


async def test_post_filter_deallocates_a_claim_reserved_only_by_the_pod(
    api: client.ApiClient,
) -> None:
    await setup_tainted(api, pod("mine"))
    stored_pod, _ = await read_pod_and_claim(api, "mine")
    await reserve(api, "mine-claim", "mine", stored_pod["metadata"]["uid"])

    outcome = await DRAScheduler(api).schedule(NAMESPACE, "mine")
    _, claim = await read_pod_and_claim(api, "mine")

    assert outcome.reason == "Unschedulable"
    assert {"allocation", "reservedFor"}.isdisjoint(claim.get("status") or {})


async def test_post_filter_keeps_a_claim_another_pod_reserved(api: client.ApiClient) -> None:
    await setup_tainted(api, pod("shared"))
    # A pod that exists: kube-controller-manager drops reservations of pods that do not.
    other = {**pod("other"), "spec": {"containers": pod("other")["spec"]["containers"][:1]}}
    other["spec"]["containers"][0]["resources"] = {}
    created = await call(client.CoreV1Api(api).create_namespaced_pod, NAMESPACE, other)
    await reserve(api, "shared-claim", "other", created["metadata"]["uid"])

    outcome = await DRAScheduler(api).schedule(NAMESPACE, "shared")
    _, claim = await read_pod_and_claim(api, "shared")

    assert outcome.reason == "Unschedulable"
    assert without_timestamp(claim["status"]["allocation"]) == (
        without_timestamp(allocation("node-a"))
    )
    assert [r["name"] for r in claim["status"]["reservedFor"]] == ["other"]


async def test_an_unallocated_claim_is_never_allocated_here(api: client.ApiClient) -> None:
    await setup(api, pod("fresh"), None)

    outcome = await DRAScheduler(api).schedule(NAMESPACE, "fresh")
    stored_pod, claim = await read_pod_and_claim(api, "fresh")

    assert outcome.reason == "Unschedulable"
    assert "2 cannot allocate all claims" in outcome.message
    assert "allocation" not in (claim.get("status") or {})
    assert "nodeName" not in stored_pod["spec"]


def test_node_selector_terms() -> None:
    labelled = node("node-a")
    by_field = allocation("node-a")["nodeSelector"]
    not_this_host = {"key": "kubernetes.io/hostname", "operator": "NotIn", "values": ["node-a"]}
    has_gpu_label = {"key": "gpu", "operator": "Exists"}
    by_label = {
        "nodeSelectorTerms": [
            {"matchExpressions": [not_this_host]},
            {"matchExpressions": [has_gpu_label]},
        ]
    }

    assert node_selector_matches(labelled, by_field)
    assert not node_selector_matches(node("node-b"), by_field)
    assert not node_selector_matches(labelled, by_label)
    assert node_selector_matches(labelled, None)


@pytest.mark.parametrize(
    ("tolerations", "tolerated"),
    [
        ([], False),
        ([{"key": "gpu", "operator": "Exists"}], True),
        ([{"key": "gpu", "operator": "Equal", "value": "broken", "effect": "NoSchedule"}], True),
        ([{"key": "gpu", "operator": "Equal", "value": "fine"}], False),
        ([{"operator": "Exists"}], True),
        ([{"key": "gpu", "operator": "Exists", "effect": "NoExecute"}], False),
    ],
)
def test_taint_toleration(tolerations: list[dict[str, Any]], tolerated: bool) -> None:
    tainted = node("node-a", taints=[{"key": "gpu", "value": "broken", "effect": "NoSchedule"}])
    candidate = pod("p", tolerations=tolerations)

    assert (pod_untolerated_taint(tainted, candidate) is None) is tolerated


@pytest.mark.parametrize(
    ("target", "candidate", "others", "expected"),
    [
        (node("n", unschedulable=True), pod("p"), [], FitFailure.of("node(s) were unschedulable")),
        (
            node("n", taints=[{"key": "gpu", "value": "x", "effect": "NoSchedule"}]),
            pod("p"),
            [],
            FitFailure.of("node(s) had untolerated taint {gpu: x}"),
        ),
        (
            node("n"),
            pod("p", nodeSelector={"zone": "a"}),
            [],
            FitFailure.of("node(s) didn't match Pod's node affinity/selector"),
        ),
        (
            node("n", cpu="2"),
            pod("p", cpu="1500m"),
            [pod("q", cpu="1")],
            FitFailure.of("Insufficient cpu", resolvable=True),
        ),
        (node("n", cpu="2"), pod("p", cpu="1"), [pod("q", cpu="1")], None),
    ],
)
def test_fit_predicates(
    target: dict[str, Any],
    candidate: dict[str, Any],
    others: list[dict[str, Any]],
    expected: FitFailure | None,
) -> None:
    assert fit_failure(candidate, target, others) == expected


async def test_a_claim_reserved_for_the_pod_costs_only_the_binding(tmp_path: Path) -> None:
    """The controller wrote allocation and reservation: PreBind writes nothing to the claim."""
    async with APIServer() as server:
        api = config.new_client_from_config(
            config_file=str(server.write_kubeconfig(tmp_path / "kubeconfig"))
        )
        try:
            await setup(api, pod("ready"), allocation("node-b"))
            stored_pod, _ = await read_pod_and_claim(api, "ready")
            await reserve(api, "ready-claim", "ready", stored_pod["metadata"]["uid"])
            server.audit.reset()

            outcome = await DRAScheduler(api).schedule(NAMESPACE, "ready")
            counts = server.audit.write_counts()
        finally:
            api.close()
    assert outcome.node == "node-b"
    assert counts == {"kube-scheduler": {"pods/binding": 1}}
