"""Namespace ResourceQuota per vendor in legacy mode, over real HTTP on the API emulator.

HAMi keys a namespace's quota by each vendor's resource names
(`limits.<memory name>`, `limits.<cores name>`, the memory limit times the
vendor's memory factor: 256 MiB per Cambricon vmemory unit) and charges each
pod's devices to the names of the vendor that holds them. So an MLU quota
refuses MLU pods, in the webhook and in Filter, and an MLU pod never uses up
the namespace's NVIDIA quota. Three of the cases are HAMi's own
(`TestFitResourceQuotaNonNvidia` and `TestFitResourceQuotaCountsEveryDevice` in
`pkg/scheduler/webhook_test.go`, `TestDevices_Fit_ResourceQuotaWholeCardRequest`
in `pkg/device/cambricon/device_test.go`), with HAMi's values.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from legacy_fixtures import (
    WAIT_S,
    add_gpu_node,
    add_namespace,
    base_url,
    create_pod,
    extender_client,
    gpu_pod,
    legacy_scheduler,
    wait_for_nodes,
)

from api.hami_annotations import VGPU_NODE
from controller.legacy.config import LegacySettings, parse_device_config
from controller.legacy.server import LegacyServer
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.admission import AdmissionClient, AdmissionOutcome, WebhookConfig

NS = "quota"
NODES = "/api/v1/nodes"
MLU_NODE = "mlu-1"
MLU_CARD = f"{MLU_NODE}-cambricon-mlu-0"
MLU_ALLOCATED = "hami.io/cambricon-mlu-devices-allocated"
USER = {"username": "admin", "groups": ["system:masters", "system:authenticated"]}

HAMI_TEST_CONFIG = parse_device_config(
    {
        "nvidia": {
            "resourceCountName": "nvidia.com/gpu",
            "resourceMemoryName": "nvidia.com/gpumem",
            "resourceMemoryPercentageName": "nvidia.com/gpumem-percentage",
            "resourceCoreName": "nvidia.com/gpucores",
            "defaultGPUNum": 1,
            "memoryFactor": 1,
        },
        "cambricon": {
            "resourceCountName": "cambricon.com/mlu",
            "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
            "resourceCoreName": "cambricon.com/mlu.smlu.vcore",
        },
        "hygon": {
            "resourceCountName": "hygon.com/dcunum",
            "resourceMemoryName": "hygon.com/dcumem",
            "resourceCoreName": "hygon.com/dcucores",
            "memoryFactor": 2,
        },
    }
)
"""The device config of HAMi's quota tests: MLUs counted by `cambricon.com/mlu`, Hygon's
memory scaled by 2 before it is recorded."""


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield client
        finally:
            await client.aclose()


async def add_mlu_node(client: KubeClient, name: str, vmemory: int) -> dict[str, Any]:
    """One MLU as Cambricon's device plugin reports it: 100 vcore units and `vmemory`
    units of 256 MiB in `status.capacity`."""
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})
    resources = {
        "cambricon.com/mlu.smlu.vcore": "100",
        "cambricon.com/mlu.smlu.vmemory": str(vmemory),
    }
    return await client.patch(
        f"{object_path(NODES, name)}/status",
        {"status": {"capacity": resources, "allocatable": resources}},
    )


def vendor_pod(name: str, namespace: str, limits: dict[str, str]) -> dict[str, Any]:
    container = {"name": "main", "image": "pause", "resources": {"limits": limits}}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"schedulerName": "hami-scheduler", "containers": [container]},
    }


def mlu_pod(
    name: str,
    namespace: str = NS,
    *,
    vmemory: int | None = None,
    vcore: int | None = None,
    count: int = 1,
    count_name: str = "cambricon.com/vmlu",
) -> dict[str, Any]:
    limits = {count_name: str(count)}
    if vmemory is not None:
        limits["cambricon.com/mlu.smlu.vmemory"] = str(vmemory)
    if vcore is not None:
        limits["cambricon.com/mlu.smlu.vcore"] = str(vcore)
    return vendor_pod(name, namespace, limits)


async def add_placed_mlu_pod(
    client: KubeClient, name: str, namespace: str, memory_mib: int, cores: int
) -> None:
    """An MLU pod the scheduler placed earlier: what it holds is in its annotations."""
    pod = mlu_pod(name, namespace)
    pod["metadata"]["annotations"] = {
        VGPU_NODE: MLU_NODE,
        MLU_ALLOCATED: f"{MLU_CARD},MLU,{memory_mib},{cores}:;",
    }
    await create_pod(client, pod)


async def add_quota(client: KubeClient, namespace: str, hard: dict[str, str]) -> None:
    quota = {"metadata": {"name": "gpu", "namespace": namespace}, "spec": {"hard": hard}}
    await client.create(f"/api/v1/namespaces/{namespace}/resourcequotas", quota)


async def caches_hold(server: LegacyServer, quotas: int, allocations: int) -> None:
    """Until the scheduler's caches hold that many quotas and placed pods."""
    async with asyncio.timeout(WAIT_S):
        await server.state.quotas.wait_for(lambda store: len(store) == quotas)
        await server.state.pods.wait_for(lambda _: len(server.state.allocations) == allocations)


async def admit(server: LegacyServer, pod: dict[str, Any]) -> AdmissionOutcome:
    config = WebhookConfig(url=f"{base_url(server)}/webhook")
    async with AdmissionClient(config) as apiserver:
        namespace = pod["metadata"]["namespace"]
        return await apiserver.review(
            apiserver.build_review(pod, namespace=namespace, user_info=USER)
        )


async def node_objects(client: KubeClient, *names: str) -> list[dict[str, Any]]:
    return [await client.get(object_path(NODES, name)) for name in names]


async def test_an_mlu_pod_is_not_charged_to_the_nvidia_quota(cluster) -> None:
    """The MLU pod's 4096 MiB and 50 cores are MLU's: the namespace's NVIDIA quota
    (5000 MiB, 60 cores) is still whole for NVIDIA pods, in the webhook and in Filter."""
    client = cluster
    await add_gpu_node(client, "gpu-1")
    await add_mlu_node(client, MLU_NODE, vmemory=64)
    await add_quota(
        client, NS, {"limits.nvidia.com/gpumem": "5000", "limits.nvidia.com/gpucores": "60"}
    )
    await add_placed_mlu_pod(client, "mlu-held", NS, memory_mib=4096, cores=50)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "gpu-1", MLU_NODE)
        await caches_hold(server, quotas=1, allocations=1)
        outcome = await admit(server, gpu_pod("cuda", NS, gpumem=2000, gpucores=20))
        assert outcome.allowed, (outcome.status or {}).get("message")
        pod = await create_pod(client, gpu_pod("cuda", NS, gpumem=2000, gpucores=20))
        answer = await scheduler.filter(pod, await node_objects(client, "gpu-1"))
        assert (answer.feasible, answer.failed) == (["gpu-1"], {})


async def test_an_mlu_quota_refuses_mlu_pods_in_the_webhook_and_in_filter(cluster) -> None:
    """`limits.cambricon.com/mlu.smlu.vmemory: 16` is 4096 MiB; with 2048 MiB held, an
    MLU pod asking 12 units (3072 MiB) is refused and one asking 8 units fits; the
    cores limit (60, 20 held) likewise."""
    client = cluster
    await add_mlu_node(client, MLU_NODE, vmemory=64)
    hard = {
        "limits.cambricon.com/mlu.smlu.vmemory": "16",
        "limits.cambricon.com/mlu.smlu.vcore": "60",
    }
    await add_quota(client, NS, hard)
    await add_placed_mlu_pod(client, "mlu-held", NS, memory_mib=2048, cores=20)
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, MLU_NODE)
        await caches_hold(server, quotas=1, allocations=1)

        too_much = await admit(server, mlu_pod("big", vmemory=12, vcore=10))
        assert not too_much.allowed
        assert (
            f"namespace {NS} ResourceQuota limits.cambricon.com/mlu.smlu.vmemory is 4096 MiB "
            "(16 x 256 MiB) with 2048 MiB in use, and this pod asks for 3072 MiB"
        ) in too_much.status["message"]
        too_many_cores = await admit(server, mlu_pod("busy", vmemory=8, vcore=41))
        assert not too_many_cores.allowed
        assert (
            "limits.cambricon.com/mlu.smlu.vcore is 60% with 20% in use"
            in (too_many_cores.status["message"])
        )
        assert (await admit(server, mlu_pod("fits", vmemory=8, vcore=40))).allowed

        nodes = await node_objects(client, MLU_NODE)
        big = await create_pod(client, mlu_pod("big", vmemory=12, vcore=10))
        assert (await scheduler.filter(big, nodes)).failed == {MLU_NODE: "1/1 ResourceQuotaNotFit"}
        fits = await create_pod(client, mlu_pod("fits", vmemory=8, vcore=40))
        assert (await scheduler.filter(fits, nodes)).feasible == [MLU_NODE]


async def test_hami_fit_resource_quota_whole_card_request(cluster) -> None:
    """HAMi's TestDevices_Fit_ResourceQuotaWholeCardRequest (HAMi#2468): a pod that asks
    for no memory takes a whole 40960 MiB card, which a quota of 50 vmemory units
    (12800 MiB) does not allow: the webhook sees no memory asked for, Filter refuses."""
    client = cluster
    await add_mlu_node(client, MLU_NODE, vmemory=160)
    await add_quota(client, NS, {"limits.cambricon.com/mlu.smlu.vmemory": "50"})
    settings = LegacySettings(device_config=HAMI_TEST_CONFIG)
    async with legacy_scheduler(client, settings) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, MLU_NODE)
        await caches_hold(server, quotas=1, allocations=0)
        [card] = server.state.inventory[MLU_NODE].node.devices
        assert (card.memory_mib, card.count, card.cores) == (40960, 100, 100)
        whole_card = mlu_pod("whole", vcore=10, count_name="cambricon.com/mlu")
        assert (await admit(server, whole_card)).allowed
        pod = await create_pod(client, whole_card)
        answer = await scheduler.filter(pod, await node_objects(client, MLU_NODE))
        assert answer.failed == {MLU_NODE: "1/1 ResourceQuotaNotFit"}


def dcu_pod(name: str, namespace: str, dcumem: int) -> dict[str, Any]:
    return vendor_pod(name, namespace, {"hygon.com/dcunum": "1", "hygon.com/dcumem": str(dcumem)})


HAMI_NON_NVIDIA_CASES = (
    ("mlu memory within quota", "mlu-mem", {"vmemory": 50}, "mlu", True),
    ("mlu memory over quota", "mlu-mem", {"vmemory": 200}, "mlu", False),
    ("mlu cores over quota", "mlu-core", {"vmemory": 1, "vcore": 60}, "mlu", False),
    ("mlu in a namespace with no quota", "unquotaed", {"vmemory": 10000}, "mlu", True),
    ("dcu memory within quota once the factor is applied", "dcu-mem", {"dcumem": 800}, "dcu", True),
    ("dcu memory over quota", "dcu-mem", {"dcumem": 1200}, "dcu", False),
)
"""HAMi's TestFitResourceQuotaNonNvidia: (name, namespace, amounts, vendor, fits)."""


async def test_hami_fit_resource_quota_non_nvidia(cluster) -> None:
    """HAMi's quotas: mlu-mem 100 vmemory units (25600 MiB), mlu-core 50 vcores of which 20
    are used, dcu-mem 1000 dcumem (x memoryFactor 2 = 2000, as the request is scaled)."""
    client = cluster
    for namespace in ("mlu-mem", "mlu-core", "dcu-mem", "unquotaed"):
        await add_namespace(client, namespace)
    await add_quota(client, "mlu-mem", {"limits.cambricon.com/mlu.smlu.vmemory": "100"})
    await add_quota(client, "mlu-core", {"limits.cambricon.com/mlu.smlu.vcore": "50"})
    await add_quota(client, "dcu-mem", {"limits.hygon.com/dcumem": "1000"})
    await add_placed_mlu_pod(client, "mlu-held", "mlu-core", memory_mib=256, cores=20)
    settings = LegacySettings(device_config=HAMI_TEST_CONFIG)
    async with legacy_scheduler(client, settings) as server:
        await caches_hold(server, quotas=3, allocations=1)
        verdicts = {}
        for name, namespace, amounts, vendor, _ in HAMI_NON_NVIDIA_CASES:
            if vendor == "mlu":
                pod = mlu_pod("mlu-pod", namespace, count_name="cambricon.com/mlu", **amounts)
            else:
                pod = dcu_pod("dcu-pod", namespace, amounts["dcumem"])
            verdicts[name] = (await admit(server, pod)).allowed
    assert verdicts == {name: fits for name, *_, fits in HAMI_NON_NVIDIA_CASES}


async def test_hami_fit_resource_quota_counts_every_device(cluster) -> None:
    """HAMi's TestFitResourceQuotaCountsEveryDevice: 2 MLUs x 40 units is 80, past a
    limit of 60 units (15360 MiB), though one device alone fits."""
    client = cluster
    await add_namespace(client, "mlu-multi")
    await add_quota(client, "mlu-multi", {"limits.cambricon.com/mlu.smlu.vmemory": "60"})
    settings = LegacySettings(device_config=HAMI_TEST_CONFIG)
    async with legacy_scheduler(client, settings) as server:
        await caches_hold(server, quotas=1, allocations=0)
        one = mlu_pod("one", "mlu-multi", vmemory=40, count_name="cambricon.com/mlu")
        two = mlu_pod("two", "mlu-multi", vmemory=40, count=2, count_name="cambricon.com/mlu")
        assert (await admit(server, one)).allowed
        assert not (await admit(server, two)).allowed


async def test_filter_holds_every_vendor_to_its_quota_not_only_cambricon(cluster) -> None:
    """HAMi's Hygon Fit checks no quota (its webhook does, and counts no memory for a
    whole card): here Filter refuses a whole DCU of 65520 MiB against 1000 dcumem, as it
    does for NVIDIA and Cambricon, and as DRA mode does for every family."""
    client = cluster
    register = "DCU-dcu-1-0,4,65520,100,DCU-Z100,0,true,0,hami-core:"
    metadata = {"name": "dcu-1", "annotations": {"hami.io/node-dcu-register": register}}
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": metadata})
    await client.patch(
        f"{object_path(NODES, 'dcu-1')}/status",
        {"status": {"allocatable": {"hygon.com/dcunum": "4"}}},
    )
    await add_quota(client, NS, {"limits.hygon.com/dcumem": "1000"})
    async with legacy_scheduler(client) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "dcu-1")
        await caches_hold(server, quotas=1, allocations=0)
        whole_card = vendor_pod("whole", NS, {"hygon.com/dcunum": "1"})
        assert (await admit(server, whole_card)).allowed
        pod = await create_pod(client, whole_card)
        answer = await scheduler.filter(pod, await node_objects(client, "dcu-1"))
        assert answer.failed == {"dcu-1": "1/1 ResourceQuotaNotFit"}
        within = await create_pod(client, dcu_pod("within", NS, dcumem=1000))
        assert (await scheduler.filter(within, await node_objects(client, "dcu-1"))).feasible == [
            "dcu-1"
        ]
