"""Allocator invariants under random clusters and workloads."""

from __future__ import annotations

from engine_helpers import engine, gpu
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.engine.model import DeviceUsage, Node
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    DeviceFilters,
    DeviceRequest,
    PodRequest,
)

POLICIES = ["spread", "binpack", "mutex", "topology-aware", "binpack,numa", "numa"]


@st.composite
def clusters(draw):
    nodes, usage = [], {}
    for n in range(draw(st.integers(1, 4))):
        name = f"node-{n}"
        devices = []
        for i in range(draw(st.integers(0, 4))):
            device = gpu(
                i,
                node=name,
                memory=draw(st.sampled_from([1024, 16384, 81920])),
                count=draw(st.integers(1, 4)),
                numa=draw(st.integers(0, 1)),
                healthy=draw(st.booleans() | st.just(True)),
            )
            devices.append(device)
            used = draw(st.integers(0, device.count))
            usage.setdefault(name, {})[device.id] = DeviceUsage(
                used=used,
                memory_mib=draw(st.integers(0, device.memory_mib)) if used else 0,
                cores=draw(st.integers(0, 100)) if used else 0,
            )
        nodes.append(Node(name, tuple(devices)))
    return nodes, usage


requests = st.builds(
    DeviceRequest,
    vendor=st.just("NVIDIA"),
    count=st.integers(1, 3),
    memory_mib=st.integers(0, 20000),
    memory_percent=st.sampled_from([MEMORY_PERCENT_UNSET, 10, 50, 100]),
    cores=st.sampled_from([0, 10, 30, 100, 150]),
    filters=st.builds(DeviceFilters, numa_bind=st.booleans()),
)
containers = st.lists(requests, max_size=1).map(tuple)
pods = st.builds(
    PodRequest,
    namespace=st.just("default"),
    name=st.just("p"),
    containers=st.lists(containers, min_size=1, max_size=3).map(tuple),
    init_containers=st.lists(containers, max_size=2).map(tuple),
    gpu_policy=st.sampled_from(POLICIES),
    node_policy=st.sampled_from(["binpack", "spread"]),
)


def run(cluster, workloads):
    nodes, usage = cluster
    eng = engine(*nodes, usage=usage)
    decisions = []
    for workload in workloads:
        decision = eng.decide(workload)
        decisions.append(decision)
        if decision.placement is not None:
            eng.commit(workload, decision.placement)
    return eng, nodes, decisions


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.lists(pods, min_size=1, max_size=12))
def test_never_overcommits_memory_cores_or_slots(cluster, workloads):
    eng, nodes, decisions = run(cluster, workloads)
    for n in nodes:
        for slot in eng.node_state(n.name).slots:
            assert slot.used <= slot.device.count
            assert slot.memory <= slot.device.memory_mib
            assert slot.cores <= slot.device.cores
    for workload, decision in zip(workloads, decisions, strict=True):
        if decision.placement is None:
            continue
        for container, grants in zip(
            workload.all_containers, decision.placement.containers, strict=True
        ):
            uuids = [g.uuid for g in grants]
            assert len(uuids) == len(set(uuids)), "a container got one card twice"
            assert len(grants) == sum(r.count for r in container)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(clusters(), st.lists(pods, min_size=1, max_size=8))
def test_identical_inputs_give_identical_results(cluster, workloads):
    _, _, first = run(cluster, workloads)
    _, _, second = run(cluster, workloads)
    assert first == second
