"""Remembered and counted refusals are exactly those of a fresh full evaluation."""

from __future__ import annotations

import copy
from dataclasses import replace

from engine_helpers import engine, gpu, node, pod, req
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from dra_driver.engine.engine import Engine, EngineSettings, fit_pod_on_node
from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.engine.reason_cache import ReasonCache
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    DeviceFilters,
    DeviceRequest,
    PodRequest,
    ScoringWeights,
)
from dra_driver.engine.single_request import PodJudge
from dra_driver.engine.vendors import FitContext

TYPES = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-Tesla-T4", "MOCK-GPU-16GB"]
POLICIES = [None, "spread", "binpack", "mutex", "topology-aware", "binpack,numa"]


@st.composite
def clusters(draw):
    nodes, usage = [], {}
    for n in range(draw(st.integers(1, 5))):
        name = f"node-{n}"
        devices = []
        for i in range(draw(st.integers(0, 4))):
            device = gpu(
                i,
                node=name,
                type=draw(st.sampled_from(TYPES)),
                memory=draw(st.sampled_from([1024, 16384, 81920])),
                count=draw(st.integers(1, 4)),
                cores=draw(st.sampled_from([0, 100, 100, 200])),
                numa=draw(st.integers(0, 1)),
                healthy=draw(st.booleans() | st.just(True)),
            )
            devices.append(device)
            used = draw(st.integers(0, device.count))
            memory = draw(st.sampled_from([0, 1000, 15384, 16384, 60000]))
            cores = draw(st.sampled_from([0, 40, 50, 90, 100, 140]))
            usage.setdefault(name, {})[device.id] = DeviceUsage(
                used=used,
                memory_mib=min(memory, device.memory_mib) if used else 0,
                cores=min(cores, device.cores) if used else 0,
            )
        ids = [d.id for d in devices]
        cordoned = (
            frozenset(draw(st.lists(st.sampled_from(ids), max_size=1))) if ids else frozenset()
        )
        nodes.append(Node(name, tuple(devices), cordoned=cordoned))
    quota = None
    if draw(st.booleans()):
        quota = QuotaLedger(
            {
                ("team", "NVIDIA"): NamespaceQuota(
                    memory_limit_mib=draw(st.sampled_from([1000, 2500, 25000, 45000])),
                    cores_limit=draw(st.sampled_from([None, 50, 300])),
                )
            }
        )
    return nodes, usage, quota


def filters():
    """Mostly permissive, so that devices pass and fail the later checks too."""
    uuids = st.lists(st.sampled_from([f"GPU-node-{n}-{i}" for n in range(3) for i in range(3)]))
    none = st.just(())
    return st.builds(
        DeviceFilters,
        use_types=st.sampled_from([(), (), (), ("A100",), ("T4", "A100")]),
        no_use_types=st.sampled_from([(), (), ("T4",)]),
        use_uuids=none | none | uuids.map(tuple),
        no_use_uuids=none | none | uuids.map(tuple),
        numa_bind=st.booleans(),
        modes=st.sampled_from([None, None, None, "hami-core", "mps"]),
    )


requests = st.builds(
    DeviceRequest,
    vendor=st.sampled_from(["NVIDIA", "NVIDIA", "MOCK"]),
    count=st.integers(1, 3),
    memory_mib=st.sampled_from([0, 0, 1000, 20000]),
    memory_percent=st.sampled_from([MEMORY_PERCENT_UNSET, 10, 50, 100]),
    cores=st.sampled_from([0, 10, 50, 60, 100, 150]),
    filters=filters(),
)
containers = st.lists(requests, max_size=2, unique_by=lambda r: r.vendor).map(tuple)
single = st.builds(lambda r: ((r,),), requests)
pods = st.builds(
    PodRequest,
    namespace=st.sampled_from(["default", "team"]),
    name=st.just("p"),
    containers=single | st.lists(containers, min_size=1, max_size=2).map(tuple),
    init_containers=st.just(()) | st.lists(containers, max_size=1).map(tuple),
    gpu_policy=st.sampled_from(POLICIES),
    node_policy=st.sampled_from([None, "binpack", "spread"]),
)


@st.composite
def shape_pools(draw):
    """A few pods plus look-alikes that differ in one thing a refusal depends on,
    so a cache key that misses that thing returns another shape's reasons."""
    pool = draw(st.lists(pods, min_size=1, max_size=2))
    base = pool[0]
    pool.append(replace(base, init_containers=() if base.init_containers else base.containers))
    pool.append(replace(base, namespace="team" if base.namespace == "default" else "default"))
    pool.append(replace(base, gpu_policy=draw(st.sampled_from(POLICIES))))
    pool.append(replace(base, weights=ScoringWeights(slot=0, core=1, memory=5)))
    pool.append(
        replace(base, containers=draw(st.lists(containers, min_size=1, max_size=2).map(tuple)))
    )
    return pool


operations = st.lists(
    st.tuples(
        st.sampled_from(["decide", "decide", "release", "replace"]),
        st.integers(0, 13),
        st.booleans(),
        st.one_of(st.none(), st.lists(st.sampled_from(["node-0", "node-2", "ghost"]))),
    ),
    min_size=1,
    max_size=25,
)


def snapshot(eng: Engine, names: list[str]):
    """The engine's current nodes and usage, to build a fresh engine from."""
    nodes, usage = [], {}
    for name in names:
        state = eng.node_state(name)
        nodes.append(state.node)
        usage[name] = {s.device.id: DeviceUsage(s.used, s.memory, s.cores) for s in state.slots}
    return nodes, usage


def full_evaluation(eng: Engine, name: str, workload: PodRequest):
    """HAMi's full fit of `workload` on the node as it is now, nothing remembered."""
    state = eng.node_state(name)
    policy = parse_gpu_policy(workload.gpu_policy or eng.settings.gpu_policy)
    ctx = FitContext(
        state.node, workload.namespace, policy, workload.weights, eng.vendors, eng.quota
    )
    return fit_pod_on_node(state, workload, ctx)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), shape_pools(), operations)
def test_remembered_and_counted_refusals_equal_a_fresh_full_evaluation(cluster, shapes, ops):
    nodes, usage, quota = cluster
    names = [n.name for n in nodes]
    eng = Engine(nodes, usage, quota=quota)
    placed: list[tuple[PodRequest, object]] = []
    for action, number, explain_all, candidates in ops:
        if action == "release" and placed:
            eng.release(*placed.pop(number % len(placed)))
            continue
        if action == "replace":
            state = eng.node_state(names[number % len(names)])
            cordon = frozenset() if state.node.cordoned else frozenset(state.ids[:1])
            eng.set_node(
                Node(state.node.name, state.node.devices, cordoned=cordon),
                {s.device.id: DeviceUsage(s.used, s.memory, s.cores) for s in state.slots},
            )
            continue
        workload = shapes[number % len(shapes)]
        fresh_nodes, fresh_usage = snapshot(eng, names)
        fresh = Engine(
            fresh_nodes,
            fresh_usage,
            settings=EngineSettings(reason_cache_shapes=0),
            quota=copy.deepcopy(eng.quota),
        )
        expected = fresh.decide(workload, candidates, explain_all=explain_all)
        decision = eng.decide(workload, candidates, explain_all=explain_all)
        assert decision == expected
        for name, reason in decision.failures.items():
            if name in names:
                assert reason == full_evaluation(eng, name, workload)
        if explain_all:
            refused = {
                name
                for name in names
                if (candidates is None or name in candidates)
                and isinstance(full_evaluation(eng, name, workload), str)
            }
            assert refused == decision.failures.keys() & set(names)
        if decision.placement is not None:
            eng.commit(workload, decision.placement)
            placed.append((workload, decision.placement))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), pods)
def test_a_counted_refusal_is_the_full_fits_reason(cluster, workload):
    nodes, usage, quota = cluster
    eng = Engine(nodes, usage, quota=quota)
    policy = parse_gpu_policy(workload.gpu_policy or eng.settings.gpu_policy)
    judge = PodJudge.for_pod(workload, policy, eng.vendors, quota)
    assume(judge is not None)
    for name in (n.name for n in nodes):
        state = eng.node_state(name)
        reason = judge.refusal(state.facts, state.ids)
        full = full_evaluation(eng, name, workload)
        if reason is not None:
            assert reason == full
        elif len([c for c in workload.all_containers if c]) == 1:
            assert not isinstance(full, str), "one judged container took the node yet it refused"


def test_a_refusal_is_forgotten_when_its_node_frees_capacity():
    usage = {"n": {"GPU-n-0": DeviceUsage(10, 100, 10), "GPU-n-1": DeviceUsage(10, 100, 10)}}
    eng = engine(node("n", 2), usage=usage)
    wants = pod(req(memory=1000))
    assert eng.decide(wants).failures == {"n": "2/2 CardTimeSlicingExhausted"}
    assert eng.decide(wants).failures == {"n": "2/2 CardTimeSlicingExhausted"}
    eng.set_node(node("n", 2), {"GPU-n-0": DeviceUsage(10, 100, 10)})
    assert eng.decide(wants).placement.containers[0][0].uuid == "GPU-n-1"


def test_a_refusal_is_forgotten_when_a_release_frees_capacity():
    eng = engine(node("n", 1, devices=(gpu(0, count=2),)))
    first, second = pod(req(memory=1000)), pod(req(memory=2000), req(memory=1))
    placement = eng.decide(first).placement
    eng.commit(first, placement)
    assert eng.decide(second).failures == {"n": "1/1 CardTimeSlicingExhausted"}
    eng.release(first, placement)
    assert eng.decide(second).placement is not None


def test_a_refusal_for_quota_is_forgotten_when_the_quota_frees_up():
    ledger = QuotaLedger({("team", "NVIDIA"): NamespaceQuota(memory_limit_mib=1000)})
    eng = engine(node("n", 1), quota=ledger)
    wants = pod(req(memory=800), namespace="team")
    ledger.quotas[("team", "NVIDIA")].memory_used_mib = 500
    assert eng.decide(wants).failures == {"n": "1/1 ResourceQuotaNotFit"}
    ledger.quotas[("team", "NVIDIA")].memory_used_mib = 0
    assert eng.decide(wants).placement is not None


def test_reason_cache_keeps_the_most_recent_shapes():
    cache = ReasonCache(shapes=2)
    cache.refusals("a")["n"] = (1, "1/1 CardNotHealth")
    cache.refusals("b")
    cache.refusals("a")
    cache.refusals("c")
    assert cache.refusals("a") == {"n": (1, "1/1 CardNotHealth")}
    assert cache.refusals("b") == {}
    assert ReasonCache(shapes=0).refusals("a") is None


def test_numa_bound_requests_are_not_counted_device_by_device():
    devices = (gpu(0, numa=0), gpu(1, numa=1), gpu(2, numa=1, memory=500))
    bound = req(count=3, memory=1000, filters=DeviceFilters(numa_bind=True))
    decision = engine(node("n", devices=devices)).decide(pod(bound), explain_all=True)
    assert decision.failures == {
        "n": "1/3 AllocatedCardsInsufficientRequest, 1/3 CardInsufficientMemory, 1/3 NumaNotFit"
    }


def test_quota_limited_requests_are_not_counted_device_by_device():
    ledger = QuotaLedger({("team", "NVIDIA"): NamespaceQuota(memory_limit_mib=1500)})
    devices = (gpu(0), gpu(1), gpu(2, memory=500))
    eng = engine(node("n", devices=devices), quota=ledger)
    decision = eng.decide(pod(req(count=3, memory=1000), namespace="team"), explain_all=True)
    assert decision.failures == {
        "n": "1/3 AllocatedCardsInsufficientRequest, 2/3 ResourceQuotaNotFit"
    }


def test_a_later_app_container_is_judged_on_what_earlier_ones_took():
    devices = (gpu(0, memory=1000), gpu(1, memory=1000))
    usage = {"n": {"GPU-n-1": DeviceUsage(1, 500, 0)}}
    eng = engine(node("n", devices=devices), usage=usage)
    decision = eng.decide(pod(req(memory=600), req(count=2, memory=600)), explain_all=True)
    assert decision.failures == {"n": "2/2 CardInsufficientMemory"}


def test_refusals_are_kept_apart_by_policy_and_init_containers():
    usage = {"n": {"GPU-n-0": DeviceUsage(1, 100, 10)}}
    eng = engine(node("n", 1), usage=usage)
    assert eng.decide(pod(req(memory=1), gpu_policy="mutex")).failures == {
        "n": "1/1 ExclusiveDeviceAllocateConflict"
    }
    assert eng.decide(pod(req(memory=1), gpu_policy="spread")).placement is not None
    too_big_first = pod(req(memory=1), init=[req(memory=90000)])
    assert eng.decide(too_big_first).failures == {"n": "1/1 CardInsufficientMemory"}
    assert eng.decide(pod(req(memory=1))).placement is not None


def test_a_node_that_goes_idle_again_takes_back_its_idle_state():
    """In place and with nothing built anew: the idle version (so what was remembered for
    the idle node holds again), headroom, score and order key of its start; a busy node
    gets a version of its own, and its refusals are not those of the idle node."""
    eng = engine(node("n", 1))
    state = eng.node_state("n")
    idle = (state.version, state.headroom, state.score, state.order_key, state.facts)
    wants = pod(req(memory=1000, cores=100))
    placement = eng.decide(wants).placement
    eng.commit(wants, placement)
    assert eng.node_state("n") is state
    assert state.version != idle[0]
    assert eng.decide(wants).failures == {"n": "1/1 CardInsufficientCore"}
    eng.set_usage("n", {})
    assert eng.node_state("n") is state
    now = (state.version, state.headroom, state.score, state.order_key, state.facts)
    assert all(a is b for a, b in zip(now, idle, strict=True))
    assert eng.decide(wants).placement == placement
