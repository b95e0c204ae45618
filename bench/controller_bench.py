"""Controller throughput end to end: claims allocated per second through the API emulator.

A cluster of N nodes x G GPUs (slices written directly, as the kubelet plugin
publishes them in controller-allocated mode) and a `dra-driver controller`
process (the real command, leader election on). The bench creates claims and
pods as fast as the emulator takes them and watches the claims: per claim, the
time from its creation to its allocation arriving on the watch (p50/p99), and
claims allocated per second over the run. Next to it, from the controller's
own /metrics in the same run: the engine's decision time per pod (mean and
histogram p50/p99) and the allocation latency the controller measures itself.
Target: >= 100 claims/s at 200 x 8.

    .venv/bin/python bench/controller_bench.py [--nodes 200] [--gpus 8] [--claims 2000]
        [--rate 50]   # offer claims at a steady rate: latency without a backlog
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import socket
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from dra_driver.kube.informer import Informer
from dra_driver.kube.rest import KubeClient
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices
from simulator.apiserver import run_in_thread

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
NAMESPACE = "default"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"
SLICE_SETTINGS = SliceSettings(
    driver=DRIVER, allocation_taint=Taint(f"{DRIVER}/allocation", "controller")
)
CONCURRENCY = 32


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


async def build_cluster(client: KubeClient, nodes: int, gpus: int) -> None:
    await client.create(
        "/apis/resource.k8s.io/v1/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        },
    )
    semaphore = asyncio.Semaphore(CONCURRENCY)

    async def one(n: int) -> None:
        name = f"node-{n:04d}"
        async with semaphore:
            node = await client.create(
                "/api/v1/nodes",
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name},
                    "status": {"allocatable": {"cpu": "256", "memory": "1Ti", "pods": "500"}},
                },
            )
            devices = [
                GpuInfo(f"GPU-{n:04d}-{i}", i, i, "NVIDIA A100-SXM4-80GB", 80 << 30, i // 4)
                for i in range(gpus)
            ]
            for item in build_resource_slices(
                name, node["metadata"]["uid"], devices, SLICE_SETTINGS, 1
            ):
                await client.create("/apis/resource.k8s.io/v1/resourceslices", item)

    await asyncio.gather(*(one(n) for n in range(nodes)))


def claim_body(i: int, rng_memory: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": f"c{i}", "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": CLASS,
                            "capacity": {"requests": {"memory": f"{rng_memory}Gi"}},
                        },
                    }
                ]
            }
        },
    }


def pod_body(i: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"p{i}", "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "main", "image": "registry.k8s.io/pause:3.10"}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"c{i}"}],
        },
    }


def histogram(text: str, name: str) -> tuple[float, float, list[tuple[float, float]]]:
    """(sum, count, cumulative buckets) of a Prometheus histogram in exposition text."""
    total = count = 0.0
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith(f"{name}_sum"):
            total = float(line.split()[-1])
        elif line.startswith(f"{name}_count"):
            count = float(line.split()[-1])
        elif line.startswith(f"{name}_bucket"):
            bound = line.split('le="')[1].split('"')[0]
            buckets.append(
                (float("inf") if bound == "+Inf" else float(bound), float(line.split()[-1]))
            )
    return total, count, buckets


def bucket_quantile(buckets: list[tuple[float, float]], count: float, q: float) -> float:
    """The upper bound of the bucket holding the q-quantile (a histogram's resolution)."""
    for bound, seen in buckets:
        if seen >= q * count:
            return bound
    return float("inf")


async def run(nodes: int, gpus: int, claims: int, rate: float) -> None:
    with run_in_thread() as server, tempfile.TemporaryDirectory() as scratch:
        kubeconfig = server.write_kubeconfig(Path(scratch) / "kubeconfig")
        client = await KubeClient.from_kubeconfig(kubeconfig)
        started = time.perf_counter()
        await build_cluster(client, nodes, gpus)
        print(f"cluster: {nodes} nodes x {gpus} GPUs in {time.perf_counter() - started:.1f} s")
        created: dict[str, float] = {}
        allocated: dict[str, float] = {}
        done = asyncio.Event()

        def on_claim(kind: str, claim: dict[str, Any]) -> None:
            name = claim["metadata"]["name"]
            if (claim.get("status") or {}).get("allocation") and name not in allocated:
                allocated[name] = time.perf_counter()
                if len(allocated) == claims:
                    done.set()

        watcher = Informer(client, CLAIMS, handlers=[on_claim])
        watch_task = asyncio.create_task(watcher.run())
        await watcher.synced.wait()
        port = free_port()
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "dra_driver.cli",
            "controller",
            "--kubeconfig",
            str(kubeconfig),
            "--metrics-host",
            "127.0.0.1",
            "--metrics-port",
            str(port),
            "--log-level",
            "WARNING",
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        try:
            await wait_for_leader(client)
            semaphore = asyncio.Semaphore(CONCURRENCY)

            async def create(i: int) -> None:
                if rate:
                    await asyncio.sleep(max(0.0, first + i / rate - time.perf_counter()))
                async with semaphore:
                    created[f"c{i}"] = time.perf_counter()
                    await client.create(
                        f"/apis/resource.k8s.io/v1/namespaces/{NAMESPACE}/resourceclaims",
                        claim_body(i, 1 + i % 8),
                    )
                    await client.create(f"/api/v1/namespaces/{NAMESPACE}/pods", pod_body(i))

            first = time.perf_counter()
            await asyncio.gather(*(create(i) for i in range(claims)))
            creation_s = time.perf_counter() - first
            async with asyncio.timeout(600):
                await done.wait()
            elapsed = max(allocated.values()) - first
            metrics = await asyncio.to_thread(
                lambda: urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
            )
            controller_cpu = cpu_seconds(process.pid)
            own_cpu = time.process_time()
        finally:
            process.terminate()
            with contextlib.suppress(ProcessLookupError):
                await process.wait()
            watch_task.cancel()
            await asyncio.gather(watch_task, return_exceptions=True)
            await client.aclose()
    latencies = sorted(allocated[name] - created[name] for name in created)
    quantiles = statistics.quantiles(latencies, n=100)
    decision_sum, decisions, decision_buckets = histogram(
        metrics, "vgpu_controller_decision_seconds"
    )
    own_sum, own_count, _ = histogram(metrics, "vgpu_controller_allocation_seconds")
    print(f"claims: {claims}, created in {creation_s:.1f} s ({claims / creation_s:.0f}/s offered)")
    print(f"allocated end to end: {claims / elapsed:.0f} claims/s over {elapsed:.1f} s")
    print(
        f"creation -> allocation on the watch: p50 {quantiles[49] * 1000:.0f} ms, "
        f"p99 {quantiles[98] * 1000:.0f} ms, max {latencies[-1] * 1000:.0f} ms"
    )
    if decisions:
        print(
            f"engine decision per pod (controller metrics, {decisions:.0f} decisions): mean "
            f"{decision_sum / decisions * 1000:.2f} ms, p50 <= "
            f"{bucket_quantile(decision_buckets, decisions, 0.5) * 1000:g} ms, p99 <= "
            f"{bucket_quantile(decision_buckets, decisions, 0.99) * 1000:g} ms"
        )
    print(
        f"CPU: controller process {controller_cpu:.1f} s, "
        f"bench process (emulator + client) {own_cpu:.1f} s"
    )
    if own_count:
        print(f"controller's own first-seen -> written: mean {own_sum / own_count * 1000:.0f} ms")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def wait_for_leader(client: KubeClient) -> None:
    """Until the controller holds its Lease (it checked the API and serves /metrics)."""
    leases = Informer(client, f"/apis/coordination.k8s.io/v1/namespaces/{NAMESPACE}/leases")
    task = asyncio.create_task(leases.run())
    try:
        async with asyncio.timeout(60):
            await leases.wait_for(
                lambda store: any(
                    (lease.get("spec") or {}).get("holderIdentity") for lease in store.values()
                )
            )
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=200)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--claims", type=int, default=2000)
    parser.add_argument(
        "--rate", type=float, default=0.0, help="claims offered per second (0: all at once)"
    )
    args = parser.parse_args()
    asyncio.run(run(args.nodes, args.gpus, args.claims, args.rate))


if __name__ == "__main__":
    main()
