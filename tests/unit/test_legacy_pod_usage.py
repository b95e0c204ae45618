"""Pod annotations the extender writes (golden) and the usage read back from them."""

from __future__ import annotations

from typing import Any

from api.hami_annotations import (
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
)
from controller.legacy.extender import pod_annotations
from controller.legacy.pod_usage import read_pod_allocation
from dra_driver.engine.engine import Placement
from dra_driver.engine.fit import Grant
from dra_driver.engine.model import DeviceUsage

UUID = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
# hami-protocol.md §4, the EncodePodSingleDevice example, with the UUID written out.
REFERENCE_LIST = f"{UUID},NVIDIA,3000,0:;{UUID},NVIDIA,5000,0:;"


def test_filter_annotations_match_hami_bytes() -> None:
    placement = Placement(
        node="gpu-node-2",
        containers=(
            (Grant(UUID, "NVIDIA", 3000, 0, 0),),
            (Grant(UUID, "NVIDIA", 5000, 0, 0),),
        ),
        score=0.0,
    )
    annotations = pod_annotations(placement, "gpu-node-2", 1796032800)
    assert annotations == {
        VGPU_NODE: "gpu-node-2",
        VGPU_TIME: "1796032800",
        VGPU_DEVICES_TO_ALLOCATE: REFERENCE_LIST,
        VGPU_DEVICES_ALLOCATED: REFERENCE_LIST,
    }


def test_empty_containers_are_kept_in_the_list() -> None:
    placement = Placement(
        node="n", containers=((), (Grant("GPU-a", "NVIDIA", 1024, 30, 0),), ()), score=0.0
    )
    assert pod_annotations(placement, "n", 0)[VGPU_DEVICES_ALLOCATED] == (
        ";GPU-a,NVIDIA,1024,30:;;"
    )


def pod(devices: str, *, init: int = 0, phase: str = "Pending", init_done: bool = False) -> dict:
    statuses: list[dict[str, Any]] = []
    if init_done:
        statuses = [{"state": {"terminated": {"exitCode": 0}}} for _ in range(init)]
    return {
        "metadata": {
            "uid": "u1",
            "namespace": "ns",
            "name": "p",
            "annotations": {VGPU_NODE: "n1", VGPU_DEVICES_ALLOCATED: devices},
        },
        "spec": {
            "initContainers": [{"name": f"i{i}"} for i in range(init)],
            "containers": [{"name": "a"}, {"name": "b"}],
        },
        "status": {"phase": phase, "initContainerStatuses": statuses},
    }


def no_indices(_: str) -> dict[str, int]:
    return {}


INIT_AND_APPS = (
    "GPU-a,NVIDIA,8000,50:;GPU-a,NVIDIA,3000,20:;GPU-a,NVIDIA,2000,10:GPU-b,NVIDIA,1000,0:;"
)


def test_init_container_collapsed_to_its_peak() -> None:
    allocation = read_pod_allocation(
        pod(INIT_AND_APPS, init=1), "NVIDIA", {"n1": {"GPU-b": 1}}.__getitem__
    )
    assert allocation is not None
    assert allocation.usage == {
        "GPU-a": DeviceUsage(used=2, memory_mib=8000, cores=50),
        "GPU-b": DeviceUsage(used=1, memory_mib=1000, cores=0),
    }
    assert allocation.placement.containers[2][1].index == 1


def test_finished_init_containers_shrink_to_app_only() -> None:
    allocation = read_pod_allocation(
        pod(INIT_AND_APPS, init=1, init_done=True), "NVIDIA", no_indices
    )
    assert allocation is not None
    assert allocation.usage["GPU-a"] == DeviceUsage(used=2, memory_mib=5000, cores=30)


def test_terminated_and_unplaced_pods_hold_nothing() -> None:
    assert (
        read_pod_allocation(pod(INIT_AND_APPS, init=1, phase="Succeeded"), "NVIDIA", no_indices)
        is None
    )
    unplaced = pod(INIT_AND_APPS, init=1)
    del unplaced["metadata"]["annotations"][VGPU_NODE]
    assert read_pod_allocation(unplaced, "NVIDIA", no_indices) is None
