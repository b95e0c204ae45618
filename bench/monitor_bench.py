"""Scrape latency of the vGPU monitor with many owned cache files, over real HTTP.

    .venv/bin/python bench/monitor_bench.py [--files 500] [--shared 255] [--scrapes 50]
        [--processes 2] [--legacy-metrics]

Writes sparse v1.2 region files (offsets from the reference layout) under a
temp cache root, one claim dir each, and indexes a claim per file reserved by
one pod, or by two for the first `--shared` claims (500 files and 255 shared
claims give 755 series per container family, the hold-out's shape). Serves
metrics on a free port and, in the same run, times reading every file (the
floor a scrape cannot go below), rendering the text, and full scrapes with
aiohttp. Target: scrape p99 <= 200 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import mmap
import os
import statistics
import struct
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable

import aiohttp
from prometheus_client import CollectorRegistry

from libvgpu.cache_watcher import WatchSettings
from libvgpu.host_gpus import HostGpu, StaticHostBackend
from libvgpu.monitor import MonitorSettings, VgpuMonitor
from libvgpu.owners import ClaimIndex, ClaimResolver

FILE_SIZE = 2008953
PROCS, SLOT, PROC_NUM, SEQLOCK = 1856, 1960, 2008896, 1936
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


def percentiles(timings: list[float]) -> str:
    ordered = sorted(timings)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return (
        f"p50 {statistics.median(ordered):.1f} ms  p99 {p99:.1f} ms  "
        f"mean {statistics.fmean(ordered):.1f} ms  max {ordered[-1]:.1f} ms"
    )


def timed(
    action: Callable[[], object], repeats: int, before: Callable[[], object] = lambda: None
) -> list[float]:
    """Milliseconds per call of `action`; `before` runs untimed ahead of each call."""
    timings = []
    for _ in range(repeats):
        before()
        start = time.perf_counter()
        action()
        timings.append((time.perf_counter() - start) * 1000)
    return timings


async def timed_async(action: Callable[[], Awaitable[object]]) -> float:
    start = time.perf_counter()
    await action()
    return (time.perf_counter() - start) * 1000


class UsageChanger:
    """Bumps slot 0's used bytes in every file under its seqlock, through a shared mapping
    as libvgpu's hooks do (so no inotify events), and the next read finds every file
    changed: a busy node, where nothing read before can be reused."""

    def __init__(self, paths: list[str]) -> None:
        self._maps = []
        for path in paths:
            with open(path, "r+b") as handle:
                self._maps.append(mmap.mmap(handle.fileno(), FILE_SIZE))
        self._round = 0

    def change_all(self) -> None:
        self._round += 1
        for region in self._maps:
            seqlock = struct.unpack_from("<Q", region, PROCS + SEQLOCK)[0]
            struct.pack_into("<Q", region, PROCS + SEQLOCK, seqlock + 1)
            struct.pack_into("<Q", region, PROCS + 8 + 32, GIB + self._round)
            struct.pack_into("<Q", region, PROCS + SEQLOCK, seqlock + 2)

    def close(self) -> None:
        for region in self._maps:
            region.close()


def reservations(index: int, shared: int) -> list[dict[str, str]]:
    pods = 2 if index < shared else 1
    return [
        {"resource": "pods", "name": f"pod-{index}-{pod}", "uid": str(uuid.uuid4())}
        for pod in range(pods)
    ]


async def bench(
    files: int, shared: int, scrapes: int, processes: int, legacy_metrics: bool
) -> None:
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
                    "status": {"reservedFor": reservations(index, shared)},
                }
            )
        host = StaticHostBackend(
            [HostGpu(index, gpu, "NVIDIA-H100", GIB, 50, 10) for index, gpu in enumerate(gpus)]
        )
        settings = MonitorSettings(
            host="127.0.0.1",
            port=0,
            cache_root=root,
            node_name="bench",
            legacy_metrics=legacy_metrics,
            watch=WatchSettings(),
        )
        async with (
            VgpuMonitor(settings, ClaimResolver(claims), host, CollectorRegistry()) as monitor,
            aiohttp.ClientSession() as session,
        ):
            url = f"http://127.0.0.1:{monitor.port}/metrics"
            changer = UsageChanger(sorted(monitor.files.paths()))

            async def scrape() -> bytes:
                async with session.get(url) as response:
                    return await response.read()

            first_start = time.perf_counter()
            body = await scrape()
            first = (time.perf_counter() - first_start) * 1000
            unchanged = [await timed_async(scrape) for _ in range(scrapes)]
            changed = []
            for _ in range(scrapes):
                changer.change_all()
                changed.append(await timed_async(scrape))
            reads_unchanged = timed(monitor.files.read_all, scrapes)
            reads_changed = timed(monitor.files.read_all, scrapes, before=changer.change_all)
            renders_changed = timed(monitor.metrics.render, scrapes, before=changer.change_all)
            changer.close()
            series = sum(
                1 for line in body.decode().splitlines() if line.startswith("hami_vgpu_memory_used")
            )
            print(
                f"files={files} shared claims={shared} processes/file={processes} "
                f"scrapes={scrapes} legacy={legacy_metrics} body={len(body)} bytes "
                f"series per container family={series}"
            )
            print(f"first scrape {first:.1f} ms")
            print(f"scrape over HTTP, every file changed:  {percentiles(changed)}")
            print(f"scrape over HTTP, files unchanged:     {percentiles(unchanged)}")
            print(f"render (read + text), every file changed: {percentiles(renders_changed)}")
            print(f"read all files, every file changed:    {percentiles(reads_changed)}")
            print(f"read all files, unchanged:             {percentiles(reads_unchanged)}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--scrapes", type=int, default=50)
    parser.add_argument("--shared", type=int, default=255, help="claims reserved by two pods")
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--legacy-metrics", action="store_true")
    arguments = parser.parse_args()
    asyncio.run(
        bench(
            arguments.files,
            arguments.shared,
            arguments.scrapes,
            arguments.processes,
            arguments.legacy_metrics,
        )
    )


if __name__ == "__main__":
    main()
