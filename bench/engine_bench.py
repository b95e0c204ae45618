"""Engine throughput: 1,000 nodes x 8 GPUs at ~50% occupancy, 10,000 mixed requests.

Prints allocations/s and p50/p99 decision latency. Target: >= 1,000
allocations/s and p99 <= 2 ms per decision.

    .venv/bin/python bench/engine_bench.py [--nodes 1000] [--requests 10000]
"""

from __future__ import annotations

import argparse
import random
import statistics
import time

from dra_driver.engine.engine import Engine, EngineSettings
from dra_driver.engine.model import Device, DeviceUsage, Node
from dra_driver.engine.requests import MEMORY_PERCENT_UNSET, DeviceRequest, PodRequest

TYPES = ["NVIDIA-A100-SXM4-80GB", "NVIDIA-H100-80GB-HBM3", "NVIDIA-L40S"]


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


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--requests", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    nodes, usage = build_cluster(rng, args.nodes, args.gpus)
    engine = Engine(nodes, usage, settings=EngineSettings())
    workloads = [random_pod(rng, i) for i in range(args.requests)]
    live = []
    latencies = []
    placed = 0
    start = time.perf_counter()
    for workload in workloads:
        began = time.perf_counter()
        decision = engine.decide(workload)
        latencies.append(time.perf_counter() - began)
        if decision.placement is not None:
            engine.commit(workload, decision.placement)
            live.append((workload, decision.placement))
            placed += 1
        if live and rng.random() < 0.5:
            engine.release(*live.pop(rng.randrange(len(live))))
    elapsed = time.perf_counter() - start
    latencies.sort()
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[int(len(latencies) * 0.99) - 1] * 1000
    print(f"nodes={args.nodes} gpus/node={args.gpus} requests={args.requests} placed={placed}")
    print(f"allocations/s={args.requests / elapsed:,.0f} (decide+commit+release loop)")
    print(f"decision latency p50={p50:.3f} ms p99={p99:.3f} ms max={latencies[-1] * 1000:.3f} ms")


if __name__ == "__main__":
    main()
