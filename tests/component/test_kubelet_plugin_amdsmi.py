"""The kubelet DRA plugin on an AMD node discovered through amdsmi (a fake module with
amdsmi's calls), over its real sockets against the API emulator: the slices carry what
amdsmi reported, and prepare lists ROCm's device nodes the host has in the CDI spec."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from fake_amdsmi import GIB, FakeCard, fake_amdsmi
from prometheus_client import CollectorRegistry

from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls
from kubeletplugin.amdsmi_backend import AmdSmiBackend
from kubeletplugin.plugin import KubeletPlugin, PluginSettings
from libvgpu.settings import LibvgpuPaths
from simulator.apiserver import APIServer
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA, KubeletDRASettings

DRIVER = "vgpu.hami.io"
NODE = "node-amd"
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
CARDS = [
    FakeCard("0000:23:00.0", "e4ff74a1-0000-1000-80ff-ffffffffffff", drm_card=1, drm_render=128),
    FakeCard(
        "0000:c3:00.0",
        "a6ff74a1-0000-1000-8088-ffffffffffff",
        vram=64 * GIB,
        numa=1,
        drm_card=2,
        drm_render=129,
    ),
]


@dataclass
class AmdNode:
    root: Path
    client: KubeClient
    kubelet: KubeletDRA
    settings: PluginSettings

    @property
    def dev(self) -> Path:
        return self.settings.dev_dir

    def plugin(self) -> KubeletPlugin:
        backend = AmdSmiBackend(fake_amdsmi(CARDS), read_drm_nodes=lambda bdf: (None, None))
        return KubeletPlugin(self.settings, self.client, backend, CollectorRegistry())

    async def claim(self, name: str, device: str) -> ClaimRef:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [{"name": "card", "exactly": {"deviceClassName": "amd." + DRIVER}}]
                }
            },
        }
        created = await self.client.create(CLAIMS, body)
        share = {
            "request": "card",
            "driver": DRIVER,
            "pool": NODE,
            "device": device,
            "shareID": str(uuid.uuid4()),
            "consumedCapacity": {"memory": "8Gi", "cores": "25", "shares": "1"},
        }
        allocation = {
            "devices": {"results": [share], "config": []},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
            "allocationTimestamp": "2026-12-01T00:00:00Z",
        }
        await self.client.patch(
            object_path(CLAIMS, name) + "/status", {"status": {"allocation": allocation}}
        )
        return ClaimRef("default", created["metadata"]["uid"], name)

    def spec(self, uid: str) -> dict:
        path = self.settings.cdi_dir / f"k8s.vgpu.hami.io-claim_{uid}.json"
        return json.loads(path.read_text())


@pytest.fixture
async def node() -> AsyncIterator[AmdNode]:
    root = Path(tempfile.mkdtemp(prefix="vgpu-amd-", dir="/tmp"))
    try:
        (root / "boot_id").write_text("boot-1\n")
        (root / "dev" / "dri").mkdir(parents=True)
        settings = PluginSettings(
            node_name=NODE,
            registry_dir=root / "registry",
            plugin_dir=root / "plugin",
            dev_dir=root / "dev",
            cdi_dir=root / "cdi",
            boot_id_file=root / "boot_id",
            libvgpu=LibvgpuPaths(
                host_dir=str(root / "absent"),
                cache_root=str(root / "absent"),
                lock_dir=str(root / "absent-lock"),
            ),
        )
        async with APIServer() as server:
            client = await KubeClient.from_kubeconfig(server.write_kubeconfig(root / "kubeconfig"))
            await client.create("/api/v1/nodes", {"metadata": {"name": NODE}})
            kubelet = KubeletDRA(KubeletDRASettings(NODE, root / "registry"), None)
            try:
                async with kubelet:
                    yield AmdNode(root, client, kubelet, settings)
            finally:
                await client.aclose()
                await settle_cancelled_grpc_calls()
    finally:
        shutil.rmtree(root, ignore_errors=True)


async def published_devices(node: AmdNode) -> list[dict]:
    while True:
        listing = await node.client.list(SLICES)
        devices = [d for item in listing.get("items") or [] for d in item["spec"]["devices"]]
        if devices:
            return devices
        async for _ in node.client.watch(
            SLICES, resource_version=listing["metadata"]["resourceVersion"]
        ):
            break


async def test_slices_carry_what_amdsmi_reported(node: AmdNode):
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        devices = {d["name"]: d for d in await published_devices(node)}
        second = devices["gpu-1"]
        attributes = second["attributes"]
        assert attributes["vendor"] == {"string": "AMD"}
        assert attributes["type"] == {"string": "AMD-Instinct-MI300X"}
        assert attributes["uuid"] == {"string": "a6ff74a1-0000-1000-8088-ffffffffffff"}
        assert attributes["pciBusID"] == {"string": "0000:c3:00.0"}
        assert attributes["minor"] == {"int": 2}
        assert attributes["numa"] == {"int": 1}
        assert second["capacity"]["memory"]["value"] == str(64 * GIB)
        assert devices["gpu-0"]["capacity"]["memory"]["value"] == str(192 * GIB)


async def test_prepare_lists_kfd_and_the_cards_dri_nodes_the_host_has(node: AmdNode):
    for name in ("kfd", "dri/renderD129", "dri/card2", "dri/renderD128"):
        os.mkfifo(node.dev / name)
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        present = await node.claim("present", "gpu-1")
        no_card_node = await node.claim("no-card-node", "gpu-0")
        response = await node.kubelet.prepare(DRIVER, [present, no_card_node])
        assert response.claims[present.uid].error == ""
        spec = node.spec(present.uid)
        assert spec["containerEdits"]["deviceNodes"] == [
            {"path": "/dev/kfd", "hostPath": str(node.dev / "kfd")}
        ]
        (device,) = spec["devices"]
        assert device["containerEdits"]["deviceNodes"] == [
            {"path": "/dev/dri/card2", "hostPath": str(node.dev / "dri/card2")},
            {"path": "/dev/dri/renderD129", "hostPath": str(node.dev / "dri/renderD129")},
        ]
        assert response.claims[no_card_node.uid].error == ""
        (device,) = node.spec(no_card_node.uid)["devices"]
        assert [n["path"] for n in device["containerEdits"]["deviceNodes"]] == [
            "/dev/dri/renderD128"
        ], "card1 is absent on the host, so it is left out"


async def test_prepare_fails_naming_a_missing_render_node(node: AmdNode):
    os.mkfifo(node.dev / "kfd")
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("absent", "gpu-1")
        response = await node.kubelet.prepare(DRIVER, [claim])
        error = response.claims[claim.uid].error
        assert f"device node {node.dev}/dri/renderD129 of AMD GPU" in error
        assert "is the amdgpu driver loaded?" in error
        assert not (node.settings.cdi_dir / f"k8s.vgpu.hami.io-claim_{claim.uid}.json").exists()
