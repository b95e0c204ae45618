"""MIG partition slices against the API emulator over loopback: every slice the plugin
builds for MIG-mode H100 and H200 nodes is accepted, published through the real
publisher, and each partitionable-device limit of the v1.36 API is refused with the
server's field path and wording (pkg/apis/resource/validation/validation.go)."""

from __future__ import annotations

import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.kube.rest import ApiError, KubeClient
from kubeletplugin.gpus import GpuInfo, MockBackend
from kubeletplugin.publisher import NODES, RESOURCE_SLICES, PublisherSettings, SlicePublisher
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices
from simulator.apiserver import APIServer

DRIVER = "vgpu.hami.io"
SETTINGS = SliceSettings(allocation_taint=Taint(f"{DRIVER}/allocation", "controller"))
FAST = PublisherSettings(retry_delay_s=0.001, max_retry_delay_s=0.01)
H100 = {"productName": "NVIDIA H100 80GB HBM3", "memory": "80Gi"}
H200 = {"productName": "NVIDIA H200", "memory": "141Gi"}
LABEL = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', "
    "regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[KubeClient]:
    async with APIServer() as server:
        kube = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield kube
        finally:
            await kube.aclose()


def discover(tmp_path: Path, model: dict[str, str], count: int, **mig: Any) -> list[GpuInfo]:
    path = tmp_path / "gpus.yaml"
    cards = [
        {"uuid": f"GPU-{i:04d}", "index": i, **model, "mig": {"mode": "enabled", **mig}}
        for i in range(count)
    ]
    path.write_text(yaml.safe_dump({"gpus": cards}))
    return list(MockBackend(path).discover())


def node_slices(gpus: list[GpuInfo], node: str = "node-a") -> list[dict[str, Any]]:
    return build_resource_slices(node, "uid-a", gpus, SETTINGS, 1)


async def refusal(client: KubeClient, resource_slice: dict[str, Any]) -> str:
    with pytest.raises(ApiError) as raised:
        await client.create(RESOURCE_SLICES, resource_slice)
    assert raised.value.status == 422
    return str(raised.value).split(" is invalid: ", 1)[1]


async def test_h200_node_is_published_through_the_publisher(
    client: KubeClient, tmp_path: Path
) -> None:
    gpus = discover(tmp_path, H200, 8)
    await client.create(NODES, {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n"}})
    async with SlicePublisher(client, "n", SETTINGS, FAST) as publisher:
        await publisher.publish(gpus)
    items = (await client.list(RESOURCE_SLICES))["items"]
    assert len(items) == 5
    assert sorted(len(i["spec"].get("devices") or []) for i in items) == [0, 50, 50, 50, 50]
    (counters,) = [i for i in items if "sharedCounters" in i["spec"]]
    assert "devices" not in counters["spec"]
    assert [c["name"] for c in counters["spec"]["sharedCounters"]] == [
        f"gpu-{i}-mig-counters" for i in range(8)
    ]
    async with SlicePublisher(client, "n", SETTINGS, FAST) as restarted:
        await restarted.publish(gpus)
        assert (restarted.publishes, restarted.generation) == (0, 1), "nothing rewritten"


async def test_h100_node_with_a_static_instance_is_accepted(
    client: KubeClient, tmp_path: Path
) -> None:
    gpus = discover(tmp_path, H100, 2, instances=[{"profile": "4g.40gb", "start": 0}])
    for resource_slice in node_slices(gpus):
        created = await client.create(RESOURCE_SLICES, resource_slice)
        assert created["spec"].get("sharedCounters") == resource_slice["spec"].get("sharedCounters")


def _partitions(tmp_path: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """One H100's device slice and counter slice, to break."""
    devices, counters = node_slices(discover(tmp_path, H100, 1))
    return devices, counters


async def test_devices_and_shared_counters_in_one_slice_are_refused(
    client: KubeClient, tmp_path: Path
) -> None:
    devices, counters = _partitions(tmp_path)
    devices["spec"]["sharedCounters"] = counters["spec"]["sharedCounters"]
    assert await refusal(client, devices) == (
        'spec: Invalid value: "": only one of `sharedCounters` or `devices` is allowed'
    )


async def test_nine_counter_sets_are_refused(client: KubeClient, tmp_path: Path) -> None:
    _, counters = _partitions(tmp_path)
    (card,) = counters["spec"]["sharedCounters"]
    counters["spec"]["sharedCounters"] = [{**card, "name": f"gpu-{i}-c"} for i in range(9)]
    assert await refusal(client, counters) == (
        "spec.sharedCounters: Too many: 9: must have at most 8 items"
    )


async def test_thirty_three_counters_in_a_set_are_refused(
    client: KubeClient, tmp_path: Path
) -> None:
    _, counters = _partitions(tmp_path)
    counters["spec"]["sharedCounters"][0]["counters"] = {
        f"memory-slice-{i}": {"value": "1"} for i in range(33)
    }
    assert await refusal(client, counters) == (
        "spec.sharedCounters[0].counters: Too many: 33: must have at most 32 items"
    )


@pytest.mark.parametrize(
    ("where", "name", "path"),
    [
        ("set", "GPU-0", "spec.sharedCounters[0].name"),
        ("counter", "memory_slice", "spec.sharedCounters[0].counters"),
    ],
)
async def test_counter_names_must_be_dns_labels(
    client: KubeClient, tmp_path: Path, where: str, name: str, path: str
) -> None:
    _, counters = _partitions(tmp_path)
    if where == "set":
        counters["spec"]["sharedCounters"][0]["name"] = name
    else:
        counters["spec"]["sharedCounters"][0]["counters"][name] = {"value": "1"}
    assert await refusal(client, counters) == f'{path}: Invalid value: "{name}": {LABEL}'


async def test_duplicate_counter_set_names_are_refused(client: KubeClient, tmp_path: Path) -> None:
    _, counters = _partitions(tmp_path)
    counters["spec"]["sharedCounters"] *= 2
    assert await refusal(client, counters) == (
        'spec.sharedCounters[1]: Duplicate value: "gpu-0-mig-counters"'
    )


async def test_three_counter_consumptions_are_refused(client: KubeClient, tmp_path: Path) -> None:
    devices, _ = _partitions(tmp_path)
    (consumption,) = devices["spec"]["devices"][0]["consumesCounters"]
    devices["spec"]["devices"][0]["consumesCounters"] = [
        {**consumption, "counterSet": f"set-{i}"} for i in range(3)
    ]
    assert await refusal(client, devices) == (
        "spec.devices[0].consumesCounters: Too many: 3: must have at most 2 items"
    )


async def test_consuming_one_set_twice_or_from_a_bad_name_is_refused(
    client: KubeClient, tmp_path: Path
) -> None:
    devices, _ = _partitions(tmp_path)
    device = devices["spec"]["devices"][0]
    device["consumesCounters"] *= 2
    assert await refusal(client, devices) == (
        'spec.devices[0].consumesCounters[1]: Duplicate value: "gpu-0-mig-counters"'
    )
    device["consumesCounters"] = [{"counterSet": "Card_0", "counters": {}}]
    assert await refusal(client, devices) == (
        f'[spec.devices[0].consumesCounters[0].counterSet: Invalid value: "Card_0": {LABEL}, '
        "spec.devices[0].consumesCounters[0].counters: Required value]"
    )


async def test_sixty_five_counter_consuming_devices_are_refused(
    client: KubeClient, tmp_path: Path
) -> None:
    devices, _ = _partitions(tmp_path)
    template = devices["spec"]["devices"][0]
    many = []
    for i in range(65):
        device = copy.deepcopy(template)
        device["name"] = f"partition-{i}"
        device.pop("taints", None)
        many.append(device)
    devices["spec"]["devices"] = many
    assert await refusal(client, devices) == (
        "spec.devices: Too many: 65: must have at most 64 items"
    )
    devices["spec"]["devices"] = many[:64]
    await client.create(RESOURCE_SLICES, devices)
