"""A vGPU monitor in a process of its own, for tests where the monitor itself could die.

    python monitor_child.py <cache root> <claim uid>...

Claim i is reserved by pod `pod-<i>` in namespace `churn`. Prints the port it
serves `/metrics` on, then serves until its stdin closes.
"""

from __future__ import annotations

import asyncio
import sys

from prometheus_client import CollectorRegistry

from libvgpu.cache_watcher import WatchSettings
from libvgpu.host_gpus import StaticHostBackend
from libvgpu.monitor import MonitorSettings, VgpuMonitor
from libvgpu.owners import ClaimIndex, ClaimResolver


def claim_index(claim_uids: list[str]) -> ClaimIndex:
    claims = ClaimIndex()
    for index, uid in enumerate(claim_uids):
        claims.on_add(
            {
                "metadata": {"uid": uid, "name": f"claim-{index}", "namespace": "churn"},
                "status": {
                    "reservedFor": [{"resource": "pods", "name": f"pod-{index}", "uid": uid}]
                },
            }
        )
    return claims


async def serve(cache_root: str, claim_uids: list[str]) -> None:
    settings = MonitorSettings(
        host="127.0.0.1",
        port=0,
        cache_root=cache_root,
        node_name="node-1",
        watch=WatchSettings(debounce_ms=200, step_ms=10, idle_tick_ms=100),
    )
    resolver = ClaimResolver(claim_index(claim_uids))
    async with VgpuMonitor(settings, resolver, StaticHostBackend(), CollectorRegistry()) as monitor:
        print(monitor.port, flush=True)
        await asyncio.to_thread(sys.stdin.read)


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], sys.argv[2:]))
