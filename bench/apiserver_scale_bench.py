"""The API emulator and the kube-scheduler stand-in at cluster size.

    .venv/bin/python bench/apiserver_scale_bench.py [--nodes 1000] [--pods 10000] \
        [--watchers 20] [--concurrency 64] [--profile out.prof]

The emulator runs in its own process with the dra mode's ValidatingAdmissionPolicies
installed; `--profile` runs cProfile on its event-loop thread and writes the stats.
This process makes `--nodes` Nodes and as many ResourceSlices (8 shared GPUs each),
keeps `--watchers` watches open (pods, claims, nodes, slices, as a controller, a
scheduler, kubelet plugins and kube-controller-manager would), then, phase by
phase, `--pods` ResourceClaims, as many Pods, one controller-like status write per
claim (allocation and reservedFor in one write), lets the kube-scheduler stand-in
(DRAScheduler.run) bind every pod, and one kubelet-like pod status write each.
Each phase prints its rate and the emulator's CPU per write; the end prints the
emulator's write counts per client (server.audit lives in the other process, so
they are fetched from it).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import multiprocessing as mp
import os
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from kubernetes import config as sync_config

from dra_driver.kube.rest import KubeClient
from simulator.apiserver import APIServerSettings, run_in_thread
from simulator.deviceclasses import device_classes
from simulator.policies import install_policies
from simulator.standins.dra_scheduler import DRAScheduler

DRIVER = "vgpu.hami.io"
CLASS = "nvidia.vgpu.hami.io"
NAMESPACE = "default"
GPUS = 8
RESOURCE = "/apis/resource.k8s.io/v1"
CLAIMS = f"{RESOURCE}/namespaces/{NAMESPACE}/resourceclaims"
PODS = f"/api/v1/namespaces/{NAMESPACE}/pods"


def serve(kubeconfig: str, profile: str, ready: Connection, stop: Connection) -> None:
    settings = APIServerSettings(watch_history=200_000)
    with run_in_thread(settings) as server:
        server.write_kubeconfig(kubeconfig)
        tokens = server.tokens
        controller = tokens.issue_service_account("vgpu-system", "vgpu-controller")
        server.write_kubeconfig(f"{kubeconfig}.controller", token=controller)
        scheduler = tokens.issue("system:kube-scheduler", ())
        server.write_kubeconfig(f"{kubeconfig}.scheduler", token=scheduler)
        profiler = cProfile.Profile()
        if profile:
            _in_loop(server, profiler.enable)
        ready.send(server.url)
        stop.recv()
        if profile:
            _in_loop(server, profiler.disable)
            profiler.dump_stats(profile)
        stop.send(server.audit.write_counts())


def _in_loop(server: Any, call: Callable[[], None]) -> None:
    """Run `call` on the emulator's event-loop thread (cProfile profiles one thread)."""

    async def run() -> None:
        call()

    asyncio.run_coroutine_threadsafe(run(), server.loop).result()


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def node(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "status": {
            "allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def resource_slice(name: str) -> dict[str, Any]:
    devices = [
        {
            "name": f"gpu-{index}",
            "allowMultipleAllocations": True,
            "attributes": {"index": {"int": index}, "productName": {"string": "A100"}},
            "capacity": {
                "memory": {
                    "value": "81920Mi",
                    "requestPolicy": {
                        "default": "1024Mi",
                        "validRange": {"min": "256Mi", "max": "80Gi", "step": "256Mi"},
                    },
                }
            },
        }
        for index in range(GPUS)
    ]
    return {
        "metadata": {"name": f"{name}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": name,
            "pool": {"name": name, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


def claim(name: str) -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": CLASS}}
    return {"metadata": {"name": name}, "spec": {"devices": {"requests": [request]}}}


def pod(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "containers": [
                {
                    "name": "main",
                    "image": "registry.k8s.io/pause:3.10",
                    "resources": {"requests": {"cpu": "100m"}, "claims": [{"name": "gpu"}]},
                }
            ],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": f"{name}-gpu"}],
        },
    }


def allocation_status(node_name: str, index: int, pod_name: str, uid: str) -> dict[str, Any]:
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": node_name,
        "device": f"gpu-{index % GPUS}",
        "shareID": "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d",
        "consumedCapacity": {"memory": "8Gi"},
    }
    selector = {"key": "metadata.name", "operator": "In", "values": [node_name]}
    return {
        "status": {
            "allocation": {
                "devices": {"results": [result]},
                "nodeSelector": {"nodeSelectorTerms": [{"matchFields": [selector]}]},
                "allocationTimestamp": "2026-12-01T00:00:00Z",
            },
            "reservedFor": [{"resource": "pods", "name": pod_name, "uid": uid}],
        }
    }


async def bounded(calls: Iterable[Callable[[], Awaitable[Any]]], concurrency: int) -> list[Any]:
    slots = asyncio.Semaphore(concurrency)

    async def one(call: Callable[[], Awaitable[Any]]) -> Any:
        async with slots:
            return await call()

    return await asyncio.gather(*(one(c) for c in calls))


class Phase:
    """Times one phase and the emulator's CPU during it."""

    def __init__(self, server_pid: int) -> None:
        self.pid = server_pid

    async def run(self, title: str, count: int, work: Awaitable[Any]) -> Any:
        cpu, began = _cpu_seconds(self.pid), time.perf_counter()
        result = await work
        elapsed, used = time.perf_counter() - began, _cpu_seconds(self.pid) - cpu
        print(
            f"{title:<34} {count:>6} in {elapsed:6.2f} s = {count / elapsed:7,.0f}/s, "
            f"emulator {used / max(count, 1) * 1000:6.2f} ms CPU each"
        )
        return result


async def keep_watching(client: KubeClient, path: str, seen: list[int]) -> None:
    while True:
        async for _ in client.watch(path, timeoutSeconds=600, allowWatchBookmarks="true"):
            seen[0] += 1


async def bench(kubeconfig: Path, server_pid: int, args: argparse.Namespace) -> None:
    client = await KubeClient.from_kubeconfig(kubeconfig, request_timeout=120)
    controller = await KubeClient.from_kubeconfig(
        Path(f"{kubeconfig}.controller"), request_timeout=120, component="controller"
    )
    phase = Phase(server_pid)
    names = [f"node-{i:04d}" for i in range(args.nodes)]
    pods = [f"p-{i:05d}" for i in range(args.pods)]
    c = args.concurrency
    await install_policies(client, "dra")
    for device_class in device_classes():
        await client.create(f"{RESOURCE}/deviceclasses", device_class)
    await phase.run(
        "nodes",
        len(names),
        bounded([lambda n=n: client.create("/api/v1/nodes", node(n)) for n in names], c),
    )
    await phase.run(
        "resourceslices",
        len(names),
        bounded(
            [
                lambda n=n: client.create(f"{RESOURCE}/resourceslices", resource_slice(n))
                for n in names
            ],
            c,
        ),
    )
    paths = [
        "/api/v1/pods",
        f"{RESOURCE}/resourceclaims",
        "/api/v1/nodes",
        f"{RESOURCE}/resourceslices",
    ]
    seen = [0]
    watches = [
        asyncio.create_task(keep_watching(client, paths[i % len(paths)], seen))
        for i in range(args.watchers)
    ]
    await phase.run(
        "resourceclaims create",
        len(pods),
        bounded([lambda p=p: client.create(CLAIMS, claim(f"{p}-gpu")) for p in pods], c),
    )
    created = await phase.run(
        "pods create",
        len(pods),
        bounded([lambda p=p: client.create(PODS, pod(p)) for p in pods], c),
    )
    uids = {item["metadata"]["name"]: item["metadata"]["uid"] for item in created}
    await phase.run(
        "resourceclaims/status (controller)",
        len(pods),
        bounded(
            [
                lambda i=i, p=p: controller.patch(
                    f"{CLAIMS}/{p}-gpu/status",
                    allocation_status(names[i % len(names)], i // len(names), p, uids[p]),
                )
                for i, p in enumerate(pods)
            ],
            c,
        ),
    )
    await phase.run("pods bound (scheduler stand-in)", len(pods), schedule_all(client, kubeconfig))
    await phase.run(
        "pods/status (kubelet)",
        len(pods),
        bounded(
            [
                lambda p=p: client.patch(f"{PODS}/{p}/status", {"status": {"phase": "Running"}})
                for p in pods
            ],
            c,
        ),
    )
    print(f"watch events delivered: {seen[0]:,} over {args.watchers} watches")
    for task in watches:
        task.cancel()
    await asyncio.gather(*watches, return_exceptions=True)
    await controller.aclose()
    await client.aclose()


async def schedule_all(client: KubeClient, kubeconfig: Path) -> None:
    """Run the stand-in until no pod is left unbound (checked by a one-item list)."""
    sync_client = sync_config.new_client_from_config(config_file=f"{kubeconfig}.scheduler")
    stop = asyncio.Event()
    running = asyncio.create_task(DRAScheduler(sync_client).run(stop))
    try:
        while True:
            listed = await client.list("/api/v1/pods", fieldSelector="spec.nodeName=", limit=1)
            if not listed["items"]:
                return
            await asyncio.sleep(0.5)
    finally:
        stop.set()
        await running
        sync_client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=10_000)
    parser.add_argument("--watchers", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=64, help="writes in flight")
    parser.add_argument("--profile", default="", help="write the emulator's cProfile stats here")
    args = parser.parse_args()
    context = mp.get_context("spawn")
    with tempfile.TemporaryDirectory() as directory:
        kubeconfig = Path(directory) / "kubeconfig"
        ready_in, ready_out = context.Pipe(duplex=False)
        stop_here, stop_there = context.Pipe()
        server = context.Process(
            target=serve, args=(str(kubeconfig), args.profile, ready_out, stop_there)
        )
        server.start()
        ready_in.recv()
        assert server.pid is not None
        try:
            asyncio.run(bench(kubeconfig, server.pid, args))
        finally:
            stop_here.send(None)
            counts = stop_here.recv()
            server.join()
        for name, by_resource in sorted(counts.items()):
            print(f"writes by {name}: {dict(sorted(by_resource.items()))}")


if __name__ == "__main__":
    main()
