"""The MIG slices legacy pods hold, read back from their annotations, with HAMi's
own test values as the table.

Each test names the HAMi test it ports (Project-HAMi/HAMi at 4707fb02,
`pkg/scheduler/mig_allocation_test.go`, getNodesUsage).
"""

from __future__ import annotations

from typing import Any

from engine_helpers import engine, pod, req

from api import hami_annotations as keys
from api.hami_annotations import MigPlacement, MigProfile
from controller.legacy.mig_slices import mig_allocations_annotation
from controller.legacy.pod_usage import read_pod_allocation
from dra_driver.engine import reasons
from dra_driver.engine.grants import Grant
from dra_driver.engine.mig_fit import (
    CARD_MIG_TOPOLOGY_INFEASIBLE,
    MigSlice,
    occupied_placements,
    slice_tag,
)
from dra_driver.engine.model import Device, Node
from dra_driver.engine.vendor_backends.nvidia import NvidiaBackend

BACKENDS = (NvidiaBackend(),)


def node1(*spots: tuple[int, int]) -> Node:
    """node1 of mig_allocation_test.go: GPU-a, 7 shares, 40960 MiB, one 1g.5gb profile."""
    profile = MigProfile("1g.5gb", 5120, 14, 0, tuple(MigPlacement(s, n) for s, n in spots))
    device = Device("GPU-a", 0, "NVIDIA", 7, 40960, 100, mode="mig", mig_profiles=(profile,))
    return Node("node1", (device,))


def pod_1(mig: str | None) -> dict[str, Any]:
    """pod-1 of mig_allocation_test.go, on node1 with GPU-a (5120 MiB, 14 cores)."""
    annotations = {
        keys.VGPU_NODE: "node1",
        keys.VGPU_DEVICES_ALLOCATED: "GPU-a,NVIDIA,5120,14:;",
    }
    if mig is not None:
        annotations[keys.VGPU_MIG_ALLOCATIONS] = mig
    return {
        "metadata": {
            "uid": "pod-1",
            "name": "pod-1",
            "namespace": "default",
            "annotations": annotations,
        }
    }


def usage_of(pod_object: dict[str, Any]):
    allocation = read_pod_allocation(pod_object, BACKENDS, lambda _: {"GPU-a": 0})
    assert allocation is not None
    return allocation


def test_get_nodes_usage_restores_mig_allocation_by_profile_and_placement() -> None:
    """TestGetNodesUsageRestoresMigAllocationByProfileAndPlacement: the slice (1g.5gb at
    6, size 1) is held; the runtime identity the device plugin added does not matter."""
    allocation = usage_of(
        pod_1(
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
            '"placement":{"start":6,"size":1},"migUUID":"MIG-a","gpuInstanceID":7,'
            '"computeInstanceID":0}]'
        )
    )
    usage = allocation.usage["GPU-a"]
    assert usage.tags == (slice_tag([MigSlice("1g.5gb", 6, 1)]),)
    assert occupied_placements(usage.tags) == [MigPlacement(6, 1)]
    decision = engine(node1((6, 1)), usage={"node1": allocation.usage}).decide(
        pod(req(memory=4000))
    )
    assert decision.failures == {"node1": f"1/1 {CARD_MIG_TOPOLOGY_INFEASIBLE}"}


def test_get_nodes_usage_fails_closed_without_mig_allocation() -> None:
    """TestGetNodesUsageFailsClosedWithoutMigAllocation: a pod on the MIG GPU without
    the annotation leaves the GPU unhealthy (and so does an unreadable one)."""
    for mig in (None, "[{broken"):
        allocation = usage_of(pod_1(mig))
        decision = engine(node1((6, 1)), usage={"node1": allocation.usage}).decide(
            pod(req(memory=4000))
        )
        assert decision.failures == {"node1": f"1/1 {reasons.CARD_NOT_HEALTH}"}, mig


def test_get_nodes_usage_restores_unconsumed_mig_reservations() -> None:
    """TestGetNodesUsageRestoresUnconsumedMigReservations: two slices on GPU-a and one
    device entry: both slices (6 then 5) are held and the GPU stays healthy."""
    allocation = usage_of(
        pod_1(
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
            '"placement":{"start":6,"size":1}},{"containerIndex":0,"deviceIndex":1,'
            '"gpuUUID":"GPU-a","profile":"1g.5gb","placement":{"start":5,"size":1}}]'
        )
    )
    usage = allocation.usage["GPU-a"]
    assert occupied_placements(usage.tags) == [MigPlacement(6, 1), MigPlacement(5, 1)]
    eng = engine(node1((5, 1), (6, 1), (4, 1)), usage={"node1": allocation.usage})
    placed = eng.decide(pod(req(memory=4000))).placement
    assert placed is not None
    assert placed.containers[0][0].tag == slice_tag([MigSlice("1g.5gb", 4, 1)])


def test_encode_mig_allocations_numbers_containers_and_devices() -> None:
    """mig_allocations.go EncodeMigAllocations: containers counted with the init
    containers first and empty ones kept, devices among the container's NVIDIA
    grants; grants without a slice are left out, and no slice writes nothing."""
    first = Grant("GPU-a", "NVIDIA", 5120, 14, 0, tag=slice_tag([MigSlice("1g.5gb", 6, 1)]))
    plain = Grant("GPU-b", "NVIDIA", 1000, 0, 1)
    other = Grant("MLU-0", "MLU", 1000, 0, 0)
    second = Grant("GPU-a", "NVIDIA", 10240, 28, 0, tag=slice_tag([MigSlice("2g.10gb", 0, 2)]))
    written = mig_allocations_annotation(((first,), (), (other, plain, second)))
    assert written == {
        keys.VGPU_MIG_ALLOCATIONS: (
            '[{"containerIndex":0,"deviceIndex":0,"gpuUUID":"GPU-a","profile":"1g.5gb",'
            '"placement":{"start":6,"size":1}},{"containerIndex":2,"deviceIndex":1,'
            '"gpuUUID":"GPU-a","profile":"2g.10gb","placement":{"start":0,"size":2}}]'
        )
    }
    assert mig_allocations_annotation(((plain,),)) == {}
