"""Node registration as the legacy scheduler reads it: formats, handshake health, problems."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

from api.hami_annotations import NODE_HANDSHAKE, NODE_NVIDIA_REGISTER
from controller.legacy.inventory import (
    UuidSightings,
    device_plugin_gone,
    read_node,
    requesting_handshake,
)

NOW = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
MINUTE = timedelta(seconds=60)
JSON_REGISTER = (
    '[{"id":"GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448","count":10,"devmem":15360,'
    '"devcore":100,"type":"NVIDIA-Tesla T4","mode":"hami-core","health":true},'
    '{"id":"GPU-1","index":1,"count":10,"devmem":15360,"devcore":100,'
    '"type":"NVIDIA-Tesla T4","numa":1,"mode":"hami-core"}]'
)
LEGACY_REGISTER = (
    "GPU-a,10,32768,100,NVIDIA-Tesla V100,0,true:"
    "GPU-b,10,32768,100,NVIDIA-Tesla V100,1,false,1,mig:"
)


def node(annotations: dict[str, str], allocatable: str | None = "2") -> dict[str, Any]:
    status = {"allocatable": {"nvidia.com/gpu": allocatable}} if allocatable else {}
    return {"metadata": {"name": "n1", "annotations": annotations}, "status": status}


def read(obj: dict[str, Any]):
    return read_node(obj, "nvidia.com/gpu", "NVIDIA", NOW, MINUTE)


def test_json_register_as_hamis_plugin_writes_it() -> None:
    entry = read(node({NODE_NVIDIA_REGISTER: JSON_REGISTER}))
    assert entry.problem == ""
    first, second = entry.node.devices
    assert (first.id, first.index, first.count, first.memory_mib, first.cores) == (
        "GPU-0fc3eda5-e98b-a25b-5b0d-cf5c855d1448",
        0,
        10,
        15360,
        100,
    )
    assert first.healthy and first.type == "NVIDIA-Tesla T4"
    assert (second.index, second.numa, second.healthy) == (1, 1, False)


def test_legacy_colon_register() -> None:
    entry = read(node({NODE_NVIDIA_REGISTER: LEGACY_REGISTER}))
    a, b = entry.node.devices
    assert (a.id, a.memory_mib, a.numa, a.healthy, a.mode) == ("GPU-a", 32768, 0, True, "hami-core")
    assert (b.index, b.healthy, b.mode) == (1, False, "mig")


def test_node_without_register_is_unregistered() -> None:
    entry = read(node({}))
    assert entry.node is None and entry.problem == "node unregistered"


def test_malformed_register_makes_the_node_unusable_with_reason() -> None:
    entry = read(node({NODE_NVIDIA_REGISTER: '[{"id": "GPU-a", "count": "ten"}]'}))
    assert entry.node is None
    assert entry.problem.startswith("node unregistered: annotation hami.io/node-nvidia-register")
    assert "count" in entry.problem


def test_requesting_handshake_golden() -> None:
    assert requesting_handshake(NOW) == "Requesting_2026-11-30 10:00:00"


OLD_REQUEST = "Requesting_2026-11-30 09:58:59"
FRESH_REQUEST = "Requesting_2026-11-30 09:59:30"


def test_old_requesting_and_zero_allocatable_marks_devices_unhealthy() -> None:
    entry = read(node({NODE_NVIDIA_REGISTER: JSON_REGISTER, NODE_HANDSHAKE: OLD_REQUEST}, "0"))
    assert not any(d.healthy for d in entry.node.devices)
    entry = read(node({NODE_NVIDIA_REGISTER: JSON_REGISTER, NODE_HANDSHAKE: OLD_REQUEST}, None))
    assert not any(d.healthy for d in entry.node.devices)


def test_handshake_rules() -> None:
    assert device_plugin_gone(OLD_REQUEST, 0, NOW, MINUTE)
    assert not device_plugin_gone(OLD_REQUEST, 2, NOW, MINUTE)
    assert not device_plugin_gone(FRESH_REQUEST, 0, NOW, MINUTE)
    assert not device_plugin_gone("Requesting", 0, NOW, MINUTE)
    assert not device_plugin_gone("Requesting_", 0, NOW, MINUTE)
    assert not device_plugin_gone("Requesting_not a time", 0, NOW, MINUTE)
    assert not device_plugin_gone("Reported_2026-11-30 09:00:00", 0, NOW, MINUTE)
    assert not device_plugin_gone(None, 0, NOW, MINUTE)
    assert device_plugin_gone("Requesting_2026.11.30 09:00:00", 0, NOW, MINUTE)


def test_a_uuid_listed_twice_on_a_node_is_one_card() -> None:
    register = (
        "GPU-a,10,32768,100,NVIDIA-Tesla V100,0,true:"
        "GPU-b,10,32768,100,NVIDIA-Tesla V100,0,true:"
        "GPU-a,10,16384,100,NVIDIA-Tesla V100,1,true:"
    )
    entry = read(node({NODE_NVIDIA_REGISTER: register}))
    cards = [(d.id, d.memory_mib) for d in entry.node.devices]
    assert cards == [("GPU-a", 32768), ("GPU-b", 32768)]
    assert entry.registered_ids == ("GPU-a", "GPU-b", "GPU-a")


def test_uuid_sightings_follow_node_changes() -> None:
    sightings = UuidSightings()
    assert sightings.update("n1", ["GPU-a", "GPU-b"]) == {}
    assert sightings.update("n2", ["GPU-a", "GPU-c", "GPU-c"]) == {
        "GPU-a": ("n1", "n2"),
        "GPU-c": ("n2", "n2"),
    }
    assert sightings.duplicates() == {"GPU-a": ("n1", "n2"), "GPU-c": ("n2", "n2")}
    sightings.update("n2", ["GPU-c"])
    assert sightings.duplicates() == {}
    sightings.update("n3", ["GPU-b"])
    sightings.remove("n1")
    assert sightings.duplicates() == {}
    assert sightings.update("n1", ["GPU-b"]) == {"GPU-b": ("n1", "n3")}
