"""Replica IDs, the ListAndWatch list, HAMi's register entries and the preferred choice."""

from __future__ import annotations

import pytest

from api.quantity import MIB
from kubeletplugin.deviceplugin.devices import (
    hami_device_type,
    kubelet_devices,
    preferred_replicas,
    register_annotation,
    replica_id,
    replica_uuid,
)
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings

A = "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448"
B = "GPU-7d0e8a8b-5d2c-4bb0-9f4e-2f7d1a9c3b11"


def gpu(uuid: str, index: int, mib: int, *, name: str = "Tesla T4", **extra) -> GpuInfo:
    return GpuInfo(uuid, index, index, name, mib * MIB, **extra)


@pytest.mark.parametrize(
    ("device_id", "uuid"),
    [
        (replica_id(A, 0), A),
        (replica_id(A, 12), A),
        ("GPU-x-", None),
        ("GPU-x-1a", None),
        ("-3", None),
        ("nodash", None),
    ],
)
def test_replica_ids_name_their_gpu(device_id: str, uuid: str | None) -> None:
    assert replica_uuid(device_id) == uuid


def test_every_gpu_is_listed_split_count_times_with_its_health_and_numa() -> None:
    gpus = [gpu(A, 0, 1024, numa_node=1), gpu(B, 1, 1024, healthy=False)]
    listed = kubelet_devices(gpus, SliceSettings(split_count=2))
    assert [(d.ID, d.health, [n.ID for n in d.topology.nodes]) for d in listed] == [
        (f"{A}-0", "Healthy", [1]),
        (f"{A}-1", "Healthy", [1]),
        (f"{B}-0", "Unhealthy", [0]),
        (f"{B}-1", "Unhealthy", [0]),
    ]


@pytest.mark.parametrize(
    ("name", "registered"),
    [
        ("NVIDIA A100-SXM4-80GB", "NVIDIA A100-SXM4-80GB"),
        ("Tesla T4", "NVIDIA-Tesla T4"),
        ("nvidia fake", "NVIDIA-nvidia fake"),
    ],
)
def test_device_type_follows_hamis_prefix_rule(name: str, registered: str) -> None:
    assert hami_device_type(name) == registered


def test_register_entries_scale_whole_mebibytes_and_truncate_as_go_does() -> None:
    gpus = [gpu(B, 1, 15109, numa_node=1, healthy=False), gpu(A, 0, 15109)]
    value = register_annotation(gpus, SliceSettings(split_count=7, memory_scaling=1.5))
    assert value == (
        f'[{{"id":"{A}","count":7,"devmem":22663,"devcore":100,"type":"NVIDIA-Tesla T4",'
        '"mode":"hami-core","health":true},'
        f'{{"id":"{B}","index":1,"count":7,"devmem":22663,"devcore":100,'
        '"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core"}]'
    )


def test_core_scaling_multiplies_the_hundred_percent() -> None:
    value = register_annotation([gpu(A, 0, 1024)], SliceSettings(core_scaling=2.0))
    assert '"devcore":200' in value


def test_preference_puts_required_then_wanted_gpus_then_other_gpus_first() -> None:
    available = [f"{A}-0", f"{A}-1", f"{B}-0", f"{B}-1", "GPU-c-0"]
    assert preferred_replicas(available, [], 1, [B]) == [f"{B}-0"]
    assert preferred_replicas(available, [f"{A}-1"], 2, [B]) == [f"{A}-1", f"{B}-0"]
    assert preferred_replicas(available, [], 3, []) == [f"{A}-0", f"{B}-0", "GPU-c-0"]
    assert preferred_replicas(available, [], 4, [B]) == [f"{B}-0", f"{A}-0", "GPU-c-0", f"{A}-1"]
    assert preferred_replicas(available, [], 2, ["GPU-gone"]) == [f"{A}-0", f"{B}-0"]
