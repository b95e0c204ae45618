"""Namespace quota per vendor, as HAMi keys it, in both modes.

ResourceQuotas are read once for every vendor (`limits.<memory name>` times the
memory factor, `limits.<cores name>`); what a namespace holds is charged to the
vendor whose devices hold it: legacy pods by their grants, DRA claims by their
devices' type, legacy pods on the DRA side by their holds. An MLU share never
counts against NVIDIA's quota in either mode.
"""

from __future__ import annotations

from typing import Any

import pytest

from api.hami_annotations import VGPU_NODE
from controller.inventory import build_inventory
from controller.inventory import quota_ledger as dra_quota_ledger
from controller.legacy.config import parse_device_config
from controller.legacy.pod_usage import read_pod_allocation
from controller.legacy.quota import quota_ledger as legacy_quota_ledger
from controller.mixed_usage import charge_holds, legacy_backends, legacy_hold
from dra_driver.engine.quota import NamespaceQuota, QuotaLedger
from dra_driver.objects.dra_engine_vendors import dra_vendor_registry
from dra_driver.objects.quotas import quota_limits
from kubeletplugin.gpus import GpuInfo
from kubeletplugin.slices import SliceSettings, build_resource_slices

DRIVER = "vgpu.hami.io"
VENDORS = (
    parse_device_config(
        {
            "nvidia": {},
            "cambricon": {
                "resourceCountName": "cambricon.com/mlu",
                "resourceMemoryName": "cambricon.com/mlu.smlu.vmemory",
                "resourceCoreName": "cambricon.com/mlu.smlu.vcore",
            },
            "hygon": {
                "resourceCountName": "hygon.com/dcunum",
                "resourceMemoryName": "hygon.com/dcumem",
                "resourceCoreName": "hygon.com/dcucores",
                "memoryFactor": 2,
            },
            "metax": {"resourceCountName": "metax-tech.com/gpu"},
        }
    )
    .backends()
    .vendors()
)
NVIDIA_AND_MLU = {
    "limits.nvidia.com/gpumem": "5000",
    "limits.nvidia.com/gpucores": "60",
    "limits.cambricon.com/mlu.smlu.vmemory": "16",
    "limits.cambricon.com/mlu.smlu.vcore": "80",
}


def resource_quota(namespace: str, hard: dict[str, str], name: str = "gpu") -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace}, "spec": {"hard": hard}}


def test_every_vendor_is_read_by_its_own_names_and_memory_factor() -> None:
    hard = {**NVIDIA_AND_MLU, "limits.hygon.com/dcumem": "1000", "pods": "10"}
    ledger = quota_limits([resource_quota("ns", hard)], VENDORS)
    assert ledger.quotas == {
        ("ns", "NVIDIA"): NamespaceQuota(5000, 60),
        ("ns", "MLU"): NamespaceQuota(16 * 256, 80),
        ("ns", "DCU"): NamespaceQuota(2000, None),
    }


def test_the_smallest_limit_of_several_quotas_wins_and_odd_values_are_skipped() -> None:
    quotas = [
        resource_quota("ns", {"limits.cambricon.com/mlu.smlu.vmemory": "16"}),
        resource_quota("ns", {"limits.cambricon.com/mlu.smlu.vmemory": "8"}, "tighter"),
        resource_quota("ns", {"limits.cambricon.com/mlu.smlu.vcore": "1.5"}, "fraction"),
    ]
    assert quota_limits(quotas, VENDORS).quotas == {("ns", "MLU"): NamespaceQuota(8 * 256, None)}


def placed_pod(namespace: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "metadata": {
            "name": "p",
            "namespace": namespace,
            "uid": f"{namespace}-p",
            "annotations": {VGPU_NODE: "n1", **annotations},
        },
        "spec": {"containers": [{"name": "main"}]},
        "status": {"phase": "Running"},
    }


MLU_POD = placed_pod(
    "ns", {"hami.io/cambricon-mlu-devices-allocated": "n1-cambricon-mlu-0,MLU,4096,50:;"}
)
NVIDIA_POD = placed_pod("ns", {"hami.io/vgpu-devices-allocated": "GPU-a,NVIDIA,1000,10:;"})


def test_legacy_pods_are_charged_to_the_vendor_whose_devices_they_hold() -> None:
    """The issue's case: one MLU pod of 4096 MiB and 50 cores read as NVIDIA's 4096/50."""
    backends = parse_device_config(None).backends()
    allocation = read_pod_allocation(MLU_POD, backends, lambda _: {})
    assert allocation is not None
    quotas = [resource_quota("ns", NVIDIA_AND_MLU)]
    ledger = legacy_quota_ledger(quotas, [allocation], backends.vendors())
    assert ledger.quotas[("ns", "NVIDIA")] == NamespaceQuota(5000, 60, 0, 0)
    assert ledger.quotas[("ns", "MLU")] == NamespaceQuota(4096, 80, 4096, 50)
    assert ledger.fits("ns", "NVIDIA", 5000, 60)
    assert not ledger.fits("ns", "MLU", 1, 0)


def mlu_and_gpu_slices(node: str) -> list[dict[str, Any]]:
    gpus = [
        GpuInfo(f"GPU-{node}", 0, 0, "NVIDIA A100-SXM4-80GB", 80 << 30),
        GpuInfo(f"MLU-{node}", 1, 1, "MLU370-X8", 48 << 30, vendor="mlu"),
    ]
    built = build_resource_slices(node, f"uid-{node}", gpus, SliceSettings(driver=DRIVER), 1)
    for item in built:
        item["metadata"]["uid"] = item["metadata"]["name"]
    return built


def claim(namespace: str, device: str, memory: str, cores: str) -> dict[str, Any]:
    result = {
        "request": "gpu",
        "driver": DRIVER,
        "pool": "n1",
        "device": device,
        "shareID": "s",
        "consumedCapacity": {"memory": memory, "cores": cores, "shares": "1"},
    }
    return {
        "metadata": {"name": device, "namespace": namespace},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def test_dra_claims_are_charged_to_the_vendor_of_their_device() -> None:
    """The DRA controller's ledger, checked for the legacy side's mistake: an MLU claim
    is charged to MLU's quota (x 256 per vmemory unit), not to NVIDIA's."""
    inventory = build_inventory(mlu_and_gpu_slices("n1"), DRIVER)
    mlu = next(d for d in inventory.by_key.values() if d.uuid == "MLU-n1")
    ledger = dra_quota_ledger(
        [resource_quota("ns", NVIDIA_AND_MLU)],
        [claim("ns", mlu.key[2], "4Gi", "50")],
        inventory,
        dra_vendor_registry(),
    )
    assert ledger.quotas[("ns", "NVIDIA")] == NamespaceQuota(5000, 60, 0, 0)
    assert ledger.quotas[("ns", "MLU")] == NamespaceQuota(4096, 80, 4096, 50)


@pytest.mark.parametrize(
    ("pod", "charged"),
    [(MLU_POD, ("MLU", 4096, 50)), (NVIDIA_POD, ("NVIDIA", 1000, 10))],
    ids=["mlu", "nvidia"],
)
def test_the_dra_side_charges_legacy_pods_to_their_vendor(pod, charged) -> None:
    hold = legacy_hold(pod, legacy_backends())
    assert hold is not None and hold.quota_use == (charged,)
    ledger = quota_limits([resource_quota("ns", NVIDIA_AND_MLU)], dra_vendor_registry())
    charge_holds(ledger, [hold])
    vendor, memory, cores = charged
    other = "NVIDIA" if vendor == "MLU" else "MLU"
    assert (
        ledger.quotas[("ns", vendor)].memory_used_mib,
        ledger.quotas[("ns", vendor)].cores_used,
    ) == (memory, cores)
    assert ledger.quotas[("ns", other)].memory_used_mib == 0


def test_a_namespace_without_a_quota_is_not_limited() -> None:
    assert QuotaLedger().fits("free", "MLU", 10**9, 10**6)
