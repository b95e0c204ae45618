"""One accounting of a GPU for both modes: legacy pods' holds, claims' usage, the re-check."""

from __future__ import annotations

from typing import Any

import pytest

from api.hami_annotations import (
    VGPU_DEVICES_ALLOCATED,
    VGPU_NODE,
    ContainerDevice,
    encode_pod_devices,
)
from controller.inventory import build_inventory
from controller.mixed_usage import (
    LegacyHold,
    add_holds,
    claims_usage,
    legacy_backends,
    legacy_hold,
    over_commits,
)
from dra_driver.engine.model import Device, DeviceUsage, Node

DRIVER = "vgpu.hami.io"
GIB = 1 << 30


def legacy_pod(node: str | None, *containers: list[tuple[str, int, int]], phase: str = "Pending"):
    annotations = {}
    if node is not None:
        annotations[VGPU_NODE] = node
    if containers:
        annotations[VGPU_DEVICES_ALLOCATED] = encode_pod_devices(
            [
                [ContainerDevice(uuid, "NVIDIA", mem, cores) for uuid, mem, cores in c]
                for c in containers
            ]
        )
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": "u1", "annotations": annotations},
        "spec": {"containers": [{"name": f"c{i}"} for i in range(len(containers))]},
        "status": {"phase": phase},
    }


def gpu_slice(node: str, uuid: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"{node}-slice", "uid": "s1"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": "gpu-0",
                    "attributes": {"uuid": {"string": uuid}, "index": {"int": 0}},
                    "capacity": {
                        "memory": {"value": "16Gi"},
                        "cores": {"value": "100"},
                        "shares": {"value": "2"},
                    },
                }
            ],
        },
    }


def claim(node: str, memory: str, cores: str, allocated: bool = True) -> dict[str, Any]:
    status = {}
    if allocated:
        result = {
            "driver": DRIVER,
            "pool": node,
            "device": "gpu-0",
            "request": "gpu",
            "shareID": "7f0c0a3e-0000-4000-8000-000000000001",
            "consumedCapacity": {"memory": memory, "cores": cores, "shares": "1"},
        }
        status = {"allocation": {"devices": {"results": [result]}}}
    return {"metadata": {"name": "c", "namespace": "ns"}, "status": status}


def test_a_legacy_pod_holds_the_sum_of_its_containers_on_its_node() -> None:
    pod = legacy_pod("n1", [("GPU-a", 1000, 10)], [("GPU-a", 500, 5), ("GPU-b", 200, 0)])
    hold = legacy_hold(pod, legacy_backends())
    assert hold == LegacyHold(
        "n1",
        (("GPU-a", DeviceUsage(2, 1500, 15)), ("GPU-b", DeviceUsage(1, 200, 0))),
        "ns",
        (("NVIDIA", 1700, 15),),
    )


@pytest.mark.parametrize(
    "pod",
    [
        legacy_pod(None, [("GPU-a", 1000, 10)]),
        legacy_pod("n1"),
        legacy_pod("n1", [("GPU-a", 1000, 10)], phase="Succeeded"),
        legacy_pod("n1", [("GPU-a", 1000, 10)], phase="Failed"),
    ],
    ids=["not filtered", "no devices", "succeeded", "failed"],
)
def test_a_legacy_pod_holds_nothing_unfiltered_or_finished(pod) -> None:
    assert legacy_hold(pod, legacy_backends()) is None


def test_an_unreadable_device_list_holds_nothing() -> None:
    pod = legacy_pod("n1")
    pod["metadata"]["annotations"][VGPU_DEVICES_ALLOCATED] = "GPU-a,NVIDIA,lots,10:;"
    assert legacy_hold(pod, legacy_backends()) is None


def test_claims_are_charged_to_the_uuid_their_slice_device_carries() -> None:
    inventory = build_inventory([gpu_slice("n1", "GPU-a")], DRIVER)
    usage = claims_usage(
        [claim("n1", "4Gi", "30"), claim("n1", "1Gi", "10"), claim("n1", "8Gi", "50", False)],
        inventory,
    )
    assert usage == {"n1": {"GPU-a": DeviceUsage(2, 5120, 40)}}


def test_holds_add_to_claims_usage_without_changing_it() -> None:
    claims = {"n1": {"GPU-a": DeviceUsage(1, 4096, 30)}}
    merged = add_holds(claims, [LegacyHold("n1", (("GPU-a", DeviceUsage(1, 1024, 10)),))])
    assert merged == {"n1": {"GPU-a": DeviceUsage(2, 5120, 40)}}
    assert claims == {"n1": {"GPU-a": DeviceUsage(1, 4096, 30)}}


NODE = Node("n1", (Device("GPU-a", 0, "NVIDIA", count=2, memory_mib=16384, cores=100),))


@pytest.mark.parametrize(
    ("usage", "expected"),
    [
        (DeviceUsage(2, 16384, 100), []),
        (DeviceUsage(3, 100, 10), ["GPU GPU-a on node n1: slots 3 > 2"]),
        (DeviceUsage(2, 16385, 10), ["GPU GPU-a on node n1: memory 16385 MiB > 16384 MiB"]),
        (DeviceUsage(1, 100, 101), ["GPU GPU-a on node n1: cores 101% > 100%"]),
    ],
)
def test_over_commits_names_the_device_and_the_dimension(usage, expected) -> None:
    assert over_commits(NODE, {"GPU-a": usage, "GPU-elsewhere": DeviceUsage(9, 9, 999)}) == expected
