"""One emulated GPU node: a Node object, mock cards of one family, and the real kubelet
plugin serving it.

Everything a node needs on its host lives under one temporary root: the mock
GPU file, the libvgpu files `install-libvgpu` would have placed, the plugin's
registration and DRA sockets, its checkpoint, and the CDI spec directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from dra_driver.kube.rest import KubeClient
from kubeletplugin.plugin import KubeletPlugin, PluginSettings, open_backend
from kubeletplugin.slices import SliceSettings, Taint
from libvgpu.settings import CONTAINER_LIBRARY_PATH, LibvgpuPaths
from simulator.identities import Identities, kubelet, kubelet_plugin
from simulator.settings import ClusterShape, FamilyNode
from simulator.standins.kubelet_dra import KubeletDRA, KubeletDRASettings
from simulator.standins.kubelet_pods import KubeletPods

GPU_NODE_LABEL = "vgpu.hami.io/gpu-node"
CONTROLLER_TAINT = Taint("vgpu.hami.io/allocation", "controller")
GPUS_PER_NUMA_NODE = 2


def mock_gpu_uuid(node_index: int, gpu_index: int) -> str:
    """Stable, readable UUIDs: `GPU-5100e000-0000-4000-8000-<node><gpu>` (6 hex digits each)."""
    return f"GPU-5100e000-0000-4000-8000-{node_index:06x}{gpu_index:06x}"


def mock_gpu_file(shape: ClusterShape, node_index: int) -> dict[str, Any]:
    return {
        "gpus": [
            {
                "uuid": mock_gpu_uuid(node_index, index),
                "index": index,
                "productName": shape.gpu_product,
                "memory": shape.gpu_memory_bytes,
                "numa": index // GPUS_PER_NUMA_NODE,
                "pciBusID": f"0000:{0x10 + index:02x}:00.0",
            }
            for index in range(shape.gpus_per_node)
        ]
    }


def family_gpu_file(shape: ClusterShape, node: FamilyNode) -> dict[str, Any]:
    """The node's mock file: NVIDIA's as it always was, another family's cards with its
    `vendor` (the backend fills in the family's product and memory) and uuids of its own."""
    if node.vendor == "nvidia":
        return mock_gpu_file(shape, node.index)
    prefix = node.vendor.upper()
    return {
        "vendor": node.vendor,
        "gpus": [
            {
                "uuid": f"{prefix}-5100e000-0000-4000-8000-{node.position:06x}{index:06x}",
                "index": index,
                "numa": index // GPUS_PER_NUMA_NODE,
                "pciBusID": f"0000:{0x10 + index:02x}:00.0",
            }
            for index in range(shape.gpus_per_node)
        ],
    }


def install_libvgpu_files(root: Path) -> LibvgpuPaths:
    """What `dra-driver install-libvgpu` leaves on a host; the CDI specs mount these."""
    vgpu = root / "vgpu"
    vgpu.mkdir(parents=True, exist_ok=True)
    (vgpu / "libvgpu.so").write_bytes(b"\x7fELF simulated libvgpu.so")
    (vgpu / "ld.so.preload").write_text(f"{CONTAINER_LIBRARY_PATH}\n")
    lock_dir = root / "vgpulock"
    lock_dir.mkdir(exist_ok=True)
    lock_dir.chmod(0o1777)
    return LibvgpuPaths(
        host_dir=str(vgpu),
        cache_root=str(vgpu),
        lock_dir=str(lock_dir),
    )


NODE_STATUS = {
    "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
    "allocatable": {"cpu": "64", "memory": "512Gi", "pods": "110"},
    "capacity": {"cpu": "64", "memory": "512Gi", "pods": "110"},
}
"""What kubelet reports for a node; written through `nodes/status`, as kubelet does."""


NOT_READY_TAINT = "node.kubernetes.io/not-ready"
READY_WAIT_S = 30.0


async def register_node(client: KubeClient, name: str) -> None:
    """Create the node, report it Ready, and wait until the node lifecycle controller
    has lifted the not-ready taint every new node starts with: a cluster the
    workloads meet is a ready one."""
    await client.create(
        "/api/v1/nodes", {"metadata": {"name": name, "labels": {GPU_NODE_LABEL: "true"}}}
    )
    await client.patch(f"/api/v1/nodes/{name}/status", {"status": NODE_STATUS})

    def ready(node: dict[str, Any]) -> bool:
        taints = (node.get("spec") or {}).get("taints") or []
        return not any(taint.get("key") == NOT_READY_TAINT for taint in taints)

    async with asyncio.timeout(READY_WAIT_S):
        while True:
            node = await client.get(f"/api/v1/nodes/{name}")
            if ready(node):
                return
            async for event in client.watch(
                "/api/v1/nodes",
                field_selector=f"metadata.name={name}",
                resource_version=node["metadata"]["resourceVersion"],
            ):
                if ready(event.get("object") or {}):
                    return


@dataclass
class SimNode:
    name: str
    settings: PluginSettings
    plugin: KubeletPlugin
    kubelet: KubeletDRA
    pods: KubeletPods

    @property
    def cdi_dir(self) -> Path:
        return self.settings.cdi_dir


async def start_node(
    identities: Identities,
    shape: ClusterShape,
    node: FamilyNode,
    root: Path,
    *,
    controller_allocated: bool,
    mixed_mode: bool = False,
) -> SimNode:
    """Create the Node, then run its kubelet plugin and kubelet stand-ins until `stop_node`,
    each under the identity deploy/ gives it (the plugin's token bound to the node);
    `mixed_mode`: the plugin also counts the node's legacy pods when it prepares."""
    name = node.name
    root.mkdir(parents=True)
    (root / "gpus.yaml").write_text(yaml.safe_dump(family_gpu_file(shape, node)))
    (root / "boot_id").write_text(f"sim-boot-{node.position}\n")
    settings = PluginSettings(
        node_name=name,
        slices=SliceSettings(
            split_count=shape.split_count,
            allocation_taint=CONTROLLER_TAINT if controller_allocated else None,
        ),
        registry_dir=root / "registry",
        plugin_dir=root / "plugin",
        cdi_dir=root / "cdi",
        boot_id_file=root / "boot_id",
        mock_gpus=root / "gpus.yaml",
        libvgpu=install_libvgpu_files(root),
        mixed_mode=mixed_mode,
    )
    node_client = await identities.client(kubelet(name))
    await register_node(node_client, name)
    plugin_client = await identities.client(kubelet_plugin(name))
    plugin = KubeletPlugin(settings, plugin_client, open_backend(settings), CollectorRegistry())
    await plugin.start()
    kubelet_dra = KubeletDRA(KubeletDRASettings(name, settings.registry_dir), None)
    await kubelet_dra.start()
    await kubelet_dra.wait_registered(settings.driver)
    pods = KubeletPods(node_client, kubelet_dra, name)
    await pods.start()
    return SimNode(name, settings, plugin, kubelet_dra, pods)


async def stop_nodes(nodes: Sequence[SimNode]) -> None:
    """Every kubelet first, then every plugin: a plugin's server waits at shutdown for
    the loop's open gRPC calls, including other nodes' health streams."""
    for node in nodes:
        await node.pods.aclose()
        await node.kubelet.aclose()
    for node in nodes:
        await node.plugin.aclose()
