"""Mixed mode's shared identity and node-side accounting, pure: one GPU has one name in
the slice and one uuid in the register; legacy pods and DRA results count as the
allocators count them."""

from __future__ import annotations

from pathlib import Path

import pytest

from api.hami_annotations import (
    VGPU_DEVICES_ALLOCATED,
    ContainerDevice,
    decode_node_devices,
    encode_pod_devices,
)
from kubeletplugin.deviceplugin.devices import register_annotation, registered_devices
from kubeletplugin.gpus import MockBackend
from kubeletplugin.mixed_reads import slice_uuids
from kubeletplugin.mixed_usage import (
    GpuHold,
    GpuLimits,
    claim_holds,
    overcommit_message,
    pod_holds,
    register_limits,
)
from kubeletplugin.slices import SliceSettings, build_resource_slices

UUID_A = "GPU-00000000-0000-0000-0000-00000000000a"
UUID_B = "GPU-00000000-0000-0000-0000-00000000000b"
MOCK = f"""
gpus:
  - {{uuid: {UUID_A}, index: 0, memory: 16Gi}}
  - {{uuid: {UUID_B}, index: 1, memory: 24Gi}}
  - {{uuid: GPU-00000000-0000-0000-0000-00000000000c, index: 2, memory: 8Gi, healthy: false}}
"""
LIMITS = {
    UUID_A: GpuLimits(UUID_A, "gpu-0", 16384, 100, 4),
    UUID_B: GpuLimits(UUID_B, "gpu-1", 24576, 100, 4),
}


@pytest.fixture
def mock_file(tmp_path: Path) -> Path:
    path = tmp_path / "gpus.yaml"
    path.write_text(MOCK)
    return path


def test_slice_device_and_register_entry_name_each_gpu_by_the_same_uuid(mock_file: Path):
    gpus = MockBackend(mock_file).discover()
    sharing = SliceSettings(split_count=4)
    slices = build_resource_slices("node-a", "uid-1", gpus, sharing, 1)
    by_slice = slice_uuids(slices)
    registered = decode_node_devices(register_annotation(gpus, sharing))

    assert sorted(by_slice.values()) == sorted(device.id for device in registered)
    assert {("node-a", f"gpu-{d.index}"): d.id for d in registered} == by_slice
    limits = register_limits(registered_devices(gpus, sharing))
    assert [(g.name, g.memory_mib, g.shares) for g in limits.values()] == [
        ("gpu-0", 16384, 4),
        ("gpu-1", 24576, 4),
        ("gpu-2", 8192, 4),
    ]


def legacy(devices: list[list[ContainerDevice]], **pod: object) -> dict:
    spec = pod.pop("spec", {})
    return {
        "metadata": {
            "namespace": "default",
            "name": "p",
            "annotations": {VGPU_DEVICES_ALLOCATED: encode_pod_devices(devices)},
        },
        "spec": {"containers": [{"name": "main"}], **spec},
        **pod,
    }


def test_a_pod_holds_each_gpu_of_its_containers_and_nothing_once_terminated():
    pod = legacy(
        [[ContainerDevice(UUID_A, "NVIDIA", 1000, 10)], [ContainerDevice(UUID_A, "NVIDIA", 500, 0)]]
    )
    assert pod_holds(pod, LIMITS) == [GpuHold("pod default/p", UUID_A, 1500, 10, 2)]
    assert pod_holds({**pod, "status": {"phase": "Succeeded"}}, LIMITS) == []


def test_init_containers_count_at_their_peak_and_other_gpus_are_ignored():
    pod = legacy(
        [
            [ContainerDevice(UUID_A, "NVIDIA", 6000, 0)],
            [ContainerDevice(UUID_A, "NVIDIA", 2000, 0)],
        ],
        spec={"initContainers": [{"name": "init"}]},
    )
    other_node = legacy([[ContainerDevice("GPU-elsewhere", "NVIDIA", 9000, 0)]])
    assert pod_holds(pod, LIMITS) == [GpuHold("pod default/p", UUID_A, 6000, 0, 1)]
    assert pod_holds(other_node, LIMITS) == []


def test_every_vendors_allocated_list_counts_and_a_malformed_one_counts_nothing():
    pod = legacy([])
    pod["metadata"]["annotations"] = {
        "hami.io/dcu-devices-allocated": f"{UUID_B},DCU,3000,20:;",
        VGPU_DEVICES_ALLOCATED: "not a device list",
    }
    assert pod_holds(pod, LIMITS) == [GpuHold("pod default/p", UUID_B, 3000, 20, 1)]


def claim(results: list[dict]) -> dict:
    return {
        "metadata": {"namespace": "ns", "name": "c"},
        "status": {"allocation": {"devices": {"results": results}}},
    }


def test_a_result_holds_its_consumed_capacity_or_the_whole_device_without_a_share():
    uuid_of = {("node-a", "gpu-0"): UUID_A, ("node-a", "gpu-1"): UUID_B}
    shared = {
        "driver": "vgpu.hami.io",
        "pool": "node-a",
        "device": "gpu-0",
        "shareID": "s1",
        "consumedCapacity": {"memory": "1500M", "cores": "30", "shares": "1"},
    }
    whole = {"driver": "vgpu.hami.io", "pool": "node-a", "device": "gpu-1"}
    foreign = {**shared, "driver": "gpu.nvidia.com"}
    holds = claim_holds([claim([shared, whole, foreign])], "vgpu.hami.io", uuid_of, LIMITS)
    assert holds == [
        GpuHold("claim ns/c", UUID_A, 1431, 30, 1),
        GpuHold("claim ns/c", UUID_B, 24576, 100, 4),
    ]


def test_share_slots_run_out_before_memory_and_the_message_names_every_holder():
    held = [GpuHold(f"pod default/p{i}", UUID_A, 100, 0, 1) for i in range(3)]
    fits = [GpuHold("claim ns/c", UUID_A, 100, 0, 1)]
    assert overcommit_message(held, fits, LIMITS) is None
    message = overcommit_message([*held, *fits], [GpuHold("pod ns/late", UUID_A, 1, 0, 1)], LIMITS)
    assert message is not None
    assert message.startswith(
        f"GPU gpu-0 ({UUID_A}) would be over-committed in mixed mode: shares 5 of 4; held by "
        "pod default/p0 (100 MiB, 0 cores, 1 share); pod default/p1"
    )
    assert "claim ns/c (100 MiB, 0 cores, 1 share); asked by pod ns/late" in message


def test_cores_over_the_gpu_are_refused_while_another_gpu_is_not_looked_at():
    held = [GpuHold("claim ns/c", UUID_A, 0, 80, 1), GpuHold("claim ns/d", UUID_B, 0, 100, 1)]
    message = overcommit_message(held, [GpuHold("pod ns/p", UUID_A, 0, 30, 1)], LIMITS)
    assert message is not None and "cores 110 of 100" in message and "ns/d" not in message
    assert overcommit_message(held, [GpuHold("pod ns/p", UUID_A, 0, 20, 1)], LIMITS) is None
