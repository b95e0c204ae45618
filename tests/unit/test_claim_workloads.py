"""ResourceClaims with capacity requests and VGPUConfig become engine requests."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from api.vgpu_config import parse_vgpu_config
from dra_driver.cli import main
from dra_driver.engine.requests import MEMORY_PERCENT_UNSET
from dra_driver.engine.vendors import VendorRegistry
from dra_driver.errors import InvalidParameterError
from dra_driver.objects.claim_workloads import claim_request

VENDORS = VendorRegistry()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PARAMS = {"apiVersion": "vgpu.hami.io/v1alpha1", "kind": "VGPUConfig"}


def claim(requests, config=None):
    devices = {"requests": requests}
    if config is not None:
        devices["config"] = config
    return {
        "kind": "ResourceClaim",
        "metadata": {"name": "c", "namespace": "ns"},
        "spec": {"devices": devices},
    }


def exactly(name="gpu", cls="nvidia.vgpu.hami.io", **fields):
    return {"name": name, "exactly": {"deviceClassName": cls, **fields}}


def opaque(parameters, requests=None, driver="vgpu.hami.io"):
    entry = {"opaque": {"driver": driver, "parameters": {**PARAMS, **parameters}}}
    if requests is not None:
        entry["requests"] = requests
    return entry


def test_capacity_requests_size_the_share():
    request, names = claim_request(
        claim([exactly(capacity={"requests": {"memory": "10Gi", "cores": "30"}})]), VENDORS
    )
    (only,) = request.containers[0]
    assert names == ("gpu",)
    assert (only.vendor, only.count, only.memory_mib, only.cores) == ("NVIDIA", 1, 10240, 30)


def test_memory_rounds_up_to_whole_mib():
    request, _ = claim_request(claim([exactly(capacity={"requests": {"memory": "1M"}})]), VENDORS)
    assert request.containers[0][0].memory_mib == 1


def test_opaque_config_sizes_and_filters_scoped_to_its_request():
    request, _ = claim_request(
        claim(
            [exactly("a", count=2), exactly("b", cls="mock.vgpu.hami.io")],
            [
                opaque(
                    {
                        "memoryPercentage": 25,
                        "cores": 10,
                        "noUseTypes": ["T4"],
                        "numaBind": True,
                        "gpuPolicy": "binpack",
                    },
                    requests=["a"],
                )
            ],
        ),
        VENDORS,
    )
    a, b = request.containers[0][0], request.containers[1][0]
    assert (a.count, a.memory_percent, a.cores) == (2, 25, 10)
    assert a.filters.no_use_types == ("T4",) and a.filters.numa_bind
    assert request.gpu_policy == "binpack"
    assert (b.vendor, b.memory_percent, b.cores) == ("MOCK", 100, 0)


def test_capacity_wins_over_config_memory():
    request, _ = claim_request(
        claim([exactly(capacity={"requests": {"memory": "1Gi"}})], [opaque({"memory": "4Gi"})]),
        VENDORS,
    )
    only = request.containers[0][0]
    assert (only.memory_mib, only.memory_percent) == (1024, MEMORY_PERCENT_UNSET)


def test_class_config_is_overridden_by_claim_config():
    class_configs = {
        "nvidia.vgpu.hami.io": [parse_vgpu_config({**PARAMS, "cores": 50, "memory": "2Gi"})]
    }
    request, _ = claim_request(
        claim([exactly()], [opaque({"cores": 20})]), VENDORS, class_configs=class_configs
    )
    only = request.containers[0][0]
    assert (only.memory_mib, only.cores) == (2048, 20)


def test_config_for_another_driver_is_ignored():
    request, _ = claim_request(
        claim([exactly()], [opaque({"bogus": 1}, driver="gpu.nvidia.com")]), VENDORS
    )
    assert request.containers[0][0].memory_percent == 100


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (claim([]), "spec.devices.requests: the claim requests no devices"),
        (
            claim([exactly(cls="gpu.nvidia.com")]),
            "spec.devices.requests[0].exactly.deviceClassName",
        ),
        (claim([{"name": "x", "firstAvailable": []}]), "only `exactly` requests are supported"),
        (claim([exactly(allocationMode="All")]), "allocationMode: All is not supported"),
        (claim([exactly(count=0)]), "spec.devices.requests[0].exactly.count: must be a positive"),
        (claim([exactly(capacity={"requests": {"memory": "lots"}})]), "capacity.requests.memory"),
        (claim([exactly(capacity={"requests": {"cores": "-1"}})]), "capacity.requests.cores"),
        (
            claim([exactly()], [opaque({"memoryPercentage": 120})]),
            "spec.devices.config[0].opaque.parameters: memoryPercentage: must be between 1 and 100",
        ),
    ],
)
def test_bad_claims_name_the_field(document, message):
    with pytest.raises(InvalidParameterError) as raised:
        claim_request(document, VENDORS)
    assert message in str(raised.value)


def test_explain_places_the_example_claim(capsys):
    status = main(
        [
            "explain",
            "-i",
            str(EXAMPLES / "inventory.yaml"),
            "-w",
            str(EXAMPLES / "claim.yaml"),
            "-o",
            "json",
        ]
    )
    result = json.loads(capsys.readouterr().out)
    assert status == 0
    assert result["node"] == "gpu-node-b"
    assert result["containers"] == [
        {
            "name": "gpu",
            "init": False,
            "devices": [
                {
                    "id": "GPU-b0000000-0000-0000-0000-000000000000",
                    "vendor": "NVIDIA",
                    "index": 0,
                    "memoryMiB": 20480,
                    "cores": 30,
                }
            ],
        }
    ]
