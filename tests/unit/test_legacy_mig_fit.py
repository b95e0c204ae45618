"""HAMi's MIG mode in the standard Fit, with HAMi's own test values as the table.

Each test names the HAMi test it ports (Project-HAMi/HAMi at 4707fb02):
`pkg/device/nvidia/mig_topology_test.go`, `mig_capability_test.go`,
`device_test.go`, `pkg/scheduler/mig_allocation_test.go`, `score_test.go`.
"""

from __future__ import annotations

from engine_helpers import engine, pod, req

from api.hami_annotations import MigPlacement, MigProfile
from dra_driver.engine import reasons
from dra_driver.engine.fit import fit_request
from dra_driver.engine.grants import Grant, Slot
from dra_driver.engine.mig_fit import (
    CARD_MIG_TOPOLOGY_INFEASIBLE,
    MigSlice,
    can_place_profiles,
    charge_slice,
    custom_filter,
    is_mig_request,
    select_placement,
    slice_tag,
)
from dra_driver.engine.model import Device, DeviceUsage, Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import DeviceFilters, ScoringWeights
from dra_driver.engine.vendors import FitContext, VendorRegistry


def placements(*pairs: tuple[int, int]) -> tuple[MigPlacement, ...]:
    return tuple(MigPlacement(start, size) for start, size in pairs)


ONES = placements(*((start, 1) for start in range(7)))

A100_PROFILES = (
    MigProfile("1g.5gb", 5120, 14, 1, ONES),
    MigProfile("2g.10gb", 10240, 28, 2, placements((0, 2), (2, 2), (4, 2))),
    MigProfile("3g.20gb", 20480, 42, 3, placements((0, 4), (4, 4))),
)
"""`a100MigProfiles()` of mig_capability_test.go."""

THREE_2G = (
    slice_tag([MigSlice("2g.10gb", 0, 2)]),
    slice_tag([MigSlice("2g.10gb", 2, 2)]),
    slice_tag([MigSlice("2g.10gb", 4, 2)]),
)
"""The three 2g.10gb slices in use of mig_capability_test.go."""


def mig_gpu(
    profiles: tuple[MigProfile, ...] = A100_PROFILES,
    *,
    id: str = "GPU-a",
    count: int = 7,
    memory: int = 40960,
    cores: int = 100,
    mode: str = "mig",
) -> Device:
    return Device(
        id=id,
        index=0,
        type="NVIDIA",
        count=count,
        memory_mib=memory,
        cores=cores,
        mode=mode,
        mig_profiles=profiles,
    )


def direct_fit(slots, request, policy: str = "spread"):
    """NVIDIA's Fit on one node's devices, as HAMi's tests call `nv.Fit`."""
    ctx = FitContext(
        Node("n", tuple(slot.device for slot in slots)),
        "default",
        parse_gpu_policy(policy),
        ScoringWeights(),
        VendorRegistry(),
        None,
    )
    return fit_request(slots, request, ctx, [])


def test_can_place_mig_profiles_a100() -> None:
    """mig_topology_test.go TestCanPlaceMigProfilesA100."""
    allowed = (
        MigProfile("1g.5gb", placements=ONES),
        MigProfile("2g.10gb", placements=placements((0, 2), (2, 2), (4, 2))),
        MigProfile("3g.20gb", placements=placements((0, 4), (4, 4))),
    )
    assert can_place_profiles(allowed, [], ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"])
    assert can_place_profiles(allowed, placements((4, 4)), ["2g.10gb", "1g.5gb", "1g.5gb"])
    assert not can_place_profiles(allowed, placements((0, 4), (4, 4)), ["1g.5gb"])
    assert not can_place_profiles(allowed, placements((0, 2), (2, 2), (4, 2)), ["2g.10gb"])


def test_select_mig_placement_uses_balanced_packing() -> None:
    """mig_topology_test.go TestSelectMigPlacementUsesBalancedPacking: 3g and 1g take
    the highest free start, 2g the lowest."""
    occupied: list[MigPlacement] = []
    for profile, start in (("3g.20gb", 4), ("2g.10gb", 0), ("1g.5gb", 3), ("1g.5gb", 2)):
        placement = select_placement(A100_PROFILES, occupied, profile)
        assert placement is not None and placement.start == start, profile
        occupied.append(placement)


def test_add_resource_usage_uses_reported_profile_and_placement() -> None:
    """mig_capability_test.go TestAddResourceUsageUsesReportedProfileAndPlacement."""
    slot = Slot(mig_gpu(), 0, 0, 0)
    charged = charge_slice(slot, Grant("GPU-a", "NVIDIA", 10000, 0, 0))
    assert charged is not None
    assert charged.uuid == "GPU-a"
    assert (charged.memory_mib, charged.cores) == (10240, 28)
    assert charged.tag == slice_tag([MigSlice("2g.10gb", 0, 2)])
    assert slot.tags == (charged.tag,)


def test_custom_filter_uses_reported_placement_capacity() -> None:
    """mig_capability_test.go TestCustomFilterUsesReportedPlacementCapacity."""
    device = mig_gpu()
    slot = Slot(device, 3, 30720, 84, THREE_2G)
    assert not custom_filter(device, slot, [], 10000)
    assert custom_filter(device, slot, [], 5000)


def test_custom_filter_ignores_queued_allocations_for_other_gpus() -> None:
    """mig_capability_test.go TestCustomFilterIgnoresQueuedAllocationsForOtherGPUs."""
    device = mig_gpu()
    slot = Slot(device, 3, 30720, 84, THREE_2G)
    assert custom_filter(device, slot, [Grant("GPU-b", "NVIDIA", 5000, 0, 1)], 5000)
    assert not custom_filter(device, slot, [Grant("GPU-a", "NVIDIA", 5000, 0, 0)], 5000)


def test_fit_uses_effective_percentage_memory_for_mig_placement() -> None:
    """mig_capability_test.go TestFitUsesEffectivePercentageMemoryForMigPlacement: 25%
    of 40960 MiB is 10240, and only a 1g slice is left."""
    slot = Slot(mig_gpu(), 3, 30720, 0, THREE_2G)
    picks, reason = direct_fit([slot], req(percent=25))
    assert picks is None
    assert reason == f"1/1 {CARD_MIG_TOPOLOGY_INFEASIBLE}"


def test_custom_filter_rule_non_mig() -> None:
    """device_test.go TestCustomFilterRule_NonMig: a GPU not in MIG mode is not
    held to any placement."""
    picks, reason = direct_fit([Slot(mig_gpu((), mode="hami-core"), 0, 0, 0)], req())
    assert picks is not None and reason == ""


def test_fit_mig_percentage_request_rejects_undersized_template() -> None:
    """device_test.go TestFit_MigPercentageRequestRejectsUndersizedTemplate: the MIG
    GPU's only profile is smaller than 50% of 8192 MiB (HAMi's case names it through the
    deprecated MigTemplate, which dynamic MIG no longer reads: no profile fits)."""
    device = mig_gpu(
        (MigProfile("1g.5gb", 1024, 14, 1, placements((0, 1))),),
        id="dev-0",
        count=1,
        memory=8192,
    )
    picks, reason = direct_fit([Slot(device, 0, 0, 0)], req(percent=50, cores=10))
    assert picks is None
    assert reason == f"1/1 {CARD_MIG_TOPOLOGY_INFEASIBLE}"


def test_is_mig_request() -> None:
    """mig_allocation_test.go TestIsMIGRequest."""
    mig = [mig_gpu()]
    hami_core = [mig_gpu(mode="hami-core")]
    cases = [
        ("non-NVIDIA request", req(vendor="AMD", filters=DeviceFilters(modes="mig")), mig, False),
        ("explicit HAMi-core mode", req(filters=DeviceFilters(modes="hami-core")), mig, False),
        ("MIG mode without Pod", req(), mig, True),
        ("MIG mode annotation", req(filters=DeviceFilters(modes="mig")), mig, True),
        ("no MIG device", req(), hami_core, False),
    ]
    for name, request, devices, want in cases:
        assert is_mig_request(request, devices) is want, name


def single_gpu_node(mode: str, spots: tuple[MigPlacement, ...]) -> Node:
    """`singleNvidiaGPUNode` of mig_allocation_test.go: one A100 40GB, 7 shares."""
    profiles = (MigProfile("1g.5gb", 5120, 14, 0, spots),) if mode == "mig" else ()
    return Node("single-gpu-node", (mig_gpu(profiles, mode=mode),))


def test_fit_in_devices_allows_multiple_mig_placements_on_single_gpu() -> None:
    """mig_allocation_test.go TestFitInDevicesAllowsMultipleMigPlacementsOnSingleGPU:
    2 GPUs of 4000 MiB on one GPU of seven 1g slices -> two distinct slices of GPU-a,
    each charged as the 1g.5gb profile."""
    request = req(count=2, memory=4000, filters=DeviceFilters(modes="mig"))
    node = single_gpu_node("mig", ONES)
    picks, reason = direct_fit([Slot(node.devices[0], 0, 0, 0)], request)
    assert reason == "" and picks is not None and len(picks) == 2
    decision = engine(node).decide(pod(request))
    assert decision.placement is not None
    (container,) = decision.placement.containers
    assert [grant.uuid for grant in container] == ["GPU-a", "GPU-a"]
    assert [(grant.memory_mib, grant.cores) for grant in container] == [(5120, 14)] * 2
    assert container[0].tag == slice_tag([MigSlice("1g.5gb", 6, 1)])
    assert container[1].tag == slice_tag([MigSlice("1g.5gb", 5, 1)])


def test_fit_in_devices_rejects_insufficient_mig_placements_on_single_gpu() -> None:
    """mig_allocation_test.go TestFitInDevicesRejectsInsufficientMigPlacementsOnSingleGPU:
    the direct Fit and the node's fit give the same reason, one CardMigTopologyInfeasible."""
    request = req(count=2, memory=4000, filters=DeviceFilters(modes="mig"))
    node = single_gpu_node("mig", placements((6, 1)))
    picks, direct = direct_fit([Slot(node.devices[0], 0, 0, 0)], request)
    assert picks is None
    assert reasons.parse_reason(direct).count(CARD_MIG_TOPOLOGY_INFEASIBLE) == 1
    assert (
        direct
        == f"1/1 {reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST}, 1/1 {CARD_MIG_TOPOLOGY_INFEASIBLE}"
    )
    decision = engine(node).decide(pod(request))
    assert decision.placement is None
    assert decision.failures == {"single-gpu-node": direct}


def test_fit_in_devices_retains_physical_count_check_for_non_mig_gpu() -> None:
    """mig_allocation_test.go TestFitInDevicesRetainsPhysicalCountCheckForNonMigGPU."""
    request = req(count=2, memory=4000, filters=DeviceFilters(modes="hami-core"))
    decision = engine(single_gpu_node("hami-core", ())).decide(pod(request))
    assert decision.failures == {"single-gpu-node": reasons.NODE_INSUFFICIENT_DEVICE}


def test_score_fit_mode_is_mig() -> None:
    """score_test.go Test_fitInCertainDevice "mode is mig": 2 x (1024 MiB, 1 core) on a
    GPU whose one profile has one placement: the first slice takes it, the second finds
    none (1/1 AllocatedCardsInsufficientRequest, 1/1 CardMigTopologyInfeasible).
    HAMi's case holds Used=1 with no slice in use; here that share holds a slice outside
    the profile's placement, since a MIG share without a slice fails closed."""
    device = Device(
        id="test-0",
        index=0,
        type="NVIDIA",
        count=4,
        memory_mib=8192,
        cores=4,
        numa=1,
        mode="mig",
        mig_profiles=(MigProfile("1g.test", 2048, 1, 0, placements((0, 1))),),
    )
    elsewhere = slice_tag([MigSlice("1g.other", 3, 1)])
    picks, reason = direct_fit([Slot(device, 1, 2048, 1, (elsewhere,))], req(2, 1024, 1, 100))
    assert picks is None
    assert reason == (
        f"1/1 {reasons.ALLOCATED_CARDS_INSUFFICIENT_REQUEST}, 1/1 {CARD_MIG_TOPOLOGY_INFEASIBLE}"
    )


def test_mig_share_without_a_slice_fails_closed() -> None:
    """mig_allocation_test.go TestGetNodesUsageFailsClosedWithoutMigAllocation, at the
    Fit: a MIG GPU holding a share with no slice (a pod without the annotation) is
    refused as unhealthy, and so is a hami-core GPU holding a slice."""
    node = single_gpu_node("mig", ONES)
    lost = {"single-gpu-node": {"GPU-a": DeviceUsage(1, 5120, 14)}}
    decision = engine(node, usage=lost).decide(pod(req(memory=4000)))
    assert decision.failures == {"single-gpu-node": f"1/1 {reasons.CARD_NOT_HEALTH}"}
    core = single_gpu_node("hami-core", ())
    stray = {
        "single-gpu-node": {
            "GPU-a": DeviceUsage(1, 5120, 14, (slice_tag([MigSlice("1g.5gb", 6, 1)]),))
        }
    }
    decision = engine(core, usage=stray).decide(pod(req(memory=4000)))
    assert decision.failures == {"single-gpu-node": f"1/1 {reasons.CARD_NOT_HEALTH}"}


def test_committed_slices_are_held_and_released() -> None:
    """A placement committed to the engine holds its slices for the next pod, and its
    release gives them back (HAMi's MigAllocationsInUse across pods)."""
    node = single_gpu_node("mig", placements((5, 1), (6, 1)))
    eng = engine(node)
    first = pod(req(memory=4000))
    placed = eng.decide(first).placement
    assert placed is not None
    eng.commit(first, placed)
    second = eng.decide(pod(req(memory=4000))).placement
    assert second is not None
    assert second.containers[0][0].tag == slice_tag([MigSlice("1g.5gb", 5, 1)])
    eng.commit(first, second)
    assert eng.decide(pod(req(memory=4000))).failures == {
        "single-gpu-node": f"1/1 {CARD_MIG_TOPOLOGY_INFEASIBLE}"
    }
    eng.release(first, placed)
    again = eng.decide(pod(req(memory=4000))).placement
    assert again is not None
    assert again.containers[0][0].tag == slice_tag([MigSlice("1g.5gb", 6, 1)])
