"""`dra-driver status` on a mixed node: a card in the slice and in the register (one uuid)
is one GPU with both modes' holders, sized by the slice; other clusters' views are as before."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console

from api.hami_annotations import (
    NODE_NVIDIA_REGISTER,
    VGPU_DEVICES_ALLOCATED,
    ContainerDevice,
    RegisteredDevice,
    encode_node_devices,
    encode_pod_devices,
)
from dra_driver.status.model import DRA, LEGACY, MIXED, build_status
from dra_driver.status.render import render_data, render_text
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices

DRIVER = "vgpu.hami.io"
GIB = 1 << 30
MIB = 1 << 20
NODE = "mixed-node"
UUIDS = ("GPU-aaaa-0", "GPU-aaaa-1")


def slices(node: str = NODE) -> list[dict[str, Any]]:
    cards = [GpuInfo(uuid, i, i, "NVIDIA A100-SXM4-80GB", 80 * GIB) for i, uuid in enumerate(UUIDS)]
    return build_resource_slices(node, "uid", cards, SliceSettings(split_count=10), 1)


def node(name: str = NODE, *, devmem_mib: int = 81920, healthy: bool = True) -> dict[str, Any]:
    register = encode_node_devices(
        RegisteredDevice(
            id=uuid,
            index=i,
            count=10,
            devmem=devmem_mib,
            devcore=100,
            type="NVIDIA-A100",
            health=healthy,
        )
        for i, uuid in enumerate(UUIDS)
    )
    return {"metadata": {"name": name, "annotations": {NODE_NVIDIA_REGISTER: register}}}


def claim(name: str, device: str, memory: str, cores: str) -> dict[str, Any]:
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": NODE,
        "device": device,
        "consumedCapacity": {"memory": memory, "cores": cores},
    }
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"{name}-uid"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def legacy_pod(name: str, uuid: str, memory_mib: int, cores: int) -> dict[str, Any]:
    allocated = encode_pod_devices([[ContainerDevice(uuid, "NVIDIA", memory_mib, cores)]])
    return {
        "metadata": {
            "name": name,
            "namespace": "team-b",
            "annotations": {VGPU_DEVICES_ALLOCATED: allocated},
        },
        "spec": {"nodeName": NODE},
        "status": {"phase": "Running"},
    }


def mixed_status(**node_args: Any):
    return build_status(
        driver=DRIVER,
        slices=slices(),
        claims=[claim("trainer", "gpu-0", "20Gi", "30")],
        pods=[legacy_pod("inference", UUIDS[0], 10240, 25)],
        nodes=[node(**node_args)],
        events=[],
        device_classes=[],
    )


def test_a_card_served_both_ways_is_one_gpu_with_both_modes_holders():
    status = mixed_status()
    assert [(gpu.device, gpu.uuid, gpu.mode) for gpu in status.gpus] == [
        ("gpu-0", UUIDS[0], MIXED),
        ("gpu-1", UUIDS[1], MIXED),
    ]
    card = status.gpus[0]
    assert [(s.mode, s.namespace, s.holder) for s in card.shares] == [
        (DRA, "team-a", "trainer"),
        (LEGACY, "team-b", "inference"),
    ]
    assert (card.allocated_memory_bytes, card.allocated_cores) == (30 * GIB, 55)


def test_the_slice_sizes_the_merged_card_and_either_side_can_mark_it_unhealthy():
    card = mixed_status(devmem_mib=40960, healthy=False).gpus[0]
    assert (card.memory_bytes, card.cores, card.shares_total) == (80 * GIB, 100, 10)
    assert not card.healthy


def test_json_and_text_show_one_bar_per_card_and_each_holders_mode():
    data = json.loads(render_data(mixed_status(), "json"))
    first = data["gpus"][0]
    assert (first["mode"], first["allocatedMemoryBytes"]) == (MIXED, 30 * GIB)
    assert [share["mode"] for share in first["shares"]] == [DRA, LEGACY]
    out = io.StringIO()
    render_text(mixed_status(), Console(file=out, width=250))
    text = out.getvalue()
    assert text.count(NODE) == 2
    assert "team-a/trainer (dra)" in text
    assert "team-b/inference (legacy)" in text


def test_a_register_on_another_node_or_without_a_slice_stays_a_legacy_gpu():
    status = build_status(
        driver=DRIVER,
        slices=slices("dra-node"),
        claims=[],
        pods=[legacy_pod("inference", UUIDS[0], 10240, 25)],
        nodes=[node("legacy-node")],
        events=[],
        device_classes=[],
    )
    views = [(gpu.node, gpu.device, gpu.mode, len(gpu.shares)) for gpu in status.gpus]
    assert views == [
        ("dra-node", "gpu-0", DRA, 0),
        ("dra-node", "gpu-1", DRA, 0),
        ("legacy-node", UUIDS[0], LEGACY, 1),
        ("legacy-node", UUIDS[1], LEGACY, 0),
    ]
    out = io.StringIO()
    render_text(status, Console(file=out, width=250))
    assert "(legacy)" not in out.getvalue()
