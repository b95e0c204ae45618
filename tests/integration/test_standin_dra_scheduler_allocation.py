"""DRAScheduler in the scheduler-allocated mode, against the API emulator: it allocates
claims from the consumable capacity the kubelet plugin publishes."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from cluster_waits import wait_schedulable
from kubernetes import client, config, watch

from api.quantity import parse_quantity
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.capacity_policy import CapacityRefusal, take_capacity
from dra_driver.objects.dra_cel import CelEvaluationError
from dra_driver.objects.resource_api import DELETE_PROTECTION
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices
from simulator.apiserver import APIServer
from simulator.standins.dra_allocator import selectors_matcher
from simulator.standins.dra_scheduler import DRAScheduler, SchedulerSettings

DRIVER = "vgpu.hami.io"
NAMESPACE = "default"
GIB = 1 << 30
CLASS_SELECTOR = f"device.driver == '{DRIVER}' && device.allowMultipleAllocations == true"
LOWERCASE_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
ALLOCATING = SchedulerSettings(allocate=True)
DEFAULT_SLICES = SliceSettings(driver=DRIVER)


@pytest.fixture
async def server() -> AsyncIterator[APIServer]:
    async with APIServer() as running:
        yield running


@pytest.fixture
def api(server: APIServer, tmp_path: Path) -> Iterator[client.ApiClient]:
    kubeconfig = server.write_kubeconfig(tmp_path / "kubeconfig")
    with config.new_client_from_config(config_file=str(kubeconfig)) as api_client:
        yield api_client


async def call(method: Any, *args: Any, **kwargs: Any) -> Any:
    response = await asyncio.to_thread(method, *args, _preload_content=False, **kwargs)
    return json.loads(response.data)


def gpu(node_name: str, index: int, healthy: bool = True) -> GpuInfo:
    return GpuInfo(
        uuid=f"GPU-{node_name}-{index}",
        index=index,
        minor=index,
        product_name="NVIDIA A100-SXM4-80GB",
        memory_bytes=80 * GIB,
        healthy=healthy,
        unhealthy_reason="" if healthy else "xid-79",
    )


async def add_node(
    api: client.ApiClient,
    name: str,
    gpus: int = 1,
    generation: int = 1,
    settings: SliceSettings = DEFAULT_SLICES,
    healthy: bool = True,
) -> list[dict[str, Any]]:
    core = client.CoreV1Api(api)
    body = {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}},
    }
    created = await call(core.create_node, body)
    await asyncio.to_thread(wait_schedulable, api, name)
    slices = build_resource_slices(
        name,
        created["metadata"]["uid"],
        [gpu(name, i, healthy) for i in range(gpus)],
        settings,
        generation,
    )
    for item in slices:
        await call(client.ResourceV1Api(api).create_resource_slice, item)
    return slices


async def add_class(api: client.ApiClient, expression: str = CLASS_SELECTOR) -> None:
    body = {
        "metadata": {"name": DRIVER},
        "spec": {
            "selectors": [{"cel": {"expression": expression}}],
            "config": [
                {
                    "opaque": {
                        "driver": DRIVER,
                        "parameters": {"apiVersion": f"{DRIVER}/v1alpha1", "kind": "VGPUConfig"},
                    }
                }
            ],
        },
    }
    await call(client.ResourceV1Api(api).create_device_class, body)


def request(name: str = "gpu", **exactly: Any) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": DRIVER, **exactly}}


def capacity(**amounts: str) -> dict[str, Any]:
    return {"capacity": {"requests": amounts}}


async def add_pod(
    api: client.ApiClient, name: str, *requests: dict[str, Any], claims: int = 1
) -> None:
    resources = client.ResourceV1Api(api)
    claim_names = [f"{name}-claim"] if claims == 1 else [f"{name}-c{i}" for i in range(claims)]
    for claim_name in claim_names:
        body = {
            "metadata": {"name": claim_name, "namespace": NAMESPACE},
            "spec": {"devices": {"requests": list(requests) or [request()]}},
        }
        await call(resources.create_namespaced_resource_claim, NAMESPACE, body)
    pod = {
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [
                {"name": f"gpu{i}", "resourceClaimName": n} for i, n in enumerate(claim_names)
            ],
        },
    }
    await call(client.CoreV1Api(api).create_namespaced_pod, NAMESPACE, pod)


async def read_claim(api: client.ApiClient, name: str) -> dict[str, Any]:
    resources = client.ResourceV1Api(api)
    return dict(await call(resources.read_namespaced_resource_claim, name, NAMESPACE))


def results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    return list(claim["status"]["allocation"]["devices"]["results"])


async def test_a_claim_gets_its_rounded_share_of_every_capacity(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    await add_pod(api, "infer", request(**capacity(memory="10Gi", cores="30")))

    outcome = await DRAScheduler(api, settings=ALLOCATING).schedule(NAMESPACE, "infer")
    claim = await read_claim(api, "infer-claim")
    stored_pod = await call(client.CoreV1Api(api).read_namespaced_pod, "infer", NAMESPACE)

    assert outcome.node == "node-a" and stored_pod["spec"]["nodeName"] == "node-a"
    [result] = results(claim)
    assert LOWERCASE_UUID.fullmatch(result.pop("shareID"))
    assert result == {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "node-a",
        "device": "gpu-0",
        "consumedCapacity": {"memory": "10Gi", "cores": "30", "shares": "1"},
    }
    allocation = claim["status"]["allocation"]
    assert allocation["nodeSelector"]["nodeSelectorTerms"] == [
        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
    ]
    assert allocation["allocationTimestamp"]
    assert [c["source"] for c in allocation["devices"]["config"]] == ["FromClass"]
    assert allocation["devices"]["config"][0]["requests"] == ["gpu"]
    assert claim["status"]["reservedFor"] == [
        {"resource": "pods", "name": "infer", "uid": stored_pod["metadata"]["uid"]}
    ]
    assert DELETE_PROTECTION in claim["metadata"]["finalizers"]


async def test_claims_share_a_device_until_its_capacity_runs_out(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    core = client.CoreV1Api(api)
    # A node with room for pods and none of the driver's devices (no slice).
    room = {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"}}
    await call(core.create_node, {"metadata": {"name": "node-b"}, "status": room})
    await asyncio.to_thread(wait_schedulable, api, "node-b")
    scheduler = DRAScheduler(api, settings=ALLOCATING)
    for name, memory in (("first", "40Gi"), ("second", "30Gi"), ("third", "20Gi")):
        await add_pod(api, name, request(**capacity(memory=memory)))

    placed = [(await scheduler.schedule(NAMESPACE, n)).node for n in ("first", "second")]
    refused = await scheduler.schedule(NAMESPACE, "third")

    assert placed == ["node-a", "node-a"]
    first, second = await read_claim(api, "first-claim"), await read_claim(api, "second-claim")
    assert {r["device"] for r in results(first) + results(second)} == {"gpu-0"}
    assert results(first)[0]["shareID"] != results(second)[0]["shareID"]
    assert refused.reason == "Unschedulable"
    assert refused.message.startswith(
        "0/2 nodes are available: 2 cannot allocate all claims. no new claims to deallocate"
    )
    assert "allocation" not in ((await read_claim(api, "third-claim")).get("status") or {})
    third = await call(core.read_namespaced_pod, "third", NAMESPACE)
    assert third["status"]["conditions"][-1]["message"] == refused.message

    node_b = await call(core.read_node, "node-b")
    slices = build_resource_slices(
        "node-b", node_b["metadata"]["uid"], [gpu("node-b", 0)], SliceSettings(driver=DRIVER), 1
    )
    await call(client.ResourceV1Api(api).create_resource_slice, slices[0])
    assert (await scheduler.schedule(NAMESPACE, "third")).node == "node-b"


async def test_unrequested_capacity_takes_the_policy_default(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    scheduler = DRAScheduler(api, settings=ALLOCATING)
    await add_pod(api, "whole", request())
    await add_pod(api, "more", request(**capacity(memory="1Gi")))

    assert (await scheduler.schedule(NAMESPACE, "whole")).node == "node-a"
    assert (await scheduler.schedule(NAMESPACE, "more")).node is None
    [result] = results(await read_claim(api, "whole-claim"))
    assert result["consumedCapacity"] == {"memory": "80Gi", "cores": "0", "shares": "1"}


async def test_requests_round_up_to_the_step_and_to_valid_values(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    scheduler = DRAScheduler(api, settings=ALLOCATING)
    await add_pod(api, "odd", request(**capacity(memory="1500Ki", cores="0")))
    await add_pod(api, "two-shares", request(**capacity(shares="2")))
    await add_pod(api, "too-much", request(**capacity(memory="81Gi")))

    assert (await scheduler.schedule(NAMESPACE, "odd")).node == "node-a"
    assert results(await read_claim(api, "odd-claim"))[0]["consumedCapacity"] == {
        "memory": "2Mi",
        "cores": "0",
        "shares": "1",
    }
    assert (await scheduler.schedule(NAMESPACE, "two-shares")).node is None
    assert (await scheduler.schedule(NAMESPACE, "too-much")).node is None


@pytest.mark.parametrize(
    ("requested", "policy", "expected"),
    [
        ("0", {"validRange": {"min": "1Mi", "step": "1Mi"}}, "1Mi"),
        ("10Gi", {"validRange": {"min": "1Mi", "step": "1Mi"}}, "10Gi"),
        ("1537Ki", {"validRange": {"min": "1Mi", "step": "1Mi"}}, "2Mi"),
        ("5", {"validRange": {"min": "1", "step": "4"}}, "5"),
        ("6", {"validRange": {"min": "1", "step": "4", "max": "8"}}, None),
        ("2", {"validValues": ["1", "4", "8"]}, "4"),
        ("9", {"validValues": ["1", "4", "8"]}, None),
        ("1500m", None, "1500m"),
        ("1500m", {"validRange": {"min": "0"}}, "1500m"),
    ],
)
def test_round_up_request(
    requested: str, policy: dict[str, Any] | None, expected: str | None
) -> None:
    taken = take_capacity("c", requested, {"value": "0", "requestPolicy": policy})
    rounded = None if isinstance(taken, CapacityRefusal) else taken

    assert rounded == (None if expected is None else parse_quantity(expected))


async def test_an_untolerated_taint_keeps_the_device_out(api: client.ApiClient) -> None:
    await add_class(api)
    taint = Taint(f"{DRIVER}/allocation", "controller")
    await add_node(api, "node-a", settings=SliceSettings(driver=DRIVER, allocation_taint=taint))
    scheduler = DRAScheduler(api, settings=ALLOCATING)
    wrong_value = {"key": taint.key, "operator": "Equal", "value": "other"}
    await add_pod(api, "plain", request(tolerations=[wrong_value]))
    tolerated = {"key": taint.key, "operator": "Exists", "effect": "NoSchedule"}
    await add_pod(api, "tolerant", request(tolerations=[tolerated]))

    refused = await scheduler.schedule(NAMESPACE, "plain")
    placed = await scheduler.schedule(NAMESPACE, "tolerant")

    assert refused.node is None and "1 cannot allocate all claims" in refused.message
    assert "allocation" not in ((await read_claim(api, "plain-claim")).get("status") or {})
    assert placed.node == "node-a"
    assert results(await read_claim(api, "tolerant-claim"))[0]["tolerations"] == [tolerated]


async def test_an_unhealthy_gpu_is_not_allocated(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a", healthy=False)
    await add_pod(api, "p", request())

    outcome = await DRAScheduler(api, settings=ALLOCATING).schedule(NAMESPACE, "p")

    assert outcome.node is None and outcome.reason == "Unschedulable"


async def test_only_the_newest_complete_generation_of_a_pool_counts(
    api: client.ApiClient,
) -> None:
    await add_class(api)
    [stale] = await add_node(api, "node-a", gpus=2, generation=1)
    stale["metadata"]["name"] = "node-a-stale"
    stale["spec"]["pool"]["generation"] = 2
    stale["spec"]["devices"] = stale["spec"]["devices"][:1]
    await call(client.ResourceV1Api(api).create_resource_slice, stale)
    [incomplete] = await add_node(api, "node-b", gpus=2)
    incomplete["metadata"]["name"] = "node-b-partial"
    incomplete["spec"]["pool"].update(generation=3, resourceSliceCount=2)
    await call(client.ResourceV1Api(api).create_resource_slice, incomplete)
    await add_pod(api, "pair", request(count=2))
    await add_pod(api, "single", request(count=1))
    scheduler = DRAScheduler(api, settings=ALLOCATING)

    outcome = await scheduler.schedule(NAMESPACE, "pair")
    single = await scheduler.schedule(NAMESPACE, "single")

    assert outcome.node is None
    assert "0/2 nodes are available: 2 cannot allocate all claims." in outcome.message
    assert single.node == "node-a"


async def test_a_count_takes_distinct_devices_and_attributes_select(
    api: client.ApiClient,
) -> None:
    await add_class(api)
    await add_node(api, "node-a", gpus=3)
    index_two = {"cel": {"expression": f'device.attributes["{DRIVER}"].index == 2'}}
    await add_pod(api, "pair", request(count=2, **capacity(memory="1Gi")))
    await add_pod(api, "picky", request(selectors=[index_two]))
    scheduler = DRAScheduler(api, settings=ALLOCATING)

    assert (await scheduler.schedule(NAMESPACE, "pair")).node == "node-a"
    assert (await scheduler.schedule(NAMESPACE, "picky")).node == "node-a"
    assert [r["device"] for r in results(await read_claim(api, "pair-claim"))] == [
        "gpu-0",
        "gpu-1",
    ]
    assert [r["device"] for r in results(await read_claim(api, "picky-claim"))] == ["gpu-2"]


async def test_claims_of_one_pod_are_counted_together(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    await add_pod(api, "duo", request(**capacity(memory="50Gi")), claims=2)

    outcome = await DRAScheduler(api, settings=ALLOCATING).schedule(NAMESPACE, "duo")

    assert outcome.node is None
    assert "allocation" not in ((await read_claim(api, "duo-c0")).get("status") or {})


async def test_an_allocation_written_by_another_counts_against_the_device(
    api: client.ApiClient,
) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    await add_pod(api, "held", request())
    held = await read_claim(api, "held-claim")
    held["status"] = {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": DRIVER,
                        "pool": "node-a",
                        "device": "gpu-0",
                        "shareID": "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d",
                        "consumedCapacity": {"memory": "60Gi", "cores": "0", "shares": "1"},
                    }
                ]
            },
            "allocationTimestamp": "2026-11-29T20:00:00Z",
        }
    }
    resources = client.ResourceV1Api(api)
    await call(resources.replace_namespaced_resource_claim_status, "held-claim", NAMESPACE, held)
    await add_pod(api, "late", request(**capacity(memory="30Gi")))
    await add_pod(api, "fits", request(**capacity(memory="20Gi")))
    scheduler = DRAScheduler(api, settings=ALLOCATING)

    assert (await scheduler.schedule(NAMESPACE, "late")).node is None
    assert (await scheduler.schedule(NAMESPACE, "fits")).node == "node-a"
    [result] = results(await read_claim(api, "fits-claim"))
    assert result["consumedCapacity"]["memory"] == "20Gi"


async def test_a_refused_allocation_write_leaves_the_claim_as_it_was(
    api: client.ApiClient, server: APIServer
) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    await add_pod(api, "p", request())
    server.faults.fail(r"/resourceclaims/p-claim/status", verb="PATCH", status=409)
    scheduler = DRAScheduler(api, settings=ALLOCATING)

    outcome = await scheduler.schedule(NAMESPACE, "p")
    claim = await read_claim(api, "p-claim")

    assert outcome.reason == "SchedulerError"
    assert outcome.message.startswith('running PreBind plugin "DynamicResources"')
    assert "allocation" not in (claim.get("status") or {})
    assert DELETE_PROTECTION not in (claim["metadata"].get("finalizers") or [])
    assert (await scheduler.schedule(NAMESPACE, "p")).node == "node-a"


async def test_a_template_claim_is_found_through_the_pod_status(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    body = {
        "metadata": {"name": "p-gpu-x7k2q", "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [request(**capacity(cores="50"))]}},
    }
    await call(client.ResourceV1Api(api).create_namespaced_resource_claim, NAMESPACE, body)
    pod = {
        "metadata": {"name": "p", "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu-template"}],
        },
    }
    core = client.CoreV1Api(api)
    created = await call(core.create_namespaced_pod, NAMESPACE, pod)
    created["status"]["resourceClaimStatuses"] = [
        {"name": "gpu", "resourceClaimName": "p-gpu-x7k2q"}
    ]
    await call(core.replace_namespaced_pod_status, "p", NAMESPACE, created)

    outcome = await DRAScheduler(api, settings=ALLOCATING).schedule(NAMESPACE, "p")

    assert outcome.node == "node-a"
    [result] = results(await read_claim(api, "p-gpu-x7k2q"))
    assert result["consumedCapacity"] == {"memory": "80Gi", "cores": "50", "shares": "1"}


async def test_a_selector_failing_on_a_device_is_reported(api: client.ApiClient) -> None:
    await add_class(api, 'device.attributes["vgpu.hami.io"].nosuch == "x"')
    await add_node(api, "node-a")
    await add_pod(api, "p", request())

    outcome = await DRAScheduler(api, settings=ALLOCATING).schedule(NAMESPACE, "p")

    assert outcome.reason == "SchedulerError"
    assert "no such member" in outcome.message and "nosuch" in outcome.message


def selected(expression: str, device: dict[str, Any]) -> bool:
    return selectors_matcher([{"cel": {"expression": expression}}], "selector")(DRIVER, device)


@pytest.mark.parametrize(
    ("expression", "device", "matches"),
    [
        (CLASS_SELECTOR, {"allowMultipleAllocations": True}, True),
        (CLASS_SELECTOR, {}, False),
        ("device.driver == 'other.io'", {}, False),
        (
            'device.attributes["vgpu.hami.io"].type == "NVIDIA-A100"',
            {"attributes": {"type": {"string": "NVIDIA-A100"}}},
            True,
        ),
        (
            "device.attributes['vgpu.hami.io']['index'] != 1",
            {"attributes": {"vgpu.hami.io/index": {"int": 0}}},
            True,
        ),
        (
            'device.attributes["example.com"].fast == true',
            {"attributes": {"example.com/fast": {"bool": True}}},
            True,
        ),
        (
            "device.capacity['vgpu.hami.io'].memory.compareTo(quantity('1Gi')) > 0",
            {"capacity": {"memory": {"value": "80Gi"}}},
            True,
        ),
        ("device.driver == 'a' || device.driver.startsWith('vgpu')", {}, True),
    ],
)
def test_selectors_evaluate_as_cel(expression: str, device: dict[str, Any], matches: bool) -> None:
    assert selected(expression, device) is matches


@pytest.mark.parametrize(
    "expression",
    [
        'device.attributes["vgpu.hami.io"].type == "NVIDIA-A100"',
        'device.attributes["vgpu.hami.io"].index == "1"',
    ],
)
def test_a_selector_failing_on_a_device_never_matches(expression: str) -> None:
    with pytest.raises(CelEvaluationError):
        selected(expression, {"attributes": {"index": {"int": 1}}})


@pytest.mark.parametrize("expression", ["device.driver == ", "device.gpu == 'a'"])
def test_a_selector_that_does_not_compile_is_refused(expression: str) -> None:
    with pytest.raises(InvalidParameterError, match=r"selector\[0\]\.cel\.expression: compilation"):
        selected(expression, {})


def bound(pod: client.V1Pod) -> bool:
    return bool(pod.spec.node_name)


def refused(pod: client.V1Pod) -> bool:
    conditions = (pod.status and pod.status.conditions) or []
    return any(c.type == "PodScheduled" and c.status == "False" for c in conditions)


async def await_pod(
    api: client.ApiClient, name: str, condition: Callable[[client.V1Pod], bool]
) -> client.V1Pod:
    """Watch the pod until `condition` holds; the watch times out rather than hang a test."""

    def wait() -> client.V1Pod:
        stream = watch.Watch()
        for event in stream.stream(
            client.CoreV1Api(api).list_namespaced_pod,
            NAMESPACE,
            field_selector=f"metadata.name={name}",
            timeout_seconds=20,
        ):
            if condition(event["object"]):
                stream.stop()
                return event["object"]
        raise AssertionError(f"pod {name} never reached {condition.__name__}")

    return await asyncio.to_thread(wait)


async def test_the_run_loop_binds_pending_pods_and_retries(api: client.ApiClient) -> None:
    await add_class(api)
    await add_node(api, "node-a")
    settings = SchedulerSettings(allocate=True, initial_backoff=0.01, max_backoff=0.05)
    stop = asyncio.Event()
    running = asyncio.create_task(DRAScheduler(api, settings=settings).run(stop))
    try:
        await add_pod(api, "now", request(**capacity(memory="80Gi")))
        first = await await_pod(api, "now", bound)
        await add_pod(api, "later", request(**capacity(memory="80Gi")))
        await await_pod(api, "later", refused)
        await add_node(api, "node-b")
        second = await await_pod(api, "later", bound)
    finally:
        stop.set()
        await running

    assert (first.spec.node_name, second.spec.node_name) == ("node-a", "node-b")
    held = results(await read_claim(api, "now-claim")) + results(
        await read_claim(api, "later-claim")
    )
    assert [r["pool"] for r in held] == ["node-a", "node-b"]
    assert all(r["consumedCapacity"]["memory"] == "80Gi" for r in held)
