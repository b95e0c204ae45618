"""Prepare's second line behind admission: an allocation that breaks its claim's
VGPUConfig filters (uuid, type, numaBind) is refused, naming the config field.

kube-scheduler reads no VGPUConfig, so in the scheduler-allocated mode a claim
pinned by `useUUIDs` can be given another GPU; the overlay's admission policy
refuses such claims, and should it be missing, prepare refuses the allocation.
"""

from __future__ import annotations

import pytest

from dra_driver.errors import InvalidParameterError
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.prepare_plan import DeviceCapacity, plan_claim

GIB = 1 << 30
DRIVER = "vgpu.hami.io"
PARAMS = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig"}
DEVICES = {
    f"gpu-{i}": DeviceCapacity(
        GpuInfo(
            uuid=f"GPU-{i}",
            index=i,
            minor=i,
            product_name="A100-SXM4-80GB",
            memory_bytes=80 * GIB,
            numa_node=i // 2,
        ),
        memory_bytes=80 * GIB,
        cores=100,
    )
    for i in range(4)
}
CONFIG = "status.allocation.devices.config"


def result(device: str, request: str = "gpu") -> dict:
    return {
        "request": request,
        "driver": DRIVER,
        "pool": "node-a",
        "device": device,
        "shareID": "7f0c3a2e-4b1d-4c8e-9a55-1e2f3a4b5c6d",
        "consumedCapacity": {"memory": "10Gi", "cores": "10"},
    }


def entry(parameters: dict, source: str = "FromClaim", requests: list[str] | None = None) -> dict:
    found = {"source": source, "opaque": {"driver": DRIVER, "parameters": {**PARAMS, **parameters}}}
    if requests:
        found["requests"] = requests
    return found


def plan(results: list[dict], *configs: dict):
    claim = {
        "metadata": {"uid": "11111111-2222-3333-4444-555555555555", "name": "c", "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": results, "config": list(configs)}}},
    }
    return plan_claim(claim, driver=DRIVER, pool="node-a", devices=DEVICES)


@pytest.mark.parametrize(
    ("parameters", "field", "reason"),
    [
        ({"useUUIDs": ["GPU-1", "GPU-2"]}, "useUUIDs", "GPU-0 is not one of GPU-1, GPU-2"),
        ({"noUseUUIDs": ["GPU-0"]}, "noUseUUIDs", "GPU-0 is one of GPU-0"),
        (
            {"useTypes": ["H100", "T4"]},
            "useTypes",
            "type NVIDIA-A100-SXM4-80GB contains none of H100, T4",
        ),
        ({"noUseTypes": ["a100"]}, "noUseTypes", "type NVIDIA-A100-SXM4-80GB contains one of a100"),
    ],
)
def test_an_allocation_that_breaks_a_filter_is_refused_naming_the_field(
    parameters: dict, field: str, reason: str
) -> None:
    with pytest.raises(InvalidParameterError) as raised:
        plan([result("gpu-0")], entry(parameters))
    assert raised.value.field == f"{CONFIG}[0].opaque.parameters.{field}"
    assert "claim ns/c (11111111-2222-3333-4444-555555555555)" in raised.value.reason
    assert f"device gpu-0 of request 'gpu': {reason}" in raised.value.reason
    assert "capacity.requests" not in raised.value.reason
    assert "selector" in raised.value.reason


def test_the_config_entry_that_set_the_filter_is_named() -> None:
    """A class sets the filter, a later claim entry overrides it: the claim's is named."""
    with pytest.raises(InvalidParameterError) as raised:
        plan(
            [result("gpu-0")],
            entry({"useTypes": ["A100"]}, source="FromClass"),
            entry({"cores": 10}),
            entry({"useTypes": ["H100"]}),
        )
    assert raised.value.field == f"{CONFIG}[2].opaque.parameters.useTypes"
    with pytest.raises(InvalidParameterError) as raised:
        plan([result("gpu-0")], entry({"noUseTypes": ["A100"]}, source="FromClass"))
    assert raised.value.field == f"{CONFIG}[0].opaque.parameters.noUseTypes"


def test_gpus_of_one_request_on_two_numa_nodes_break_numa_bind() -> None:
    with pytest.raises(InvalidParameterError) as raised:
        plan([result("gpu-1"), result("gpu-2")], entry({"numaBind": True}))
    assert raised.value.field == f"{CONFIG}[0].opaque.parameters.numaBind"
    assert "request 'gpu' has GPUs on NUMA nodes 0, 1" in raised.value.reason
    assert "matchAttribute: vgpu.hami.io/numa" in raised.value.reason


@pytest.mark.parametrize(
    ("results", "configs"),
    [
        ([result("gpu-0")], [entry({"useUUIDs": ["GPU-0"], "noUseUUIDs": ["GPU-1"]})]),
        ([result("gpu-0")], [entry({"useTypes": ["a100"], "noUseTypes": ["H100"]})]),
        ([result("gpu-0"), result("gpu-1")], [entry({"numaBind": True})]),
        ([result("gpu-1"), result("gpu-2")], [entry({"numaBind": False})]),
        ([result("gpu-0"), result("gpu-2", "b")], [entry({"numaBind": True})]),
        ([result("gpu-0")], [entry({"useUUIDs": ["GPU-3"]}, requests=["other"])]),
        ([result("gpu-0", "gpu/a100")], [entry({"useTypes": ["A100"]}, requests=["gpu"])]),
    ],
    ids=["uuids", "types", "one-numa", "unbound", "numa-per-request", "scoped", "subrequest"],
)
def test_an_allocation_within_the_filters_is_prepared(results: list, configs: list) -> None:
    assert len(plan(results, *configs).grants) == len(results)


def test_a_subrequest_result_is_checked_against_its_request_config() -> None:
    with pytest.raises(InvalidParameterError) as raised:
        plan([result("gpu-0", "gpu/any")], entry({"noUseUUIDs": ["GPU-0"]}, requests=["gpu"]))
    assert "device gpu-0 of request 'gpu/any'" in raised.value.reason
