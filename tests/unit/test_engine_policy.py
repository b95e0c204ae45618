"""Device and node policies: binpack, spread, chains, mutex, topology-aware."""

from __future__ import annotations

import json

import pytest
from engine_helpers import engine, gpu, node, pod, req

from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import (
    DeviceFilters,
    PodRequest,
    ScoringWeights,
    parse_scoring_weights,
)
from dra_driver.errors import InvalidParameterError

HALF_USED = {"n": {"GPU-n-0": DeviceUsage(used=1, memory_mib=40960, cores=50)}}


def first_uuid(decision) -> str:
    return decision.placement.containers[0][0].uuid


def test_gpu_spread_prefers_the_emptiest_card():
    eng = engine(node("n", 2), usage=HALF_USED, gpu_policy="spread")
    assert first_uuid(eng.decide(pod(req(memory=100)))) == "GPU-n-1"


def test_gpu_binpack_prefers_the_fullest_card():
    eng = engine(node("n", 2), usage=HALF_USED, gpu_policy="binpack")
    assert first_uuid(eng.decide(pod(req(memory=100)))) == "GPU-n-0"


def test_pod_annotation_overrides_cluster_gpu_policy():
    eng = engine(node("n", 2), usage=HALF_USED, gpu_policy="spread")
    assert first_uuid(eng.decide(pod(req(memory=100), gpu_policy="binpack"))) == "GPU-n-0"


def test_node_binpack_picks_the_busiest_node_that_fits():
    usage = {"busy": {"GPU-busy-0": DeviceUsage(1, 20000, 20)}}
    eng = engine(node("idle"), node("busy"), usage=usage, node_policy="binpack")
    assert eng.decide(pod(req(memory=100))).placement.node == "busy"


def test_node_spread_picks_the_idlest_node():
    usage = {"busy": {"GPU-busy-0": DeviceUsage(1, 20000, 20)}}
    eng = engine(node("idle"), node("busy"), usage=usage, node_policy="spread")
    assert eng.decide(pod(req(memory=100), node_policy="spread")).placement.node == "idle"


def test_node_binpack_falls_back_when_busiest_node_cannot_fit():
    usage = {"busy": {f"GPU-busy-{i}": DeviceUsage(10, 100, 10) for i in range(2)}}
    eng = engine(node("idle"), node("busy"), usage=usage)
    decision = eng.decide(pod(req(memory=100)))
    assert decision.placement.node == "idle"


def test_node_ties_break_on_name_for_both_policies():
    eng = engine(node("b"), node("a"), node("c"))
    assert eng.decide(pod(req(memory=1))).placement.node == "a"
    assert eng.decide(pod(req(memory=1), node_policy="spread")).placement.node == "a"


def test_commit_moves_the_node_in_the_preference_order():
    eng = engine(node("a"), node("b"))
    first = pod(req(memory=1000))
    eng.commit(first, eng.decide(first).placement)
    assert eng.decide(first).placement.node == "a"
    assert eng.decide(pod(req(memory=1000), node_policy="spread")).placement.node == "b"


def test_release_undoes_commit():
    eng = engine(node("a", 1))
    workload = pod(req(memory=1000, cores=20))
    placement = eng.decide(workload).placement
    eng.commit(workload, placement)
    eng.release(workload, placement)
    slot = eng.node_state("a").slots[0]
    assert (slot.used, slot.memory, slot.cores, eng.node_state("a").score) == (0, 0, 0, 0.0)


def test_binpack_numa_chain_puts_numa_after_score():
    devices = (gpu(0, numa=1), gpu(1, numa=0))
    eng = engine(node("n", devices=devices))
    assert first_uuid(eng.decide(pod(req(memory=1), gpu_policy="binpack,numa"))) == "GPU-n-0"
    # numa first: highest numa sorts last and is tried first
    assert first_uuid(eng.decide(pod(req(memory=1), gpu_policy="numa,binpack"))) == "GPU-n-0"


def test_chain_ends_on_device_index():
    eng = engine(node("n", 3))
    # spread with identical scores: the highest index sorts last and is tried first
    assert first_uuid(eng.decide(pod(req(memory=1), gpu_policy="spread,numa"))) == "GPU-n-2"


def test_chain_without_sort_keys_sorts_as_spread():
    assert parse_gpu_policy("mutex,topology-aware").chain == ("spread",)


def test_numa_bind_with_binpack_groups_by_numa():
    devices = (gpu(0, numa=0), gpu(1, numa=1), gpu(2, numa=0))
    usage = {"n": {"GPU-n-0": DeviceUsage(1, 40000, 40)}}
    bound = req(count=2, memory=10, filters=DeviceFilters(numa_bind=True))
    placed = engine(node("n", devices=devices), usage=usage).decide(
        pod(bound, gpu_policy="binpack")
    )
    assert {g.uuid for g in placed.placement.containers[0]} == {"GPU-n-0", "GPU-n-2"}


def test_scoring_weights_change_the_preferred_card():
    usage = {
        "n": {
            "GPU-n-0": DeviceUsage(used=5, memory_mib=0, cores=0),
            "GPU-n-1": DeviceUsage(used=1, memory_mib=60000, cores=0),
        }
    }
    eng = engine(node("n", 2), usage=usage, gpu_policy="binpack")
    slots_heavy = PodRequest(
        namespace="default",
        name="p",
        containers=((req(memory=1),),),
        gpu_policy="binpack",
        weights=ScoringWeights(slot=10, core=1, memory=0),
    )
    assert first_uuid(eng.decide(slots_heavy)) == "GPU-n-0"
    memory_heavy = PodRequest(
        namespace="default",
        name="p",
        containers=slots_heavy.containers,
        gpu_policy="binpack",
        weights=ScoringWeights(slot=0, core=1, memory=10),
    )
    assert first_uuid(eng.decide(memory_heavy)) == "GPU-n-1"


def test_scoring_weights_absent_are_equal_and_spaces_are_allowed():
    assert parse_scoring_weights(None) == ScoringWeights(1, 1, 1)
    assert parse_scoring_weights(" memory = 3, slot = 1, core = 0 ") == ScoringWeights(1, 0, 3)
    assert parse_scoring_weights("slot=+2,core=1,memory=1") == ScoringWeights(2, 1, 1)


@pytest.mark.parametrize(
    ("value", "why"),
    [
        ("", "expected slot, core, and memory weights"),
        ("slot=1,memory=3", "expected slot, core, and memory weights"),
        ("slot=1,core=1,memory=1,", "expected slot, core, and memory weights"),
        ("slot=1,core,memory=3", "expected key=value entries"),
        ("slot=1,core=high,memory=3", '"core" weight must be an integer'),
        ("slot=1,core=0.5,memory=3", '"core" weight must be an integer'),
        ("slot=1,core=9223372036854775808,memory=3", '"core" weight must be an integer'),
        ("slot=1,core=-1,memory=3", '"core" weight must not be negative'),
        ("slot=1,bandwidth=2,memory=3", 'unknown weight "bandwidth"'),
        ("slot=1,slot=2,memory=3", 'duplicate "slot" weight'),
        ("slot=0,core=0,memory=0", "at least one weight must be positive"),
    ],
)
def test_scoring_weights_errors_are_hamis(value, why):
    with pytest.raises(InvalidParameterError) as caught:
        parse_scoring_weights(value)
    quoted = json.dumps(value)
    assert caught.value.reason == (
        f"invalid hami.io/device-scoring-weights annotation {quoted}: {why}"
    )
    assert caught.value.field == "metadata.annotations[hami.io/device-scoring-weights]"


def test_parse_gpu_policy_chain_dedupes_and_flags_filters():
    policy = parse_gpu_policy(" binpack, numa ,binpack,mutex")
    assert policy.chain == ("binpack", "numa")
    assert policy.mutex and not policy.topology


PAIR_SCORES = {
    "GPU-n-0": {"GPU-n-1": 100, "GPU-n-2": 10, "GPU-n-3": 10},
    "GPU-n-1": {"GPU-n-0": 100, "GPU-n-2": 10, "GPU-n-3": 10},
    "GPU-n-2": {"GPU-n-0": 10, "GPU-n-1": 10, "GPU-n-3": 60},
    "GPU-n-3": {"GPU-n-0": 10, "GPU-n-1": 10, "GPU-n-2": 60},
}


def test_topology_aware_picks_the_best_linked_pair():
    n = node("n", 4, pair_scores=PAIR_SCORES)
    placed = engine(n).decide(pod(req(count=2, memory=1), gpu_policy="topology-aware"))
    assert {g.uuid for g in placed.placement.containers[0]} == {"GPU-n-0", "GPU-n-1"}


def test_topology_aware_takes_the_best_sum_when_every_sum_is_negative():
    scores = {
        "GPU-n-0": {"GPU-n-1": -10, "GPU-n-2": -40},
        "GPU-n-1": {"GPU-n-0": -10, "GPU-n-2": -50},
        "GPU-n-2": {"GPU-n-0": -40, "GPU-n-1": -50},
    }
    n = node("n", 3, pair_scores=scores)
    placed = engine(n).decide(pod(req(count=2, memory=1), gpu_policy="topology-aware"))
    assert {g.uuid for g in placed.placement.containers[0]} == {"GPU-n-0", "GPU-n-1"}


def test_topology_aware_keeps_the_first_set_on_all_zero_scores():
    placed = engine(node("n", 3)).decide(pod(req(count=2, memory=1), gpu_policy="topology-aware"))
    assert [g.uuid for g in placed.placement.containers[0]] == ["GPU-n-2", "GPU-n-1"]


def test_topology_aware_single_card_takes_the_worst_connected():
    scores = {**PAIR_SCORES, "GPU-n-3": {"GPU-n-0": 0, "GPU-n-1": 0, "GPU-n-2": 5}}
    scores["GPU-n-2"] = {"GPU-n-0": 10, "GPU-n-1": 10, "GPU-n-3": 5}
    n = node("n", 4, pair_scores=scores)
    placed = engine(n).decide(pod(req(count=1, memory=1), gpu_policy="topology-aware"))
    assert first_uuid(placed) == "GPU-n-3"


def test_topology_aware_without_scores_still_grants_the_cards():
    placed = engine(node("n", 3)).decide(pod(req(count=2, memory=1), gpu_policy="topology-aware"))
    assert len(placed.placement.containers[0]) == 2


def test_topology_aware_fails_when_too_few_cards_fit():
    usage = {"n": {"GPU-n-0": DeviceUsage(10, 1, 1)}}
    decision = engine(node("n", 2), usage=usage).decide(
        pod(req(count=2, memory=1), gpu_policy="topology-aware")
    )
    assert decision.failures["n"] == (
        "1/2 AllocatedCardsInsufficientRequest, 1/2 CardTimeSlicingExhausted"
    )
