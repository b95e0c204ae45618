"""Preemption end to end: a high-priority pod's creation to its claim's allocation.

Against the API emulator (in a thread of this process) a cluster of N Ready nodes x
8 GPUs of 80 GiB (controller_bench_cluster.py), the real `dra-driver controller` as
a subprocess (controller_bench_process.py, leading through a Lease), every GPU full
of two priority-0 pods of 40 GiB each, each with its own pre-created claim. Then,
one at a time, a priority-1000 pod whose claim asks for 50 GiB of one GPU: it fits
nowhere, so the controller plans the preemption, nominates a node, marks and
deletes the victims, takes their shares back once they are gone, and allocates
the pod. Timed from the pod's create (its claim already exists) to its claim's
allocation on the bench's watch, victims' deletion included; printed p50/p99 and
victims per preemption (the fewest any node needs is 2: one 40 GiB share frees
too little). No kube-scheduler stand-in runs: the pods stay unbound, so a victim's
delete is immediate (a bound pod would wait for its kubelet); what is timed is the
controller's part.

    .venv/bin/python bench/preemption_flow_bench.py [--nodes 200] [--preemptions 20]
"""

from __future__ import annotations

import argparse
import asyncio
import tempfile
import time
from pathlib import Path
from typing import Any

from controller_bench_cluster import CLAIMS, PODS, build_cluster, claim_body, percentile, pod_body
from controller_bench_process import (
    ControllerProcess,
    controller_env,
    yield_cpu_to,
)

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from simulator.apiserver import run_in_thread

GPUS = 8
LOW_GIB = 40
HIGH_GIB = 50
HIGH = "bench-high"
CREATE_CONCURRENCY = 32
FILL_TIMEOUT_S = 1800
PREEMPTION_TIMEOUT_S = 300
EVENTS = "/api/v1/namespaces/default/events"
EVENT_WAIT_S = 10.0


def allocated(claims: Informer, key: str) -> bool:
    return bool(((claims.store.get(key) or {}).get("status") or {}).get("allocation"))


def pod_with_claim(name: str, **spec: Any) -> dict[str, Any]:
    """The pod that uses the claim `<name>-claim`."""
    body = pod_body(name, {"resourceClaimName": f"{name}-claim"})
    body["spec"].update(spec)
    return body


async def create_pod(client: KubeClient, name: str, size_gib: int) -> None:
    await client.create(CLAIMS, claim_body(f"{name}-claim", size_gib))
    await client.create(PODS, pod_with_claim(name))


async def victims_of(client: KubeClient, name: str) -> int | None:
    """How many pods the preemptor's Preempting event names (the controller lists them);
    None if no such event is written within EVENT_WAIT_S (it is recorded asynchronously)."""
    deadline = time.monotonic() + EVENT_WAIT_S
    while time.monotonic() < deadline:
        for event in (await client.list(EVENTS))["items"]:
            if event.get("reason") == "Preempting" and event["involvedObject"]["name"] == name:
                return int(event["message"].split("preempted ", 1)[1].split(" ", 1)[0])
        await asyncio.sleep(0.1)
    return None


async def fill(client: KubeClient, claims: Informer, count: int) -> list[str]:
    """`count` priority-0 pods of LOW_GIB, created 32 at a time; until all are allocated."""
    names = [f"low-{n:05d}" for n in range(count)]
    semaphore = asyncio.Semaphore(CREATE_CONCURRENCY)

    async def one(name: str) -> None:
        async with semaphore:
            await create_pod(client, name, LOW_GIB)

    await asyncio.gather(*(one(name) for name in names))
    keys = [f"default/{name}-claim" for name in names]
    async with asyncio.timeout(FILL_TIMEOUT_S):
        await claims.wait_for(lambda store: all(allocated(claims, k) for k in keys))
    return names


async def run(args: argparse.Namespace) -> None:
    env = controller_env(args.allocator)
    with run_in_thread() as server, tempfile.TemporaryDirectory() as scratch:
        kubeconfig = server.write_kubeconfig(Path(scratch) / "kubeconfig")
        client = await KubeClient.from_kubeconfig(kubeconfig, component="bench")
        started = time.perf_counter()
        await build_cluster(client, args.nodes, GPUS)
        await client.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": HIGH},
                "value": 1000,
            },
        )
        claims = Informer(client, CLAIMS)
        tasks = [asyncio.create_task(claims.run(), name=f"bench {claims.path}")]
        controller = ControllerProcess(kubeconfig, env)
        try:
            await claims.synced.wait()
            await controller.start(client)
            yield_cpu_to(controller.pid, args.bench_niceness)
            print(
                f"cluster: {args.nodes} nodes x {GPUS} GPUs, controller leading "
                f"({time.perf_counter() - started:.1f} s)"
            )
            started = time.perf_counter()
            lows = await fill(client, claims, args.nodes * GPUS * 2)
            print(
                f"filled: {len(lows)} pods of {LOW_GIB} GiB allocated "
                f"in {time.perf_counter() - started:.1f} s"
            )
            latencies: list[float] = []
            victims: list[int | None] = []
            for n in range(args.preemptions):
                name = f"high-{n:03d}"
                await client.create(CLAIMS, claim_body(f"{name}-claim", HIGH_GIB))
                created = time.perf_counter()
                await client.create(PODS, pod_with_claim(name, priorityClassName=HIGH))
                key = f"default/{name}-claim"
                async with asyncio.timeout(PREEMPTION_TIMEOUT_S):
                    await claims.wait_for(lambda store, key=key: allocated(claims, key))
                latencies.append(time.perf_counter() - created)
                victims.append(await victims_of(client, name))
        finally:
            await controller.stop()
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            await client.aclose()
    print(
        f"creation -> allocation over {len(latencies)} preemptions: "
        f"p50 {percentile(latencies, 0.5) * 1000:.0f} ms, "
        f"p99 {percentile(latencies, 0.99) * 1000:.0f} ms, "
        f"max {max(latencies) * 1000:.0f} ms"
    )
    counts = sorted({str(v) for v in victims})
    print(f"victims per preemption: {counts} (fewest possible: 2; None: no Preempting event)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--preemptions", type=int, default=20)
    parser.add_argument("--allocator", choices=("jemalloc", "pymalloc"), default="jemalloc")
    parser.add_argument("--bench-niceness", type=int, default=10)
    args = parser.parse_args()
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
