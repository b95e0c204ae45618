"""The engine brought in line with the claims in place equals one built afresh: the same
usage on every device, the same quota ledger, the same decisions; only nodes whose usage
changed are replaced, and each claim's usage is read again only when its object changed."""

from __future__ import annotations

from typing import Any

from controller.inventory import Inventory, build_inventory, quota_ledger, usage_by_node
from controller.usage_sync import ClaimUsageMemo, sync_engine
from dra_driver.engine.engine import Engine
from dra_driver.engine.requests import (
    MEMORY_PERCENT_UNSET,
    DeviceFilters,
    DeviceRequest,
    PodRequest,
)
from dra_driver.engine.vendors import VendorRegistry
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, Taint, build_resource_slices

DRIVER = "vgpu.hami.io"
OWN_TAINT = Taint(f"{DRIVER}/allocation", "controller")
NODES = ("node-a", "node-b", "node-c")
QUOTAS = [
    {
        "metadata": {"name": "q", "namespace": "team"},
        "spec": {
            "hard": {"limits.nvidia.com/gpumem": "120000", "limits.nvidia.com/gpucores": "150"}
        },
    }
]


def cluster() -> Inventory:
    items: list[dict[str, Any]] = []
    for node in NODES:
        gpus = [
            GpuInfo(f"GPU-{node}-{i}", i, i, "NVIDIA A100-SXM4-80GB", 80 << 30, 0) for i in range(2)
        ]
        built = build_resource_slices(
            node, f"uid-{node}", gpus, SliceSettings(driver=DRIVER, allocation_taint=OWN_TAINT), 1
        )
        for item in built:
            item["metadata"]["uid"] = item["metadata"]["name"]
        items += built
    return build_inventory(items, DRIVER, frozenset({OWN_TAINT.key}))


def claim(name: str, node: str, device: str, memory: str, cores: str) -> dict[str, Any]:
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": node,
        "device": device,
        "shareID": name,
        "consumedCapacity": {"memory": memory, "cores": cores, "shares": "1"},
    }
    return {
        "metadata": {"name": name, "namespace": "team"},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def fresh(inventory: Inventory, claims: list[dict[str, Any]]) -> Engine:
    return Engine(
        inventory.nodes.values(),
        usage_by_node(claims, inventory),
        quota=quota_ledger(QUOTAS, claims, inventory, VendorRegistry()),
    )


def held(engine: Engine, inventory: Inventory) -> dict[str, list[tuple[Any, ...]]]:
    return {
        name: [
            (s.device.id, s.used, s.memory, s.cores, s.tags) for s in engine.node_state(name).slots
        ]
        for name in inventory.nodes
    }


def request(memory: int) -> PodRequest:
    gpu = DeviceRequest(
        vendor="NVIDIA",
        count=1,
        memory_mib=memory,
        memory_percent=MEMORY_PERCENT_UNSET,
        cores=10,
        filters=DeviceFilters(),
    )
    return PodRequest(namespace="team", name="p", containers=((gpu,),))


def test_an_engine_synced_in_place_equals_one_built_from_the_claims() -> None:
    inventory = cluster()
    first = [
        claim("a", "node-a", "gpu-0", "20Gi", "30"),
        claim("b", "node-b", "gpu-1", "10Gi", "20"),
        claim("c", "node-c", "gpu-0", "5Gi", "10"),
    ]
    memo = ClaimUsageMemo()
    engine = Engine(
        inventory.nodes.values(),
        memo.usage_by_node(first, inventory),
        quota=quota_ledger(QUOTAS, first, inventory, VendorRegistry()),
    )
    placed = engine.decide(request(30000)).placement
    assert placed is not None
    engine.commit(request(30000), placed)
    untouched = engine.node_state("node-c").version
    states = {name: engine.node_state(name) for name in inventory.nodes}
    versions = {name: state.version for name, state in states.items()}

    # Pod "a" finished, "b" grew (a new object), "c" is the same object, "d" is the
    # allocation the commit above stands for, now seen as a claim.
    grown = claim("b", "node-b", "gpu-1", "30Gi", "40")
    [grant] = placed.containers[0]
    device = next(d for d in inventory.by_key.values() if d.uuid == grant.uuid)
    added = claim("d", placed.node, device.name, f"{grant.memory_mib}Mi", str(grant.cores))
    second = [grown, first[2], added]
    replaced = sync_engine(
        engine,
        inventory,
        memo.usage_by_node(second, inventory),
        quota_ledger(QUOTAS, second, inventory, VendorRegistry()),
    )

    rebuilt = fresh(inventory, second)
    assert held(engine, inventory) == held(rebuilt, inventory)
    assert engine.quota == rebuilt.quota
    assert engine.node_state("node-c").version == untouched
    assert replaced == 2
    # Changed in place: the same node states, each changed one with a new version and
    # the headroom, score and facts of the engine built afresh.
    for name, state in states.items():
        assert engine.node_state(name) is state
        assert (state.version != versions[name]) == (name in ("node-a", "node-b"))
        theirs = rebuilt.node_state(name)
        assert (state.headroom, state.score, state.facts) == (
            theirs.headroom,
            theirs.score,
            theirs.facts,
        )
    for memory in (1000, 40000, 70000):
        ours, theirs = engine.decide(request(memory)), rebuilt.decide(request(memory))
        assert ours.placement == theirs.placement
        assert ours.failures == theirs.failures


def test_a_claim_is_read_again_only_when_its_object_changed() -> None:
    inventory = cluster()
    same = claim("a", "node-a", "gpu-0", "20Gi", "30")
    memo = ClaimUsageMemo()
    memo.usage_by_node([same], inventory)
    same["status"]["allocation"]["devices"]["results"][0]["consumedCapacity"]["cores"] = "99"
    assert memo.usage_by_node([same], inventory) == usage_by_node(
        [claim("a", "node-a", "gpu-0", "20Gi", "30")], inventory
    )
    replaced = claim("a", "node-a", "gpu-0", "20Gi", "50")
    assert memo.usage_by_node([replaced], inventory) == usage_by_node([replaced], inventory)
    assert memo.usage_by_node([replaced], cluster()) == usage_by_node([replaced], inventory)
