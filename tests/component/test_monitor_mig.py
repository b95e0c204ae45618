"""The monitor's MIG series over real HTTP: the mock backend's MIG cards, a claim holding a
partition and a legacy pod holding a MIG slice, named by informers over the API emulator."""

from __future__ import annotations

import asyncio
from pathlib import Path

import yaml
from fake_pynvml import FakeCard, fake_nvml
from prometheus_client import CollectorRegistry
from test_monitor_http import FAST_WATCH, HANG_GUARD_S, scrape, series

from api.hami_annotations.keys import VGPU_MIG_ALLOCATIONS
from api.hami_annotations.mig_allocations import MigAllocation, encode_mig_allocations
from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.objects.mig_profiles import H100_80GB, Placement
from kubeletplugin.gpus import MockBackend
from kubeletplugin.mig_mock import MockMigDevice
from libvgpu.host_gpus import MockHostBackend
from libvgpu.host_mig import HostMigInstance, mock_mig_uuid, read_nvml_mig_instances
from libvgpu.monitor import MonitorSettings
from libvgpu.monitor_service import MonitorService
from simulator.apiserver import APIServer

NODE = "node-1"
H100 = "GPU-h100-0"
SHARED = "GPU-a100-1"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/team-a/resourceclaims"
PODS = "/api/v1/namespaces/team-a/pods"
MOCK_FILE = {
    "gpus": [
        {
            "uuid": H100,
            "index": 0,
            "productName": "NVIDIA H100 80GB HBM3",
            "memory": "80Gi",
            "mig": {
                "mode": "enabled",
                "instances": [{"profile": "3g.40gb", "start": 4}, {"profile": "1g.10gb"}],
            },
        },
        {"uuid": SHARED, "index": 1, "productName": "NVIDIA A100-SXM4-80GB", "memory": "80Gi"},
    ]
}
"""NVIDIA's H100 80GB placements (dra_driver/objects/mig_profiles.py): 3g.40gb at 4:4, and
1g.10gb's first placement 0:1."""
LEGACY_MIG_UUID = "MIG-legacy-0000-1111"


def write_mock(path: Path) -> Path:
    path.write_text(yaml.safe_dump(MOCK_FILE), encoding="utf-8")
    return path


def node_labels(mig_uuid: str, profile: str, gi: int, start: int, size: int) -> tuple:
    return tuple(
        sorted(
            {
                "zone": "vGPU",
                "node": NODE,
                "device_uuid": H100,
                "device_index": "0",
                "mig_uuid": mig_uuid,
                "profile": profile,
                "gpu_instance_id": str(gi),
                "compute_instance_id": "0",
                "placement_start": str(start),
                "placement_size": str(size),
            }.items()
        )
    )


def device_labels(**values: str) -> tuple:
    return tuple(sorted({"zone": "vGPU", "compute_instance_id": "0", **values}.items()))


def test_mock_cards_show_the_instances_the_plugin_mock_seeds(tmp_path: Path):
    path = write_mock(tmp_path / "gpus.yaml")
    seeded = {gpu.uuid: gpu.mig.instances for gpu in MockBackend(path).discover()}
    read = {gpu.uuid: gpu.mig_instances for gpu in MockHostBackend(path).read()}
    assert read[SHARED] == () and seeded[SHARED] == ()
    assert read[H100] == tuple(
        HostMigInstance(i.gpu_instance_id, i.compute_instance_id, i.profile, i.placement, i.uuid)
        for i in seeded[H100]
    )
    assert [(i.profile, i.placement) for i in read[H100]] == [
        ("1g.10gb", Placement(0, 1)),
        ("3g.40gb", Placement(4, 4)),
    ]


def test_nvml_reads_each_mig_device_with_profile_and_placement():
    mig = MockMigDevice(H100, H100_80GB)
    for profile, start in (("2g.20gb", 2), ("1g.10gb", 6)):
        mig.create_compute_instance(mig.create_gpu_instance(profile, start))
    cards = [FakeCard(H100, mig=mig), FakeCard(SHARED, minor=1)]
    nvml = fake_nvml(cards)
    assert read_nvml_mig_instances(nvml, cards[1]) == ()
    assert read_nvml_mig_instances(nvml, cards[0]) == (
        HostMigInstance(1, 0, "2g.20gb", Placement(2, 2), mig.mig_uuid(1, 0)),
        HostMigInstance(2, 0, "1g.10gb", Placement(6, 1), mig.mig_uuid(2, 0)),
    )
    mig.enabled = False
    assert read_nvml_mig_instances(nvml, cards[0]) == ()


def partition_claim(name: str, device: str) -> tuple[dict, dict]:
    manifest = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "team-a"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "part", "exactly": {"deviceClassName": "mig.nvidia.vgpu.hami.io"}}
                ]
            }
        },
    }
    allocation = {
        "devices": {
            "results": [
                {"request": "part", "driver": "vgpu.hami.io", "pool": NODE, "device": device}
            ]
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
            ]
        },
        "allocationTimestamp": "2026-11-29T00:00:00Z",
    }
    return manifest, allocation


def legacy_pod() -> dict:
    allocations = encode_mig_allocations(
        [
            MigAllocation(1, 0, H100, "1g.10gb", 0, 1, LEGACY_MIG_UUID, 7, 0),
            MigAllocation(0, 0, H100, "1g.10gb", 1, 1),
        ]
    )
    return {
        "metadata": {"name": "legacy-0", "annotations": {VGPU_MIG_ALLOCATIONS: allocations}},
        "spec": {
            "nodeName": NODE,
            "initContainers": [{"name": "setup", "image": "i:1"}],
            "containers": [{"name": "main", "image": "i:1"}],
        },
    }


async def test_scrape_names_each_mig_device_and_who_uses_it(tmp_path: Path):
    async with APIServer() as server:
        client = await KubeClient.from_kubeconfig(server.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            await client.create("/api/v1/namespaces", {"metadata": {"name": "team-a"}})
            manifest, allocation = partition_claim("part", "gpu-0-mig-3g-40gb-at-4")
            claim = await client.create(CLAIMS, manifest)
            unprepared, unprepared_allocation = partition_claim("later", "gpu-0-mig-2g-20gb-at-2")
            await client.create(CLAIMS, unprepared)
            pod = await client.create(
                PODS,
                {
                    "metadata": {"name": "worker-0"},
                    "spec": {"nodeName": NODE, "containers": [{"name": "main", "image": "i:1"}]},
                },
            )
            reservation = {"resource": "pods", "name": "worker-0", "uid": pod["metadata"]["uid"]}
            for name, result in (("part", allocation), ("later", unprepared_allocation)):
                await client.patch(
                    object_path(CLAIMS, name) + "/status",
                    {"status": {"allocation": result, "reservedFor": [reservation]}},
                )
            await client.create(PODS, legacy_pod())
            settings = MonitorSettings(
                host="127.0.0.1",
                port=0,
                cache_root=str(tmp_path / "vgpu"),
                node_name=NODE,
                legacy_metrics=True,
                watch=FAST_WATCH,
            )
            host = MockHostBackend(write_mock(tmp_path / "gpus.yaml"))
            service = MonitorService(settings, client, host, CollectorRegistry())
            async with service, asyncio.timeout(HANG_GUARD_S):
                await service.informers[0].wait_for(lambda store: len(store) == 2)
                await service.informers[1].wait_for(lambda store: len(store) == 2)
                families = await scrape(service.port)
        finally:
            await client.aclose()
    assert series(families, "hami_node_gpu_mig_instance_info") == {
        node_labels(mock_mig_uuid(H100, 2, 0), "1g.10gb", 2, 0, 1): 1,
        node_labels(mock_mig_uuid(H100, 1, 0), "3g.40gb", 1, 4, 4): 1,
    }
    assert series(families, "hami_mig_device_info") == {
        device_labels(
            namespace="team-a",
            pod="worker-0",
            container="",
            vdevice_index="0",
            device_uuid=H100,
            mig_uuid=mock_mig_uuid(H100, 1, 0),
            profile="3g.40gb",
            gpu_instance_id="1",
            claim_uid=claim["metadata"]["uid"],
            placement_start="4",
            placement_size="4",
        ): 1,
        device_labels(
            namespace="team-a",
            pod="legacy-0",
            container="main",
            vdevice_index="0",
            device_uuid=H100,
            mig_uuid=LEGACY_MIG_UUID,
            profile="1g.10gb",
            gpu_instance_id="7",
            claim_uid="",
            placement_start="0",
            placement_size="1",
        ): 1,
    }
    assert {dict(labels)["migname"] for labels in series(families, "nodeGPUMigInstance")} == {
        "1g.10gb-2",
        "3g.40gb-1",
    }
    assert {
        (dict(labels)["podname"], dict(labels)["instanceid"])
        for labels in series(families, "MigInfo")
    } == {("worker-0", "1"), ("legacy-0", "7")}
