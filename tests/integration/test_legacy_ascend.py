"""The legacy scheduler with Ascend enabled, over real HTTP on the API emulator: an Ascend
node registered as HAMi's Ascend device plugin registers it, Filter's pod annotations
(per-chip keys, predicate-time, the huawei.com/<chip> runtime JSON), the soft split
only on nodes that run it, NetworkID placement, and Bind's shared node lock."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from legacy_fixtures import (
    add_namespace,
    base_url,
    create_pod,
    legacy_scheduler,
    pods_path,
    wait_for_nodes,
)

from api.hami_annotations import NODE_LOCK, VGPU_NODE, VGPU_TIME
from controller.legacy.config import LegacySettings, parse_device_config
from dra_driver.engine.vendor_backends.ascend_chips import HAMI_DEFAULT_SECTION
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import ExtenderConfig, SchedulerExtenderClient

NS = "npu"
CHIP = "Ascend910B3"
SETTINGS = LegacySettings(
    device_config=parse_device_config({"nvidia": {}, "vnpus": HAMI_DEFAULT_SECTION}),
    enabled_vendor_flags=frozenset({"enable-ascend"}),
)


def extender_client(server) -> SchedulerExtenderClient:
    """kube-scheduler with the chip's resources among the extender's managedResources
    (HAMi's chart lists every vendor's there)."""
    managed = (f"huawei.com/{CHIP}", f"huawei.com/{CHIP}-memory")
    return SchedulerExtenderClient(ExtenderConfig(base_url(server), managed_resources=managed))


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield client
        finally:
            await client.aclose()


async def add_npu_node(
    client: KubeClient, name: str, networks: list[int], annotations: dict[str, str] | None = None
) -> None:
    """Four-way shared 910B3 NPUs registered in HAMi's JSON (capitalised keys, as the
    plugin's Go structs write them), each with its NetworkID."""
    register = json.dumps(
        [
            {"ID": f"{name}-npu-{i}", "Index": i, "Count": 4, "Devmem": 65536, "Devcore": 20,
             "Type": CHIP, "Health": True, "CustomInfo": {"NetworkID": network}}
            for i, network in enumerate(networks)
        ]
    )  # fmt: skip
    metadata = {"name": name, "annotations": {f"hami.io/node-register-{CHIP}": register}}
    metadata["annotations"].update(annotations or {})
    await client.create("/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": metadata})
    status = {"status": {"allocatable": {f"huawei.com/{CHIP}": str(4 * len(networks))}}}
    await client.patch(f"{object_path('/api/v1/nodes', name)}/status", status)


def npu_pod(name: str, limits: dict[str, str], annotations: dict[str, str] | None = None):
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations or {}},
        "spec": {
            "schedulerName": "hami-scheduler",
            "containers": [{"name": "app", "image": "pause", "resources": {"limits": limits}}],
        },
    }


async def nodes(client: KubeClient, *names: str) -> list[dict[str, Any]]:
    return [await client.get(object_path("/api/v1/nodes", name)) for name in names]


async def test_hard_split_share_is_written_with_its_template(cluster) -> None:
    client = cluster
    await add_npu_node(client, "npu-1", [0, 0])
    async with legacy_scheduler(client, SETTINGS) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "npu-1")
        limits = {f"huawei.com/{CHIP}": "1", f"huawei.com/{CHIP}-memory": "16384"}
        pod = await create_pod(client, npu_pod("vnpu", limits))
        result = await scheduler.schedule_once(pod, await nodes(client, "npu-1"))
        assert (result.node, result.reason) == ("npu-1", None)
        stored = await client.get(object_path(pods_path(NS), "vnpu"))
        annotations = stored["metadata"]["annotations"]
        assert annotations[f"hami.io/{CHIP}-devices-to-allocate"] == f"npu-1-npu-1,{CHIP},16384,0:;"
        assert annotations[f"hami.io/{CHIP}-devices-allocated"] == f"npu-1-npu-1,{CHIP},16384,0:;"
        assert annotations["predicate-time"] == annotations[VGPU_TIME]
        assert json.loads(annotations[f"huawei.com/{CHIP}"]) == [
            {"UUID": "npu-1-npu-1", "temp": "vir05_1c_16g", "memory": 16384}
        ]
        assert annotations[VGPU_NODE] == "npu-1"
        node = await client.get(object_path("/api/v1/nodes", "npu-1"))
        _, namespace, name = node["metadata"]["annotations"][NODE_LOCK].split(",")
        assert (namespace, name) == (NS, "vnpu")


async def test_soft_split_pod_goes_only_where_the_node_runs_it(cluster) -> None:
    client = cluster
    await add_npu_node(client, "hard", [0])
    await add_npu_node(client, "soft", [0], {"hami-vnpu-core": "true"})
    async with legacy_scheduler(client, SETTINGS) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "hard", "soft")
        limits = {f"huawei.com/{CHIP}": "1", f"huawei.com/{CHIP}-memory": "15360"}
        pod = await create_pod(
            client, npu_pod("core", limits, {"huawei.com/vnpu-mode": "hami-core"})
        )
        refused = await scheduler.filter(pod, await nodes(client, "hard"))
        assert (refused.feasible, refused.failed) == ([], {"hard": "1/1 ModeNotFit"})
        answer = await scheduler.filter(pod, await nodes(client, "hard", "soft"))
        assert answer.feasible == ["soft"]
        stored = await client.get(object_path(pods_path(NS), "core"))
        assert json.loads(stored["metadata"]["annotations"][f"huawei.com/{CHIP}"]) == [
            {"UUID": "soft-npu-0", "memory": 15360}
        ]


async def test_two_npus_go_to_the_node_where_they_share_a_network(cluster) -> None:
    """Both nodes are idle; binpack takes the higher ScoreNode (NPUs on one NetworkID)."""
    client = cluster
    await add_npu_node(client, "a-split", [0, 1])
    await add_npu_node(client, "b-joined", [7, 7])
    async with legacy_scheduler(client, SETTINGS) as server, extender_client(server) as scheduler:
        await wait_for_nodes(server, "a-split", "b-joined")
        pod = await create_pod(client, npu_pod("pair", {f"huawei.com/{CHIP}": "2"}))
        answer = await scheduler.filter(pod, await nodes(client, "a-split", "b-joined"))
        assert answer.feasible == ["b-joined"]
