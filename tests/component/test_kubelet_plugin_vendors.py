"""The kubelet DRA plugin serving other vendors' mock cards, over its real sockets: the
slices it publishes (vendor, type, coreUnit, the family's request policies) and what
prepare writes (the vendor runtime's variables and VGPU_SHARE_*, no libvgpu)."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from dra_driver.kube.rest import KubeClient, object_path
from dra_driver.process.grpc_tasks import settle_cancelled_grpc_calls
from kubeletplugin.gpus import MockBackend
from kubeletplugin.plugin import KubeletPlugin, PluginSettings
from libvgpu.settings import LibvgpuPaths
from simulator.apiserver import APIServer
from simulator.standins.kubelet_dra import ClaimRef, KubeletDRA, KubeletDRASettings

DRIVER = "vgpu.hami.io"
NODE = "node-v"
GIB = 1 << 30
CLAIMS = "/apis/resource.k8s.io/v1/namespaces/default/resourceclaims"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"


def mock_file(vendor: str) -> str:
    return (
        f"vendor: {vendor}\n"
        "gpus:\n"
        "  - {uuid: CARD-a, index: 0}\n"
        "  - {uuid: CARD-b, index: 1, numa: 1}\n"
    )


@dataclass
class VendorNode:
    root: Path
    client: KubeClient
    kubelet: KubeletDRA
    settings: PluginSettings

    def plugin(self) -> KubeletPlugin:
        return KubeletPlugin(
            self.settings, self.client, MockBackend(self.settings.mock_gpus), CollectorRegistry()
        )

    def use(self, vendor: str) -> None:
        self.settings.mock_gpus.write_text(mock_file(vendor))

    async def claim(self, name: str, cls: str, results: list[dict]) -> ClaimRef:
        body = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {"requests": [{"name": "card", "exactly": {"deviceClassName": cls}}]}
            },
        }
        created = await self.client.create(CLAIMS, body)
        allocation = {
            "devices": {"results": results, "config": []},
            "nodeSelector": {
                "nodeSelectorTerms": [
                    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}
                ]
            },
            "allocationTimestamp": "2026-11-29T00:00:00Z",
        }
        await self.client.patch(
            object_path(CLAIMS, name) + "/status", {"status": {"allocation": allocation}}
        )
        return ClaimRef("default", created["metadata"]["uid"], name)


def result(device: str, memory: str, cores: str) -> dict:
    return {
        "request": "card",
        "driver": DRIVER,
        "pool": NODE,
        "device": device,
        "shareID": str(uuid.uuid4()),
        "consumedCapacity": {"memory": memory, "cores": cores, "shares": "1"},
    }


@pytest.fixture
async def node() -> AsyncIterator[VendorNode]:
    """A node with no libvgpu files at all: other vendors' prepares must not need them."""
    root = Path(tempfile.mkdtemp(prefix="vgpu-v-", dir="/tmp"))
    try:
        (root / "gpus.yaml").write_text(mock_file("nvidia"))
        (root / "boot_id").write_text("boot-1\n")
        settings = PluginSettings(
            node_name=NODE,
            registry_dir=root / "registry",
            plugin_dir=root / "plugin",
            cdi_dir=root / "cdi",
            boot_id_file=root / "boot_id",
            mock_gpus=root / "gpus.yaml",
            config_file=root / "config" / "node.yaml",
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
                    yield VendorNode(root, client, kubelet, settings)
            finally:
                await client.aclose()
                await settle_cancelled_grpc_calls()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def spec_env(node: VendorNode, uid: str) -> tuple[dict, dict[str, str]]:
    spec = json.loads((node.settings.cdi_dir / f"k8s.vgpu.hami.io-claim_{uid}.json").read_text())
    entries = list(spec.get("containerEdits", {}).get("env", []))
    for device in spec["devices"]:
        entries += device["containerEdits"].get("env", [])
    return spec, dict(entry.split("=", 1) for entry in entries)


async def published_devices(node: VendorNode) -> list[dict]:
    while True:
        items = (await node.client.list(SLICES)).get("items") or []
        devices = [d for item in items for d in item["spec"].get("devices") or []]
        if devices:
            return devices
        listing = await node.client.list(SLICES)
        async for _ in node.client.watch(
            SLICES, resource_version=listing["metadata"]["resourceVersion"]
        ):
            break


async def test_an_amd_node_publishes_its_family_and_prepares_rocm_variables(node: VendorNode):
    node.use("amd")
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        devices = await published_devices(node)
        first = next(d for d in devices if d["name"] == "gpu-0")
        attributes = first["attributes"]
        assert attributes["vendor"] == {"string": "AMD"}
        assert attributes["type"] == {"string": "AMD-Instinct-MI300X"}
        assert attributes["coreUnit"] == {"string": "CU"}
        assert "cudaComputeCapability" not in attributes
        assert first["capacity"]["memory"]["value"] == str(192 * GIB)

        claim = await node.claim("amd-share", "amd.vgpu.hami.io", [result("gpu-1", "48Gi", "25")])
        response = await node.kubelet.prepare(DRIVER, [claim])
        assert response.claims[claim.uid].error == ""
        spec, env = spec_env(node, claim.uid)
        assert env == {
            "ROCR_VISIBLE_DEVICES": "0",  # card 1, the first ROCm finds in the container
            "HIP_DEVICE_MEMORY_LIMIT": "49152m",
            "VGPU_SHARE_VENDOR": "amd",
            "VGPU_SHARE_DEVICES": "CARD-b",
            "VGPU_SHARE_MEMORY_LIMIT_0": "49152m",
            "VGPU_SHARE_CORE_LIMIT_0": "25",
        }
        mounts = [m for d in spec["devices"] for m in d["containerEdits"].get("mounts", [])]
        assert mounts == [], "no libvgpu mounts for another vendor's card"
        assert not (node.root / "absent").exists(), "no libvgpu cache dir either"


async def test_an_exclusive_family_is_one_share_of_the_whole_card(node: VendorNode):
    node.use("gcu")
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        devices = await published_devices(node)
        capacity = devices[0]["capacity"]
        whole = str(48 * GIB)
        assert devices[0]["attributes"]["vendor"] == {"string": "GCU"}
        assert capacity["shares"]["value"] == "1"
        assert capacity["memory"]["requestPolicy"] == {"default": whole, "validValues": [whole]}
        assert capacity["cores"]["requestPolicy"] == {"default": "100", "validValues": ["100"]}


async def test_an_ascend_share_names_its_npu_for_the_ascend_runtime(node: VendorNode):
    node.use("ascend")
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("npu", "ascend.vgpu.hami.io", [result("gpu-0", "16Gi", "0")])
        response = await node.kubelet.prepare(DRIVER, [claim])
        assert response.claims[claim.uid].error == ""
        _, env = spec_env(node, claim.uid)
        assert env["ASCEND_VISIBLE_DEVICES"] == "0"
        assert env["VGPU_SHARE_MEMORY_LIMIT_0"] == "16384m"
        assert not any(name.startswith("CUDA_") for name in env)


async def test_an_ascend_template_share_gets_its_vnpu_template_and_a_whole_chip_none(
    node: VendorNode,
):
    """The mock NPUs are the family's Ascend910B3: 16 GiB is its vir05_1c_16g template."""
    node.use("ascend")
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        devices = await published_devices(node)
        policy = devices[0]["capacity"]["memory"]["requestPolicy"]
        vnpu = await node.claim("vnpu", "ascend.vgpu.hami.io", [result("gpu-1", "16Gi", "0")])
        whole = await node.claim("chip", "ascend.vgpu.hami.io", [result("gpu-0", "64Gi", "0")])
        two = await node.claim(
            "two",
            "ascend.vgpu.hami.io",
            [result("gpu-0", "64Gi", "0"), result("gpu-1", "16Gi", "0")],
        )
        # Alone first: with the others it would also over-commit gpu-0, refused before.
        refused = await node.kubelet.prepare(DRIVER, [two])
        response = await node.kubelet.prepare(DRIVER, [vnpu, whole])
        _, vnpu_env = spec_env(node, vnpu.uid)
        _, whole_env = spec_env(node, whole.uid)

    assert policy["validValues"] == [str(16 * GIB), str(32 * GIB), str(64 * GIB)]
    assert (response.claims[vnpu.uid].error, response.claims[whole.uid].error) == ("", "")
    assert (vnpu_env["ASCEND_VISIBLE_DEVICES"], vnpu_env["ASCEND_VNPU_SPECS"]) == (
        "1",
        "vir05_1c_16g",
    )
    assert whole_env["ASCEND_VISIBLE_DEVICES"] == "0" and "ASCEND_VNPU_SPECS" not in whole_env
    assert "one vNPU per container" in refused.claims[two.uid].error


async def test_an_nvidia_claim_on_this_node_still_needs_libvgpu(node: VendorNode):
    """The NVIDIA path is unchanged: without libvgpu's files the prepare fails, naming them."""
    async with node.plugin():
        await node.kubelet.wait_registered(DRIVER)
        claim = await node.claim("gpu", "nvidia.vgpu.hami.io", [result("gpu-0", "4Gi", "30")])
        response = await node.kubelet.prepare(DRIVER, [claim])
        assert "libvgpu" in response.claims[claim.uid].error
