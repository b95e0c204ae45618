"""`dra-driver monitor` wiring: informers over the API emulator name the series."""

from __future__ import annotations

import asyncio
from pathlib import Path

from prometheus_client import CollectorRegistry
from test_libvgpu_region_writer import write_region
from test_monitor_http import (
    FAST_WATCH,
    GIB,
    HANG_GUARD_S,
    container_labels,
    region,
    scrape,
    series,
)

from dra_driver.kube.rest import KubeClient, object_path
from libvgpu.host_gpus import StaticHostBackend
from libvgpu.monitor import MonitorSettings
from libvgpu.monitor_service import MonitorService
from simulator.apiserver import APIServer

CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims"
ALLOCATION = {
    "devices": {
        "results": [
            {"request": "gpu", "driver": "vgpu.hami.io", "pool": "node-1", "device": "gpu-0"}
        ]
    },
    "nodeSelector": {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-1"]}]}
        ]
    },
    "allocationTimestamp": "2026-11-29T00:00:00Z",
}


def claim_manifest(name: str) -> dict:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "nvidia.vgpu.hami.io"}}]
            }
        },
    }


async def test_claim_and_pod_names_come_from_the_live_api(tmp_path: Path):
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await client.create("/api/v1/namespaces", {"metadata": {"name": "team-a"}})
            claim = await client.create(CLAIMS, claim_manifest("shared"))
            claim_uid = claim["metadata"]["uid"]
            # A real pod: kube-controller-manager drops reservations of pods that do not exist.
            pod = await client.create(
                "/api/v1/namespaces/team-a/pods",
                {
                    "metadata": {"name": "worker-0"},
                    "spec": {"containers": [{"name": "main", "image": "i:1"}]},
                },
            )
            reservation = {"resource": "pods", "name": "worker-0", "uid": pod["metadata"]["uid"]}
            await client.patch(
                object_path(CLAIMS, "shared") + "/status",
                {"status": {"allocation": ALLOCATION, "reservedFor": [reservation]}},
            )
            cache = tmp_path / "vgpu" / "claims" / claim_uid
            cache.mkdir(parents=True)
            write_region(cache / ("a" * 32 + ".cache"), region(4 * GIB, 3 * GIB, 40))
            settings = MonitorSettings(
                host="127.0.0.1", port=0, cache_root=str(tmp_path / "vgpu"), watch=FAST_WATCH
            )
            service = MonitorService(settings, client, StaticHostBackend(), CollectorRegistry())
            async with service, asyncio.timeout(HANG_GUARD_S):
                await service.informers[0].wait_for(lambda store: len(store) == 1)
                families = await scrape(service.port)
                assert series(families, "hami_vgpu_memory_used_bytes") == {
                    container_labels("team-a", "worker-0", "", claim_uid): 3 * GIB
                }
                await client.delete(object_path(CLAIMS, "shared"))
                await service.informers[0].wait_for(lambda store: not store)
                assert series(await scrape(service.port), "hami_vgpu_memory_used_bytes") == {}
        finally:
            await client.aclose()
