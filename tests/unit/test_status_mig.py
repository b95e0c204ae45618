"""`dra-driver status` on a node with a MIG-mode card beside a shared one: the partitioned
card is one row listing its placements and who holds each (a claim's partition device;
a legacy pod's `hami.io/vgpu-mig-allocations` slice), the shared card as before.

Slices come from the kubelet plugin's own builder over the mock's MIG device, so the
view reads what the node really publishes. Placements are NVIDIA's H100 80GB table
(dra_driver/objects/mig_profiles.py)."""

from __future__ import annotations

import io
import json
from typing import Any

from rich.console import Console

from api.hami_annotations import NODE_NVIDIA_REGISTER, RegisteredDevice, encode_node_devices
from api.hami_annotations.keys import VGPU_MIG_ALLOCATIONS
from api.hami_annotations.mig_allocations import MigAllocation, encode_mig_allocations
from dra_driver.objects.mig_profiles import H100_80GB
from dra_driver.status.model import build_status
from dra_driver.status.render import render_data, render_text
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.mig_mock import MockMigDevice
from kubeletplugin.slices import SliceSettings, build_resource_slices

DRIVER = "vgpu.hami.io"
GIB = 1 << 30
NODE = "mig-node"
H100 = "GPU-h100-0"
SHARED = "GPU-a100-1"
LEGACY_CARD = "GPU-legacy-h100"


def slices() -> list[dict[str, Any]]:
    mig = MockMigDevice(H100, H100_80GB)
    cards = [
        GpuInfo(H100, 0, 0, "NVIDIA H100 80GB HBM3", 80 * GIB, mig=mig.state()),
        GpuInfo(SHARED, 1, 1, "NVIDIA A100-SXM4-80GB", 80 * GIB),
    ]
    return build_resource_slices(NODE, "uid", cards, SliceSettings(split_count=10), 1)


def claim(name: str, device: str, pod: str) -> dict[str, Any]:
    result = {"request": "part", "driver": DRIVER, "pool": NODE, "device": device}
    return {
        "metadata": {"name": name, "namespace": "team-a", "uid": f"{name}-uid"},
        "status": {
            "allocation": {"devices": {"results": [result]}},
            "reservedFor": [{"resource": "pods", "name": pod, "uid": f"{pod}-uid"}],
        },
    }


def legacy_objects() -> tuple[dict[str, Any], dict[str, Any]]:
    register = encode_node_devices(
        [
            RegisteredDevice(
                id=LEGACY_CARD,
                count=7,
                devmem=81920,
                devcore=100,
                type="NVIDIA-H100",
                health=True,
                mode="mig",
            )
        ]
    )
    node = {"metadata": {"name": "legacy-node", "annotations": {NODE_NVIDIA_REGISTER: register}}}
    allocations = encode_mig_allocations(
        [MigAllocation(0, 0, LEGACY_CARD, "1g.10gb", 6, 1, "MIG-x", 1, 0)]
    )
    pod = {
        "metadata": {
            "name": "legacy-0",
            "namespace": "team-b",
            "annotations": {VGPU_MIG_ALLOCATIONS: allocations},
        },
        "spec": {"nodeName": "legacy-node"},
    }
    return node, pod


def status_of(claims: list[dict[str, Any]]):
    node, pod = legacy_objects()
    return build_status(
        driver=DRIVER,
        slices=slices(),
        claims=claims,
        pods=[pod],
        nodes=[node],
        events=[],
        device_classes=[],
    )


def test_a_partitioned_card_is_one_row_with_its_placements_and_holders():
    status = status_of(
        [
            claim("big", "gpu-0-mig-3g-40gb-at-4", "worker-0"),
            claim("small", "gpu-0-mig-1g-10gb-at-0", "worker-1"),
        ]
    )
    rows = {(gpu.node, gpu.device): gpu for gpu in status.gpus}
    assert set(rows) == {(NODE, "gpu-0"), (NODE, "gpu-1"), ("legacy-node", LEGACY_CARD)}
    card = rows[(NODE, "gpu-0")]
    assert card.uuid == H100
    placements = {(p.profile, p.placement): p for p in card.partitions}
    expected = {
        (profile.name, str(placement))
        for profile in H100_80GB.profiles
        for placement in profile.placements
    }
    assert set(placements) == expected
    held = {key: (p.namespace, p.holder, p.pods) for key, p in placements.items() if p.holder}
    assert held == {
        ("3g.40gb", "4:4"): ("team-a", "big", ["worker-0"]),
        ("1g.10gb", "0:1"): ("team-a", "small", ["worker-1"]),
    }
    assert sorted((s.holder, s.partition, s.cores) for s in card.shares) == [
        ("big", "3g.40gb 4:4", 42),
        ("small", "1g.10gb 0:1", 14),
    ]
    assert card.allocated_memory_bytes == sum(p.memory_bytes for p in card.partitions if p.holder)
    assert card.partitions[0].placement == "0:8"
    assert rows[(NODE, "gpu-1")].partitions == []
    legacy = rows[("legacy-node", LEGACY_CARD)]
    assert [(p.profile, p.placement, p.holder) for p in legacy.partitions] == [
        ("1g.10gb", "6:1", "legacy-0")
    ]


def test_the_text_view_names_each_holders_placement_and_what_is_free():
    status = status_of([claim("big", "gpu-0-mig-3g-40gb-at-4", "worker-0")])
    out = io.StringIO()
    render_text(status, Console(file=out, width=400, color_system=None))
    text = out.getvalue()
    assert "team-a/big [MIG (hardware partition)] 3g.40gb 4:4" in text
    assert "free 3g.40gb 0:4; 4g.40gb 0:4; 1g.20gb 0:2 2:2;" in text
    assert "; 1g.10gb 0:1 1:1 2:1 3:1;" in text
    assert "4:1" not in text, "a placement inside the held 4:4 is not free"
    assert "team-b/legacy-0 [MIG (hardware partition)] 1g.10gb 6:1" in text
    data = json.loads(render_data(status, "json"))
    card = next(gpu for gpu in data["gpus"] if gpu["device"] == "gpu-0")
    assert {"profile": "3g.40gb", "placement": "4:4", "holder": "big"}.items() <= next(
        p for p in card["partitions"] if p["holder"]
    ).items()
