"""Engine decision time: pods that fit, and pods that fit nowhere.

Fitting: 10,000 mixed requests against N nodes x 8 GPUs at ~50 % occupancy,
committed and released as they go; prints allocations/s and p50/p99 decision
latency (target: >= 1,000 allocations/s, p99 <= 2 ms).

No fit: a request that no node can take, so every node's `k/N Reason` is
needed. "cold" is the first decision on a freshly built engine; "retry" is
the same request decided again after another pod was placed on or removed
from one node, as a controller retries a pending claim whenever usage
changes (the other nodes' refusals are reused). A one-request pod and a
two-container pod (whose second container needs the full fit on nodes that
take the first) are shown; the reasons of a cold and of a retried decision
are checked against HAMi's full fit on every node. Target: a no-fit decision
with its reasons <= 50 ms at 5,000 x 8. The garbage of building each engine is
collected before the clock starts; a retry's p99 can still include one of
Python's full collections over the whole heap (tens of ms at 5,000 nodes).

    .venv/bin/python bench/engine_bench.py [--nodes 1000 5000] [--requests 10000]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from dra_driver.engine.engine import Engine, EngineSettings, fit_pod_on_node
from dra_driver.engine.model import Device, DeviceUsage, Node
from dra_driver.engine.policy import parse_gpu_policy
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    DeviceFilters,
    DeviceRequest,
    PodRequest,
)
from dra_driver.engine.vendors import FitContext

TYPES = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"]
A100_ONLY = DeviceFilters(use_types=("A100",))


def build_cluster(rng: random.Random, nodes: int, gpus: int):
    inventory, usage = [], {}
    for n in range(nodes):
        name = f"node-{n:04d}"
        devices = []
        for i in range(gpus):
            device = Device(
                id=f"GPU-{n:04d}-{i}",
                index=i,
                type=rng.choice(TYPES),
                count=10,
                memory_mib=81920,
                cores=100,
                numa=i // (gpus // 2),
            )
            devices.append(device)
            used = rng.randint(3, 7)
            usage.setdefault(name, {})[device.id] = DeviceUsage(
                used=used, memory_mib=used * 5800, cores=used * 7
            )
        inventory.append(Node(name, tuple(devices)))
    return inventory, usage


def random_pod(rng: random.Random, serial: int) -> PodRequest:
    kind = rng.random()
    if kind < 0.6:
        request = DeviceRequest(
            "NVIDIA",
            1,
            memory_mib=rng.choice([1024, 2048, 4096, 8192]),
            cores=rng.choice([0, 10, 20, 30]),
        )
    elif kind < 0.8:
        request = DeviceRequest(
            "NVIDIA", rng.choice([1, 2]), memory_percent=rng.choice([10, 25]), cores=10
        )
    elif kind < 0.95:
        request = DeviceRequest("NVIDIA", 2, memory_mib=4096, cores=20)
    else:
        request = DeviceRequest(
            "NVIDIA", 1, memory_percent=MEMORY_PERCENT_UNSET, memory_mib=16384, cores=50
        )
    policy = rng.choice([None, None, "binpack", "spread,numa"])
    return PodRequest(
        "default",
        f"pod-{serial}",
        ((request,),),
        gpu_policy=policy,
        node_policy=rng.choice(["binpack", "spread"]),
    )


NO_FIT_SINGLE = PodRequest(
    "default",
    "eight-a100s",
    ((DeviceRequest("NVIDIA", 8, memory_mib=45000, cores=60, filters=A100_ONLY),),),
)
NO_FIT_TWO_CONTAINERS = PodRequest(
    "default",
    "trainer-and-eval",
    (
        (DeviceRequest("NVIDIA", 4, memory_mib=45000, cores=60, filters=A100_ONLY),),
        (DeviceRequest("NVIDIA", 4, memory_mib=45000, cores=60, filters=A100_ONLY),),
    ),
)
SMALL_POD = PodRequest("default", "small", ((DeviceRequest("NVIDIA", 1, memory_mib=1024),),))


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[max(0, int(len(ordered) * fraction + 0.5) - 1)]


def fitting(nodes, usage, rng: random.Random, requests: int) -> tuple[float, float, float]:
    """Allocations/s, p50 and p99 ms of the decide+commit+release loop."""
    engine = Engine(nodes, usage, settings=EngineSettings())
    workloads = [random_pod(rng, i) for i in range(requests)]
    live = []
    latencies = []
    start = time.perf_counter()
    for workload in workloads:
        began = time.perf_counter()
        decision = engine.decide(workload)
        latencies.append(time.perf_counter() - began)
        if decision.placement is not None:
            engine.commit(workload, decision.placement)
            live.append((workload, decision.placement))
        if live and rng.random() < 0.5:
            engine.release(*live.pop(rng.randrange(len(live))))
    elapsed = time.perf_counter() - start
    return requests / elapsed, percentile(latencies, 0.5) * 1000, percentile(latencies, 0.99) * 1000


def no_fit(nodes, usage, rng: random.Random, pod: PodRequest, colds: int, retries: int):
    """Cold and retry times (ms) for a pod that fits nowhere, the number of
    reasons, and whether the first cold and the last retry decision carry
    exactly the reasons of HAMi's full fit on every node."""
    cold = []
    for _ in range(colds):
        engine = Engine(nodes, usage, settings=EngineSettings())
        gc.collect()
        began = time.perf_counter()
        decision = engine.decide(pod)
        cold.append((time.perf_counter() - began) * 1000)
        assert decision.placement is None, "the no-fit request fitted; change the bench cluster"
    exact = same_as_full_fit(engine, pod, decision.failures)
    names = [node.name for node in nodes]
    retry = []
    placed = []
    gc.collect()
    for _ in range(retries):
        if placed and rng.random() < 0.5:
            engine.release(*placed.pop())
        else:
            small = engine.decide(SMALL_POD, [rng.choice(names)])
            if small.placement is not None:
                engine.commit(SMALL_POD, small.placement)
                placed.append((SMALL_POD, small.placement))
        began = time.perf_counter()
        decision = engine.decide(pod)
        retry.append((time.perf_counter() - began) * 1000)
    exact = exact and same_as_full_fit(engine, pod, decision.failures)
    return cold, retry, len(decision.failures), exact


def same_as_full_fit(engine: Engine, pod: PodRequest, failures) -> bool:
    """Every refusal equals HAMi's full fit of `pod` on that node, nothing remembered."""
    policy = parse_gpu_policy(pod.gpu_policy or engine.settings.gpu_policy)
    for name, reason in failures.items():
        state = engine.node_state(name)
        ctx = FitContext(state.node, pod.namespace, policy, pod.weights, engine.vendors, None)
        if fit_pod_on_node(state, pod, ctx) != reason:
            return False
    return True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--colds", type=int, default=5, help="fresh engines per no-fit case")
    parser.add_argument("--retries", type=int, default=50, help="retries per no-fit case")
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    for count in args.nodes:
        rng = random.Random(args.seed)
        nodes, usage = build_cluster(rng, count, args.gpus)
        rate, p50, p99 = fitting(nodes, usage, rng, args.requests)
        print(f"nodes={count} gpus/node={args.gpus}")
        print(
            f"  fitting:  {args.requests} requests, allocations/s={rate:,.0f} "
            f"(decide+commit+release loop), decision p50={p50:.3f} ms p99={p99:.3f} ms"
        )
        for label, pod in (("1 request", NO_FIT_SINGLE), ("2 containers", NO_FIT_TWO_CONTAINERS)):
            cold, retry, reasons, exact = no_fit(nodes, usage, rng, pod, args.colds, args.retries)
            print(
                f"  no fit, {label}: cold p50={statistics.median(cold):.1f} ms "
                f"max={max(cold):.1f} ms; retry p50={statistics.median(retry):.2f} ms "
                f"p99={percentile(retry, 0.99):.2f} ms; {reasons} reasons, "
                f"equal to HAMi's full fit on every node: {exact}"
            )


if __name__ == "__main__":
    main()
