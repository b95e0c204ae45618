"""HAMi's fit rules, one failure reason at a time, and the request shapes."""

from __future__ import annotations

import logging

import pytest
from engine_helpers import engine, gpu, node, pod, req

from dra_driver.engine import reasons
from dra_driver.engine.engine import Placement
from dra_driver.engine.grants import Grant
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.requests import DeviceFilters


def only_reason(eng, workload, name="n") -> str:
    decision = eng.decide(workload)
    assert decision.placement is None
    return decision.failures[name]


def test_single_gpu_fits_with_requested_memory_and_cores():
    decision = engine(node("n", 1)).decide(pod(req(memory=3000, cores=30)))
    assert decision.placement is not None
    (grant,) = decision.placement.containers[0]
    assert (grant.uuid, grant.memory_mib, grant.cores) == ("GPU-n-0", 3000, 30)


def test_count_only_takes_whole_card_memory_via_percentage():
    decision = engine(node("n", 1)).decide(pod(req(percent=100)))
    assert decision.placement.containers[0][0].memory_mib == 81920


def test_percentage_memory_is_a_share_of_each_card():
    devices = (gpu(0, memory=40960), gpu(1, memory=81920))
    decision = engine(node("n", devices=devices)).decide(pod(req(count=2, percent=25)))
    grants = {g.uuid: g.memory_mib for g in decision.placement.containers[0]}
    assert grants == {"GPU-n-0": 10240, "GPU-n-1": 20480}


def test_cores_above_100_are_clamped_to_100():
    decision = engine(node("n", 1)).decide(pod(req(memory=10, cores=250)))
    assert decision.placement.containers[0][0].cores == 100


def test_unhealthy_card_is_skipped():
    n = node("n", devices=(gpu(0, healthy=False),))
    assert only_reason(engine(n), pod(req(memory=1))) == "1/1 CardNotHealth"


def test_cordoned_card_is_skipped():
    n = node("n", 2, cordoned=frozenset({"GPU-n-0", "GPU-n-1"}))
    assert only_reason(engine(n), pod(req(memory=1))) == "2/2 CardCordoned"


def test_type_mismatch_include_and_exclude():
    n = node("n", devices=(gpu(0, type="NVIDIA-Tesla-T4"), gpu(1)))
    want_a100 = req(memory=1, filters=DeviceFilters(use_types=("a100",)))
    placed = engine(n).decide(pod(want_a100)).placement
    assert placed.containers[0][0].uuid == "GPU-n-1"
    no_nvidia = req(memory=1, filters=DeviceFilters(no_use_types=("NVIDIA",)))
    assert only_reason(engine(n), pod(no_nvidia)) == "2/2 CardTypeMismatch"


def test_mode_filter_is_a_type_mismatch():
    n = node("n", devices=(gpu(0, mode="mps"),))
    wants_core = req(memory=1, filters=DeviceFilters(modes="hami-core"))
    assert only_reason(engine(n), pod(wants_core)) == "1/1 CardTypeMismatch"


def test_uuid_include_and_exclude():
    n = node("n", 2)
    picked = engine(n).decide(pod(req(memory=1, filters=DeviceFilters(use_uuids=("GPU-n-0",)))))
    assert picked.placement.containers[0][0].uuid == "GPU-n-0"
    excluded = req(memory=1, filters=DeviceFilters(no_use_uuids=("GPU-n-0", "GPU-n-1")))
    assert only_reason(engine(n), pod(excluded)) == "2/2 CardUuidMismatch"


def test_slots_exhausted():
    usage = {"n": {"GPU-n-0": DeviceUsage(used=10, memory_mib=10, cores=10)}}
    eng = engine(node("n", 1), usage=usage)
    assert only_reason(eng, pod(req(memory=1))) == "1/1 CardTimeSlicingExhausted"


def test_insufficient_memory():
    usage = {"n": {"GPU-n-0": DeviceUsage(used=1, memory_mib=80000, cores=0)}}
    eng = engine(node("n", 1), usage=usage)
    assert only_reason(eng, pod(req(memory=2000))) == "1/1 CardInsufficientMemory"


def test_insufficient_cores():
    usage = {"n": {"GPU-n-0": DeviceUsage(used=1, memory_mib=0, cores=80)}}
    eng = engine(node("n", 1), usage=usage)
    assert only_reason(eng, pod(req(memory=1, cores=30))) == "1/1 CardInsufficientCore"


def test_exclusive_request_conflicts_with_any_sharer():
    usage = {"n": {"GPU-n-0": DeviceUsage(used=1, memory_mib=10, cores=0)}}
    eng = engine(node("n", 1), usage=usage)
    reason = only_reason(eng, pod(req(memory=1, cores=100)))
    assert reason == "1/1 ExclusiveDeviceAllocateConflict"


def test_zero_core_request_refused_on_compute_exhausted_card():
    usage = {"n": {"GPU-n-0": DeviceUsage(used=1, memory_mib=10, cores=100)}}
    eng = engine(node("n", 1), usage=usage)
    assert only_reason(eng, pod(req(memory=1, cores=0))) == "1/1 CardComputeUnitsExhausted"


def test_mutex_policy_refuses_used_cards_and_picks_idle_ones():
    usage = {"n": {"GPU-n-0": DeviceUsage(used=1, memory_mib=10, cores=10)}}
    eng = engine(node("n", 2), usage=usage)
    placed = eng.decide(pod(req(memory=1), gpu_policy="mutex")).placement
    assert placed.containers[0][0].uuid == "GPU-n-1"
    both = {"n": {f"GPU-n-{i}": DeviceUsage(1, 10, 10) for i in range(2)}}
    reason = only_reason(engine(node("n", 2), usage=both), pod(req(memory=1), gpu_policy="mutex"))
    assert reason == "2/2 ExclusiveDeviceAllocateConflict"


def test_node_with_fewer_cards_than_requested():
    assert (
        only_reason(engine(node("n", 2)), pod(req(count=3, memory=1))) == "NodeInsufficientDevice"
    )


def test_partial_multi_card_fit_reports_allocated_cards_insufficient():
    usage = {"n": {"GPU-n-0": DeviceUsage(used=1, memory_mib=81000, cores=0)}}
    reason = only_reason(engine(node("n", 2), usage=usage), pod(req(count=2, memory=2000)))
    assert reason == "1/2 AllocatedCardsInsufficientRequest, 1/2 CardInsufficientMemory"


def test_quota_denial_counts_whole_pod_on_the_node():
    ledger = QuotaLedger({("team", "NVIDIA"): NamespaceQuota(memory_limit_mib=5000)})
    eng = engine(node("n", 2), quota=ledger)
    fits = pod(req(memory=2000), req(memory=3000), namespace="team")
    assert eng.decide(fits).placement is not None
    too_much = pod(req(memory=2000), req(memory=3001), namespace="team")
    assert only_reason(engine(node("n", 2), quota=ledger), too_much) == "2/2 ResourceQuotaNotFit"
    other_namespace = pod(req(memory=60000), namespace="elsewhere")
    assert engine(node("n", 2), quota=ledger).decide(other_namespace).placement is not None


def test_quota_is_charged_on_commit():
    ledger = QuotaLedger({("team", "NVIDIA"): NamespaceQuota(cores_limit=50)})
    eng = engine(node("n", 2), quota=ledger)
    first = pod(req(memory=1, cores=30), namespace="team")
    eng.commit(first, eng.decide(first).placement)
    assert only_reason(eng, first) == "2/2 ResourceQuotaNotFit"


def test_multi_device_request_uses_distinct_cards():
    decision = engine(node("n", 4)).decide(pod(req(count=3, memory=1000)))
    uuids = [g.uuid for g in decision.placement.containers[0]]
    assert len(set(uuids)) == 3


def test_containers_accumulate_on_one_node():
    n = node("n", devices=(gpu(0, memory=10000),))
    fits = pod(req(memory=6000), req(memory=4000))
    assert engine(n).decide(fits).placement is not None
    too_big = pod(req(memory=6000), req(memory=4001))
    assert only_reason(engine(n), too_big) == "1/1 CardInsufficientMemory"


def test_empty_containers_are_kept_in_order():
    decision = engine(node("n", 1)).decide(pod((), req(memory=5), ()))
    assert [len(c) for c in decision.placement.containers] == [0, 1, 0]


def test_init_containers_each_fit_alone_and_count_at_their_peak():
    n = node("n", devices=(gpu(0, memory=10000),))
    eng = engine(n)
    workload = pod(req(memory=3000), init=[req(memory=8000), req(memory=9000)])
    placement = eng.decide(workload).placement
    assert [c[0].memory_mib for c in placement.containers] == [8000, 9000, 3000]
    eng.commit(workload, placement)
    slot = eng.node_state("n").slots[0]
    assert (slot.used, slot.memory) == (1, 9000)


def test_init_container_that_cannot_fit_refuses_the_node():
    n = node("n", devices=(gpu(0, memory=10000),))
    workload = pod(req(memory=100), init=[req(memory=10001)])
    assert only_reason(engine(n), workload) == "1/1 CardInsufficientMemory"


def test_numa_bind_keeps_cards_on_one_numa_node():
    devices = (gpu(0, numa=0), gpu(1, numa=1), gpu(2, numa=1))
    bound = req(count=2, memory=10, filters=DeviceFilters(numa_bind=True))
    placed = engine(node("n", devices=devices)).decide(pod(bound)).placement
    assert {g.uuid for g in placed.containers[0]} == {"GPU-n-1", "GPU-n-2"}


def test_numa_bind_switching_resets_and_reports_numa_not_fit():
    devices = (gpu(0, numa=0), gpu(1, numa=1), gpu(2, numa=2))
    bound = req(count=2, memory=10, filters=DeviceFilters(numa_bind=True))
    reason = only_reason(engine(node("n", devices=devices)), pod(bound))
    assert reason == "1/3 AllocatedCardsInsufficientRequest, 2/3 NumaNotFit"


def test_node_without_devices_gets_a_reason():
    assert only_reason(engine(Node("n", ())), pod(req(memory=1))) == "NodeHasNoDevices"


def test_unknown_candidate_is_reported_as_hami_reports_it():
    decision = engine(node("n", 1)).decide(pod(req(memory=1)), candidates=["ghost"])
    assert decision.placement is None
    assert decision.failures == {"ghost": "node unregistered"}


def test_reason_entries_sort_as_whole_strings():
    assert reasons.format_reason({"CardCordoned": 2, "CardInsufficientMemory": 10}, 12) == (
        "10/12 CardInsufficientMemory, 2/12 CardCordoned"
    )
    devices = tuple(gpu(i, memory=1000) for i in range(12))
    n = node("n", devices=devices, cordoned=frozenset({"GPU-n-0", "GPU-n-1"}))
    assert only_reason(engine(n), pod(req(memory=2000))) == (
        "10/12 CardInsufficientMemory, 2/12 CardCordoned"
    )


def test_uuid_use_and_nouse_lists_both_apply():
    n = node("n", 3)
    both = DeviceFilters(use_uuids=("GPU-n-0", "GPU-n-1"), no_use_uuids=("GPU-n-1",))
    placed = engine(n).decide(pod(req(memory=1, filters=both))).placement
    assert placed.containers[0][0].uuid == "GPU-n-0"
    refused = DeviceFilters(use_uuids=("GPU-n-0",), no_use_uuids=("GPU-n-0",))
    assert only_reason(engine(n), pod(req(memory=1, filters=refused))) == "3/3 CardUuidMismatch"


def test_usage_for_devices_and_nodes_the_inventory_lacks_is_ignored(caplog):
    usage = {
        "n": {"GPU-n-0": DeviceUsage(1, 1000, 10), "GPU-gone": DeviceUsage(3, 3000, 30)},
        "gone-node": {"GPU-x": DeviceUsage(1, 1, 1)},
    }
    with caplog.at_level(logging.DEBUG, logger="dra_driver.engine.engine"):
        eng = engine(node("n", 1), usage=usage)
    slot = eng.node_state("n").slots[0]
    assert (slot.used, slot.memory, slot.cores) == (1, 1000, 10)
    logged = {
        (r.getMessage(), tuple(getattr(r, "devices", getattr(r, "nodes", ()))))
        for r in caplog.records
    }
    assert ("usage of devices the inventory no longer has is ignored", ("GPU-gone",)) in logged
    assert ("usage on nodes the inventory does not have is ignored", ("gone-node",)) in logged


def test_placements_naming_stale_devices_charge_only_known_ones(caplog):
    eng = engine(node("n", 1))
    stale = Placement(
        node="n",
        containers=(
            (Grant("GPU-n-0", "NVIDIA", 500, 5, 0), Grant("GPU-gone", "NVIDIA", 700, 7, 1)),
        ),
        score=0.0,
    )
    elsewhere = Placement(
        node="gone-node", containers=((Grant("GPU-x", "NVIDIA", 1, 1, 0),),), score=0.0
    )
    workload = pod(req(count=2, memory=1))
    with caplog.at_level(logging.DEBUG, logger="dra_driver.engine.engine"):
        eng.commit(workload, stale)
        eng.commit(workload, elsewhere)
        slot = eng.node_state("n").slots[0]
        assert (slot.used, slot.memory, slot.cores) == (1, 500, 5)
        eng.release(workload, stale)
        eng.release(workload, elsewhere)
    assert (slot.used, slot.memory, slot.cores) == (0, 0, 0)
    messages = [r.getMessage() for r in caplog.records]
    assert messages.count("usage of devices the inventory no longer has is ignored") == 2
    assert messages.count("usage on a node the inventory does not have is ignored") == 2


@pytest.mark.parametrize("value", ["binpak", "spread,fastest"])
def test_unknown_gpu_policy_is_rejected_with_field(value):
    from dra_driver.errors import InvalidParameterError

    with pytest.raises(InvalidParameterError, match="gpuPolicy"):
        engine(node("n", 1)).decide(pod(req(memory=1), gpu_policy=value))


def test_mock_vendor_matches_only_mock_devices():
    n = node("n", devices=(gpu(0), gpu(1, type="MOCK-GPU-16GB", memory=16384)))
    placed = engine(n).decide(pod(req(memory=1, vendor="MOCK"))).placement
    assert placed.containers[0][0].uuid == "GPU-n-1"
    assert placed.containers[0][0].vendor == "MOCK"


def test_failure_summary_text():
    failures = {
        "a": "2/2 CardInsufficientMemory",
        "b": "1/2 CardInsufficientMemory, 1/2 CardNotHealth",
        "c": "NodeInsufficientDevice",
    }
    assert reasons.summarize_failures(failures) == (
        "no available node, 3 nodes do not meet: 2 nodes CardInsufficientMemory(a,b); "
        "1 nodes CardNotHealth(b); 1 nodes NodeInsufficientDevice(c)"
    )
