"""Pure allocation building: request-policy rounding, consumed capacity, the allocation dict."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from api.quantity import MIB
from controller.allocation import (
    PlannedResult,
    build_allocation,
    consumed_capacity,
    quantity_text,
)
from controller.inventory import PublishedDevice
from controller.requests import ClaimVariant
from dra_driver.objects.capacity_policy import CapacityRefusal, take_capacity

GI = 1 << 30
RANGE = {"validRange": {"min": "256Mi", "max": "80Gi", "step": "256Mi"}}


@pytest.mark.parametrize(
    ("amount", "policy", "expected"),
    [
        (Decimal(100 * MIB), RANGE, Decimal(256 * MIB)),
        (Decimal(300 * MIB), RANGE, Decimal(512 * MIB)),
        (Decimal(512 * MIB), RANGE, Decimal(512 * MIB)),
        (Decimal(81 * GI), RANGE, None),
        (Decimal(2), {"validValues": ["1", "4", "8"]}, Decimal(4)),
        (Decimal(9), {"validValues": ["1", "4", "8"]}, None),
        (Decimal(7), None, Decimal(7)),
        (Decimal(0), {"validRange": {"min": "0", "step": "1"}}, Decimal(0)),
    ],
)
def test_requests_are_rounded_up_by_the_policy(
    amount: Decimal, policy: dict[str, Any] | None, expected: Decimal | None
) -> None:
    taken = take_capacity("c", amount, {"value": "0", "requestPolicy": policy})
    assert (None if isinstance(taken, CapacityRefusal) else taken) == expected


def device(**capacity: dict[str, Any]) -> PublishedDevice:
    spec = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": capacity}
    return PublishedDevice("vgpu.hami.io", "node-a", "node-a", spec, "uid", 1, "GPU-0")


def test_every_capacity_of_the_device_is_consumed() -> None:
    published = device(
        memory={"value": "80Gi", "requestPolicy": {"default": "80Gi", **RANGE}},
        cores={
            "value": "100",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1"}},
        },
        shares={"value": "10", "requestPolicy": {"default": "1", "validValues": ["1"]}},
        bandwidth={"value": "100"},
    )
    consumed = consumed_capacity(published, memory_mib=1000, cores=30, requested={})
    assert consumed == {
        "memory": Decimal(1024 * MIB),
        "cores": Decimal(30),
        "shares": Decimal(1),
        "bandwidth": Decimal(100),
    }
    refused = consumed_capacity(published, memory_mib=90 * 1024, cores=0, requested={})
    assert isinstance(refused, CapacityRefusal) and refused.capacity == "memory"


def test_quantities_are_written_canonically() -> None:
    assert quantity_text(Decimal(10 * GI)) == "10Gi"
    assert quantity_text(Decimal(30)) == "30"
    assert quantity_text(Decimal("0.5")) == "500m"


def test_the_allocation_names_the_node_and_each_config_source() -> None:
    class_config = {"opaque": {"driver": "vgpu.hami.io", "parameters": {"kind": "VGPUConfig"}}}
    claim_config = {"requests": ["gpu"], "opaque": {"driver": "vgpu.hami.io", "parameters": {}}}
    claim = {"spec": {"devices": {"requests": [], "config": [claim_config]}}}
    variant = ClaimVariant(claim, (), ("gpu/small",), ("nvidia.vgpu.hami.io",), None, None)
    results = [PlannedResult("gpu/small", device(), {"memory": Decimal(GI)})]
    classes = {"nvidia.vgpu.hami.io": {"spec": {"config": [class_config]}}}
    allocation = build_allocation(
        variant, results, classes, "node-a", "2026-11-30T10:00:00Z", lambda: "share-1"
    )
    assert allocation == {
        "devices": {
            "results": [
                {
                    "request": "gpu/small",
                    "driver": "vgpu.hami.io",
                    "pool": "node-a",
                    "device": "gpu-0",
                    "shareID": "share-1",
                    "consumedCapacity": {"memory": "1Gi"},
                }
            ],
            "config": [
                {"source": "FromClass", "requests": ["gpu/small"], **class_config},
                {"source": "FromClaim", **claim_config},
            ],
        },
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["node-a"]}]}
            ]
        },
        "allocationTimestamp": "2026-11-30T10:00:00Z",
    }
