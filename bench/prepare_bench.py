"""Kubelet plugin prepare latency, flat in the number of claims already prepared.

The plugin (mock GPUs), the API emulator and the kubelet stand-in run in this
process; each prepare includes the claim GET over loopback HTTP, the
checkpoint writes (fsync) and the CDI spec write. For each `--prepared` count
a fresh node gets that many claims prepared first (8 GPUs, split count large
enough for them all), then single-claim prepares are timed one after another
on top (each unprepared again, untimed, so the count stays put), then a burst
of concurrent claims. Issue 20's target: p99 with 500 prepared no worse than
with 5; single-claim p99 <= 20 ms and >= 200 prepares/s with 100 concurrent.

    .venv/bin/python bench/prepare_bench.py [--prepared 5 500] [--samples 200] [--concurrency 100]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from prometheus_client import CollectorRegistry

from dra_driver.kube.rest import KubeClient, object_path
from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin, PluginSettings
from kubeletplugin.slices import SliceSettings
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths
from simulator.apiserver import APIServer
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA, KubeletDRASettings

DRIVER = "vgpu.hami.io"
NODE = "node-a"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
GPUS = 8
PREPARE_BATCH = 50
"""Claims per NodePrepareResources call while filling the node."""


@dataclass(frozen=True, slots=True)
class Figures:
    prepared: int
    p50_ms: float
    p99_ms: float
    samples: int
    burst: int
    burst_per_s: float


def allocation(device: str) -> dict:
    return {
        "devices": {
            "results": [
                {
                    "request": "gpu",
                    "driver": DRIVER,
                    "pool": NODE,
                    "device": device,
                    "shareID": str(uuid.uuid4()),
                    "consumedCapacity": {"memory": "64Mi", "cores": "0", "shares": "1"},
                }
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
        "allocationTimestamp": "2026-11-29T00:00:00Z",
    }


async def make_claims(client: KubeClient, prefix: str, count: int) -> list[ClaimRef]:
    claims = []
    for number in range(count):
        name = f"{prefix}-{number}"
        created = await client.create(
            CLAIMS,
            {
                "metadata": {"name": name},
                "spec": {
                    "devices": {
                        "requests": [{"name": "gpu", "exactly": {"deviceClassName": "nvidia"}}]
                    }
                },
            },
        )
        await client.patch(
            object_path(CLAIMS, name) + "/status",
            {"status": {"allocation": allocation(f"gpu-{number % GPUS}")}},
        )
        claims.append(ClaimRef("default", created["metadata"]["uid"], name))
    return claims


def node_settings(root: Path, split_count: int) -> PluginSettings:
    gpus = "".join(
        f"  - {{uuid: GPU-00000000-0000-0000-0000-00000000000{i}, index: {i}, memory: 80Gi}}\n"
        for i in range(GPUS)
    )
    (root / "gpus.yaml").write_text("gpus:\n" + gpus)
    (root / "boot_id").write_text("bench\n")
    (root / "mountinfo").write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    (root / "vgpu").mkdir()
    (root / "vgpu" / "libvgpu.so").write_bytes(b"\x7fELF")
    (root / "vgpu" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    (root / "vgpulock").mkdir()
    return PluginSettings(
        node_name=NODE,
        slices=SliceSettings(split_count=split_count),
        registry_dir=root / "registry",
        plugin_dir=root / "plugin",
        cdi_dir=root / "cdi",
        boot_id_file=root / "boot_id",
        mock_gpus=root / "gpus.yaml",
        libvgpu=LibvgpuPaths(
            host_dir=str(root / "vgpu"),
            cache_root=str(root / "vgpu"),
            lock_dir=str(root / "vgpulock"),
        ),
        cache_dirs=CacheDirSettings(
            self_mountinfo=str(root / "mountinfo"), mountinfo_glob=str(root / "none-*")
        ),
    )


async def prepare_all(kubelet: KubeletDRA, claims: list[ClaimRef]) -> None:
    for start in range(0, len(claims), PREPARE_BATCH):
        batch = claims[start : start + PREPARE_BATCH]
        response = await kubelet.prepare(DRIVER, batch)
        errors = [response.claims[c.uid].error for c in batch if response.claims[c.uid].error]
        assert not errors, errors[:3]


async def measure(prepared: int, samples: int, concurrency: int) -> Figures:
    """One fresh node: `prepared` claims first, then the timed prepares on top."""
    root = Path(tempfile.mkdtemp(prefix="vgpu-bench-", dir="/tmp"))
    split_count = -(-(prepared + max(samples, concurrency) + 1) // GPUS)
    settings = node_settings(root, max(split_count, 10))
    try:
        async with APIServer() as server:
            client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            await client.create("/api/v1/nodes", {"metadata": {"name": NODE}})
            plugin = KubeletPlugin(
                settings, client, MockBackend(settings.mock_gpus), CollectorRegistry()
            )
            kubelet = KubeletDRA(KubeletDRASettings(NODE, root / "registry"), None)
            async with kubelet, plugin:
                await kubelet.wait_registered(DRIVER)
                await prepare_all(kubelet, await make_claims(client, "held", prepared))
                single = await make_claims(client, "single", samples)
                latencies = []
                for claim in single:
                    began = time.perf_counter()
                    response = await kubelet.prepare(DRIVER, [claim])
                    latencies.append(time.perf_counter() - began)
                    assert response.claims[claim.uid].error == "", response.claims[claim.uid]
                    await kubelet.unprepare(DRIVER, [claim])
                burst = await make_claims(client, "burst", concurrency)
                began = time.perf_counter()
                responses = await asyncio.gather(
                    *(kubelet.prepare(DRIVER, [claim]) for claim in burst)
                )
                elapsed = time.perf_counter() - began
                assert all(
                    r.claims[c.uid].error == "" for r, c in zip(responses, burst, strict=True)
                )
                await kubelet.unprepare(DRIVER, burst)
            await client.aclose()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    latencies.sort()
    return Figures(
        prepared,
        statistics.median(latencies) * 1000,
        latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000,
        len(latencies),
        concurrency,
        concurrency / elapsed,
    )


async def main(args: argparse.Namespace) -> None:
    results = [await measure(n, args.samples, args.concurrency) for n in args.prepared]
    print(f"single-claim prepare over gRPC, sequential, {args.samples} samples per row")
    print(f"{'prepared':>9} {'p50 ms':>8} {'p99 ms':>8} {f'{args.concurrency} concurrent/s':>18}")
    for row in results:
        print(f"{row.prepared:>9} {row.p50_ms:>8.2f} {row.p99_ms:>8.2f} {row.burst_per_s:>18.0f}")
    base = results[0]
    for row in results[1:]:
        print(
            f"ratio {row.prepared}/{base.prepared} prepared: p50 x{row.p50_ms / base.p50_ms:.2f}, "
            f"p99 x{row.p99_ms / base.p99_ms:.2f}, "
            f"concurrent x{row.burst_per_s / base.burst_per_s:.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--prepared", type=int, nargs="+", default=[5, 500])
    parser.add_argument("--samples", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
