"""`dra-driver status` at scale: wall time of the real command against the API emulator.

Builds a cluster in the emulator as the components would have left it: N nodes
x G GPUs (ResourceSlices written as the kubelet plugin publishes them), claims
allocated straight into `status.allocation` + `reservedFor` as the controller
writes them, one pod per claim bound to the claim's node, a Normal event per
pod, and some pending claims with the Warning event an allocator records.
Then runs `dra-driver status` as a user does (a subprocess of the installed
command, the kubeconfig, output piped) for the summary, `--node`, `-o wide`
and `-o json`, and prints per view the wall time (best and median of the
runs) and the size of what it printed. Target: the summary in <= 2 s at
1,000 x 8 with 10,000 claims and pods.

    .venv/bin/python bench/status_bench.py [--nodes 1000] [--gpus 8] [--claims 10000]
        [--pending 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.kube.rest import KubeClient
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices
from simulator.apiserver import run_in_thread

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
NAMESPACE = "default"
RESOURCE = "/apis/resource.k8s.io/v1"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"
EVENTS = f"/api/v1/namespaces/{NAMESPACE}/events"
CONCURRENCY = 64
GIB = 1 << 30


def node_name(n: int) -> str:
    return f"node-{n:04d}"


async def bounded(jobs: list[Any], concurrency: int = CONCURRENCY) -> None:
    semaphore = asyncio.Semaphore(concurrency)

    async def one(job: Any) -> None:
        async with semaphore:
            await job

    await asyncio.gather(*(one(job) for job in jobs))


async def build_nodes(client: KubeClient, nodes: int, gpus: int) -> None:
    await client.create(
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": CLASS},
            "spec": {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}'"}}]},
        },
    )

    async def one(n: int) -> None:
        node = await client.create(
            "/api/v1/nodes",
            {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name(n)}},
        )
        devices = [
            GpuInfo(f"GPU-{n:04d}-{i}", i, i, "NVIDIA A100-SXM4-80GB", 80 * GIB, i // 4)
            for i in range(gpus)
        ]
        settings = SliceSettings(driver=DRIVER)
        for item in build_resource_slices(
            node_name(n), node["metadata"]["uid"], devices, settings, 1
        ):
            await client.create(f"{RESOURCE}/resourceslices", item)

    await bounded([one(n) for n in range(nodes)])


def claim_body(name: str, memory_gib: int) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": CLASS,
                            "capacity": {"requests": {"memory": f"{memory_gib}Gi", "cores": "10"}},
                        },
                    }
                ]
            }
        },
    }


def pod_body(name: str, claim: str, node: str | None) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [
            {"name": "main", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}
        ],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def event_body(kind: str, name: str, kind_type: str, reason: str, message: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:12]}"},
        "involvedObject": {"kind": kind, "namespace": NAMESPACE, "name": name},
        "type": kind_type,
        "reason": reason,
        "message": message,
        "lastTimestamp": "2026-12-01T10:00:00Z",
    }


def allocation(node: str, device: str, memory_gib: int, pod: dict[str, Any]) -> dict[str, Any]:
    return {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "gpu",
                        "driver": DRIVER,
                        "pool": node,
                        "device": device,
                        "shareID": str(uuid.uuid4()),
                        "consumedCapacity": {
                            "memory": f"{memory_gib}Gi",
                            "cores": "10",
                            "shares": "1",
                        },
                    }
                ],
                "config": [],
            },
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
                ]
            },
            "allocationTimestamp": "2026-12-01T10:00:00Z",
        },
        "reservedFor": [
            {"resource": "pods", "name": pod["metadata"]["name"], "uid": pod["metadata"]["uid"]}
        ],
    }


async def build_workload(client: KubeClient, nodes: int, gpus: int, claims: int) -> None:
    """Claim i on node (i * 7) % nodes, GPU i % gpus: nodes end up unevenly busy."""

    async def one(i: int) -> None:
        node, device, memory = node_name((i * 7) % nodes), f"gpu-{i % gpus}", 1 + (i * 37) % 9
        claim = await client.create(CLAIMS, claim_body(f"c{i}", memory))
        pod = await client.create(PODS, pod_body(f"p{i}", f"c{i}", node))
        await client.patch(
            f"{CLAIMS}/c{i}/status",
            {
                "metadata": {"resourceVersion": claim["metadata"]["resourceVersion"]},
                "status": allocation(node, device, memory, pod),
            },
        )
        await client.create(
            EVENTS, event_body("Pod", f"p{i}", "Normal", "Started", "Started container main")
        )

    await bounded([one(i) for i in range(claims)])


async def build_pending(client: KubeClient, pending: int) -> None:
    async def one(i: int) -> None:
        await client.create(CLAIMS, claim_body(f"pending-{i}", 200))
        await client.create(PODS, pod_body(f"pending-{i}", f"pending-{i}", None))
        await client.create(
            EVENTS,
            event_body(
                "ResourceClaim",
                f"pending-{i}",
                "Warning",
                "FailedAllocation",
                "no node fits: 8000/8000 CardInsufficientMemory",
            ),
        )

    await bounded([one(i) for i in range(pending)])


@dataclass(frozen=True, slots=True)
class Timing:
    best_s: float
    median_s: float
    command_cpu_s: float
    """Median CPU (user + system) of the command's process: what a loaded machine changes
    least, next to the wall time that it changes most."""
    server_cpu_s: float
    """Median CPU of this process during the run: the emulator serving the lists."""
    size: int
    lines: int


def time_command(command: list[str], runs: int) -> Timing:
    walls, command_cpu, server_cpu, out = [], [], [], b""
    for _ in range(runs):
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        own = time.process_time()
        started = time.perf_counter()
        out = subprocess.run(command, check=True, capture_output=True).stdout
        walls.append(time.perf_counter() - started)
        server_cpu.append(time.process_time() - own)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        command_cpu.append(after.ru_utime + after.ru_stime - children.ru_utime - children.ru_stime)
    return Timing(
        min(walls),
        statistics.median(walls),
        statistics.median(command_cpu),
        statistics.median(server_cpu),
        len(out),
        out.count(b"\n"),
    )


def dra_driver_command() -> list[str]:
    installed = Path(sys.executable).parent / "dra-driver"
    return [str(installed)] if installed.exists() else [sys.executable, "-m", "dra_driver.cli"]


async def build(kubeconfig: Path, nodes: int, gpus: int, claims: int, pending: int) -> None:
    client = await KubeClient.from_kubeconfig(kubeconfig)
    try:
        started = time.perf_counter()
        await build_nodes(client, nodes, gpus)
        await build_workload(client, nodes, gpus, claims)
        await build_pending(client, pending)
        print(
            f"cluster: {nodes} nodes x {gpus} GPUs, {claims} allocated claims and pods, "
            f"{pending} pending, {claims + pending} events, built in "
            f"{time.perf_counter() - started:.0f} s"
        )
    finally:
        await client.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--claims", type=int, default=10000)
    parser.add_argument("--pending", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with run_in_thread() as server, tempfile.TemporaryDirectory() as scratch:
        kubeconfig = server.write_kubeconfig(Path(scratch) / "kubeconfig")
        asyncio.run(build(kubeconfig, args.nodes, args.gpus, args.claims, args.pending))
        base = [*dra_driver_command(), "status", "--kubeconfig", str(kubeconfig)]
        views = {
            "summary": [],
            f"--node {node_name(0)}": ["--node", node_name(0)],
            "-o wide": ["-o", "wide"],
            "-o json": ["-o", "json"],
        }
        # The emulator serves from this process; a loaded machine slows both sides, so the
        # load and the bare start-up of the command are printed next to the figures.
        print(f"machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
        runs = {"dra-driver --help (start-up)": [*dra_driver_command(), "--help"]}
        runs.update({f"status {label}": [*base, *extra] for label, extra in views.items()})
        for label, command in runs.items():
            try:
                timing = time_command(command, args.runs)
            except subprocess.CalledProcessError as error:
                print(f"{label:30} failed: {error.stderr.decode()[-300:]}")
                continue
            print(
                f"{label:30} wall best {timing.best_s:5.2f} s median {timing.median_s:5.2f} s; "
                f"CPU command {timing.command_cpu_s:5.2f} s, "
                f"emulator {timing.server_cpu_s:5.2f} s; "
                f"{timing.size / 1024:5.0f} KiB {timing.lines:6} lines "
                f"(load {os.getloadavg()[0]:.1f})"
            )


if __name__ == "__main__":
    main()
