"""Pod annotations the extender writes (golden) and the usage read back from them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.hami_annotations import (
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    VGPU_DEVICES_TO_ALLOCATE,
    VGPU_NODE,
    VGPU_TIME,
    RegisteredDevice,
    encode_node_devices,
)
from controller.legacy.extender import pod_annotations
from controller.legacy.inventory import read_node
from controller.legacy.pod_usage import read_pod_allocation
from dra_driver.engine.engine import Engine, Placement
from dra_driver.engine.grants import Grant
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.requests import DeviceRequest, PodRequest
from dra_driver.engine.vendor_backends.base import PatchContext
from dra_driver.engine.vendor_backends.nvidia import NvidiaBackend

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
MINUTE = timedelta(seconds=60)
UUID = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
# hami-protocol.md §4, the EncodePodSingleDevice example, with the UUID written out.
REFERENCE_LIST = f"{UUID},NVIDIA,3000,0:;{UUID},NVIDIA,5000,0:;"
NVIDIA_ONLY = (NvidiaBackend(),)


def test_filter_annotations_match_hami_bytes() -> None:
    placement = Placement(
        node="gpu-node-2",
        containers=(
            (Grant(UUID, "NVIDIA", 3000, 0, 0),),
            (Grant(UUID, "NVIDIA", 5000, 0, 0),),
        ),
        score=0.0,
    )
    annotations = pod_annotations(
        placement, NVIDIA_ONLY, PatchContext(node="gpu-node-2", now_ns=1796032800 * 10**9)
    )
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
    assert pod_annotations(placement, NVIDIA_ONLY, PatchContext(node="n"))[
        VGPU_DEVICES_ALLOCATED
    ] == (";GPU-a,NVIDIA,1024,30:;;")


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
        pod(INIT_AND_APPS, init=1), NVIDIA_ONLY, {"n1": {"GPU-b": 1}}.__getitem__
    )
    assert allocation is not None
    assert allocation.usage == {
        "GPU-a": DeviceUsage(used=2, memory_mib=8000, cores=50),
        "GPU-b": DeviceUsage(used=1, memory_mib=1000, cores=0),
    }
    assert allocation.placement.containers[2][1].index == 1


def test_finished_init_containers_shrink_to_app_only() -> None:
    allocation = read_pod_allocation(
        pod(INIT_AND_APPS, init=1, init_done=True), NVIDIA_ONLY, no_indices
    )
    assert allocation is not None
    assert allocation.usage["GPU-a"] == DeviceUsage(used=2, memory_mib=5000, cores=30)


def test_terminated_and_unplaced_pods_hold_nothing() -> None:
    assert (
        read_pod_allocation(pod(INIT_AND_APPS, init=1, phase="Succeeded"), NVIDIA_ONLY, no_indices)
        is None
    )
    unplaced = pod(INIT_AND_APPS, init=1)
    del unplaced["metadata"]["annotations"][VGPU_NODE]
    assert read_pod_allocation(unplaced, NVIDIA_ONLY, no_indices) is None


def t4(uuid: str, index: int) -> RegisteredDevice:
    return RegisteredDevice(uuid, index, 10, 15360, 100, "NVIDIA-Tesla T4", health=True)


REPEATED = encode_node_devices([*(t4(f"GPU-clone-{i}", i) for i in range(4)), t4("GPU-clone-0", 4)])
"""Four cards as a shared mock file (or a cloned VM) registers them on every node, the
first listed twice, as a bad NVML answer can."""


def registered_node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "annotations": {NODE_NVIDIA_REGISTER: REPEATED}},
        "status": {"allocatable": {"nvidia.com/gpu": "50"}},
    }


def test_shared_uuids_never_let_a_card_hold_more_than_its_capacity() -> None:
    entries = [
        read_node(registered_node(name), "nvidia.com/gpu", "NVIDIA", NOW, MINUTE)
        for name in ("n1", "n2")
    ]
    engine = Engine([entry.node for entry in entries if entry.node is not None])
    pods = []
    for i in range(300):
        request = PodRequest("ns", f"p{i}", ((DeviceRequest("NVIDIA", 1, memory_mib=4000),),))
        placement = engine.decide(request).placement
        if placement is None:
            continue
        engine.commit(request, placement)
        annotations = pod_annotations(placement, NVIDIA_ONLY, PatchContext(node=placement.node))
        metadata = {"uid": f"u{i}", "namespace": "ns", "name": f"p{i}", "annotations": annotations}
        pods.append({"metadata": metadata, "spec": {}, "status": {}})
    used: dict[tuple[str, str], DeviceUsage] = {}
    for held in pods:
        allocation = read_pod_allocation(held, NVIDIA_ONLY, no_indices)
        assert allocation is not None
        for device_id, amount in allocation.usage.items():
            key = (allocation.placement.node, device_id)
            used[key] = used.get(key, DeviceUsage()).plus(amount)
    assert len(pods) == 2 * 4 * 3
    assert all(amount.memory_mib <= 15360 and amount.used <= 10 for amount in used.values())
    assert {key: amount.memory_mib for key, amount in used.items()} == {
        (node, f"GPU-clone-{i}"): 12000 for node in ("n1", "n2") for i in range(4)
    }
