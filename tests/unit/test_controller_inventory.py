"""Slices -> engine nodes, claims -> usage and quota: newest complete pools only, stale
results ignored, the controller's own taint ignored, other taints make a card unusable."""

from __future__ import annotations

from typing import Any

from controller.inventory import (
    build_inventory,
    duplicate_uuid_notes,
    quota_ledger,
    usage_by_node,
)
from dra_driver.engine.model import DeviceUsage
from dra_driver.engine.vendors import VendorRegistry
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices

DRIVER = "vgpu.hami.io"
OWN_TAINT = Taint(f"{DRIVER}/allocation", "controller")
SETTINGS = SliceSettings(driver=DRIVER, allocation_taint=OWN_TAINT)


def gpus(node: str, count: int, healthy: bool = True) -> list[GpuInfo]:
    return [
        GpuInfo(f"GPU-{node}-{i}", i, i, "NVIDIA A100-SXM4-80GB", 80 << 30, i // 2, healthy=healthy)
        for i in range(count)
    ]


def slices(
    node: str, count: int, generation: int = 1, healthy: bool = True
) -> list[dict[str, Any]]:
    built = build_resource_slices(
        node, f"uid-{node}", gpus(node, count, healthy), SETTINGS, generation
    )
    for item in built:
        item["metadata"]["uid"] = f"{item['metadata']['name']}-{generation}"
    return built


def claim(namespace: str, *results: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": namespace},
        "status": {"allocation": {"devices": {"results": list(results)}}},
    }


def result(pool: str, device: str, **consumed: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}
    if consumed:
        entry["shareID"] = "s"
        entry["consumedCapacity"] = consumed
    return entry


IGNORED = frozenset({OWN_TAINT.key})


def test_devices_become_engine_devices_and_only_the_newest_generation_counts() -> None:
    inventory = build_inventory(slices("node-a", 2, 1) + slices("node-a", 3, 2), DRIVER, IGNORED)
    [node] = inventory.nodes.values()
    assert [d.id for d in node.devices] == ["GPU-node-a-0", "GPU-node-a-1", "GPU-node-a-2"]
    device = node.devices[1]
    assert (device.memory_mib, device.cores, device.count, device.numa) == (81920, 100, 10, 0)
    assert device.type == "NVIDIA-A100-SXM4-80GB" and device.healthy


def test_an_incomplete_pool_and_other_drivers_are_left_out() -> None:
    incomplete = slices("node-a", 1)
    incomplete[0]["spec"]["pool"]["resourceSliceCount"] = 2
    other = slices("node-b", 1)
    other[0]["spec"]["driver"] = "gpu.example.com"
    assert build_inventory(incomplete + other, DRIVER, IGNORED).nodes == {}


def test_only_the_controllers_own_taint_is_ignored() -> None:
    unhealthy = build_inventory(slices("node-a", 1, healthy=False), DRIVER, IGNORED)
    assert not unhealthy.nodes["node-a"].devices[0].healthy
    strict = build_inventory(slices("node-a", 1), DRIVER, frozenset())
    assert not strict.nodes["node-a"].devices[0].healthy


def test_usage_sums_shares_counts_whole_devices_and_ignores_stale_ones() -> None:
    inventory = build_inventory(slices("node-a", 2), DRIVER, IGNORED)
    claims = [
        claim("ns", result("node-a", "gpu-0", memory="10Gi", cores="30", shares="1")),
        claim("ns", result("node-a", "gpu-0", memory="1536Ki", cores="0", shares="1")),
        claim("ns", result("node-a", "gpu-1")),
        claim("ns", result("node-a", "gpu-7", memory="1Gi")),
        claim("ns", result("node-gone", "gpu-0", memory="1Gi")),
    ]
    usage = usage_by_node(claims, inventory)
    assert usage == {
        "node-a": {
            "GPU-node-a-0": DeviceUsage(2, 10240 + 2, 30),
            "GPU-node-a-1": DeviceUsage(10, 81920, 100),
        }
    }


def test_quota_ledger_reads_limits_and_charges_the_namespace() -> None:
    inventory = build_inventory(slices("node-a", 1), DRIVER, IGNORED)
    quotas = [
        {
            "metadata": {"name": "q", "namespace": "team"},
            "spec": {
                "hard": {"limits.nvidia.com/gpumem": "20000", "limits.nvidia.com/gpucores": "50"}
            },
        }
    ]
    claims = [claim("team", result("node-a", "gpu-0", memory="10000Mi", cores="40", shares="1"))]
    ledger = quota_ledger(quotas, claims, inventory, VendorRegistry())
    assert ledger.fits("team", "NVIDIA", 10000, 10)
    assert not ledger.fits("team", "NVIDIA", 10001, 0)
    assert not ledger.fits("team", "NVIDIA", 0, 11)
    assert ledger.fits("other", "NVIDIA", 10**6, 100)


def cloned_slices(node: str, uuids: list[str]) -> list[dict[str, Any]]:
    """The node's slices with the given uuid on each GPU (a shared mock file, a clone)."""
    built = slices(node, len(uuids))
    for device, uuid in zip(built[0]["spec"]["devices"], uuids, strict=True):
        device["attributes"]["uuid"] = {"string": uuid}
    return built


def test_a_uuid_on_two_nodes_is_one_card_on_each_and_twice_on_a_node_is_one() -> None:
    inventory = build_inventory(
        cloned_slices("node-a", ["GPU-x", "GPU-x"]) + cloned_slices("node-b", ["GPU-x", "GPU-y"]),
        DRIVER,
        IGNORED,
    )
    assert [d.id for d in inventory.nodes["node-a"].devices] == ["GPU-x"]
    assert [d.id for d in inventory.nodes["node-b"].devices] == ["GPU-x", "GPU-y"]
    assert inventory.device("node-a", "GPU-x").key == (DRIVER, "node-a", "gpu-0")
    assert inventory.device("node-b", "GPU-x").key == (DRIVER, "node-b", "gpu-0")
    assert inventory.duplicate_uuids == {"GPU-x": ("node-a", "node-a", "node-b")}
    claims = [
        claim("ns", result("node-a", "gpu-0", memory="10Gi", cores="10", shares="1")),
        claim("ns", result("node-a", "gpu-1", memory="20Gi", cores="20", shares="1")),
        claim("ns", result("node-b", "gpu-0", memory="30Gi", cores="30", shares="1")),
    ]
    assert usage_by_node(claims, inventory) == {
        "node-a": {"GPU-x": DeviceUsage(2, 30 * 1024, 30)},
        "node-b": {"GPU-x": DeviceUsage(1, 30 * 1024, 30)},
    }


def test_a_uuid_filter_selects_a_shared_uuid_only_when_all_its_devices_qualify() -> None:
    inventory = build_inventory(
        cloned_slices("node-a", ["GPU-x", "GPU-y"]) + cloned_slices("node-b", ["GPU-x"]),
        DRIVER,
        IGNORED,
    )
    inventory.device("node-b", "GPU-x").spec["attributes"]["numa"] = {"int": 7}
    assert inventory.uuids() == {"GPU-x", "GPU-y"}
    assert inventory.uuids_where(lambda d: d.node == "node-a") == {"GPU-y"}
    assert inventory.uuids_where(lambda d: d.name == "gpu-0") == {"GPU-x"}
    assert inventory.uuid_groups("numa") == {"0": frozenset({"GPU-y"})}


def test_duplicate_uuid_notes_name_each_node_once_and_only_what_is_new() -> None:
    current = {"GPU-x": ("node-a", "node-a", "node-b"), "GPU-y": ("node-b", "node-c")}
    notes = duplicate_uuid_notes(current, {"GPU-y": ("node-b", "node-c")})
    assert sorted(notes) == ["node-a", "node-b"]
    assert "GPU-x (2 on this node, also on node-b)" in notes["node-a"]
    assert "GPU-x (1 on this node, also on node-a)" in notes["node-b"]
    assert "GPU-y" not in notes["node-b"]
    assert duplicate_uuid_notes(current, current) == {}
