"""Prepare, the second line: an allocation kube-scheduler's rule refuses on the device as
the node publishes it (a claim's request above the policy, a consumed amount the policy
does not allow) is refused, naming the claim, the request, the capacity and the policy."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.errors import InvalidParameterError
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.plugin import device_capacities
from kubeletplugin.prepare_plan import ClaimPlan, plan_claim
from kubeletplugin.slices import SliceSettings

DRIVER = "vgpu.hami.io"
A100 = GpuInfo(
    uuid="GPU-0", index=0, minor=0, product_name="NVIDIA A100-SXM4-80GB", memory_bytes=80 << 30
)


def prepare(requested: dict[str, str], **consumed: str) -> ClaimPlan:
    claim: dict[str, Any] = {
        "metadata": {"uid": "u1", "name": "c", "namespace": "ns"},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "nvidia.vgpu.hami.io",
                            "capacity": {"requests": requested},
                        },
                    }
                ]
            }
        },
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {
                            "request": "gpu",
                            "driver": DRIVER,
                            "pool": "node-a",
                            "device": "gpu-0",
                            "shareID": "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d",
                            "consumedCapacity": {"memory": "80Gi", "shares": "1", **consumed},
                        }
                    ]
                }
            }
        },
    }
    devices = device_capacities([A100], SliceSettings(driver=DRIVER))
    return plan_claim(claim, driver=DRIVER, pool="node-a", devices=devices)


def test_a_request_above_the_policy_is_refused_though_its_charge_fits() -> None:
    with pytest.raises(InvalidParameterError) as raised:
        prepare({"cores": "101"}, cores="100")

    assert raised.value.field == "status.allocation.devices.results[0]"
    assert (
        "claim ns/c (u1): request gpu on device gpu-0: capacity cores: request 101 is outside "
        "its requestPolicy {validRange {min: 0, max: 100, step: 1}; default 0}"
    ) in raised.value.reason


def test_a_consumed_amount_the_policy_does_not_allow_is_refused() -> None:
    with pytest.raises(InvalidParameterError) as raised:
        prepare({}, cores="30", shares="2")

    assert (
        "capacity shares: consumedCapacity 2 is outside its requestPolicy "
        "{validValues [1]; default 1}"
    ) in raised.value.reason


@pytest.mark.parametrize("name", ["cores", f"{DRIVER}/cores"])
def test_a_request_the_policy_serves_is_prepared(name: str) -> None:
    [grant] = prepare({name: "100"}, cores="100").grants

    assert grant.core_limit == 100
