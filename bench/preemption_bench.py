"""Preemption decision time, and victims against the fewest that would do.

N nodes x 8 GPUs of 80 GiB, every GPU full of priority-0 shares of 10, 20 or
40 GiB (random, seeded), each held by one pod with its own start time. A
priority-1000 pod asks for one GPU with 50 GiB: it fits nowhere until
lower-priority pods go. Each run decides from a random offset, as
kube-scheduler starts its dry run at a random node; prints p50/p99 of
`plan_preemption` (goal p99 <= 50 ms at 1,000 x 8), and the victims chosen
against the fewest any node needs (largest shares first on its best GPU).

    .venv/bin/python bench/preemption_bench.py [--nodes 1000] [--runs 200]
"""

from __future__ import annotations

import argparse
import gc
import random
import statistics
import time

from controller.inventory import build_inventory
from controller.preemption import Holder, Holdings, NodeVictims, Preemptor, plan_preemption
from controller.preemption_shares import Share
from controller.requests import ClaimVariant, PodVariant
from dra_driver.engine.engine import Engine
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.requests import DeviceRequest, PodRequest

DRIVER = "vgpu.hami.io"
GPUS = 8
GPU_GIB = 80
WANTED_GIB = 50
SHARE_SIZES = (10, 20, 40)


def device_slice(node: str) -> dict[str, object]:
    devices = [
        {
            "name": f"gpu-{i}",
            "allowMultipleAllocations": True,
            "attributes": {
                "uuid": {"string": f"{node}-{i}"},
                "index": {"int": i},
                "type": {"string": "NVIDIA-A100"},
            },
            "capacity": {
                "memory": {"value": f"{GPU_GIB}Gi"},
                "cores": {"value": "100"},
                "shares": {"value": "10"},
            },
        }
        for i in range(GPUS)
    ]
    pool = {"name": node, "generation": 1, "resourceSliceCount": 1}
    return {
        "metadata": {"uid": f"slice-{node}"},
        "spec": {"driver": DRIVER, "nodeName": node, "pool": pool, "devices": devices},
    }


def full_cluster(
    nodes: int, rng: random.Random
) -> tuple[list[str], list[Share], dict[str, Holder]]:
    """Every GPU filled to 80 GiB with shares; returns the nodes, shares and pods."""
    names = [f"node-{n:04d}" for n in range(nodes)]
    shares: list[Share] = []
    pods: dict[str, Holder] = {}
    for name in names:
        for index in range(GPUS):
            left = GPU_GIB
            while left:
                gib = rng.choice([s for s in SHARE_SIZES if s <= left])
                left -= gib
                uid = f"{name}-{index}-{left}"
                usage = {f"{name}-{index}": DeviceUsage(1, gib * 1024, 0)}
                shares.append(Share(uid, name, usage, frozenset({uid})))
                pods[uid] = Holder(uid, f"batch/{uid}", 0, rng.uniform(0, 86400))
    return names, shares, pods


def fewest_victims(shares: list[Share]) -> int:
    """The fewest shares whose going frees 50 GiB on one GPU anywhere."""
    per_gpu: dict[str, list[int]] = {}
    for share in shares:
        for uuid, amount in share.usage.items():
            per_gpu.setdefault(uuid, []).append(amount.memory_mib)
    best = len(shares)
    for sizes in per_gpu.values():
        freed = count = 0
        for size in sorted(sizes, reverse=True):
            if freed >= WANTED_GIB * 1024:
                break
            freed += size
            count += 1
        best = min(best, count)
    return best


def preemptor() -> Preemptor:
    container = (DeviceRequest("NVIDIA", 1, WANTED_GIB * 1024),)
    claim = ClaimVariant({"spec": {}}, (container,), ("gpu",), ("c",), None, None)
    return Preemptor(1000, [PodVariant(PodRequest("serving", "hi", (container,)), (claim,))])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    rng = random.Random(34)
    names, shares, pods = full_cluster(args.nodes, rng)
    inventory = build_inventory([device_slice(name) for name in names], DRIVER)
    usage: dict[str, dict[str, DeviceUsage]] = {}
    for share in shares:
        on_node = usage.setdefault(share.node, {})
        for uuid, amount in share.usage.items():
            on_node[uuid] = on_node.get(uuid, DeviceUsage()).plus(amount)
    engine = Engine(inventory.nodes.values(), usage)
    holdings = Holdings(pods, shares)
    pod = preemptor()
    gc.collect()
    latencies: list[float] = []
    chosen: list[int] = []
    for _ in range(args.runs):
        offset = rng.randrange(len(names))
        started = time.perf_counter()
        plan = plan_preemption(pod, engine, inventory, names, holdings, offset)
        latencies.append(time.perf_counter() - started)
        assert isinstance(plan, NodeVictims), plan
        chosen.append(len(plan.victims))
    latencies.sort()
    p50 = latencies[len(latencies) // 2] * 1000
    p99 = latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))] * 1000
    print(
        f"{args.nodes} nodes x {GPUS} GPUs, {len(shares)} priority-0 shares, {args.runs} runs: "
        f"decision p50={p50:.1f} ms p99={p99:.1f} ms; victims per preemption "
        f"mean={statistics.mean(chosen):.2f} max={max(chosen)}, fewest possible "
        f"{fewest_victims(shares)}"
    )


if __name__ == "__main__":
    main()
