"""Kubelet plugin prepare latency and throughput, over the real sockets.

The plugin (mock GPUs), the API emulator and the kubelet stand-in run in this
process; each prepare includes the claim GET over loopback HTTP, the
checkpoint writes (fsync) and the CDI spec write. Target here: single-claim
p99 <= 20 ms and >= 200 prepares/s with 100 concurrent claims.

    .venv/bin/python bench/prepare_bench.py [--claims 200] [--concurrency 100]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import tempfile
import time
import uuid
from pathlib import Path

from prometheus_client import CollectorRegistry

from dra_driver.kube.rest import KubeClient, object_path
from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin, PluginSettings
from libvgpu.cache_dirs import CacheDirSettings
from libvgpu.settings import LibvgpuPaths
from simulator.apiserver import APIServer
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA, KubeletDRASettings

DRIVER = "vgpu.hami.io"
NODE = "node-a"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"


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
            {"status": {"allocation": allocation(f"gpu-{number % 8}")}},
        )
        claims.append(ClaimRef("default", created["metadata"]["uid"], name))
    return claims


async def main(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="vgpu-bench-", dir="/tmp"))
    gpus = "".join(
        f"  - {{uuid: GPU-00000000-0000-0000-0000-00000000000{i}, index: {i}, memory: 80Gi}}\n"
        for i in range(8)
    )
    (root / "gpus.yaml").write_text("gpus:\n" + gpus)
    (root / "boot_id").write_text("bench\n")
    (root / "mountinfo").write_text("22 1 8:1 / / rw - ext4 /dev/sda1 rw\n")
    (root / "vgpu").mkdir()
    (root / "vgpu" / "libvgpu.so").write_bytes(b"\x7fELF")
    (root / "vgpu" / "ld.so.preload").write_text("/usr/local/vgpu/libvgpu.so\n")
    (root / "vgpulock").mkdir()
    settings = PluginSettings(
        node_name=NODE,
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
                single = await make_claims(client, "single", args.claims)
                latencies = []
                for claim in single:
                    began = time.perf_counter()
                    response = await kubelet.prepare(DRIVER, [claim])
                    latencies.append(time.perf_counter() - began)
                    assert response.claims[claim.uid].error == ""
                await kubelet.unprepare(DRIVER, single)
                burst = await make_claims(client, "burst", args.concurrency)
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
    p50 = statistics.median(latencies) * 1000
    p99 = latencies[max(0, int(len(latencies) * 0.99) - 1)] * 1000
    print(f"single-claim prepare over gRPC (n={len(latencies)}): p50={p50:.2f} ms p99={p99:.2f} ms")
    print(
        f"{args.concurrency} concurrent claims: {elapsed * 1000:.0f} ms total, "
        f"{args.concurrency / elapsed:.0f} prepares/s"
    )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--claims", type=int, default=200)
    parser.add_argument("--concurrency", type=int, default=100)
    asyncio.run(main(parser.parse_args()))
