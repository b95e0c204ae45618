"""The kube-scheduler stand-in charges and refuses capacity requests by kube-scheduler's own
rule (the one the controller uses): whole-number step arithmetic, max, validValues, and a
request for a capacity the device does not publish."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest

from simulator.standins.dra_allocator import DeviceRequest, DeviceUsage, PoolDevice, plan_allocation

CORES = {
    "value": "100",
    "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
}
HALVES = {
    "value": "2",
    "requestPolicy": {"default": "500m", "validRange": {"min": "500m", "max": "2", "step": "500m"}},
}


def device(**capacity: dict[str, Any]) -> PoolDevice:
    spec = {"name": "gpu-0", "allowMultipleAllocations": True, "capacity": capacity}
    return PoolDevice("vgpu.hami.io", "node-a", spec)


def consumed(published: PoolDevice, **requested: str) -> dict[str, Decimal] | None:
    request = DeviceRequest(
        claim=0,
        name="gpu",
        device_class="c",
        matches=lambda driver, spec: True,
        count=1,
        tolerations=(),
        capacity={name: Decimal(amount) for name, amount in requested.items()},
    )
    picks = plan_allocation([request], [published], DeviceUsage())
    return None if picks is None else dict(picks[0].consumed or {})


@pytest.mark.parametrize(
    ("requested", "expected"),
    [("1.2", Decimal(2)), ("0.5", Decimal(1)), ("0.2", Decimal("0.5")), ("2.1", None)],
)
def test_fractional_steps_round_on_whole_numbers_as_kube_scheduler(
    requested: str, expected: Decimal | None
) -> None:
    taken = consumed(device(halves=HALVES), halves=requested)

    assert (None if taken is None else taken["halves"]) == expected


def test_cores_above_max_and_unpublished_capacities_refuse_the_device() -> None:
    assert consumed(device(cores=CORES), cores="101") is None
    assert consumed(device(cores=CORES), cores="100") == {"cores": Decimal(100)}
    assert consumed(device(cores=CORES), bandwidth="1") is None
