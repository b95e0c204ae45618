"""Our device plugin's node annotations, read back by our extender, equal what HAMi's
extender would read from HAMi's own NVIDIA device plugin on the same GPUs; and the
handshake is answered the way HAMi's current plugin answers it (allocatable
replicas, no `Reported_` write)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from deviceplugin_rig import RESOURCE, api_client, bounded, gpu_node, scratch_dir
from legacy_fixtures import legacy_scheduler, wait_for_nodes

from api.hami_annotations import NODE_HANDSHAKE, NODE_NVIDIA_REGISTER
from controller.legacy.inventory import read_node, requesting_handshake

NODE = "gpu-node-1"
GPUS = """
gpus:
  - {uuid: GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448, index: 0, memory: 80Gi, numa: 0,
     productName: NVIDIA A100-SXM4-80GB}
  - {uuid: GPU-7d0e8a8b-5d2c-4bb0-9f4e-2f7d1a9c3b11, index: 1, memory: 15360Mi, numa: 1,
     productName: Tesla T4}
  - {uuid: GPU-c6f0b2a4-1e5d-4e4b-8a7e-9d3f2b1c0a99, index: 2, memory: 15360Mi, numa: 1,
     productName: Tesla T4, healthy: false}
"""
# What HAMi's NVIDIA plugin (register.go getAPIDevices + MarshalNodeDevices) writes for
# these GPUs with deviceSplitCount 10, deviceMemoryScaling 2, deviceCoreScaling 1:
# MiB x scaling, the NVML name kept when it starts with NVIDIA, zero values omitted.
HAMI_WRITES = (
    '[{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","count":10,"devmem":163840,'
    '"devcore":100,"type":"NVIDIA A100-SXM4-80GB","mode":"hami-core","health":true},'
    '{"id":"GPU-7d0e8a8b-5d2c-4bb0-9f4e-2f7d1a9c3b11","index":1,"count":10,"devmem":30720,'
    '"devcore":100,"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core","health":true},'
    '{"id":"GPU-c6f0b2a4-1e5d-4e4b-8a7e-9d3f2b1c0a99","index":2,"count":10,"devmem":30720,'
    '"devcore":100,"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core"}]'
)
TIMEOUT = timedelta(seconds=60)


def annotation(node: dict[str, Any], key: str) -> str | None:
    return (node["metadata"].get("annotations") or {}).get(key)


def as_hami_registered(node: dict[str, Any]) -> dict[str, Any]:
    """The same node, its register annotation replaced by what HAMi's plugin writes."""
    metadata = {**node["metadata"], "annotations": {NODE_NVIDIA_REGISTER: HAMI_WRITES}}
    return {**node, "metadata": metadata}


async def test_our_register_annotation_reads_back_as_hamis() -> None:
    async with (
        scratch_dir() as root,
        api_client(root) as (_, client),
        gpu_node(client, root, NODE, gpus=GPUS, split_count=10, memory_scaling=2.0) as node,
        node.plugin(),
    ):
        await bounded(node.kubelet.wait_update(RESOURCE))
        await node.report_allocatable()
        ours = await bounded(node.wait_node(lambda n: bool(annotation(n, NODE_NVIDIA_REGISTER))))
        async with legacy_scheduler(client) as scheduler:
            await bounded(wait_for_nodes(scheduler, NODE))
            in_cache = scheduler.state.inventory[NODE]

    now = datetime.now(UTC)
    hamis = read_node(as_hami_registered(ours), RESOURCE, "NVIDIA", now, TIMEOUT)
    assert annotation(ours, NODE_NVIDIA_REGISTER) == HAMI_WRITES
    assert in_cache.problem == ""
    assert in_cache.node == hamis.node
    assert in_cache.allocatable_gpus == 20
    assert [(d.memory_mib, d.count, d.healthy, d.numa) for d in in_cache.node.devices] == [
        (163840, 10, True, 0),
        (30720, 10, True, 1),
        (30720, 10, False, 1),
    ]


async def test_a_stale_requesting_handshake_is_answered_by_allocatable_replicas() -> None:
    """HAMi's scheduler drops a node whose Requesting handshake is over 60 s old while
    allocatable GPUs are 0. A registered plugin keeps allocatable above 0 (kubelet
    reports its healthy replicas), so the node stays usable; once the plugin is gone
    kubelet reports 0 and the same handshake drops the node."""
    async with (
        scratch_dir() as root,
        api_client(root) as (_, client),
        gpu_node(client, root, NODE, gpus=GPUS, split_count=10) as node,
    ):
        stale = requesting_handshake(datetime.now(UTC) - timedelta(minutes=5))
        await client.patch(
            f"/api/v1/nodes/{NODE}", {"metadata": {"annotations": {NODE_HANDSHAKE: stale}}}
        )
        async with node.plugin():
            await bounded(node.kubelet.wait_update(RESOURCE))
            await node.report_allocatable()
            running = await bounded(
                node.wait_node(lambda n: bool(annotation(n, NODE_NVIDIA_REGISTER)))
            )
        await bounded(node.kubelet.wait_stream_closed(RESOURCE))
        await node.report_allocatable()
        stopped = await node.node()

    now = datetime.now(UTC)
    while_running = read_node(running, RESOURCE, "NVIDIA", now, TIMEOUT)
    after_stop = read_node(stopped, RESOURCE, "NVIDIA", now, TIMEOUT)
    assert annotation(running, NODE_HANDSHAKE) == stale
    assert while_running.allocatable_gpus == 20
    assert [d.healthy for d in while_running.node.devices] == [True, True, False]
    assert after_stop.allocatable_gpus == 0
    assert [d.healthy for d in after_stop.node.devices] == [False, False, False]
