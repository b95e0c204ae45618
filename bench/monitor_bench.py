"""Scrape latency of the vGPU monitor with many cache files, over real HTTP.

    .venv/bin/python bench/monitor_bench.py [--files 500] [--scrapes 50] [--processes 2]

Writes sparse v1.2 region files (offsets from the reference layout) under a
temp cache root, one claim dir each, indexes a claim per file, serves metrics
on a free port and times full scrapes with aiohttp. Target: p99 <= 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import struct
import tempfile
import time
import uuid

import aiohttp
from prometheus_client import CollectorRegistry

from libvgpu.cache_watcher import WatchSettings
from libvgpu.host_gpus import HostGpu, StaticHostBackend
from libvgpu.monitor import MonitorSettings, VgpuMonitor
from libvgpu.owners import ClaimIndex, ClaimResolver

FILE_SIZE = 2008953
PROCS, SLOT, PROC_NUM = 1856, 1960, 2008896
GIB = 1 << 30


def write_sparse_region(path: str, gpu_uuid: str, processes: int) -> None:
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o666)
    try:
        os.ftruncate(descriptor, FILE_SIZE)
        os.pwrite(descriptor, struct.pack("<iII", 19920718, 1, 2), 0)
        os.pwrite(descriptor, struct.pack("<Q", 1), 56)
        os.pwrite(descriptor, gpu_uuid.encode(), 64)
        os.pwrite(descriptor, struct.pack("<Q", 4 * GIB), 1600)
        os.pwrite(descriptor, struct.pack("<Q", 50), 1728)
        for slot in range(processes):
            base = PROCS + slot * SLOT
            os.pwrite(descriptor, struct.pack("<ii", 100 + slot, 9000 + slot), base)
            os.pwrite(descriptor, struct.pack("<Q", (slot + 1) * 1 << 28), base + 8 + 32)
            os.pwrite(descriptor, struct.pack("<Q", 12), base + 1160 + 16)
            os.pwrite(descriptor, struct.pack("<i", 1), base + 1928)
        os.pwrite(descriptor, struct.pack("<iiii", processes, 1, 2, 1), PROC_NUM)
        os.pwrite(descriptor, struct.pack("<Q", int(time.time())), 2008912)
    finally:
        os.close(descriptor)


async def bench(files: int, scrapes: int, processes: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        claims = ClaimIndex()
        gpus = [f"GPU-{uuid.UUID(int=index)}" for index in range(8)]
        for index in range(files):
            claim_uid = str(uuid.uuid4())
            directory = os.path.join(root, "claims", claim_uid)
            os.makedirs(directory)
            write_sparse_region(
                os.path.join(directory, uuid.uuid4().hex + ".cache"), gpus[index % 8], processes
            )
            claims.on_add(
                {
                    "metadata": {"uid": claim_uid, "name": f"claim-{index}", "namespace": "bench"},
                    "status": {
                        "reservedFor": [
                            {"resource": "pods", "name": f"pod-{index}", "uid": str(uuid.uuid4())}
                        ]
                    },
                }
            )
        host = StaticHostBackend(
            [HostGpu(index, gpu, "NVIDIA-H100", GIB, 50, 10) for index, gpu in enumerate(gpus)]
        )
        settings = MonitorSettings(
            host="127.0.0.1", port=0, cache_root=root, node_name="bench", watch=WatchSettings()
        )
        async with (
            VgpuMonitor(settings, ClaimResolver(claims), host, CollectorRegistry()) as monitor,
            aiohttp.ClientSession() as session,
        ):
            url = f"http://127.0.0.1:{monitor.port}/metrics"
            timings = []
            size = 0
            for _ in range(scrapes + 1):
                start = time.perf_counter()
                async with session.get(url) as response:
                    body = await response.read()
                timings.append((time.perf_counter() - start) * 1000)
                size = len(body)
            first, steady = timings[0], sorted(timings[1:])
            series = sum(
                1 for line in body.decode().splitlines() if line.startswith("hami_vgpu_memory_used")
            )
            print(
                f"files={files} processes/file={processes} scrapes={scrapes} "
                f"body={size} bytes vgpu_used_series={series}"
            )
            print(
                f"first scrape (opens+maps files) {first:.1f} ms; "
                f"p50 {statistics.median(steady):.1f} ms  "
                f"p99 {steady[min(len(steady) - 1, int(len(steady) * 0.99))]:.1f} ms  "
                f"mean {statistics.fmean(steady):.1f} ms  max {steady[-1]:.1f} ms"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--processes", type=int, default=2)
    arguments = parser.parse_args()
    asyncio.run(bench(arguments.files, arguments.scrapes, arguments.processes))


if __name__ == "__main__":
    main()
