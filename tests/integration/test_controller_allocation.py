"""The controller allocates claims of pending pods through the API emulator, from slices the
kubelet plugin's publisher writes, with HAMi's policies; what it writes is what a real
kube-scheduler needs to bind the pod."""

from __future__ import annotations

import re
from pathlib import Path

from controller_cluster import (
    CLASS,
    DRIVER,
    capacity,
    cluster,
    controller,
    gpu,
    memory_mib,
    node_of,
    request,
    results,
    vgpu_config,
)

from dra_driver.objects.resource_api import DELETE_PROTECTION

SHARE_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")


async def test_an_allocation_carries_what_kube_scheduler_needs_to_bind(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class(config=[vgpu_config(cores=20)])
        await c.add_node("node-a", 1)
        pod = await c.add_pod_with_claim("infer", request(**capacity(memory="10Gi", cores="30")))
        async with controller(c.client):
            [claim] = await c.wait_allocated("infer-claim")
    allocation = claim["status"]["allocation"]
    assert TIMESTAMP.fullmatch(allocation["allocationTimestamp"])
    assert allocation["nodeSelector"] == {
        "nodeSelectorTerms": [
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
        ]
    }
    assert DELETE_PROTECTION not in (claim["metadata"].get("finalizers") or [])
    [reservation] = claim["status"]["reservedFor"]
    assert reservation == {"resource": "pods", "name": "infer", "uid": pod["metadata"]["uid"]}
    [result] = results(claim)
    assert SHARE_ID.fullmatch(result.pop("shareID"))
    assert result == {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "node-a",
        "device": "gpu-0",
        "consumedCapacity": {"memory": "10Gi", "cores": "30", "shares": "1"},
    }
    assert allocation["devices"]["config"] == [
        {"source": "FromClass", "requests": ["gpu"], **vgpu_config(cores=20)}
    ]


async def test_vgpu_config_sizes_the_share_without_capacity_requests(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        config = {"requests": ["gpu"], **vgpu_config(memory="4Gi", cores=25)}
        await c.add_claim("sized-claim", request(), config=[config])
        await c.add_pod("sized", ["sized-claim"])
        await c.add_pod_with_claim("whole", request())
        async with controller(c.client):
            sized, whole = await c.wait_allocated("sized-claim", "whole-claim")
    assert results(sized)[0]["consumedCapacity"] == {"memory": "4Gi", "cores": "25", "shares": "1"}
    assert [e["source"] for e in sized["status"]["allocation"]["devices"]["config"]] == [
        "FromClaim"
    ]
    assert results(whole)[0]["consumedCapacity"]["memory"] == "80Gi"


async def test_binpack_fills_one_node_and_spread_uses_both(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        for name in ("node-a", "node-b"):
            await c.add_node(name, 2)
        async with controller(c.client):
            for i in range(3):
                await c.add_pod_with_claim(f"pack{i}", request(**capacity(memory="10Gi")))
                await c.wait_allocated(f"pack{i}-claim")
            packed = {node_of(c.claim(f"pack{i}-claim")) for i in range(3)}
            policy = {"hami.io/node-scheduler-policy": "spread"}
            for i in range(2):
                await c.add_pod_with_claim(
                    f"spread{i}", request(**capacity(memory="10Gi")), annotations=policy
                )
                await c.wait_allocated(f"spread{i}-claim")
            spread = [node_of(c.claim(f"spread{i}-claim")) for i in range(2)]
    assert len(packed) == 1
    assert packed != {spread[0]} and spread[1] in {*packed, spread[0]}


async def test_gpu_policy_binpack_shares_a_card_and_spread_takes_an_empty_one(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 2)
        async with controller(c.client):
            await c.add_pod_with_claim("first", request(**capacity(memory="10Gi")))
            [first] = await c.wait_allocated("first-claim")
            binpack = {"hami.io/gpu-scheduler-policy": "binpack"}
            await c.add_pod_with_claim(
                "packed", request(**capacity(memory="10Gi")), annotations=binpack
            )
            [packed] = await c.wait_allocated("packed-claim")
            await c.add_pod_with_claim("spread", request(**capacity(memory="10Gi")))
            [spread] = await c.wait_allocated("spread-claim")
    assert results(packed)[0]["device"] == results(first)[0]["device"]
    assert results(spread)[0]["device"] != results(first)[0]["device"]


async def test_type_and_uuid_filters_and_numa_binding(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node(
            "node-a",
            [
                gpu("node-a", 0, product="NVIDIA A100-SXM4-80GB", numa=0),
                gpu("node-a", 1, product="NVIDIA H100-SXM5-80GB", numa=0),
                gpu("node-a", 2, product="NVIDIA H100-SXM5-80GB", numa=1),
                gpu("node-a", 3, product="NVIDIA H100-SXM5-80GB", numa=1),
            ],
        )
        await c.add_claim(
            "typed-claim", request(), config=[vgpu_config(memory="1Gi", useTypes=["H100"])]
        )
        await c.add_pod("typed", ["typed-claim"])
        await c.add_claim(
            "uuid-claim",
            request(),
            config=[vgpu_config(memory="1Gi", useUUIDs=["GPU-node-a-2"])],
        )
        await c.add_pod("uuid", ["uuid-claim"])
        await c.add_claim(
            "numa-claim",
            request(count=2),
            config=[vgpu_config(memory="1Gi", numaBind=True, noUseUUIDs=["GPU-node-a-1"])],
        )
        await c.add_pod("numa", ["numa-claim"])
        async with controller(c.client):
            typed, by_uuid, numa = await c.wait_allocated("typed-claim", "uuid-claim", "numa-claim")
    assert results(typed)[0]["device"] in {"gpu-1", "gpu-2", "gpu-3"}
    assert results(by_uuid)[0]["device"] == "gpu-2"
    assert sorted(r["device"] for r in results(numa)) == ["gpu-2", "gpu-3"]


async def test_exclusive_card_and_multi_gpu_request(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 3)
        await c.add_pod_with_claim("shared", request(**capacity(memory="10Gi", cores="10")))
        async with controller(c.client):
            [shared] = await c.wait_allocated("shared-claim")
            await c.add_pod_with_claim("exclusive", request(**capacity(cores="100")))
            [exclusive] = await c.wait_allocated("exclusive-claim")
            await c.add_pod_with_claim("pair", request(count=2, **capacity(memory="20Gi")))
            [pair] = await c.wait_allocated("pair-claim")
    assert results(exclusive)[0]["device"] != results(shared)[0]["device"]
    assert results(exclusive)[0]["consumedCapacity"]["cores"] == "100"
    devices = [r["device"] for r in results(pair)]
    assert len(set(devices)) == 2 and results(exclusive)[0]["device"] not in devices
    assert all(memory_mib(r) == 20 * 1024 for r in results(pair))


async def test_all_claims_of_a_pod_land_on_one_node(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        await c.add_node("node-b", 2)
        for name in ("multi-0", "multi-1"):
            await c.add_claim(name, request(**capacity(memory="50Gi")))
        await c.add_pod("multi", ["multi-0", "multi-1"])
        async with controller(c.client):
            first, second = await c.wait_allocated("multi-0", "multi-1")
    assert node_of(first) == node_of(second) == "node-b"
    assert results(first)[0]["device"] != results(second)[0]["device"]


async def test_first_available_falls_back_and_names_the_subrequest(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", 1)
        subrequests = [
            {"name": "big", "deviceClassName": CLASS, **capacity(memory="100Gi")},
            {"name": "small", "deviceClassName": CLASS, **capacity(memory="8Gi")},
        ]
        await c.add_pod_with_claim("fallback", {"name": "gpu", "firstAvailable": subrequests})
        async with controller(c.client):
            [claim] = await c.wait_allocated("fallback-claim")
    [result] = results(claim)
    assert result["request"] == "gpu/small" and result["consumedCapacity"]["memory"] == "8Gi"


async def test_match_attribute_keeps_two_requests_on_one_numa_node(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node(
            "node-a",
            [gpu("node-a", 0, numa=0), gpu("node-a", 1, numa=1), gpu("node-a", 2, numa=1)],
        )
        await c.add_claim(
            "pair-claim",
            request("a", **capacity(memory="70Gi")),
            request("b", **capacity(memory="70Gi")),
            constraints=[{"requests": ["a", "b"], "matchAttribute": f"{DRIVER}/numa"}],
        )
        await c.add_pod("pair", ["pair-claim"])
        async with controller(c.client):
            [claim] = await c.wait_allocated("pair-claim")
    assert sorted(r["device"] for r in results(claim)) == ["gpu-1", "gpu-2"]


async def test_request_selectors_are_evaluated_with_cel(tmp_path: Path) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node("node-a", [gpu("node-a", 0, memory_gib=40), gpu("node-a", 1)])
        expression = "device.capacity['vgpu.hami.io'].memory.compareTo(quantity('64Gi')) > 0"
        selector = {"cel": {"expression": expression}}
        await c.add_pod_with_claim("big", request(selectors=[selector], **capacity(memory="1Gi")))
        async with controller(c.client):
            [claim] = await c.wait_allocated("big-claim")
    assert results(claim)[0]["device"] == "gpu-1"


async def test_distinct_attribute_puts_two_requests_on_different_numa_nodes(
    tmp_path: Path,
) -> None:
    async with cluster(tmp_path) as c:
        await c.add_class()
        await c.add_node(
            "node-a",
            [gpu("node-a", 0, numa=0), gpu("node-a", 1, numa=0), gpu("node-a", 2, numa=1)],
        )
        binpack = {"hami.io/gpu-scheduler-policy": "binpack"}
        await c.add_claim(
            "apart-claim",
            request("a", **capacity(memory="1Gi")),
            request("b", **capacity(memory="1Gi")),
            constraints=[{"requests": ["a", "b"], "distinctAttribute": f"{DRIVER}/numa"}],
        )
        await c.add_pod("apart", ["apart-claim"], annotations=binpack)
        async with controller(c.client):
            [claim] = await c.wait_allocated("apart-claim")
    devices = {r["request"]: r["device"] for r in results(claim)}
    assert "gpu-2" in devices.values() and len(set(devices.values())) == 2
