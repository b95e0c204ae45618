"""Vendors whose PatchAnnotations reads more than the grants, over the extender's HTTP API
on the API emulator: AWS Neuron writes the core ids its device plugin hands out (from the
container's limits and the node's cores per device) with the node and time; Enflame DRS
writes the card's index and minor and, per container name, the DRS profile chosen from
the container's request on the node's `gcu-drs-capacity`. Values as in HAMi's
awsneuron `Test_PatchAnnotations` and enflame `TestPatchAnnotations_DRSFields`.
"""

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

from api.hami_annotations import VGPU_NODE, VGPU_TIME
from controller.legacy.config import LegacySettings, parse_device_config
from dra_driver.kube.rest import KubeClient, object_path
from simulator.apiserver import APIServer
from simulator.standins.scheduler_extender import ExtenderConfig, SchedulerExtenderClient

NS = "vendors"
NODES = "/api/v1/nodes"
SETTINGS = LegacySettings(
    device_config=parse_device_config({"nvidia": {}, "awsneuron": {}, "enflame": {}})
)
NEURON_NODE = "inf-1"
DRS_NODE = "gcu-1"
DRS_CAPACITY = json.dumps(
    {
        "devices": [{"index": "0", "minor": "0", "capacity": 6}],
        "profiles": {"1g.6gb": "0", "3g.20gb": "1", "6g.40gb": "2"},
    },
    separators=(",", ":"),
)


@pytest.fixture
async def cluster(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await add_namespace(client, NS)
            yield client
        finally:
            await client.aclose()


async def add_node(
    client: KubeClient,
    name: str,
    *,
    annotations: dict[str, str] | None = None,
    labels: dict[str, str] | None = None,
    resources: dict[str, str] | None = None,
) -> dict[str, Any]:
    metadata = {"name": name, "annotations": annotations or {}, "labels": labels or {}}
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": metadata})
    status = {"capacity": resources or {}, "allocatable": resources or {}}
    return await client.patch(f"{object_path(NODES, name)}/status", {"status": status})


def pod(name: str, containers: list[dict[str, Any]], annotations: dict[str, str]) -> dict:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS, "annotations": annotations},
        "spec": {"schedulerName": "hami-scheduler", "containers": containers},
    }


def container(name: str, limits: dict[str, str]) -> dict[str, Any]:
    return {"name": name, "image": "pause", "resources": {"limits": limits}}


def extender_client(server, *managed: str) -> SchedulerExtenderClient:
    return SchedulerExtenderClient(ExtenderConfig(base_url(server), managed_resources=managed))


async def placed_annotations(
    client: KubeClient, scheduler: SchedulerExtenderClient, body: dict, node: dict
) -> dict[str, str]:
    created = await create_pod(client, body)
    result = await scheduler.schedule_once(created, [node])
    assert (result.node, result.reason) == (node["metadata"]["name"], None)
    stored = await client.get(object_path(pods_path(NS), body["metadata"]["name"]))
    return stored["metadata"]["annotations"]


async def test_aws_neuron_core_ids_node_and_time_land_on_the_pod(cluster) -> None:
    """Two devices of two cores (inf2): the pod's one core on device 1 is core id 2
    (device index x cores per device + core), typed as a core request."""
    client = cluster
    node = await add_node(
        client,
        NEURON_NODE,
        labels={"node.kubernetes.io/instance-type": "inf2.xlarge"},
        resources={"aws.amazon.com/neuron": "2", "aws.amazon.com/neuroncore": "4"},
    )
    async with (
        legacy_scheduler(client, SETTINGS) as server,
        extender_client(server, "aws.amazon.com/neuron", "aws.amazon.com/neuroncore") as scheduler,
    ):
        await wait_for_nodes(server, NEURON_NODE)
        body = pod(
            "neuron",
            [container("infer", {"aws.amazon.com/neuroncore": "1"})],
            {"aws.amazon.com/use-neuron-uuid": f"{NEURON_NODE}-AWSNeuron-1"},
        )
        annotations = await placed_annotations(client, scheduler, body, node)
    assert annotations["hami.io/aws-neuron-devices-allocated"] == (
        f"{NEURON_NODE}-AWSNeuron-1,AWSNeuron,0,1:;"
    )
    assert annotations["AWS_NEURON_IDS"] == "2"
    assert annotations["NEURON_RESOURCE_TYPE"] == "aws.amazon.com/neuroncore"
    assert annotations["NEURON_ALLOCATED"] == "false"
    assert annotations["aws.amazon.com/predicate-node"] == annotations[VGPU_NODE] == NEURON_NODE
    # One clock reading: the nanoseconds and Filter's seconds agree.
    assert int(annotations["NEURON_ALLOC_TIME"]) // 10**9 == int(annotations[VGPU_TIME])


async def test_enflame_drs_profile_and_card_land_on_the_pod(cluster) -> None:
    """Three slices asked: profile 3g.20gb (id 1) on card 0, named by container."""
    client = cluster
    node = await add_node(
        client, DRS_NODE, annotations={"enflame.com/gcu-drs-capacity": DRS_CAPACITY}
    )
    async with (
        legacy_scheduler(client, SETTINGS) as server,
        extender_client(server, "enflame.com/drs-gcu") as scheduler,
    ):
        await wait_for_nodes(server, DRS_NODE)
        body = pod(
            "drs",
            [
                container("sidecar", {}),
                container("pod-gcu-example1", {"enflame.com/drs-gcu": "3"}),
            ],
            {},
        )
        annotations = await placed_annotations(client, scheduler, body, node)
    assert annotations["hami.io/enflame-vgpu-devices-allocated"] == (
        f";{DRS_NODE}-enflame-drs-0,Enflame,20480,50:;"
    )
    assert annotations["enflame.com/gcu-assigned"] == "false"
    assert annotations["enflame.com/gcu-assigned-index"] == "0"
    assert annotations["enflame.com/gcu-assigned-id"] == "0"
    assert annotations["enflame.com/gcu-assigned-minor"] == "0"
    assert annotations["enflame.com/gcu-request-size"] == "3"
    assert json.loads(annotations["assigned-containers"]) == {
        "pod-gcu-example1": {
            "allocated": False,
            "request": 3,
            "profileID": "1",
            "profileName": "3g.20gb",
        }
    }
    assert int(annotations["enflame.com/gcu-assigned-time"]) // 10**9 == int(annotations[VGPU_TIME])
