"""One emulated GPU node: a Node object, mock cards of one family, and the real kubelet
plugin serving it.

Everything a node needs on its host lives under one temporary root: the mock
GPU file, the libvgpu files `install-libvgpu` would have placed, the plugin's
registration and DRA sockets, its checkpoint, and the CDI spec directory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry

from dra_driver.errors import DriverError
from dra_driver.kube.rest import KubeClient
from dra_driver.process.grpc_tasks import await_server_calls, settle_cancelled_grpc_calls
from kubeletplugin.plugin import KubeletPlugin, PluginSettings, open_backend
from kubeletplugin.slices import SliceSettings, Taint
from libvgpu.settings import CONTAINER_LIBRARY_PATH, LibvgpuPaths
from simulator.failures import first_failure, run_as
from simulator.identities import Identities, kubelet, kubelet_plugin
from simulator.settings import ClusterShape, FamilyNode
from simulator.standins.kubelet_dra import KubeletDRA, KubeletDRASettings
from simulator.standins.kubelet_pods import KubeletPods, PodFeed

GPU_NODE_LABEL = "vgpu.hami.io/gpu-node"
CONTROLLER_TAINT = Taint("vgpu.hami.io/allocation", "controller")
GPUS_PER_NUMA_NODE = 2
MIG_CARD_MEMORY_BYTES = 80 << 30
"""An H100 80GB as the mock backend sizes it (NVIDIA's table picks the card by memory)."""


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


def mig_gpu_file(shape: ClusterShape, node: FamilyNode) -> dict[str, Any]:
    """A MIG node's mock file: `mig_gpus_per_node` H100 80GB cards in MIG mode with no
    instance yet (prepare creates each partition's), uuids by the node's position."""
    return {
        "gpus": [
            {
                "uuid": mock_gpu_uuid(node.position, index),
                "index": index,
                "productName": shape.mig_product,
                "memory": MIG_CARD_MEMORY_BYTES,
                "numa": index // GPUS_PER_NUMA_NODE,
                "pciBusID": f"0000:{0x10 + index:02x}:00.0",
                "mig": {"mode": "enabled"},
            }
            for index in range(shape.mig_gpus_per_node)
        ]
    }


def family_gpu_file(shape: ClusterShape, node: FamilyNode) -> dict[str, Any]:
    """The node's mock file: NVIDIA's as it always was, a MIG node's cards in MIG mode,
    another family's cards with its `vendor` (the backend fills in the family's product
    and memory) and uuids of its own."""
    if node.mig:
        return mig_gpu_file(shape, node)
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


def dump_yaml(document: dict[str, Any]) -> str:
    """`yaml.safe_dump`'s text through libyaml when it is there: the pure-Python
    emitter took 20 ms per node's mock GPU file."""
    return yaml.dump(document, Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper))


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
START_WAIT_S = 60.0
"""Longest wait for a plugin to start, or for kubelet to register it."""
CONCURRENT_STARTS = 32
"""Nodes starting at once: enough to keep the one event loop busy while each waits
on round trips, few enough that each start's requests stay within their timeouts."""
HOST_POLL_S = 5.0
"""How often a plugin looks at its sockets and GPU file: 1,000 plugins cannot each have
the two inotify instances they use on a real node (a user gets 128). Nothing in a run
touches them after the start; an edit of a kept mock GPU file shows within 5 s."""
REGISTRY_SCAN_S = 5.0
"""kubelet's registry rescans (it uses inotify): the first scan, right after the plugin
serves its socket, registers it; every 50 ms on 1,000 nodes was 20,000 scans a second,
and scans (like the polls above) add up over a start that takes longer the more nodes."""


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

    try:
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
    except TimeoutError as error:
        raise NodeNotReadyError(name) from error


class NodeNotReadyError(DriverError):
    """The node lifecycle controller did not lift the not-ready taint in time."""

    def __init__(self, node: str) -> None:
        super().__init__(
            f"Node {node} still has the {NOT_READY_TAINT} taint after {READY_WAIT_S:g} s"
        )
        self.node = node


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
    feed: PodFeed,
    controller_allocated: bool,
    mixed_mode: bool = False,
) -> SimNode:
    """Create the Node, then run its kubelet plugin and kubelet stand-ins until `stop_nodes`,
    each under the identity deploy/ gives it (the plugin's token bound to the node);
    `mixed_mode`: the plugin also counts the node's legacy pods when it prepares;
    `feed`: the pod watch the kubelet stand-ins share.
    A step that fails says which component it was (`kubelet on <node>`, `kubelet
    plugin on <node>`); what had started by then is stopped."""
    name = node.name
    root.mkdir(parents=True)
    (root / "gpus.yaml").write_text(dump_yaml(family_gpu_file(shape, node)))
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
        host_poll_s=HOST_POLL_S,
    )
    kubelet_name, plugin_name = f"kubelet on {name}", f"kubelet plugin on {name}"
    node_client = await identities.client(kubelet(name))
    await run_as(kubelet_name, register_node(node_client, name))
    plugin_client = await identities.client(kubelet_plugin(name))
    plugin = KubeletPlugin(settings, plugin_client, open_backend(settings), CollectorRegistry())
    # start() stops what it started when it fails.
    await run_as(plugin_name, plugin.start(), timeout_s=START_WAIT_S, doing="starting")
    kubelet_dra = KubeletDRA(
        KubeletDRASettings(name, settings.registry_dir, scan_interval=REGISTRY_SCAN_S), None
    )
    pods = KubeletPods(node_client, kubelet_dra, name, feed)
    try:
        await kubelet_dra.start()
        await run_as(
            kubelet_name,
            kubelet_dra.wait_registered(settings.driver),
            timeout_s=START_WAIT_S,
            doing=f"registering the {settings.driver} plugin",
        )
        await pods.start()
    except BaseException:
        await pods.aclose()
        await kubelet_dra.aclose()
        await plugin.aclose()
        raise
    return SimNode(name, settings, plugin, kubelet_dra, pods)


async def start_nodes(
    identities: Identities,
    shape: ClusterShape,
    root: Path,
    into: list[SimNode],
    *,
    feed: PodFeed,
    controller_allocated: bool,
    mixed_mode: bool = False,
    on_started: Callable[[int, int], None] = lambda done, total: None,
) -> None:
    """Start every node of `shape`, `CONCURRENT_STARTS` at a time (a start mostly waits
    on the API server: one at a time left the loop idle). `into` gets each node as it is up,
    so that a caller stops them all even when one fails; it ends in the shape's order.
    `mixed_mode` applies to the NVIDIA nodes; `on_started(done, total)` reports progress.
    The first failure is raised as it is and cancels the starts still running."""
    family_nodes = shape.family_nodes()
    gate = asyncio.Semaphore(CONCURRENT_STARTS)

    async def start(node: FamilyNode) -> None:
        async with gate:
            started = await start_node(
                identities,
                shape,
                node,
                root / node.name,
                feed=feed,
                controller_allocated=controller_allocated,
                mixed_mode=mixed_mode and node.vendor == "nvidia",
            )
        into.append(started)
        on_started(len(into), len(family_nodes))

    try:
        async with asyncio.TaskGroup() as group:
            for node in family_nodes:
                group.create_task(start(node), name=f"start {node.name}")
    except BaseExceptionGroup as failures:
        raise first_failure(failures) from None
    order = {node.name: node.position for node in family_nodes}
    into.sort(key=lambda started: order[started.name])


async def stop_nodes(nodes: Sequence[SimNode]) -> None:
    """Every kubelet first, then every plugin: a plugin's server waits at shutdown for
    the loop's open gRPC calls, including other nodes' health streams. The nodes of
    each round stop together, and grpc's leftover call tasks are settled once per round
    (a settle scans every task and may collect the heap: per node, 200 took minutes)."""

    async def stop_kubelet(node: SimNode) -> None:
        await node.pods.aclose()
        await node.kubelet.aclose(settle=False)

    await asyncio.gather(*(stop_kubelet(node) for node in nodes))
    await settle_cancelled_grpc_calls()
    stopped = await asyncio.gather(*(node.plugin.aclose(settle=False) for node in nodes))
    await await_server_calls([server for servers in stopped for server in servers])
    await settle_cancelled_grpc_calls()
